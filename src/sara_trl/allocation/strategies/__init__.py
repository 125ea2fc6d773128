"""Allocation strategies, one module each, registered by name (``AllocationConfig.allocator``) in
:data:`~sara_trl.allocation.registry.REGISTRY`.

A strategy's rounds face is a generator function ``collect(ctx: StepContext)`` that fills ``ctx.ledger`` round by
round (:class:`~sara_trl.allocation.strategies.base.StepContext`) until ``ctx.B`` groups are committed or a limit
binds, yielding each round's request and returning a ``StrategyResult``; its optional streaming face is a
:class:`~sara_trl.allocation.strategies.base.StreamingPolicy` that decides each prompt as its completions arrive.
The :class:`~sara_trl.allocation.Allocator` owns the cross-step state, draws fresh prompts, builds the batch and the
accounting. A new allocator is one module that calls :func:`~sara_trl.allocation.registry.register`.
"""

from __future__ import annotations

# Importing the modules registers them, in this order (the order of ``ALLOCATORS``).
# isort: off
from sara_trl.allocation.strategies import sara as _sara  # noqa: F401  (paper Alg. 1)
from sara_trl.allocation.strategies import dynamic_sampling as _dynamic_sampling  # noqa: F401  (DAPO)
from sara_trl.allocation.strategies import uniform as _uniform  # noqa: F401  (plain GRPO)
# isort: on
from sara_trl.allocation.registry import STRATEGIES
from sara_trl.allocation.strategies.base import (
    STOP_REASONS,
    Rounds,
    StepContext,
    Strategy,
    StrategyResult,
    StreamingPolicy,
)

__all__ = ["STOP_REASONS", "STRATEGIES", "Rounds", "StepContext", "Strategy", "StrategyResult", "StreamingPolicy"]
