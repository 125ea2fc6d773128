"""``SaraRun``: SARA's whole run state inside one trainer, in one object (``trainer.sara``).

Set once after TRL's construction (:func:`sara_trl.trainer.prepare.setup`); the modules of :mod:`sara_trl.trainer`
read and update it, and nothing else of SARA's is written onto the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SaraRun"]


@dataclass
class SaraRun:
    """SARA's state in one trainer.

    Attributes
    ----------
    allocator : sara_trl.allocation.Allocator
        The allocation core; cross-step state (refill model, carry-over counts, totals).
    stream : sara_trl.allocation.PromptStream, ShardStream or IterablePromptStream
        SARA's seeded prompt stream over ``train_dataset`` (checkpointed with the allocator).
    success_rule : sara_trl.allocation.labels.SuccessRule
        Reward rows -> success labels; checks the scores' scale on the first scored step.
    plan : sara_trl.trainer.plan.CollectionPlan
        How the run collects (schedule, engine, multi-turn kind), decided once before TRL's construction.
    rollout_func : callable or None
        The user's ``rollout_func`` (a round calls it; TRL's own calls are answered from the replay).
    last_step : sara_trl.allocation.StepResult or None
        The latest collected step (per-prompt records); None before the first.
    carry : sara_trl.trainer.rollout.RolloutCache or None
        With ``carry_over``: the rollouts handed to the next step.
    rows : dict of int to dict
        ``{prompt id: dataset row}`` of the current step (read once per step).
    replay : sara_trl.trainer.replay.Replay or None
        The replay in progress (set only inside :func:`sara_trl.trainer.replay.replaying`).
    """

    allocator: Any
    stream: Any
    success_rule: Any
    plan: Any = None
    rollout_func: Callable | None = None
    last_step: Any = None
    carry: Any = None
    rows: dict[int, dict] = field(default_factory=dict)
    replay: Any = None
