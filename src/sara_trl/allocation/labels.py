"""Labelling rules: when a rollout is a success, and when a group is mixed (effective).

Every allocator decides from binary success labels, so one rule turns scores into labels and one predicate says
whether a prompt's outcomes are mixed. The trainer calls :func:`allocator_labels` once per round; the decision rule,
the extensions, the scheduler and :class:`~sara_trl.allocation.types.Group` all call :func:`is_mixed`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DS_FILTERS",
    "FLOAT32_SPREAD_ULPS",
    "allocator_labels",
    "is_mixed",
    "score_spread_labels",
    "score_tolerance",
    "success_labels",
]

DS_FILTERS = ("success", "score")
"""What dynamic sampling filters on: the binary success labels (default, as SARA) or the raw score spread (DAPO's
filter-on-score variant)."""

FLOAT32_SPREAD_ULPS = 4
"""Spreads up to this many float32 machine epsilons (relative to the largest magnitude, at least 1) are noise."""


def is_mixed(s, n_scored):
    """Whether each prompt's scored rollouts hold at least one success and one failure (paper Def. 1).

    A mixed group has a non-zero GRPO advantage, so it is effective; a unanimous one (all successes or all
    failures) is saturated.

    Parameters
    ----------
    s : array_like of int, shape (P,)
        Successes per prompt.
    n_scored : array_like of int, shape (P,)
        Scorable rollouts per prompt (unscorable ones never count toward mixing).

    Returns
    -------
    ndarray of bool, shape (P,)
        ``0 < s < n_scored``.
    """
    s = np.asarray(s)
    return (s > 0) & (s < np.asarray(n_scored))


def success_labels(score, threshold: float) -> np.ndarray:
    """Binary success labels: 1.0 where ``score > threshold``, 0.0 otherwise, NaN where the score is NaN.

    The strict inequality matches :mod:`sara_trl.rewards` (``success = combined > success_threshold``).

    Parameters
    ----------
    score : array_like of float, shape (R,)
        One score per rollout (NaN: unscorable).
    threshold : float
        ``success_threshold``.

    Returns
    -------
    ndarray of float64, shape (R,)
        Labels in {0, 1, NaN}.
    """
    score = np.asarray(score, dtype=np.float64)
    labels = (score > threshold).astype(np.float64)
    labels[np.isnan(score)] = np.nan
    return labels


def score_tolerance(values) -> float:
    """The largest spread of scores that is float noise rather than signal.

    Rewards reach the allocator through TRL's float32 reward tensors, whose resolution near a value ``r`` is about
    ``eps32 * |r|`` (``eps32 = 2**-23 = 1.19e-7``). A spread ``max - min`` of at most
    ``FLOAT32_SPREAD_ULPS * eps32 * max(1, max |r|)`` (4.8e-7 for rewards of magnitude <= 1) carries no signal: a
    group ``[1, 1, 0.99999994, 1]`` is not mixed.

    Parameters
    ----------
    values : array_like of float, shape (m,)
        The finite scores of one group.

    Returns
    -------
    float
        The tolerance, in the units of the scores.
    """
    values = np.asarray(values, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(values)))) if values.size else 1.0
    return FLOAT32_SPREAD_ULPS * float(np.finfo(np.float32).eps) * scale


def score_spread_labels(score, counts, threshold: float) -> np.ndarray:
    """Labels under which a group is mixed exactly when its scores differ beyond float noise (DAPO filter-on-score).

    For each prompt block (prompt-major, ``counts[j]`` rollouts each): if the block's scorable scores spread by
    more than :func:`score_tolerance`, scores above the block minimum (by more than the tolerance) are labelled 1.0
    and the rest 0.0, so the block is mixed; otherwise every scorable rollout gets the success label of the block
    mean (:func:`success_labels`), so it is not. NaN stays NaN. For binary rewards this equals
    :func:`success_labels`.

    Parameters
    ----------
    score : array_like of float, shape (R,)
        Scores, prompt-major.
    counts : array_like of int, shape (P,)
        Rollouts per prompt block, ``counts.sum() == R``.
    threshold : float
        ``success_threshold`` (labels a block with no spread).

    Returns
    -------
    ndarray of float64, shape (R,)
        Labels in {0, 1, NaN}.
    """
    score = np.asarray(score, dtype=np.float64)
    labels = np.full(score.shape, np.nan)
    start = 0
    for count in np.asarray(counts, dtype=np.int64):
        block = score[start : start + count]
        scored = ~np.isnan(block)
        out = np.full(count, np.nan)
        values = block[scored]
        if values.size >= 2 and values.max() - values.min() > score_tolerance(values):
            out[scored] = (values > values.min() + score_tolerance(values)).astype(np.float64)
        elif values.size:
            out[scored] = float(values.mean() > threshold)
        labels[start : start + count] = out
        start += count
    return labels


def allocator_labels(score, counts, threshold: float, ds_filter: str = "success") -> np.ndarray:
    """The labels an allocator decides from, for one round of scored rollouts.

    Every allocator uses the binary success labels (:func:`success_labels`), so SARA, dynamic sampling and
    uniform sampling are compared on the same definition of a mixed group. ``ds_filter="score"`` (valid only for
    ``allocator="dynamic_sampling"``, checked by :class:`~sara_trl.allocation.AllocationConfig`) instead keeps a
    group whenever its scores differ beyond float noise (:func:`score_spread_labels`), as DAPO's filter on the
    shaped reward does: a group of wrong answers with different format scores then counts as mixed.

    Parameters
    ----------
    score : array_like of float, shape (R,)
        Scores, prompt-major (NaN: unscorable).
    counts : array_like of int, shape (P,)
        Rollouts per prompt block, ``counts.sum() == R``.
    threshold : float
        ``success_threshold``.
    ds_filter : {"success", "score"}
        See :data:`DS_FILTERS`.

    Returns
    -------
    ndarray of float64, shape (R,)
        Labels in {0, 1, NaN}.

    Raises
    ------
    ValueError
        ``ds_filter`` is not one of :data:`DS_FILTERS`.
    """
    if ds_filter == "success":
        return success_labels(score, threshold)
    if ds_filter == "score":
        return score_spread_labels(score, counts, threshold)
    raise ValueError(f"ds_filter must be one of {DS_FILTERS}, got {ds_filter!r}")
