"""Dynamic sampling (DAPO): rounds of full k-groups from fresh prompts; keep the mixed ones until B are kept."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.refill import fresh_to_draw, judge_full_groups
from sara_trl.allocation.strategies.base import Rounds, StepContext, StrategyResult


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
