"""Empirical-Bayes fit of the success-rate prior from recent outcomes (used by ``stopping_rule="bayes_optimal"``).

Every prompt the allocator has drawn leaves a pair ``(n, s)``: scorable rollouts and successes. Whatever rule
stopped it (commit, abandon, end of step), the rule only looked at the prompt's own past outcomes or at other prompts,
so the stopping is ignorable and the likelihood of the prompt's data under a prior on gamma is the marginal
probability of the observed *sequence*,

    L(n, s) = w0 [s = 0] + w1 [s = n] + wB B(a + s, b + n - s) / B(a, b)

for the mixture ``w0 delta(0) + w1 delta(1) + wB Beta(a, b)`` (``w0 = w1 = 0`` for the plain Beta family). The data
are therefore summarised by a ``(k + 1, k + 1)`` table of decayed counts of ``(n, s)``; the fit maximises the
weighted log-likelihood over that table with :func:`scipy.optimize.minimize` (L-BFGS-B).

With a prompt history (``history_decay``) the fit scores each drawn prompt's in-step outcomes by their predictive
probability given the pseudo-counts it carried when drawn, ``m(S0 + s, F0 + f) / m(S0, F0)``
(:class:`PredictiveBuffer`, :func:`fit_prior_counts`). This is valid under predictive selection (which depends only
on outcomes already observed), uses the same decayed counts the decisions use, and identifies the point masses
far better than one step's short prefix: a prompt that keeps failing after a failing history supports a point mass
at 0 over a Beta near 0. (Fitting the rows' decayed counts directly would not: under selection the saturated rows
are drawn rarely, so their decayed records are short and a Beta explains them as well as a point mass.)

Identifiability caveat: prompts abandoned after a few same-outcome rollouts cannot tell a point mass at 0 from a
Beta with most of its mass near 0; the fit then leans on the parametric family, which is what lets it extrapolate
beyond the abandon point.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import betaln, digamma

from sara_trl.allocation.optimal_stopping import MixturePrior

__all__ = ["OutcomeTable", "PredictiveBuffer", "fit_prior", "fit_prior_counts", "FAMILIES"]

FAMILIES = ("mixture", "beta")
_LOG_AB = (np.log(0.02), np.log(200.0))  # bounds on log a, log b
_Z = (-12.0, 12.0)  # bounds on the weight logits


class OutcomeTable:
    """Decayed counts of ``(n, s)`` outcomes of drawn prompts, shape ``(k + 1, k + 1)``; O(k^2) memory.

    Parameters
    ----------
    k : int
        Group size (largest possible n).

    Raises
    ------
    ValueError
        ``k < 2``.
    """

    def __init__(self, k: int):
        if k < 2:
            raise ValueError(f"group size k must be >= 2, got {k}")
        self.k = int(k)
        self.counts = np.zeros((k + 1, k + 1), np.float64)

    def add(self, n, s) -> None:
        """Count prompts with ``n`` scorable rollouts and ``s`` successes (``(P,)`` ints, ``0 <= s <= n <= k``).

        Raises
        ------
        ValueError
            a count outside ``0 <= s <= n <= k``.
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
    """Maximum-likelihood prior for the outcomes in ``table`` (see :func:`fit_prior_counts`).

    Raises
    ------
    ValueError
        unknown family, or the table holds no prompt with a scorable rollout.
    """
    k = table.k
    n_idx, s_idx = np.nonzero(np.tril(np.ones((k + 1, k + 1), bool)))
    keep = (n_idx >= 1) & (table.counts[n_idx, s_idx] > 0)
    n_, s_ = n_idx[keep].astype(np.float64), s_idx[keep].astype(np.float64)
    return fit_prior_counts(s_, n_ - s_, table.counts[n_idx, s_idx][keep], family, init)


