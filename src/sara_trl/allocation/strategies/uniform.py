"""Uniform allocation (plain GRPO): B prompts x k rollouts, every group kept."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.refill import judge_full_groups
from sara_trl.allocation.registry import AllocatorSpec, register
from sara_trl.allocation.strategies.base import RULE_OPTIONS, Rounds, StepContext, StrategyResult


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


def _ignores(config) -> set[str]:
    """Options uniform sampling never reads: it draws B prompts once and keeps every group, so neither SARA's probe
    and rule, nor the budget, the round cap, the refill model nor, without ``selection``, the Beta prior applies."""
    names = set(RULE_OPTIONS) | {"budget_cap", "max_rounds", "yield_decay", "refill_margin"}
    return names if config.selection is not None else names | {"prior_alpha", "prior_beta"}


# No streaming face: uniform sampling has nothing to decide per completion.
register(AllocatorSpec(name="uniform", rounds=collect_uniform, ignores=_ignores, keeps_every_group=True))
