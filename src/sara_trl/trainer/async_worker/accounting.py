"""The asynchronous worker's accounting: one metrics dict per window, shaped for TRL's ``metrics_queue``.

TRL 1.16's trainer reduces each key over its logging window by its shape and name
(``async_grpo_trainer._reduce_metric``): a ``(numerator, denominator)`` pair is a rate, a key whose last path word is
``total`` is a counter (summed), ``max`` an extremum, anything else a gauge (averaged). Every counter here is a delta
over one accounting window of the collector (:meth:`~sara_trl.allocation.StreamingCollector.window`), for which,
in rollouts and in tokens (checked by :meth:`~sara_trl.allocation.types.WindowStats.check`)::

    generated == pushed + dropped + abandoned + aborted + (undecided now - undecided at the last window)

``pushed``: the committed groups' rollouts put on ``rollout_buffer`` (the trainer's queue); ``dropped``: those of
groups committed but not pushed because the worker stopped while the buffer was full (0 otherwise); ``abandoned``:
the rollouts of prompts abandoned in the window; ``aborted``: requests cancelled before they finished (abandoned
prompts' speculative requests, surplus, everything at ``stop()``) plus those that finished after being given up;
``undecided``: rollouts recorded on prompts still undecided.
"""

from __future__ import annotations

from dataclasses import dataclass

from sara_trl.allocation.types import WindowStats

__all__ = ["WindowMeter", "window_metrics"]


@dataclass
class WindowMeter:
    """What the worker counts itself within a window (the collector counts the rest): prompts drawn, groups and
    rollouts pushed or dropped, and the staleness of the pushed groups (in policy versions)."""

    prompts_drawn: int = 0
    groups_pushed: int = 0
    rollouts_pushed: int = 0
    tokens_pushed: int = 0
    rollouts_dropped: int = 0
    tokens_dropped: int = 0
    staleness_sum: int = 0
    staleness_high: int = 0
    spread_sum: int = 0

    def pushed(self, rollouts: int, tokens: int, staleness: int, spread: int) -> None:
        """A group of ``rollouts`` completions (``tokens`` completion tokens) was put on the buffer ``staleness``
        versions behind the policy (current version - its oldest completion's), its completions ``spread`` versions
        apart (newest - oldest)."""
        self.groups_pushed += 1
        self.rollouts_pushed += rollouts
        self.tokens_pushed += tokens
        self.staleness_sum += staleness
        self.staleness_high = max(self.staleness_high, staleness)
        self.spread_sum += spread

    def dropped(self, rollouts: int, tokens: int) -> None:
        """A committed group was not pushed (the worker stopped while the buffer was full)."""
        self.rollouts_dropped += rollouts
        self.tokens_dropped += tokens


def window_metrics(stats: WindowStats, meter: WindowMeter, prompts_abandoned: int) -> dict:
    """The window's dict for ``metrics_queue`` (keys ``sara/...``; see the module docstring for the reductions).

    Parameters
    ----------
    stats : WindowStats
        The collector's window (already checked).
    meter : WindowMeter
        The worker's counts for the same window.
    prompts_abandoned : int
        Prompts abandoned in the window.

    Returns
    -------
    dict
        Counters (``*_total``, deltas): ``rollouts_/tokens_`` ``generated``, ``pushed``, ``abandoned``, ``aborted``
        (and ``dropped`` when any were); ``groups_committed_total``, ``prompts_drawn_total``,
        ``prompts_abandoned_total``. Gauges: ``rollouts_undecided``, ``tokens_undecided`` (at the window's end),
        ``inflight`` (requests running on into the next window). Rates: ``effective_yield`` (rollouts pushed per
        rollout generated), ``token_yield`` (the same in tokens), ``group_staleness_mean`` and
        ``group_version_spread_mean`` (per pushed group). ``group_staleness_max`` when a group was pushed.

    Raises
    ------
    AssertionError
        The worker's pushed + dropped rollouts differ from the collector's emitted ones (a group lost in between).
    """
    if (meter.rollouts_pushed + meter.rollouts_dropped, meter.tokens_pushed + meter.tokens_dropped) != (
            stats.rollouts_emitted, stats.tokens_emitted):
        raise AssertionError(f"pushed + dropped ({meter.rollouts_pushed} + {meter.rollouts_dropped} rollouts) != "
                             f"committed ({stats.rollouts_emitted} rollouts) in one window")
    m = {
        "sara/rollouts_generated_total": stats.rollouts_generated,
        "sara/tokens_generated_total": stats.tokens_generated,
        "sara/rollouts_pushed_total": meter.rollouts_pushed,
        "sara/tokens_pushed_total": meter.tokens_pushed,
        "sara/rollouts_abandoned_total": stats.rollouts_abandoned,
        "sara/tokens_abandoned_total": stats.tokens_abandoned,
        "sara/rollouts_aborted_total": stats.rollouts_aborted,
        "sara/tokens_aborted_total": stats.tokens_aborted,
        "sara/groups_committed_total": stats.groups_emitted,
        "sara/prompts_drawn_total": meter.prompts_drawn,
        "sara/prompts_abandoned_total": prompts_abandoned,
        "sara/rollouts_undecided": stats.rollouts_active[1],
        "sara/tokens_undecided": stats.tokens_active[1],
        "sara/inflight": stats.in_flight,
        "sara/effective_yield": (meter.rollouts_pushed, stats.rollouts_generated),
        "sara/token_yield": (meter.tokens_pushed, stats.tokens_generated),
        "sara/group_staleness_mean": (meter.staleness_sum, meter.groups_pushed),
        "sara/group_version_spread_mean": (meter.spread_sum, meter.groups_pushed),
    }
    if meter.groups_pushed:
        m["sara/group_staleness_max"] = meter.staleness_high
    if meter.rollouts_dropped:
        m["sara/rollouts_dropped_total"] = meter.rollouts_dropped
        m["sara/tokens_dropped_total"] = meter.tokens_dropped
    return {key: (tuple(float(x) for x in v) if isinstance(v, tuple) else float(v)) for key, v in m.items()}