def _log_marginal(theta, family, S, F):
    """log m(S, F) = log[w0 [S = 0] + w1 [F = 0] + wB B(a + S, b + F) / B(a, b)] per row and its gradient w.r.t. the
    parameters (``(P, N)``: via the component responsibilities r, d/dz_j = r_j - w_j, d/dlog a =
    r_B a [psi(a + S) - psi(a + b + S + F) - psi(a) + psi(a + b)], likewise for b)."""
    w0, w1, a, b = _unpack(theta, family)
    lb = betaln(a + S, b + F) - betaln(a, b)
    with np.errstate(divide="ignore"):
        terms = np.stack([np.log(max(1.0 - w0 - w1, 1e-300)) + lb,
                          np.where(S == 0, np.log(w0) if w0 > 0 else -np.inf, -np.inf),
                          np.where(F == 0, np.log(w1) if w1 > 0 else -np.inf, -np.inf)])
    logm = _logsumexp0(terms)
    resp = np.exp(terms - logm)  # (3, N) posterior component responsibilities
    dab = digamma(a + b) - digamma(a + b + S + F)
    ga = resp[0] * a * (digamma(a + S) - digamma(a) + dab)
    gb = resp[0] * b * (digamma(b + F) - digamma(b) + dab)
    grads = np.stack([ga, gb]) if family == "beta" else np.stack([resp[1] - w0, resp[2] - w1, ga, gb])
    return logm, grads


