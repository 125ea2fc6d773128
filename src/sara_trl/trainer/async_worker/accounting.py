"""The asynchronous worker's accounting: one metrics dict per window, shaped for TRL's ``metrics_queue``.

TRL 1.16's trainer reduces each key over its logging window by its shape and name
(``async_grpo_trainer._reduce_metric``): a ``(numerator, denominator)`` pair is a rate, a key whose last path word is
``total`` is a counter (summed), ``max`` an extremum, anything else a gauge (averaged). Every counter here is a delta
over one accounting window of the collector (:meth:`~sara_trl.allocation.StreamingCollector.window`), for which,
in rollouts and in tokens (checked by :meth:`~sara_trl.allocation.types.WindowStats.check`)::

    generated == pushed + dropped + abandoned + aborted + (undecided now - undecided at the last window)
                                                        + (waiting now - waiting at the last window)

``pushed``: the committed groups' rollouts put on ``rollout_buffer`` (the trainer's queue) in the window;
``waiting``: rollouts of committed groups still waiting for room in that buffer (backpressure: a group committed in
one window may reach the buffer in a later one, row by row); ``dropped``: rows of committed groups never put on the
buffer because the worker stopped while it was full (0 otherwise); ``abandoned``:
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

    def row_pushed(self, tokens: int) -> None:
        """One row (a rollout of ``tokens`` completion tokens) was put on the buffer."""
        self.rollouts_pushed += 1
        self.tokens_pushed += tokens

    def group_pushed(self, staleness: int, spread: int) -> None:
        """The last row of a group was put on the buffer, ``staleness`` versions behind the policy (current version
        - its oldest completion's), its completions ``spread`` versions apart (newest - oldest)."""
        self.groups_pushed += 1
        self.staleness_sum += staleness
        self.staleness_high = max(self.staleness_high, staleness)
        self.spread_sum += spread

    def dropped(self, rollouts: int, tokens: int) -> None:
        """Rows of a committed group were not pushed (the worker stopped while the buffer was full)."""
        self.rollouts_dropped += rollouts
        self.tokens_dropped += tokens


def window_metrics(stats: WindowStats, meter: WindowMeter, prompts_abandoned: int,
                   waiting: tuple[int, int] = (0, 0), waiting_before: tuple[int, int] = (0, 0)) -> dict:
    """The window's dict for ``metrics_queue`` (keys ``sara/...``; see the module docstring for the reductions).

    Parameters
    ----------
    stats : WindowStats
        The collector's window (already checked).
    meter : WindowMeter
        The worker's counts for the same window.
    prompts_abandoned : int
        Prompts abandoned in the window.
    waiting, waiting_before : (int, int)
        Rows of committed groups waiting for room in the buffer, and their completion tokens, at the window's end
        and at the previous window's end.

    Returns
    -------
    dict
        Counters (``*_total``, deltas): ``rollouts_/tokens_`` ``generated``, ``pushed``, ``abandoned``, ``aborted``
        (and ``dropped`` when any were); ``groups_committed_total``, ``prompts_drawn_total``,
        ``prompts_abandoned_total``. Gauges: ``rollouts_undecided``, ``tokens_undecided`` (at the window's end),
        ``inflight`` (requests running on into the next window), ``rollouts_waiting``, ``tokens_waiting`` (rows of
        committed groups waiting for room in the buffer). Rates: ``effective_yield`` (rollouts pushed per rollout
        generated), ``token_yield`` (the same in tokens), ``group_staleness_mean`` and
        ``group_version_spread_mean`` (per pushed group). ``group_staleness_max`` when a group was pushed.

    Raises
    ------
    AssertionError
        The worker's pushed + dropped + change in waiting rollouts (or tokens) differ from the collector's emitted
        ones (a group lost in between).
    """
    moved = (meter.rollouts_pushed + meter.rollouts_dropped + waiting[0] - waiting_before[0],
             meter.tokens_pushed + meter.tokens_dropped + waiting[1] - waiting_before[1])
    if moved != (stats.rollouts_emitted, stats.tokens_emitted):
        raise AssertionError(f"pushed + dropped + change in waiting ({moved[0]} rollouts, {moved[1]} tokens) != "
                             f"committed ({stats.rollouts_emitted} rollouts, {stats.tokens_emitted} tokens) in one "
                             "window")
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
        "sara/rollouts_waiting": waiting[0],
        "sara/tokens_waiting": waiting[1],
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
