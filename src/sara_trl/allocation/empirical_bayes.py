"""Empirical-Bayes fit of the success-rate prior from recent outcomes (used by ``tau_low="auto"``).

Every prompt the allocator has drawn leaves a pair ``(n, s)``: scorable rollouts and successes. Whatever rule
stopped it (commit, abandon, end of step), the rule only looked at the prompt's own past outcomes or at other prompts,
so the stopping is ignorable and the likelihood of the prompt's data under a prior on gamma is the marginal
probability of the observed *sequence*,

    L(n, s) = w0 [s = 0] + w1 [s = n] + wB B(a + s, b + n - s) / B(a, b)

for the mixture ``w0 delta(0) + w1 delta(1) + wB Beta(a, b)`` (``w0 = w1 = 0`` for the plain Beta family). The data
are therefore summarised by a ``(k + 1, k + 1)`` table of decayed counts of ``(n, s)``; the fit maximises the
weighted log-likelihood over that table with :func:`scipy.optimize.minimize` (L-BFGS-B).

Identifiability caveat: prompts abandoned after a few same-outcome rollouts cannot tell a point mass at 0 from a
Beta with most of its mass near 0; the fit then leans on the parametric family, which is what lets it extrapolate
beyond the abandon point.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import betaln, digamma

from sara_trl.allocation.optimal_stopping import MixturePrior

__all__ = ["OutcomeTable", "fit_prior", "FAMILIES"]

FAMILIES = ("mixture", "beta")
_LOG_AB = (np.log(0.02), np.log(200.0))  # bounds on log a, log b
_Z = (-12.0, 12.0)  # bounds on the weight logits


class OutcomeTable:
    """Decayed counts of ``(n, s)`` outcomes of drawn prompts, shape ``(k + 1, k + 1)``; O(k^2) memory.

    Args:
        k: group size (largest possible n).

    Raises:
        ValueError: ``k < 2``.
    """

    def __init__(self, k: int):
        if k < 2:
            raise ValueError(f"group size k must be >= 2, got {k}")
        self.k = int(k)
        self.counts = np.zeros((k + 1, k + 1), np.float64)

    def add(self, n, s) -> None:
        """Count prompts with ``n`` scorable rollouts and ``s`` successes (``(P,)`` ints, ``0 <= s <= n <= k``).

        Raises:
            ValueError: a count outside ``0 <= s <= n <= k``.
        """
        n = np.asarray(n, np.int64).reshape(-1)
        s = np.asarray(s, np.int64).reshape(-1)
        if n.shape != s.shape or np.any(s < 0) or np.any(s > n) or np.any(n > self.k):
            raise ValueError(f"outcomes must satisfy 0 <= s <= n <= k={self.k}")
        np.add.at(self.counts, (n, s), 1.0)

    def decay(self, factor: float) -> None:
        """Multiply every count by ``factor`` in [0, 1] (once per step: older steps weigh less)."""
        self.counts *= factor

    @property
    def total(self) -> float:
        """Weighted number of prompts with at least one scorable rollout."""
        return float(self.counts[1:].sum())

    def state_dict(self) -> dict:
        return {"k": self.k, "counts": self.counts.copy()}

    def load_state_dict(self, state: dict) -> None:
        counts = np.asarray(state["counts"], np.float64)
        if counts.shape != self.counts.shape:
            raise ValueError(f"outcome table was saved for k={int(state['k'])}, this one has k={self.k}")
        self.counts = counts.copy()


def _logsumexp0(x: np.ndarray) -> np.ndarray:
    """log(sum(exp(x), axis=0)) for a (3, N) stack with -inf entries (plain numpy: the hot loop of the fit)."""
    top = x.max(axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    return top + np.log(np.exp(x - top).sum(axis=0))


def _unpack(theta: np.ndarray, family: str):
    if family == "beta":
        return 0.0, 0.0, float(np.exp(theta[0])), float(np.exp(theta[1]))
    z = np.array([theta[0], theta[1], 0.0])
    w = np.exp(z - z.max())
    w /= w.sum()
    return float(w[0]), float(w[1]), float(np.exp(theta[2])), float(np.exp(theta[3]))


def _pack(prior: MixturePrior, family: str) -> np.ndarray:
    w0, w1, a, b = prior.as_tuple()
    la, lb = np.clip(np.log([a, b]), *_LOG_AB)
    if family == "beta":
        return np.array([la, lb])
    wb = max(1.0 - w0 - w1, 1e-6)
    z0, z1 = np.clip(np.log([max(w0, 1e-6) / wb, max(w1, 1e-6) / wb]), *_Z)
    return np.array([z0, z1, la, lb])


def fit_prior(table: OutcomeTable, family: str = "mixture", init: MixturePrior | None = None) -> MixturePrior:
    """Maximum-likelihood prior for the outcomes in ``table``.

    Args:
        table: decayed ``(n, s)`` counts.
        family: ``"mixture"`` (point masses at 0 and 1 plus a Beta) or ``"beta"``.
        init: optional warm start (e.g. the previous fit); without it two fixed starts are tried.

    Returns:
        The fitted :class:`MixturePrior` (scalar fields). Beta parameters are kept in [0.02, 200].

    Raises:
        ValueError: unknown family, or the table holds no prompt with a scorable rollout.
    """
    if family not in FAMILIES:
        raise ValueError(f"prior family must be one of {FAMILIES}, got {family!r}")
    k = table.k
    n_idx, s_idx = np.nonzero(np.tril(np.ones((k + 1, k + 1), bool)))
    keep = (n_idx >= 1) & (table.counts[n_idx, s_idx] > 0)
    n_, s_, c_ = n_idx[keep].astype(np.float64), s_idx[keep].astype(np.float64), table.counts[n_idx, s_idx][keep]
    if c_.sum() <= 0:
        raise ValueError("cannot fit a prior: no outcome has been observed yet")
    all_fail = s_ == 0
    all_pass = s_ == n_
    total = c_.sum()

    def nll(theta):
        """Mean negative log-likelihood and its gradient (responsibilities r of the three components:
        d/dz_j = r_j - w_j for the weight logits, d/dlog a = r_B a [psi(a + s) - psi(a + b + n) - psi(a) + psi(a + b)],
        likewise for b)."""
        w0, w1, a, b = _unpack(theta, family)
        lb = betaln(a + s_, b + n_ - s_) - betaln(a, b)
        with np.errstate(divide="ignore"):
            terms = np.stack([np.log(max(1.0 - w0 - w1, 1e-300)) + lb,
                              np.where(all_fail, np.log(w0) if w0 > 0 else -np.inf, -np.inf),
                              np.where(all_pass, np.log(w1) if w1 > 0 else -np.inf, -np.inf)])
        logl = _logsumexp0(terms)
        resp = np.exp(terms - logl)  # (3, N) posterior component responsibilities
        dab = digamma(a + b) - digamma(a + b + n_)
        ga = resp[0] * a * (digamma(a + s_) - digamma(a) + dab)
        gb = resp[0] * b * (digamma(b + n_ - s_) - digamma(b) + dab)
        if family == "beta":
            grads = np.stack([ga, gb])
        else:
            grads = np.stack([resp[1] - w0, resp[2] - w1, ga, gb])
        return -float(np.dot(c_, logl)) / total, -(grads @ c_) / total

    starts = [init] if init is not None else [MixturePrior(0.3, 0.3, 1.0, 1.0), MixturePrior(0.1, 0.1, 0.5, 0.5)]
    bounds = [_LOG_AB, _LOG_AB] if family == "beta" else [_Z, _Z, _LOG_AB, _LOG_AB]
    best = None
    for start in starts:
        res = minimize(nll, _pack(start, family), jac=True, method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun:
            best = res
    w0, w1, a, b = _unpack(best.x, family)
    return MixturePrior(w0=w0, w1=w1, a=a, b=b)