def fit_prior_counts(successes, failures, weights=None, family: str = "mixture", init: MixturePrior | None = None,
                     prior_successes=None, prior_failures=None) -> MixturePrior:
    """Maximum-likelihood prior for prompts with ``successes`` and ``failures`` observed (weighted), optionally
    conditional on pseudo-counts each prompt already carried (its history).

    Without history the marginal likelihood of a prompt is ``m(S, F) = w0 [S = 0] + w1 [F = 0] + wB B(a + S, b + F)
    / B(a, b)``. With history ``(S0, F0)`` the new outcomes are scored by the *predictive* likelihood
    ``m(S0 + S, F0 + F) / m(S0, F0)``: the prior that best predicts what prompts did given what they had shown, which
    is what the per-prompt decisions use. Any stopping or selection rule that depends only on outcomes already
    observed is ignorable for both, so prompts drawn by predictive selection are valid data. Counts may be
    fractional (decayed pseudo-counts).

    Parameters
    ----------
    successes, failures
        ``(N,)`` float >= 0 per prompt (rows without new outcomes are dropped).
    weights
        ``(N,)`` float >= 0 (default 1).
    family
        ``"mixture"`` (point masses at 0 and 1 plus a Beta) or ``"beta"``.
    init
        optional warm start (e.g. the previous fit); without it two fixed starts are tried.
    prior_successes, prior_failures
        ``(N,)`` float >= 0 history pseudo-counts at draw time (default 0).

    Returns
    -------
    MixturePrior
        The fitted prior (scalar fields). Beta parameters are kept in [0.02, 200].

    Raises
    ------
    ValueError
        unknown family, negative or mismatched counts, or no informative prompt.
    """
    if family not in FAMILIES:
        raise ValueError(f"prior family must be one of {FAMILIES}, got {family!r}")
    s_ = np.asarray(successes, np.float64).reshape(-1)
    f_ = np.asarray(failures, np.float64).reshape(-1)
    c_ = np.ones_like(s_) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    s0 = np.zeros_like(s_) if prior_successes is None else np.asarray(prior_successes, np.float64).reshape(-1)
    f0 = np.zeros_like(s_) if prior_failures is None else np.asarray(prior_failures, np.float64).reshape(-1)
    arrays = (s_, f_, c_, s0, f0)
    if any(x.shape != s_.shape for x in arrays) or any(np.any(x < 0) for x in arrays):
        raise ValueError("successes, failures, weights and prior counts must be equal-length arrays of values >= 0")
    keep = ((s_ + f_) > 0) & (c_ > 0)
    s_, f_, c_, s0, f0 = (x[keep] for x in arrays)
    if c_.sum() <= 0:
        raise ValueError("cannot fit a prior: no outcome has been observed yet")
    total = c_.sum()
    has_prior = bool(np.any((s0 + f0) > 0))

    def nll(theta):
        logm, grads = _log_marginal(theta, family, s0 + s_, f0 + f_)
        if has_prior:
            logm0, grads0 = _log_marginal(theta, family, s0, f0)
            logm, grads = logm - logm0, grads - grads0
        return -float(np.dot(c_, logm)) / total, -(grads @ c_) / total

    starts = [init] if init is not None else [MixturePrior(0.3, 0.3, 1.0, 1.0), MixturePrior(0.1, 0.1, 0.5, 0.5)]
    bounds = [_LOG_AB, _LOG_AB] if family == "beta" else [_Z, _Z, _LOG_AB, _LOG_AB]
    best = None
    for start in starts:
        res = minimize(nll, _pack(start, family), jac=True, method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun:
            best = res
    w0, w1, a, b = _unpack(best.x, family)
    return MixturePrior(w0=w0, w1=w1, a=a, b=b)


class PredictiveBuffer:
    """Recent draws under history, for the predictive-likelihood fit: per drawn prompt its pseudo-counts at draw
    time ``(S0, F0)`` and the step's outcomes ``(s, f)``, with a weight.

    Records of prompts drawn *with* history are scored given it and their weight decays once per step (they track
    the moving policy). Records of prompts drawn *without* history (``S0 = F0 = 0``) are unbiased draws from the
    dataset even under predictive selection (fresh prompts all score alike, so the choice among them is uniform);
    their marginal likelihood is what pins the absolute mixture weights, which the history-conditional terms cannot
    (those only see the ratios w0 : wB and w1 : wB), so they are kept undecayed: the most recent ``anchor_capacity``
    of them. Decayed records below ``min_weight`` are dropped and at most ``capacity`` are kept, so memory is
    bounded whatever the dataset size.
    """

    def __init__(self, capacity: int = 8192, anchor_capacity: int = 4096, min_weight: float = 0.01):
        self.capacity = int(capacity)
        self.anchor_capacity = int(anchor_capacity)
        self.min_weight = float(min_weight)
        self.data = np.zeros((0, 5), np.float64)  # columns: S0, F0, s, f, weight
        self.anchors = np.zeros((0, 2), np.float64)  # columns: s, f of draws without history

    def add(self, s0, f0, s, f) -> None:
        """Append one step's draws (``(P,)`` arrays each)."""
        s0, f0, s, f = (np.asarray(x, np.float64).reshape(-1) for x in (s0, f0, s, f))
        fresh = (s0 + f0) == 0
        self.anchors = np.concatenate([self.anchors, np.column_stack([s[fresh], f[fresh]])])[-self.anchor_capacity:]
        rows = np.column_stack([s0[~fresh], f0[~fresh], s[~fresh], f[~fresh], np.ones(int((~fresh).sum()))])
        self.data = np.concatenate([self.data, rows])[-self.capacity:]

    def decay(self, factor: float) -> None:
        """Age the history-conditional records by one step."""
        self.data[:, 4] *= factor
        self.data = self.data[self.data[:, 4] >= self.min_weight]

    @property
    def total(self) -> float:
        """Weighted number of records."""
        return float(self.data[:, 4].sum()) + len(self.anchors)

    def fit(self, family: str, init: MixturePrior | None) -> MixturePrior:
        """The prior maximising the anchors' marginal plus the other records' predictive likelihood."""
        d, a = self.data, self.anchors
        return fit_prior_counts(np.r_[d[:, 2], a[:, 0]], np.r_[d[:, 3], a[:, 1]], np.r_[d[:, 4], np.ones(len(a))],
                                family, init, prior_successes=np.r_[d[:, 0], np.zeros(len(a))],
                                prior_failures=np.r_[d[:, 1], np.zeros(len(a))])

    def state_dict(self) -> dict:
        return {"data": self.data.copy(), "anchors": self.anchors.copy()}

    def load_state_dict(self, state: dict) -> None:
        data = np.asarray(state["data"], np.float64)
        anchors = np.asarray(state["anchors"], np.float64)
        if data.size == 0:  # an empty buffer saved as JSON ([]) has lost its width
            data = data.reshape(0, 5)
        if anchors.size == 0:
            anchors = anchors.reshape(0, 2)
        if data.ndim != 2 or data.shape[1] != 5 or anchors.ndim != 2 or anchors.shape[1] != 2:
            raise ValueError("predictive buffer state must hold an (N, 5) data and an (M, 2) anchors array")
        self.data = data.copy()
        self.anchors = anchors.copy()
