"""What a strategy receives for one step (:class:`StepContext`) and what it returns (:class:`StrategyResult`)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sara_trl.allocation.ledger import Ledger
from sara_trl.allocation.refill import step_budget
from sara_trl.allocation.types import RoundRequest

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.allocation.config import AllocationConfig

__all__ = ["STOP_REASONS", "Rounds", "StepContext", "Strategy", "StrategyResult"]

STOP_REASONS = ("filled", "budget", "max_rounds", "stream")
"""Why a step ended: B groups committed; the budget cap (or the per-round capacity) left no room; ``max_rounds``
rounds were used; the stream had no fresh prompt left (``wrap=False``), or uniform sampling drew fewer than B."""


@dataclass(frozen=True)
class StrategyResult:
    """How a strategy's collection ended.

    Attributes
    ----------
    stop_reason : str
        One of :data:`STOP_REASONS`.
    expected_lost : float
        Summed p_eff (paper Eq. 2) of the prompts abandoned early: the expected number of abandoned groups that
        would have been effective at size k (paper Thm 1). 0 for strategies that never stop a group early.
    """

    stop_reason: str
    expected_lost: float = 0.0


@dataclass
class StepContext:
    """Everything a strategy may use to collect one step's B groups.

    Attributes
    ----------
    config : AllocationConfig
        The allocation settings (``k``, ``n0``, ``budget_cap``, ...).
    ledger : Ledger
        The step's ledger: :meth:`Ledger.add` slots for drawn prompts, ``yield from`` :meth:`Ledger.round` one round,
        :meth:`Ledger.mark` decisions. It may already hold prompts carried in from the previous step.
    B : int
        Groups the batch needs.
    draw : callable
        ``draw(count) -> (<= count,) int64`` fresh prompt ids (stream order, or the predictive selector's pick).
    decide : callable
        ``decide(pids, n, n_scored, s) -> (decision, p_eff)``, the per-round rule (paper Eq. 3, or the
        beyond-paper rule when enabled), all arrays ``(P,)``.
    mix_rate : callable
        ``mix_rate() -> (k + 1,)`` learned share of unmixed prompts with n rollouts that go on to mix (n = 0: a
        fresh prompt), from the refill model.
    fresh_cost : callable
        ``fresh_cost() -> float`` learned rollouts a fresh prompt costs until it is committed or abandoned.
    resolved : callable
        ``resolved(last_unmixed, mixed, cost)`` feeds the refill model with prompts whose fate became known (all
        ``(P,)``: the largest rollout count at which each was still unmixed; whether it mixed; rollouts it cost).
    """

    config: AllocationConfig
    ledger: Ledger
    B: int
    draw: Callable[[int], np.ndarray]
    decide: Callable[..., tuple[np.ndarray, np.ndarray]]
    mix_rate: Callable[[], np.ndarray]
    fresh_cost: Callable[[], float]
    resolved: Callable[[np.ndarray, np.ndarray, np.ndarray], None]

    @property
    def budget(self) -> int:
        """Rollouts the step may generate: ``floor(budget_cap * B * k)`` (paper App. D)."""
        return step_budget(self.config, self.B)

    @property
    def need(self) -> int:
        """Committed groups still missing for a full batch (<= 0 when full)."""
        return self.B - len(self.ledger.kept_order)


Rounds = Generator[RoundRequest, object, StrategyResult]
"""What a strategy is once called: a generator that yields each round's :class:`RoundRequest` (through
:meth:`Ledger.round`), is sent that round's outcomes, and returns the :class:`StrategyResult`."""


class Strategy(Protocol):
    """``strategy(ctx) -> Rounds``: collect until ``ctx.B`` groups are committed or a limit binds, one yielded
    :class:`RoundRequest` per round. The strategy never generates anything itself, so the same code runs whether a
    round is one ``rollout_fn`` call (:meth:`Allocator.collect`) or a batch of engine requests answered through
    the event loop (:class:`~sara_trl.allocation.rounds.RoundCollector`)."""

    def __call__(self, ctx: StepContext) -> Rounds: ...
