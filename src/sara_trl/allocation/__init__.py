"""The torch-free allocation core: p_eff (Eq. 2), the decision rule (Eq. 3), the round-synchronous scheduler
(Alg. 1) for SARA and the uniform / dynamic-sampling baselines, their accounting, and a simulated rollout source.

Depends on numpy and scipy only; never imports torch, TRL or transformers.
"""

from sara_trl.allocation.config import ALLOCATORS, AllocationConfig
from sara_trl.allocation.predictor import abandon_point_uniform, p_eff
from sara_trl.allocation.rules import decide
from sara_trl.allocation.scheduler import Allocator
from sara_trl.allocation.simulate import SimulatedTask, phi, psi, u_shaped_gammas
from sara_trl.allocation.stream import PromptStream
from sara_trl.allocation.types import (
    ABANDON,
    COMMIT,
    CONTINUE,
    Group,
    PromptRecord,
    RolloutFn,
    RoundOutcome,
    StepResult,
    StepStats,
)

__all__ = [
    "ALLOCATORS", "AllocationConfig", "Allocator", "PromptStream", "RoundOutcome", "RolloutFn", "StepResult",
    "StepStats", "Group", "PromptRecord", "p_eff", "decide", "abandon_point_uniform", "SimulatedTask",
    "u_shaped_gammas", "phi", "psi", "COMMIT", "ABANDON", "CONTINUE",
]
