"""Dynamic sampling (DAPO): full k-groups from fresh prompts; keep the mixed ones until B are kept, in rounds
(:func:`collect_dynamic_sampling`) or on a running engine (:class:`DynamicSamplingStreaming`)."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.labels import score_spread_labels, scores_spread
from sara_trl.allocation.refill import fresh_to_draw, judge_full_groups
from sara_trl.allocation.registry import AllocatorSpec, register
from sara_trl.allocation.strategies.base import RULE_OPTIONS, Rounds, StepContext, StrategyResult, StreamingPolicy

__all__ = ["DynamicSamplingStreaming", "collect_dynamic_sampling"]


def collect_dynamic_sampling(ctx: StepContext) -> Rounds:
    """Generate full groups of k for fresh prompts, round after round, committing the mixed ones.

    Each round draws ``ceil(need / Phi_hat)`` prompts, where ``Phi_hat = mix_rate()[0]`` is the learned share of
    fresh prompts that mix, within the remaining budget and the per-round capacity. A saturated group is
    abandoned (its rollouts are accounted as abandoned).
    """
    cfg, ledger, k = ctx.config, ctx.ledger, ctx.config.k
    budget = ctx.budget
    while True:
        need = ctx.need
        if need <= 0:
            return StrategyResult("filled")
        if ledger.rounds >= cfg.max_rounds:
            return StrategyResult("max_rounds")
        room = budget - ledger.generated
        if cfg.max_rollouts_per_round is not None:
            room = min(room, cfg.max_rollouts_per_round)
        want = min(fresh_to_draw(need, 0.0, 0.0, float(ctx.mix_rate()[0]), 0.0), room // k)
        if want <= 0:
            return StrategyResult("budget")
        pids = ctx.draw(want)
        if len(pids) == 0:
            return StrategyResult("stream")
        slots = ledger.add(pids)
        yield from ledger.round(slots, np.full(len(slots), k, np.int64))
        judge_full_groups(ledger, slots, k, ctx.resolved, keep_all=False)


class DynamicSamplingStreaming(StreamingPolicy):
    """Dynamic sampling per completion: a fresh prompt gets its k requests at once; when the k-th finishes, the group
    is committed if mixed, else abandoned (saturated). With ``ds_filter="score"`` a group's labels follow the spread
    of its k scores (:func:`~sara_trl.allocation.labels.score_spread_labels`), as in rounds, so each completion
    must bring its score. ``speculate`` is ignored (every request of a prompt is submitted at once)."""

    def __init__(self, collector, speculate: bool = False):
        super().__init__(collector)
        self.probe = collector.config.k
        # ds_filter="score": a group's scores, kept until all k are in
        self.scores: dict[int, list[float]] | None = {} if collector.config.ds_filter == "score" else None

    def validate(self, rid, success, score) -> None:
        if self.scores is not None and (score is None or np.isnan(float(score)) != np.isnan(success)):
            raise ValueError(f"request {rid}: ds_filter='score' needs each completion's score (NaN exactly when its "
                             f"success label is NaN), got {score!r}")

    def remap(self, new) -> None:
        if self.scores is not None:
            self.scores = {int(new[slot]): scores for slot, scores in self.scores.items() if new[slot] >= 0}

    def outcome(self, slot, was_mixed, score, actions) -> None:
        c, k = self.c, self.c.config.k
        led = c.ledger
        if self.scores is not None:
            self.scores.setdefault(slot, []).append(float(score))
        if led.n[slot] < k:
            return
        if self.scores is not None:
            scores = np.asarray(self.scores.pop(slot), np.float64)
            if scores_spread(scores[~np.isnan(scores)]):
                led.relabel(slot, score_spread_labels(scores, [len(scores)], threshold=0.5))  # (threshold unused)
        judge_full_groups(led, np.array([slot]), k, c._resolved, keep_all=False)
        c.close(slot, actions)


def _ignores(config) -> set[str]:
    """Options dynamic sampling never reads: SARA's probe and rule (its streaming collector still prices a fresh
    prompt from ``n0`` and ``commit_min`` until it has learned the price, so those two count there), and with rounds
    ``refill_margin`` (each draw is sized without it)."""
    if config.collection == "streaming":
        return set(RULE_OPTIONS) - {"n0", "commit_min"}
    return set(RULE_OPTIONS) | {"refill_margin"}


register(AllocatorSpec(
    name="dynamic_sampling", rounds=collect_dynamic_sampling, streaming=DynamicSamplingStreaming, ignores=_ignores,
    owns={"ds_filter": ("ds_filter={value!r} is a dynamic-sampling option", "decides from the binary success "
                        "labels")}))
