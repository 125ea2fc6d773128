"""Labelling rules: when a rollout is a success, and when a group is mixed (effective).

Every allocator decides from binary success labels, so one rule turns scores into labels and one predicate says
whether a prompt's outcomes are mixed. The trainer calls :func:`allocator_labels` once per round; the decision rule,
the beyond-paper options, the allocator and :class:`~sara_trl.allocation.types.Group` all call :func:`is_mixed`.

A score that is not a 0/1 success label (a reward model's score, a length or format score on another scale) is
binarized at ``success_threshold`` (paper App. F). :class:`SuccessRule` does that labelling for the trainer and, on
the first step where scores are seen, checks that the threshold fits their scale (:func:`score_scale`): a default
threshold that does not fit stops training with an error that names the fix; a threshold the user set explicitly is
used as set, with a warning.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from sara_trl.allocation.registry import spec_of

__all__ = [
    "DEFAULT_SUCCESS_THRESHOLD",
    "DS_FILTERS",
    "FLOAT32_SPREAD_ULPS",
    "ScoreScale",
    "SuccessRule",
    "allocator_labels",
    "is_mixed",
    "score_scale",
    "score_spread_labels",
    "score_tolerance",
    "scores_spread",
    "success_labels",
]

DEFAULT_SUCCESS_THRESHOLD = 0.5
"""``success_threshold`` when none is set: the midpoint of 0/1 success labels."""

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


def scores_spread(values) -> bool:
    """Whether a group's finite scores ``values`` (shape ``(m,)``) differ beyond float noise
    (:func:`score_tolerance`): dynamic sampling's ``ds_filter="score"`` keeps such a group as mixed."""
    values = np.asarray(values, dtype=np.float64)
    return bool(values.size >= 2 and values.max() - values.min() > score_tolerance(values))


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
        if scores_spread(values):
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


# ------------------------------------------------------------------------------------------ the scale of the scores
@dataclass(frozen=True)
class ScoreScale:
    """How a set of scores sits next to a success threshold (see :func:`score_scale`).

    Attributes
    ----------
    threshold : float
        The threshold they were compared with.
    count : int
        Scorable (non-NaN) scores.
    low, high, median : float
        Their smallest, largest and median value.
    successes : int
        Scores ``> threshold``.
    examples : tuple of float
        The first few distinct scores, in the order seen.
    outside : bool
        Some score lies outside [0, 1] (beyond float32 noise): they are not 0/1 success labels.
    unanimous : bool
        The threshold gives every score the same label although the scores differ (beyond float noise): under it
        no group can mix.
    """

    threshold: float
    count: int
    low: float
    high: float
    median: float
    successes: int
    examples: tuple[float, ...]
    outside: bool
    unanimous: bool

    @property
    def fits(self) -> bool:
        """The scores look like success labels for this threshold (neither ``outside`` nor ``unanimous``)."""
        return not (self.outside or self.unanimous)


def score_scale(score, threshold: float, examples: int = 5) -> ScoreScale | None:
    """Whether ``score`` can be success labels for the rule ``score > threshold``.

    Two signs that they cannot: a value outside [0, 1] (a reward model's score, a length or a sum of rewards), or a
    threshold that labels every scored rollout the same way while the scores themselves vary (a continuous score
    entirely on one side of it). Binary 0/1 rewards show neither, whatever the outcomes (all-fail and all-pass
    scores do not vary).

    Parameters
    ----------
    score : array_like of float, shape (R,)
        Scores (NaN: unscorable, left out).
    threshold : float
        ``success_threshold``.
    examples : int
        How many distinct scores to keep as examples.

    Returns
    -------
    ScoreScale or None
        None when no score is scorable.
    """
    score = np.asarray(score, dtype=np.float64).ravel()
    values = score[~np.isnan(score)]
    if not values.size:
        return None
    finite = values[np.isfinite(values)]
    noise = FLOAT32_SPREAD_ULPS * float(np.finfo(np.float32).eps)
    low, high = float(values.min()), float(values.max())
    spread = high - low
    varies = bool(spread > score_tolerance(finite)) if math.isfinite(spread) else low != high
    successes = int((values > threshold).sum())
    _, first = np.unique(values, return_index=True)
    return ScoreScale(
        threshold=float(threshold), count=int(values.size), low=low, high=high, median=float(np.median(values)),
        successes=successes, examples=tuple(float(v) for v in values[np.sort(first)[:examples]]),
        outside=bool(low < -noise or high > 1.0 + noise), unanimous=varies and successes in (0, values.size),
    )


