"""Bayes-optimal stopping for one prompt's group (``stopping_rule="bayes_optimal"``), beyond the
paper's fixed threshold.

The paper (App. C.7, Prop. 3a) casts one prompt as a stopping problem and notes that the optimal boundary is a
threshold on p_eff whose level is set by the cost/reward ratio; App. G lists a parameter-free tau_low as future work.
This module computes that boundary exactly.

Model. A prompt's success rate gamma has a prior that is a *mixture*: a point mass at 0 (weight ``w0``), a point mass
at 1 (weight ``w1``) and ``Beta(a, b)`` (weight ``1 - w0 - w1``); ``w0 = w1 = 0`` is the paper's plain Beta prior.
Rollouts are i.i.d. Bernoulli(gamma) given gamma. An unmixed prefix is all-fail (side ``"fail"``, s = 0) or all-pass
(side ``"pass"``, s = n), so the whole state space of an undecided prompt is ``(n, side)`` with ``1 <= n <= K``.
With ``F(n) = P(first n rollouts all fail)`` and ``G(n) = P(first n all pass)``:

* ``F(n) = w0 + w1 [n = 0] + wB B(a, b + n) / B(a, b)``, ``G(n) = w1 + w0 [n = 0] + wB B(a + n, b) / B(a, b)``;
* the chance that rollout n + 1 breaks an all-fail run is ``q_f(n) = 1 - F(n + 1) / F(n)`` (same for pass with G);
* p_eff at ``(n, fail)`` with K scorable slots is ``1 - F(K) / F(n)`` (paper Eq. 2 when w0 = w1 = 0).

Costs and reward (renewal-reward). Each rollout costs one unit (``cost_unit="rollouts"``) or its expected length
(``"tokens"``: ``t_pass`` for a success, ``t_fail`` for a failure); a committed (mixed) group is worth ``lam`` cost
units; a mixed group is topped up to the commit floor ``m`` before it is committed (paper App. D, commit_min).
For a given ``lam`` backward induction over ``n = K, ..., 1`` gives the value of each state,

    V(n, side) = max(0, cont(n, side)),   cont = -c(n) + q(n) (lam - C_mix(n + 1)) + (1 - q(n)) V(n + 1, side),

with ``V(K, side) = 0`` (a complete unmixed group is abandoned) and forced continuation below the probe size ``n0``.
The objective is effective groups per cost unit, a ratio; Dinkelbach's iteration ``lam <- E[cost] / E[reward]``
under the policy optimal for the previous ``lam`` reaches the fixed point ``lam*`` (the optimal cost per effective
group) in a handful of iterations, and the policy optimal for ``lam*`` maximises the ratio.

Everything is vectorized over prompts: a "prior" holds ``(P,)`` arrays, so per-prompt (history) priors cost
``O(P K)`` per call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaln

__all__ = ["MixturePrior", "StoppingSolution", "path_probabilities", "p_eff_mixture", "solve_values",
           "evaluate_policy", "solve_rate", "mixed_token_mean"]

_TIE = 1e-12  # relative slack: a state is continued only if its continuation value is clearly positive


@dataclass(frozen=True)
class MixturePrior:
    """A prior on the success rate gamma: ``w0`` delta(0) + ``w1`` delta(1) + ``(1 - w0 - w1)`` Beta(a, b).

    Fields are floats or ``(P,)`` arrays (one prior per prompt); they broadcast together.

    Raises
    ------
    ValueError
        a weight outside [0, 1], ``w0 + w1 > 1``, or ``a``/``b`` not finite and > 0.
    """

    w0: np.ndarray | float = 0.0
    w1: np.ndarray | float = 0.0
    a: np.ndarray | float = 1.0
    b: np.ndarray | float = 1.0

    def __post_init__(self):
        w0, w1, a, b = (np.asarray(v, dtype=np.float64) for v in (self.w0, self.w1, self.a, self.b))
        if np.any(~np.isfinite(w0)) or np.any(~np.isfinite(w1)) or np.any(w0 < 0) or np.any(w1 < 0):
            raise ValueError("MixturePrior: point-mass weights w0, w1 must be finite and >= 0")
        if np.any(w0 + w1 > 1.0 + 1e-12):
            raise ValueError("MixturePrior: point-mass weights must sum to <= 1")
        if np.any(~np.isfinite(a)) or np.any(~np.isfinite(b)) or np.any(a <= 0) or np.any(b <= 0):
            raise ValueError("MixturePrior: Beta parameters a, b must be finite and > 0")

    @property
    def wb(self):
        """Weight of the Beta component, ``1 - w0 - w1``."""
        return np.maximum(0.0, 1.0 - np.asarray(self.w0, np.float64) - np.asarray(self.w1, np.float64))

    def arrays(self, size: int | None = None):
        """``(w0, w1, wB, a, b)`` as float64 arrays broadcast together (to ``(size,)`` when given)."""
        w0, w1, a, b = (np.asarray(v, dtype=np.float64) for v in (self.w0, self.w1, self.a, self.b))
        wb = np.maximum(0.0, 1.0 - w0 - w1)
        out = np.broadcast_arrays(w0, w1, wb, a, b)
        if size is not None:
            out = [np.broadcast_to(x, (size,)) if x.ndim == 0 else x for x in out]
        return [np.array(x, dtype=np.float64) for x in out]

    def posterior(self, successes, failures) -> "MixturePrior":
        """The prior updated with (possibly fractional, e.g. decayed) pseudo-counts of successes and failures.

        The point mass at 0 survives only if ``successes == 0`` and the one at 1 only if ``failures == 0`` (their
        likelihoods are 0^s and 1^0); the Beta component becomes ``Beta(a + s, b + f)`` with weight proportional to
        ``wB B(a + s, b + f) / B(a, b)``.
        """
        w0, w1, wb, a, b = self.arrays()
        s = np.asarray(successes, np.float64)
        f = np.asarray(failures, np.float64)
        if np.any(s < 0) or np.any(f < 0):
            raise ValueError("pseudo-counts must be >= 0")
        w0, w1, wb, a, b, s, f = np.broadcast_arrays(w0, w1, wb, a, b, s, f)
        lb = np.full(wb.shape, -np.inf)
        pos = wb > 0
        lb[pos] = np.log(wb[pos]) + betaln(a[pos] + s[pos], b[pos] + f[pos]) - betaln(a[pos], b[pos])
        l0 = np.where((s == 0) & (w0 > 0), np.log(np.where(w0 > 0, w0, 1.0)), -np.inf)
        l1 = np.where((f == 0) & (w1 > 0), np.log(np.where(w1 > 0, w1, 1.0)), -np.inf)
        top = np.maximum(np.maximum(l0, l1), lb)
        e0, e1, eb = np.exp(l0 - top), np.exp(l1 - top), np.exp(lb - top)
        tot = e0 + e1 + eb
        return MixturePrior(w0=e0 / tot, w1=e1 / tot, a=a + s, b=b + f)

    def mean(self):
        """Prior mean of gamma."""
        w0, w1, wb, a, b = self.arrays()
        return w1 + wb * a / (a + b)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """One draw of gamma per prompt (Thompson sampling), shape of the broadcast fields (or ``(size,)``)."""
        w0, w1, wb, a, b = self.arrays(size)
        u = rng.random(w0.shape)
        g = rng.beta(a, b)
        return np.where(u < w0, 0.0, np.where(u < w0 + w1, 1.0, g))

    def take(self, idx) -> "MixturePrior":
        """The priors of the prompts ``idx`` (fields must be arrays or scalars)."""
        w0, w1, _, a, b = self.arrays()

        def pick(x):
            return x if x.ndim == 0 else x[idx]

        return MixturePrior(w0=pick(w0), w1=pick(w1), a=pick(a), b=pick(b))

    def as_tuple(self) -> tuple:
        """``(w0, w1, a, b)`` as Python floats (scalar priors only)."""
        return tuple(float(np.asarray(v)) for v in (self.w0, self.w1, self.a, self.b))


def path_probabilities(prior: MixturePrior, K: int, size: int | None = None):
    """Log-probabilities of unbroken runs: ``log F(n)`` and ``log G(n)`` for ``n = 0..K``.

    Returns
    -------
    logF, logG : ndarray of float64, shape (P, K + 1)
        P = number of priors (1 for a scalar prior).
    """
    w0, w1, wb, a, b = (x.reshape(-1, 1) for x in prior.arrays(size))
    n = np.arange(K + 1, dtype=np.float64).reshape(1, -1)
    with np.errstate(divide="ignore"):
        lwb = np.log(wb)
        beta_f = lwb + betaln(a, b + n) - betaln(a, b)
        beta_p = lwb + betaln(a + n, b) - betaln(a, b)
        first = (n == 0)
        lw0 = np.log(w0 + w1 * first)
        lw1 = np.log(w1 + w0 * first)
    logF = np.logaddexp(lw0, beta_f)
    logG = np.logaddexp(lw1, beta_p)
    logF[:, 0] = 0.0
    logG[:, 0] = 0.0
    return logF, logG


def p_eff_mixture(prior: MixturePrior, n, s, K) -> np.ndarray:
    """Posterior-predictive probability that the group of ``K`` scorable slots ends mixed (paper Eq. 2 generalized
    to the mixture prior): 1 if mixed, ``1 - F(K)/F(n)`` if all-fail, ``1 - G(K)/G(n)`` if all-pass and
    ``1 - F(K) - G(K)`` if nothing was observed.

    Parameters
    ----------
    prior
        per-prompt priors (fields broadcast to ``(P,)``).
    n, s, K
        ``(P,)`` int scorable rollouts, successes, scorable group size; ``0 <= s <= n <= K``.

    Returns
    -------
    ndarray of float64, shape (P,)
        Values in [0, 1].
    """
    n = np.asarray(n, np.int64).reshape(-1)
    s = np.asarray(s, np.int64).reshape(-1)
    K = np.broadcast_to(np.asarray(K, np.int64), n.shape)
    P = n.shape[0]
    Kmax = int(K.max()) if P else 0
    logF, logG = path_probabilities(prior, Kmax, size=P)
    rows = np.arange(P)
    if logF.shape[0] == 1 and P > 1:
        rows = np.zeros(P, np.int64)
    out = np.ones(P)
    fail = (s == 0) & (n > 0)
    pas = (s == n) & (n > 0)
    fresh = n == 0
    out[fail] = -np.expm1(logF[rows[fail], K[fail]] - logF[rows[fail], n[fail]])
    out[pas] = -np.expm1(logG[rows[pas], K[pas]] - logG[rows[pas], n[pas]])
    out[fresh] = 1.0 - np.exp(logF[rows[fresh], K[fresh]]) - np.exp(logG[rows[fresh], K[fresh]])
    return np.clip(out, 0.0, 1.0) + 0.0


def mixed_token_mean(prior: MixturePrior, K: int, t_pass: float, t_fail: float, size: int | None = None):
    """Expected cost of each rollout still owed by a group that has just become mixed, per state.

    A group that first mixes at rollout ``n + 1`` from an all-fail run holds 1 success in ``n + 1`` rollouts (from an
    all-pass run, ``n`` successes); the point masses are then excluded and gamma ~ Beta(a + s', b + n + 1 - s'), so
    each later rollout succeeds with probability ``(a + s') / (a + b + n + 1)`` (a martingale, hence exact for every
    later rollout).

    Returns
    -------
    cost_f, cost_p : ndarray of float64, shape (P, K + 1)
        Index ``n`` is the expected cost per owed rollout after the run of length ``n`` on that side was broken at
        rollout ``n + 1``.
    """
    _, _, _, a, b = (x.reshape(-1, 1) for x in prior.arrays(size))
    n = np.arange(K + 1, dtype=np.float64).reshape(1, -1)
    mu_f = (a + 1.0) / (a + b + n + 1.0)
    mu_p = (a + n) / (a + b + n + 1.0)
    return mu_f * t_pass + (1 - mu_f) * t_fail, mu_p * t_pass + (1 - mu_p) * t_fail


@dataclass
class StoppingSolution:
    """Backward-induction output for P priors.

    Attributes
    ----------
    cont_f, cont_p
        ``(P, K + 1)`` continuation values (in cost units) at the all-fail / all-pass state with
        ``n`` rollouts; ``-inf`` where no choice exists (n = K).
    abandon_f, abandon_p
        ``(P, K + 1)`` bool, the optimal decision at each unmixed state (True = abandon).
        States with ``n < n0`` are forced to continue (the probe), ``n = K`` is always abandoned.
    value0
        ``(P,)`` value of drawing a fresh prompt (probe included) at this ``lam``.
    lam
        the reward of one committed group, in cost units.
    """

    cont_f: np.ndarray
    cont_p: np.ndarray
    abandon_f: np.ndarray
    abandon_p: np.ndarray
    value0: np.ndarray
    lam: np.ndarray

    def abandon_points(self) -> tuple[int, int]:
        """First ``n`` at which an all-fail / all-pass run is abandoned, for the first prior (n = K if never)."""
        return int(np.argmax(self.abandon_f[0])), int(np.argmax(self.abandon_p[0]))


def _step_costs(logF, logG, K, t_pass, t_fail):
    """Per-state break probabilities q and next-rollout costs c on both sides, shape (P, K) (index n = 0..K-1)."""
    qf = -np.expm1(logF[:, 1:] - logF[:, :-1])  # P(rollout n+1 succeeds | n fails)
    qp = -np.expm1(logG[:, 1:] - logG[:, :-1])  # P(rollout n+1 fails | n passes)
    qf = np.clip(np.nan_to_num(qf, nan=0.0), 0.0, 1.0)
    qp = np.clip(np.nan_to_num(qp, nan=0.0), 0.0, 1.0)
    cf = qf * t_pass + (1 - qf) * t_fail
    cp = qp * t_fail + (1 - qp) * t_pass
    return qf, qp, cf, cp


def _owed(K: int, m: int, n0: int) -> np.ndarray:
    """``(1, K)``: rollouts still to generate after a run is broken at rollout n + 1 (n = 0..K-1): up to the commit
    floor m, and at least the rest of the probe (its n0 rollouts come in one batch)."""
    return np.maximum(0, max(m, n0) - np.arange(1, K + 1)).reshape(1, -1)


def _check(K, m, n0):
    if not (isinstance(K, (int, np.integer)) and K >= 2):
        raise ValueError(f"group size K must be an integer >= 2, got {K!r}")
    if not 1 <= n0 <= K:
        raise ValueError(f"probe size n0={n0} must satisfy 1 <= n0 <= K={K}")
    if not 1 <= m <= K:
        raise ValueError(f"commit floor m={m} must satisfy 1 <= m <= K={K}")


def solve_values(prior: MixturePrior, K: int, m: int, n0: int, lam, t_pass: float = 1.0, t_fail: float = 1.0,
                 size: int | None = None, loss_cap: float | None = None) -> StoppingSolution:
    """Backward induction for a given value ``lam`` of a committed group (see the module docstring).

    Parameters
    ----------
    prior
        per-prompt priors, broadcast to ``(P,)``.
    K : int
        Scorable group size.
    m : int
        Commit floor (a mixed group is topped up to m rollouts before commit).
    n0
        probe size (states with n < n0 must continue).
    lam
        scalar or ``(P,)`` reward of one committed group, in cost units (rollouts or tokens).
    t_pass, t_fail
        cost of a successful / failed rollout (1, 1 for rollouts).
    loss_cap
        optional reliability cap: a state may be abandoned only if its p_eff is below the cap, so every
        abandoned group would have mixed with probability < cap (paper Thm 1 with tau_low = cap); the induction
        then finds the best policy within that class.

    Returns
    -------
    StoppingSolution
        The value tables and the abandon sets.

    Raises
    ------
    ValueError
        inconsistent K, m, n0.
    """
    _check(K, m, n0)
    logF, logG = path_probabilities(prior, K, size)
    P = logF.shape[0]
    lam = np.broadcast_to(np.asarray(lam, np.float64), (P,)).reshape(-1, 1)
    qf, qp, cf, cp = _step_costs(logF, logG, K, t_pass, t_fail)
    mf, mp = mixed_token_mean(prior, K, t_pass, t_fail, size=P if P > 1 else None)
    mf = np.broadcast_to(mf, (P, K + 1))
    mp = np.broadcast_to(mp, (P, K + 1))
    owed = _owed(K, m, n0)  # rollouts still owed after mixing at rollout n+1
    gain_f = lam - owed * mf[:, :K]  # value of breaking the run at rollout n+1, n = 0..K-1
    gain_p = lam - owed * mp[:, :K]
    cont_f = np.full((P, K + 1), -np.inf)
    cont_p = np.full((P, K + 1), -np.inf)
    ab_f = np.zeros((P, K + 1), bool)
    ab_p = np.zeros((P, K + 1), bool)
    ab_f[:, K] = ab_p[:, K] = True
    vf = np.zeros(P)
    vp = np.zeros(P)
    scale = np.maximum(np.abs(lam[:, 0]), 1.0)
    if loss_cap is not None:
        # p_eff along each run (1 - F(K)/F(n)); abandoning is allowed only where it is below the cap.
        may_f = -np.expm1(logF[:, K : K + 1] - logF) < loss_cap
        may_p = -np.expm1(logG[:, K : K + 1] - logG) < loss_cap
    else:
        may_f = may_p = np.ones((P, K + 1), bool)
    for n in range(K - 1, 0, -1):
        cont_f[:, n] = -cf[:, n] + qf[:, n] * gain_f[:, n] + (1 - qf[:, n]) * vf
        cont_p[:, n] = -cp[:, n] + qp[:, n] * gain_p[:, n] + (1 - qp[:, n]) * vp
        if n >= n0:
            ab_f[:, n] = (cont_f[:, n] <= _TIE * scale) & may_f[:, n]
            ab_p[:, n] = (cont_p[:, n] <= _TIE * scale) & may_p[:, n]
        vf = np.where(ab_f[:, n], 0.0, cont_f[:, n])
        vp = np.where(ab_p[:, n], 0.0, cont_p[:, n])
    # n = 0: the first rollout only chooses the side (it cannot mix); the probe always runs.
    q0 = np.exp(logG[:, 1])  # P(first rollout succeeds)
    value0 = -(q0 * t_pass + (1 - q0) * t_fail) + q0 * vp + (1 - q0) * vf
    return StoppingSolution(cont_f, cont_p, ab_f, ab_p, value0, lam[:, 0].copy())


def evaluate_policy(prior: MixturePrior, K: int, m: int, abandon_f: np.ndarray, abandon_p: np.ndarray,
                    t_pass: float = 1.0, t_fail: float = 1.0, size: int | None = None, n0: int = 1):
    """Expected reward (committed groups) and cost of one fresh prompt under a fixed stopping policy.

    Parameters
    ----------
    abandon_f, abandon_p
        ``(P, K + 1)`` or ``(K + 1,)`` bool decisions at the unmixed states (True = abandon);
        ``n = 0`` is ignored (the first rollout is always generated) and ``n = K`` is always an abandon.
    n0
        probe size: a group that mixes inside the probe still pays for all n0 probe rollouts.

    Returns
    -------
    reward, cost : ndarray of float64, shape (P,)
        Probability of a commit, and expected cost units spent.
    """
    logF, logG = path_probabilities(prior, K, size)
    P = logF.shape[0]
    abandon_f = np.broadcast_to(np.asarray(abandon_f, bool), (P, K + 1))
    abandon_p = np.broadcast_to(np.asarray(abandon_p, bool), (P, K + 1))
    qf, qp, cf, cp = _step_costs(logF, logG, K, t_pass, t_fail)
    mf, mp = mixed_token_mean(prior, K, t_pass, t_fail, size=P if P > 1 else None)
    mf = np.broadcast_to(mf, (P, K + 1))
    mp = np.broadcast_to(mp, (P, K + 1))
    owed = _owed(K, m, n0)
    rf = np.zeros(P); rp = np.zeros(P); kf = np.zeros(P); kp = np.zeros(P)  # noqa: E702
    for n in range(K - 1, 0, -1):
        go_f = ~abandon_f[:, n]
        go_p = ~abandon_p[:, n]
        rf, kf = (np.where(go_f, qf[:, n] + (1 - qf[:, n]) * rf, 0.0),
                  np.where(go_f, cf[:, n] + qf[:, n] * owed[0, n] * mf[:, n] + (1 - qf[:, n]) * kf, 0.0))
        rp, kp = (np.where(go_p, qp[:, n] + (1 - qp[:, n]) * rp, 0.0),
                  np.where(go_p, cp[:, n] + qp[:, n] * owed[0, n] * mp[:, n] + (1 - qp[:, n]) * kp, 0.0))
    q0 = np.exp(logG[:, 1])
    reward = q0 * rp + (1 - q0) * rf
    cost = q0 * t_pass + (1 - q0) * t_fail + q0 * kp + (1 - q0) * kf
    return reward, cost


def solve_rate(population: MixturePrior, K: int, m: int, n0: int, t_pass: float = 1.0, t_fail: float = 1.0,
               weights: np.ndarray | None = None, loss_cap: float | None = None,
               max_iter: int = 100) -> tuple[float, StoppingSolution]:
    """Optimal cost per effective group ``lam*`` for prompts drawn from ``population`` (Dinkelbach iteration).

    Maximises ``E[commits] / E[cost]`` over stopping policies for a prompt whose prior is drawn from the population
    (``(P,)`` priors with optional ``weights``; one prior for the in-step case). Starts from the policy that never
    abandons early, sets ``lam <- E[cost] / E[reward]`` under the current policy and re-solves, until the policy
    stops changing (finitely many policies, so this terminates; each iteration strictly lowers ``lam`` otherwise).
    With ``loss_cap`` the search is restricted to policies that abandon only states with p_eff < cap.

    Returns
    -------
    lam_star : float
        The optimal cost per committed group, in cost units.
    solution : StoppingSolution
        The backward induction at ``lam_star`` (its ``abandon_*`` tables are the optimal policy for every prior of
        the population).

    Raises
    ------
    ValueError
        the population can never produce a mixed group (every prior puts all mass on 0 and 1).
    """
    _check(K, m, n0)
    logF, _ = path_probabilities(population, K)
    P = logF.shape[0]
    size = P if P > 1 else None
    w = np.ones(P) if weights is None else np.broadcast_to(np.asarray(weights, np.float64), (P,))
    if np.any(w < 0) or w.sum() <= 0:
        raise ValueError("population weights must be >= 0 and not all 0")
    ab_f = np.zeros((P, K + 1), bool)
    ab_f[:, K] = True
    ab_p = ab_f.copy()
    for _ in range(max_iter):
        reward, cost = evaluate_policy(population, K, m, ab_f, ab_p, t_pass, t_fail, size=size, n0=n0)
        r = float(np.dot(w, reward))
        if r <= 0:
            raise ValueError("the prior population never yields a mixed group (all mass on gamma in {0, 1})")
        lam = float(np.dot(w, cost)) / r
        sol = solve_values(population, K, m, n0, lam, t_pass, t_fail, size=size, loss_cap=loss_cap)
        new_f = np.broadcast_to(sol.abandon_f, (P, K + 1))
        new_p = np.broadcast_to(sol.abandon_p, (P, K + 1))
        if np.array_equal(new_f, ab_f) and np.array_equal(new_p, ab_p):
            break
        ab_f, ab_p = new_f.copy(), new_p.copy()
    return lam, sol
