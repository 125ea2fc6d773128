"""The SARA decision rule (paper Eq. 3), vectorized over the prompts of a round, from integer counts only."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.predictor import p_eff_unchecked
from sara_trl.allocation.types import ABANDON, COMMIT, CONTINUE

__all__ = ["decide"]


def decide(n, n_scored, s, *, k: int, tau_low: float, commit_min: int, alpha0: float = 1.0, beta0: float = 1.0):
    """commit / abandon / continue for each prompt (paper Eq. 3).

    Parameters
    ----------
    n : array_like of int, shape (P,)
        Rollouts generated so far per prompt (unscorable ones included: they cost a rollout).
    n_scored : array_like of int, shape (P,)
        Scorable rollouts among them (success was 0 or 1).
    s : array_like of int, shape (P,)
        Successes among the scorable rollouts.
    k : int
        Group size.
    tau_low : float
        Abandon threshold on p_eff, in [0, 1).
    commit_min : int
        Commit floor: a mixed prompt is committed once it has this many rollouts.
    alpha0, beta0 : float
        Beta prior on the success rate (paper §3.2).

    Returns
    -------
    decision : ndarray of int8, shape (P,)
        ``COMMIT`` (mixed and ``n >= commit_min``), ``ABANDON`` (``p_eff < tau_low``, or the group is complete and
        unmixed) or ``CONTINUE``.
    p : ndarray of float64, shape (P,)
        p_eff of Eq. 2 on the scorable counts, where the group's scorable capacity is ``k - (n - n_scored)``:
        an unscorable rollout occupies a slot but does not move the posterior.
    """
    n = np.asarray(n, dtype=np.int64)
    n_scored = np.asarray(n_scored, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    k_scorable = k - (n - n_scored)
    p = p_eff_unchecked(n_scored, s, np.maximum(k_scorable, n_scored), alpha0, beta0)
    mixed = is_mixed(s, n_scored)
    decision = np.full(n.shape, CONTINUE, dtype=np.int8)
    decision[(~mixed) & ((p < tau_low) | (n >= k))] = ABANDON
    decision[mixed & (n >= commit_min)] = COMMIT
    return decision, p
