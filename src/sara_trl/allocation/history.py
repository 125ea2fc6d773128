"""History warm-start (paper App. D, "Defaults and history warm-start"): per-prompt success/failure pseudo-counts
carried across steps with exponential decay, so a prompt seen saturated starts its next group with a skewed prior.

After step t a prompt that showed ``s`` successes in ``n`` scorable rollouts at step t' <= t holds the pseudo-counts

    S = sum over its past draws of lambda^(t + 1 - t') s,     F = sum of lambda^(t + 1 - t') (n - s),

so its prior when next drawn is the base prior updated with (S, F) (for a Beta base: Beta(alpha0 + S, beta0 + F)).
``lambda = 0`` forgets everything (the paper's SARA), ``lambda = 1`` never forgets.

Memory is one pair of float64 per dataset row plus one scalar. The decay is lazy: the arrays store
``value / scale`` and only ``scale`` is multiplied by lambda at the end of a step, so a step costs O(1) per prompt
it touched (reads and updates) and O(1) for the decay; once every few thousand steps (when ``scale`` would
underflow) the arrays are renormalised in O(num_prompts).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["PromptHistory", "select_candidates"]

_RENORM = 1e-150  # renormalise the lazy scale below this
_FLUSH = 1e-6  # pseudo-counts below this read as 0 (lets a point mass at 0 or 1 come back after long decay)


class PromptHistory:
    """Decayed success/failure pseudo-counts per dataset row.

    Parameters
    ----------
    num_prompts
        dataset size (rows are indexed 0..num_prompts-1).
    decay
        lambda in [0, 1], the weight kept per step.

    Raises
    ------
    ValueError
        ``num_prompts < 1`` or ``decay`` outside [0, 1].
    """

    def __init__(self, num_prompts: int, decay: float):
        if int(num_prompts) < 1:
            raise ValueError(f"PromptHistory needs at least one prompt, got num_prompts={num_prompts}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"history decay must lie in [0, 1], got {decay}")
        self.num_prompts = int(num_prompts)
        self.decay = float(decay)
        self._succ = np.zeros(self.num_prompts, np.float64)  # stored as value / scale
        self._fail = np.zeros(self.num_prompts, np.float64)
        self._scale = 1.0

    def _check(self, pids: np.ndarray) -> np.ndarray:
        pids = np.asarray(pids, np.int64).reshape(-1)
        if pids.size and (pids.min() < 0 or pids.max() >= self.num_prompts):
            raise ValueError(f"prompt ids must lie in [0, {self.num_prompts}), got {int(pids.min())}.."
                             f"{int(pids.max())}")
        return pids

    def counts(self, pids) -> tuple[np.ndarray, np.ndarray]:
        """Decayed pseudo-counts ``(S, F)`` of the rows ``pids``, each ``(P,)`` float64 (values below 1e-6 read 0)."""
        pids = self._check(pids)
        s = self._succ[pids] * self._scale
        f = self._fail[pids] * self._scale
        s[s < _FLUSH] = 0.0
        f[f < _FLUSH] = 0.0
        return s, f

    def seen(self, pids) -> np.ndarray:
        """``(P,)`` bool: the row carries any (non-flushed) history."""
        s, f = self.counts(pids)
        return (s + f) > 0

    def observe(self, pids, n_scored, s) -> None:
        """Add this step's outcomes: ``s`` successes in ``n_scored`` scorable rollouts per row (repeats add up).

        Raises
        ------
        ValueError
            ids out of range, or ``0 <= s <= n_scored`` violated.
        """
        pids = self._check(pids)
        n_scored = np.asarray(n_scored, np.float64).reshape(-1)
        s = np.asarray(s, np.float64).reshape(-1)
        if not (pids.shape == n_scored.shape == s.shape) or np.any(s < 0) or np.any(s > n_scored):
            raise ValueError("observe needs equal-length pids, n_scored, s with 0 <= s <= n_scored")
        np.add.at(self._succ, pids, s / self._scale)
        np.add.at(self._fail, pids, (n_scored - s) / self._scale)

    def end_step(self) -> None:
        """Apply one step of decay (O(1) except for a rare renormalisation)."""
        self._scale *= self.decay
        if self._scale < _RENORM:
            self._succ *= self._scale
            self._fail *= self._scale
            self._succ[self._succ < _FLUSH * 1e-3] = 0.0
            self._fail[self._fail < _FLUSH * 1e-3] = 0.0
            self._scale = 1.0

    def all_counts(self, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pseudo-counts ``(S, F)`` of every row that carries history (O(num_prompts); once per step for the prior
        fit). With ``max_rows`` an evenly spaced subset of at most that many rows is returned."""
        s = self._succ * self._scale
        f = self._fail * self._scale
        s[s < _FLUSH] = 0.0
        f[f < _FLUSH] = 0.0
        rows = np.flatnonzero((s + f) > 0)
        if max_rows is not None and len(rows) > max_rows:
            rows = rows[np.linspace(0, len(rows) - 1, max_rows).astype(np.int64)]
        return s[rows], f[rows]

    def rows_with_history(self) -> int:
        """Number of rows carrying history (O(num_prompts); for diagnostics)."""
        return int(((self._succ + self._fail) * self._scale >= _FLUSH).sum())

    def state_dict(self) -> dict:
        return {"num_prompts": self.num_prompts, "decay": self.decay, "succ": self._succ.copy(),
                "fail": self._fail.copy(), "scale": self._scale}

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved history.

        Raises
        ------
        ValueError
            saved for another dataset size.
        """
        if int(state["num_prompts"]) != self.num_prompts:
            raise ValueError(f"prompt history was saved for {int(state['num_prompts'])} prompts, this dataset has "
                             f"{self.num_prompts}")
        self._succ = np.asarray(state["succ"], np.float64).copy()
        self._fail = np.asarray(state["fail"], np.float64).copy()
        self._scale = float(state["scale"])


def select_candidates(pool: np.ndarray, count: int, scores: np.ndarray, rng: np.random.Generator,
                      floor: float, return_uniform: bool = False):
    """Pick ``count`` prompts from a candidate ``pool``: an epsilon-uniform share at random, the rest by score.

    ``u ~ Binomial(count, floor)`` picks are a uniformly random subset of the (deduplicated) pool; the other
    ``count - u`` are the highest-scoring remaining candidates (ties by pool order). Every candidate is therefore
    picked with probability at least ``floor * count / M`` (M = distinct candidates), whatever its score: that is
    the starvation floor. Selection is deterministic given the generator state.

    Parameters
    ----------
    pool
        ``(M',)`` int64 candidate prompt ids in stream order (repeats are dropped).
    count
        prompts wanted.
    scores
        ``(M',)`` float64, higher = more likely effective.
    rng
        the allocator's selection generator.
    floor
        epsilon in (0, 1].
    return_uniform
        also return which picks came from the uniform share.

    Returns
    -------
    picked : ndarray of int64, shape (min(count, M),)
        Chosen ids in pool order.
    uniform : ndarray of bool, shape (min(count, M),)
        Only with ``return_uniform``: which picks came from the uniform share (an unbiased sample of the stream,
        used to fit the prior).
    """
    pool = np.asarray(pool, np.int64)
    _, first = np.unique(pool, return_index=True)
    first = np.sort(first)
    pool, scores = pool[first], np.asarray(scores, np.float64)[first]
    M = len(pool)
    if count >= M:
        return (pool, np.ones(M, bool)) if return_uniform else pool
    u = int(rng.binomial(count, floor))
    uniform = np.zeros(M, bool)
    if u:
        uniform[rng.choice(M, size=u, replace=False)] = True
    chosen = uniform.copy()
    rest = np.flatnonzero(~chosen)
    order = rest[np.lexsort((rest, -scores[rest]))]
    chosen[order[: count - u]] = True
    return (pool[chosen], uniform[chosen]) if return_uniform else pool[chosen]


def pool_size(count: int, factor: float) -> int:
    """Candidates to draw from the stream for ``count`` picks with pool factor ``factor`` (>= count)."""
    return max(count, int(math.ceil(count * factor)))
