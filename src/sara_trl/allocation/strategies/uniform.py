"""Uniform allocation (plain GRPO): B prompts x k rollouts, every group kept."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.refill import judge_full_groups
from sara_trl.allocation.strategies.base import Rounds, StepContext, StrategyResult


def collect_uniform(ctx: StepContext) -> Rounds:
    """Draw B prompts and generate k rollouts for each, in one round unless ``max_rollouts_per_round`` binds.

    Every group is committed, mixed or not (``effective_fraction`` reports how many were). Stops with
    ``"stream"`` when the stream returned fewer than B prompts, else ``"filled"``.
    """
    cfg, ledger, k, B = ctx.config, ctx.ledger, ctx.config.k, ctx.B
    slots = ledger.add(ctx.draw(B))
    per_call = max(1, (cfg.max_rollouts_per_round or B * k) // k)
    for i in range(0, len(slots), per_call):
        chunk = slots[i : i + per_call]
        yield from ledger.round(chunk, np.full(len(chunk), k, np.int64))
    judge_full_groups(ledger, slots, k, ctx.resolved, keep_all=True)
    return StrategyResult("filled" if len(slots) == B else "stream")
