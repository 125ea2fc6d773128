"""What a strategy receives for one step (:class:`StepContext`) and what it returns (:class:`StrategyResult`); the
interface of an allocator's streaming face (:class:`StreamingPolicy`)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.ledger import Ledger
from sara_trl.allocation.refill import expected_commits, fresh_affordable, fresh_to_draw, step_budget
from sara_trl.allocation.types import RoundRequest

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.allocation.config import AllocationConfig
    from sara_trl.allocation.streaming import StreamActions, StreamingCollector

__all__ = ["RULE_OPTIONS", "STOP_REASONS", "Rounds", "StepContext", "Strategy", "StrategyResult", "StreamingPolicy"]

RULE_OPTIONS = ("n0", "tau_low", "commit_min", "round_increment", "continue_to_decision", "auto_prior",
                "auto_prior_decay", "auto_min_prompts", "auto_loss_cap")
"""The options of SARA's probe and stopping rule (paper Eq. 3, Alg. 1): an allocator that keeps or drops whole groups
never reads them."""

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


class StreamingPolicy:
    """An allocator's decisions when completions arrive one at a time (``collection="streaming"``).

    The :class:`~sara_trl.allocation.streaming.StreamingCollector` owns the mechanics (requests in flight, the queue,
    aborts, holds, carry, surplus accounting); the policy decides, through the collector it was built for
    (``self.c``): :meth:`outcome` commits or abandons a prompt (``c.close``) or queues its next requests
    (``c.enqueue``); :meth:`fresh` sizes the fresh draws; :meth:`held` names the undecided prompts to hold.
    Subclasses set :attr:`probe` and implement :meth:`outcome`; the defaults suit an allocator that decides only
    full groups.

    Attributes
    ----------
    probe : int
        Requests submitted at once for a fresh prompt (SARA: n0; dynamic sampling: k).
    """

    probe: int

    def __init__(self, collector: StreamingCollector):
        self.c = collector

    def validate(self, rid: int, success: float, score: float | None) -> None:
        """Check a completion before it is recorded (raise ``ValueError`` to refuse it); default: accept."""

    def outcome(self, slot: int, was_mixed: bool, score: float | None, actions: StreamActions) -> None:
        """``slot``'s latest completion is recorded (``was_mixed``: it was mixed before it): decide the prompt."""
        raise NotImplementedError

    def seed(self, slots: range, actions: StreamActions) -> None:
        """Decide the undecided prompts carried in (``carry_over``) and queue their requests.

        Raises
        ------
        ValueError
            Always, by default: the allocator carries nothing.
        """
        raise ValueError(f"allocator={self.c.config.allocator!r} carries no prompts between steps")

    def held(self) -> list[int] | None:
        """The undecided prompts to hold (no new request; with ``carry_over`` carried), once the prompts being
        completed alone fill the batch; None while they do not (then fresh prompts may be drawn). Default: None."""
        return None

    def reserved(self) -> float:
        """Rollouts the undecided prompts are expected to need beyond what is submitted or queued, kept back from
        fresh draws; default 0 (every request of a prompt is submitted at once)."""
        return 0.0

    def remap(self, new: np.ndarray) -> None:
        """The collector renumbered its slots (``new[old]``, -1: forgotten, a decided prompt), at a continuous
        window: renumber any per-slot state; default: none."""

    def fill(self, actions: StreamActions) -> None:
        """Use engine slots the rule leaves free (runs with an empty queue, nothing held); default: leave them."""

    def expected_commits(self, need: int) -> tuple[float, float]:
        """:func:`~sara_trl.allocation.refill.expected_commits` of the undecided prompts, an unmixed one at the
        learned mix rate of its rollout count (a prompt below its probe counting as fresh)."""
        led = self.c.ledger
        act = led.active()
        if len(act) == 0:
            return 0.0, 0.0
        rate = self.c.mix_rate()
        mixed = is_mixed(led.s[act], led.nsc[act])
        n = led.n[act]
        return expected_commits(int(mixed.sum()), need, rate[np.where(n < self.probe, 0, n)][~mixed])

    def affordable(self, left: int, wanted: int) -> int:
        """``min(wanted, fresh_affordable(left, reserved(), fresh cost))``: fresh prompts only as many as the budget
        left after the undecided prompts' expected remaining cost can see through."""
        if wanted <= 0:
            return wanted
        return min(wanted, fresh_affordable(left, self.reserved(), self.c.fresh_cost()))

    def fresh(self, need: int, free: int, left: int) -> tuple[int, int]:
        """``(wanted, affordable)`` fresh prompts for ``need`` missing groups, ``free`` engine slots and ``left``
        budget: as the round allocator sizes a refill, expected commits plus ``refill_margin`` standard deviations
        (:func:`~sara_trl.allocation.refill.fresh_to_draw`), then capped by the slots, the budget and
        :meth:`affordable`."""
        expected, var = self.expected_commits(need)
        wanted = fresh_to_draw(need, expected, var, float(self.c.mix_rate()[0]), self.c.config.margin)
        return wanted, self.affordable(left, min(wanted, free // self.probe, left // self.probe))