def _num(value: float) -> str:
    return f"{value:.4g}"


class SuccessRule:
    """The trainer's success labels, ``score > threshold``, with a check of the scores' scale on the first step.

    Every allocator decides from binary labels. When the scores are not 0/1 labels (values outside [0, 1], or a
    threshold that puts every rollout on the same side while the scores vary; :func:`score_scale`), the default
    threshold of 0.5 is meaningless for them: SARA would see every group saturated and train nothing. So, until the
    end of the first step in which a scorable rollout was seen:

    - with the default threshold and an allocator that decides from these labels (SARA; dynamic sampling with
      ``ds_filter="success"``), :meth:`labels` raises as soon as a score outside [0, 1] arrives, and
      :meth:`end_step` raises if the step's scores do not fit. The ``ValueError`` names the score's source, the
      values seen and the two fixes (a binary ``success_reward_func``, or an explicit ``success_threshold``);
    - with a threshold the user set, the scores are binarized at it (paper App. F) and :meth:`end_step` warns once;
    - with an allocator that keeps every group (``allocator="uniform"``, ``AllocatorSpec.keeps_every_group``) or
      ``ds_filter="score"`` (the allocation does not depend on the labels; only the
      ``sara/*`` success metrics do) :meth:`end_step` warns once with the default threshold, and is silent with an
      explicit one.

    Parameters
    ----------
    threshold : float
        ``success_threshold``.
    explicit : bool
        The threshold was set by the user (not the default).
    source : str
        What the score is, for the messages (e.g. ``"the weighted sum of the reward functions ['acc', 'fmt']"``).
    allocator : str
        ``allocator`` of the config.
    ds_filter : str
        ``ds_filter`` of the config.

    Attributes
    ----------
    checking : bool
        True until the end of the first step that held a scorable rollout.
    """

    def __init__(self, threshold: float, explicit: bool, source: str, allocator: str = "sara",
                 ds_filter: str = "success"):
        self.threshold = float(threshold)
        self.explicit = bool(explicit)
        self.source = source
        self.allocator = allocator
        self.ds_filter = ds_filter
        self.checking = True

    @property
    def binding(self) -> bool:
        """The allocator decides which groups to train from these labels."""
        spec = spec_of(self.allocator)
        return not (spec is not None and spec.keeps_every_group) and self.ds_filter == "success"

    @property
    def strict(self) -> bool:
        """A scale that does not fit is an error (default threshold, binding labels), not a warning."""
        return self.binding and not self.explicit

    def labels(self, score) -> np.ndarray:
        """:func:`success_labels` of ``score``; while checking, a default threshold meeting scores outside [0, 1]
        raises at once (no need to wait for the end of the step).

        Parameters
        ----------
        score : array_like of float, shape (R,)
            One reward pass's scores (NaN: unscorable).

        Returns
        -------
        ndarray of float64, shape (R,)
            Labels in {0, 1, NaN}.

        Raises
        ------
        ValueError
            See :class:`SuccessRule`.
        """
        labels = success_labels(score, self.threshold)
        if self.checking and self.strict:
            scale = score_scale(score, self.threshold)
            if scale is not None and scale.outside:
                raise ValueError(self.message(scale))
        return labels

    def end_step(self, score) -> None:
        """Judge a whole step's scores; the check ends after the first step that held a scorable rollout.

        Parameters
        ----------
        score : array_like of float, shape (R,)
            Every score of the step (the same on every process, so that every process raises or none does).

        Raises
        ------
        ValueError
            See :class:`SuccessRule`.
        """
        if not self.checking:
            return
        scale = score_scale(score, self.threshold)
        if scale is None:  # nothing scorable yet: check the next step
            return
        self.checking = False
        if scale.fits:
            return
        if self.strict:
            raise ValueError(self.message(scale))
        if self.explicit and not self.binding:  # the user's threshold only feeds the sara/* success metrics
            return
        warnings.warn(self.message(scale), UserWarning, stacklevel=2)

    def message(self, scale: ScoreScale) -> str:
        """The error or warning text for scores that do not fit (see :class:`SuccessRule`)."""
        thr = _num(self.threshold)
        seen = (f"{self.source} ranged from {_num(scale.low)} to {_num(scale.high)} over {scale.count} scored "
                f"rollout(s) of the first training step (e.g. {', '.join(_num(v) for v in scale.examples)})")
        label = "success" if scale.successes else "failure"
        default = "" if self.explicit else " (the default)"
        same = f"success_threshold={thr}{default} labels every one of them a {label} although they differ"
        if self.explicit:
            text = (f"success_threshold={thr} (set explicitly) binarizes scores that are not 0/1 success labels: "
                    f"{seen}; {scale.successes} of {scale.count} are successes (score > {thr}). "
                    f"allocator={self.allocator!r} decides which groups to train from these labels (paper App. F: a "
                    "continuous reward is binarized at a threshold); the loss uses the rewards as they are.")
            if scale.unanimous:
                text += (f" But {same}: no group can mix, so nothing is trained while that lasts; choose a threshold "
                         f"between {_num(scale.low)} and {_num(scale.high)}.")
            return text
        why = ("outside [0, 1]" + (f", and {same}" if scale.unanimous else
                                   f"; success_threshold={thr}, the default meant for 0/1 labels, labels "
                                   f"{scale.successes} of {scale.count} of them successes")) if scale.outside else same
        text = f"The rewards are not 0/1 success labels: {seen}, {why}."
        if not self.binding:
            how = "ds_filter='score'" if self.ds_filter != "success" else f"allocator={self.allocator!r}"
            return (text + f" With {how} the allocation does not depend on these labels, so training proceeds; only "
                    "the sara/* success metrics (sara/raw_success_rate, sara/effective_fraction) count them. Set "
                    "success_threshold or success_reward_func to make those meaningful (docs/rewards.md).")
        if scale.unanimous:
            text += (f" allocator={self.allocator!r} trains only groups that mix successes and failures, so every "
                     "group would be saturated and no step would train anything.")
        else:
            text += (f" allocator={self.allocator!r} decides which groups to train from these labels, so the "
                     "threshold has to be chosen for this scale.")
        suggested, what = scale.median, "the median score seen"
        if not scale.low < suggested < scale.high:
            suggested, what = (scale.low + scale.high) / 2, "midway between the lowest and highest score seen"
        example = (f" (e.g. success_threshold={_num(suggested)}, {what})"
                   if math.isfinite(suggested) and scale.low < scale.high else "")
        return text + (
            " Fix it in one of two ways: (1) add a reward function that returns 1.0 for a success and 0.0 for a "
            "failure (a verifier) and name it with success_reward_func (the loss still uses every reward function, "
            "weighted by reward_weights); or (2) set success_threshold explicitly to the score above which a "
            f"rollout counts as a success{example}: the "
            "scores are then binarized at it (paper App. F), with a warning instead of this error. See "
            "docs/rewards.md, 'Continuous rewards and reward models'. If the task has no notion of success, "
            "allocator='uniform' keeps TRL's own behaviour (every drawn prompt trained with its k rollouts).")
