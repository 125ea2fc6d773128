"""Allocation strategies, registered by name (``AllocationConfig.allocator``).

A strategy is a generator function ``collect(ctx: StepContext)`` that fills ``ctx.ledger`` round by round
(:class:`~sara_trl.allocation.strategies.base.StepContext`) until ``ctx.B`` groups are committed or a limit binds,
yielding each round's request and returning a ``StrategyResult``;
the :class:`~sara_trl.allocation.Allocator` owns the cross-step state, draws fresh prompts, builds the batch and
the accounting. A new allocator is one module in this package plus one line in :data:`STRATEGIES`.
"""

from __future__ import annotations

from sara_trl.allocation.strategies.base import STOP_REASONS, Rounds, StepContext, Strategy, StrategyResult
from sara_trl.allocation.strategies.dynamic_sampling import collect_dynamic_sampling
from sara_trl.allocation.strategies.sara import collect_sara
from sara_trl.allocation.strategies.uniform import collect_uniform

__all__ = ["STOP_REASONS", "STRATEGIES", "Rounds", "StepContext", "Strategy", "StrategyResult"]

STRATEGIES: dict[str, Strategy] = {
    "sara": collect_sara,  # paper Alg. 1
    "dynamic_sampling": collect_dynamic_sampling,  # DAPO
    "uniform": collect_uniform,  # plain GRPO
}
"""Allocator name -> strategy; the order is the order of ``ALLOCATORS``."""
