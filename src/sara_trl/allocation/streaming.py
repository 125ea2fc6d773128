"""Streaming collection: decide per finished completion on a running engine, with no round barrier.

The round allocators (:mod:`~sara_trl.allocation.strategies`) wait for a whole generation call before any decision.
:class:`StreamingCollector` instead takes completions one at a time, as a continuous-batching engine (vLLM's
``add_request`` / ``step`` / ``abort_request``) finishes them. It keeps the mechanics: requests in flight under a
concurrency cap, a queue of wanted requests, aborts (of a decided prompt's requests, and of everything once B groups
are committed), held prompts, the carry (``carry_over``) and the surplus accounting. Every decision is the
allocator's streaming policy (:class:`~sara_trl.allocation.strategies.base.StreamingPolicy`, registered beside its
rounds strategy in :mod:`~sara_trl.allocation.registry`): what a finished completion decides (commit, abandon, or
the prompt's next requests), how many fresh prompts to draw, and which undecided prompts to hold once the batch is
covered (their requests in flight are aborted, or with ``carry_over`` run on until a queued request needs the slot).
Bookkeeping goes through the same :class:`~sara_trl.allocation.ledger.Ledger` as rounds, so the batch, the
per-prompt table and the accounting are built exactly as for rounds; aborted requests (and requests that finish
after the batch is full) are accounted as surplus rollouts and tokens; held prompts end the step undecided
(``active_left``).

The driver's loop (one implementation, :func:`~sara_trl.allocation.event_loop.drive_streaming_engine`, which the
trainer runs on vLLM and :func:`~benchmarks.simulator.simulate.run_streaming_step` on a simulated engine)::

    actions = collector.start()
    while not collector.done:
        submit actions.submit, abort actions.abort (then collector.aborted(rid, tokens) for each)
        rid, success, tokens = next finished request
        actions = collector.complete(rid, success, tokens)
    result = collector.finish()
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sara_trl.allocation import strategies as _strategies  # noqa: F401  (registers the allocators)
from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.ledger import Ledger
from sara_trl.allocation.refill import RefillModel, config_rule, step_budget
from sara_trl.allocation.registry import spec_of, streaming_allocators
from sara_trl.allocation.types import Fate, Group, StepResult, StepStats, WindowStats

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.allocation.config import AllocationConfig

_ENDLESS = 2**62
"""Continuous mode's batch size and budget: no bound (the engine's concurrency cap and the stream limit the run)."""

__all__ = ["Request", "StreamActions", "StreamingCollector", "merge_step_results"]

@dataclass(frozen=True)
class Request:
    """One rollout to generate: request id (unique within the step) and dataset index of its prompt."""

    rid: int
    prompt_id: int


@dataclass
class StreamActions:
    """What the driver must do after an event.

    Attributes
    ----------
    submit : list of Request
        New requests, in order (continuing prompts first, then fresh probes).
    abort : list of int
        Request ids to abort; report each one's decoded tokens with :meth:`StreamingCollector.aborted`.
    """

    submit: list[Request] = field(default_factory=list)
    abort: list[int] = field(default_factory=list)


class _Requests:
    """The collector's requests: those in flight (request id -> slot), per slot how many are in flight, the queue of
    wanted requests not yet submitted (one entry per request), and those asked to abort whose tokens are unreported.
    An aborted request marks its prompt ``truncated`` in ``ledger``."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.next_rid = 0
        self.flight: dict[int, int] = {}  # request id in flight -> slot
        self.out: dict[int, int] = {}  # slot -> requests in flight
        self.queue: deque[int] = deque()  # one entry per wanted request (slot) not yet submitted
        self.queued: dict[int, int] = {}  # slot -> entries in the queue
        self.aborting: set[int] = set()  # asked to abort, tokens not yet reported

    def outstanding(self, slot: int) -> int:
        return self.out.get(slot, 0) + self.queued.get(slot, 0)

    def submit(self, slot: int, prompt_id: int, actions: StreamActions) -> None:
        rid, self.next_rid = self.next_rid, self.next_rid + 1
        self.flight[rid] = slot
        self.out[slot] = self.out.get(slot, 0) + 1
        actions.submit.append(Request(rid, prompt_id))

    def enqueue(self, slot: int, count: int) -> None:
        if count > 0:
            self.queue.extend([slot] * count)
            self.queued[slot] = self.queued.get(slot, 0) + count

    def dequeue(self) -> int:
        slot = self.queue.popleft()
        self.queued[slot] -= 1
        return slot

    def finished(self, rid: int) -> int:
        """The slot of request ``rid``, which left the engine."""
        slot = self.flight.pop(rid)
        self.out[slot] -= 1
        return slot

    def abort(self, rid: int, actions: StreamActions) -> None:
        self.ledger.truncated[self.finished(rid)] = True
        self.aborting.add(rid)
        actions.abort.append(rid)

    def drop(self, slot: int, actions: StreamActions, abort: bool = True) -> None:
        """Forget ``slot``'s queued requests and, with ``abort``, abort those in flight."""
        if abort and self.out.get(slot, 0):
            for rid in [r for r, s in self.flight.items() if s == slot]:
                self.abort(rid, actions)
        if self.queued.pop(slot, 0):
            self.queue = deque(s for s in self.queue if s != slot)

    def abort_all(self, actions: StreamActions) -> None:
        for rid in list(self.flight):
            self.abort(rid, actions)
        self.queue.clear()
        self.queued.clear()

    def make_room(self, held: set[int], short: int, actions: StreamActions) -> None:
        """Abort the ``short`` newest requests of the ``held`` slots (the least decoded)."""
        if short > 0:
            for rid in sorted((r for r, slot in self.flight.items() if slot in held), reverse=True)[:short]:
                self.abort(rid, actions)

    def remap(self, new: np.ndarray) -> None:
        """Slots renumbered (``new[old]``, -1: gone; a gone slot has nothing in flight or queued)."""
        self.flight = {rid: int(new[slot]) for rid, slot in self.flight.items()}
        self.out = {int(new[slot]): count for slot, count in self.out.items() if new[slot] >= 0}
        self.queue = deque(int(new[slot]) for slot in self.queue)
        self.queued = {int(new[slot]): count for slot, count in self.queued.items() if new[slot] >= 0}


class StreamingCollector:
    """One step's B groups from completions that arrive one at a time, or (``B=None``) groups handed out one by one
    as they commit: the mechanics, with every decision left to the allocator's streaming policy
    (:attr:`~sara_trl.allocation.registry.AllocatorSpec.streaming`).

    Parameters
    ----------
    config : AllocationConfig
        Its ``allocator`` must have a streaming policy. ``max_rounds`` and ``max_rollouts_per_round`` do not apply.
    B : int or None
        Groups the batch needs (>= 1); None: continuous mode (no batch, no budget, :meth:`window`).
    draw : callable
        ``draw(count, avoid) -> (<= count,) int64`` fresh prompt ids not in ``avoid`` (the ids of the step's
        prompts; in continuous mode those still undecided), e.g. ``PromptStream.take``.
    max_in_flight : int
        Concurrency cap: requests submitted and not yet finished or aborted (>= k, so a full group fits).
    decide, mix_rate, fresh_cost, resolved : callable, optional
        The rule ``decide(pids, n, n_scored, s) -> (decision, p_eff)`` on ``(P,)`` arrays (default: paper Eq. 3 with
        ``config``'s threshold, floor and prior); ``mix_rate() -> (k + 1,)`` and ``fresh_cost() -> float`` that size
        fresh draws (default: the prior's, Eq. 2); ``resolved(last_unmixed, mixed, cost)``, fed each prompt whose
        fate becomes known (the refill model of :class:`~sara_trl.allocation.Allocator`).
    on_finish : callable, optional
        ``on_finish(result)`` called by :meth:`finish`.
    carry : dict, optional
        ``carry_over``: the prompts the previous step left undecided (what ``Ledger.finish`` returned); they take the
        step's first slots and rollout ids and are decided again by the policy at :meth:`start`.
    speculate : bool, default False
        ``streaming_speculate``, passed to the policy.
    on_group : callable, optional
        Continuous mode only, and required there: ``on_group(group)`` with each :class:`Group` as it commits
        (``rollout_ids``: completions recorded since :meth:`start`, in recording order).

    Attributes
    ----------
    done, stop_reason : bool, str
        B groups are committed (``"filled"``), or nothing is in flight and the budget or the stream allows nothing
        more (``"budget"``, ``"stream"``), or :meth:`stop` was called (``"stopped"``); ``""`` until done.
    submitted : int
        Requests submitted, less those withdrawn; the budget cap bounds it by ``floor(budget_cap * B * k)`` (App. D).
    aborted_rollouts, aborted_tokens : int
        Requests aborted (or finished after the batch was full) and their tokens: surplus.
    carry : dict or None
        After :meth:`finish` with ``carry_over``: the prompts this step leaves undecided, in the form ``carry`` takes.
    policy : StreamingPolicy
        The allocator's decisions, built with ``(collector, speculate)``.

    Raises
    ------
    ValueError
        An allocator without a streaming policy, ``B < 1``, ``max_in_flight < k``, a ``carry`` without
        ``carry_over`` (or in continuous mode), ``stopping_rule="bayes_optimal"`` without ``decide``, ``on_group``
        missing in continuous mode or given with a batch.
    """

    def __init__(self, config: AllocationConfig, B: int | None, draw: Callable[[int, np.ndarray], np.ndarray], *,
                 max_in_flight: int, decide=None, mix_rate=None, fresh_cost=None, resolved=None, on_finish=None,
                 carry: dict | None = None, speculate: bool = False, on_group: Callable[[Group], None] | None = None):
        cfg = config
        spec = _check_arguments(cfg, B, max_in_flight, decide, carry, on_group)
        self.config, self.max_in_flight, self.continuous = cfg, int(max_in_flight), B is None
        self.B = _ENDLESS if B is None else int(B)
        self._carry_in, self.carry = carry, None
        self._draw, self._decide, self._resolved, self._on_finish = draw, decide or config_rule(cfg), resolved, \
            on_finish
        prior = RefillModel(cfg)  # with nothing learned: the prior's mix rates and fresh-prompt cost
        self.mix_rate, self.fresh_cost = mix_rate or prior.mix_rate, fresh_cost or prior.fresh_cost
        self.ledger = Ledger()
        self.budget = _ENDLESS if B is None else step_budget(cfg, self.B)
        self.submitted = self.aborted_rollouts = self.aborted_tokens = 0
        self.expected_lost = 0.0
        self.done, self.stop_reason = False, ""
        self._rq = _Requests(self.ledger)
        self._on_group, self._ids, self._recorded = on_group, [], 0  # (continuous) run-level ids of the rollouts
        self._window = np.zeros(4, np.int64)  # (continuous) at the window start: active rollouts, tokens; aborted
        self._started = self._finished = False
        self.policy = spec.streaming(self, bool(speculate))

    # ------------------------------------------------------------------------------------------------ state
    in_flight = property(lambda self: len(self._rq.flight), doc="Requests submitted, not yet finished or aborted.")
    free = property(lambda self: self.max_in_flight - self.in_flight, doc="Engine slots free under the cap.")
    committed = property(lambda self: len(self.ledger.kept_order), doc="Groups committed (continuous: this window).")
    need = property(lambda self: self.B - self.committed, doc="Groups missing for a full batch (continuous: no end).")
    recorded = property(lambda self: self._recorded, doc="Completions recorded: rollout ids ``C .. C + recorded - 1`` "
                        "in recording order, after the ``C`` carried in.")

    @property
    def truncated(self) -> np.ndarray:
        """``(prompts in the step,)`` bool: the prompt had a request aborted (here or in a step it was carried from),
        so its outcomes are the first to finish, the shorter ones; the prior fit leaves it out."""
        return self.ledger.truncated[: self.ledger.size].copy()

    @property
    def aborting(self) -> frozenset[int]:
        """Requests named in :attr:`StreamActions.abort` and not yet reported: a completion of one is surplus, so a
        driver need not score it."""
        return frozenset(self._rq.aborting)

    def outstanding(self, slot: int) -> int:
        """Requests of ``slot`` in flight or queued."""
        return self._rq.outstanding(slot)

    # ------------------------------------------------------------------------------------------------ events
    def start(self) -> StreamActions:
        """The first requests: the carried prompts' (``carry_over``), then fresh probes up to the cap. Raises
        ``RuntimeError`` when called twice."""
        if self._started:
            raise RuntimeError("StreamingCollector.start() was already called")
        self._started = True
        actions = StreamActions()
        if self._carry_in is not None:
            led, first = self.ledger, self.ledger.size
            led.seed(self._carry_in)
            self._carry_in = None
            self._rq.out.update(dict.fromkeys(range(first, led.size), 0))
            if self.committed >= self.B:
                self.done, self.stop_reason = True, "filled"
            else:
                self.policy.seed(range(first, led.size), actions)
        if not self.done:
            self._refill(actions)
        return actions

    def complete(self, rid: int, success: float, tokens: int, score: float | None = None) -> StreamActions:
        """A request finished: record it, let the policy decide its prompt, and say what to submit and abort.

        ``success``: 1.0, 0.0, or NaN / None (unscorable: a rollout that does not move the posterior); ``tokens``: its
        completion tokens (>= 0); ``score``: its weighted reward sum (NaN where ``success`` is), for a policy that
        reads it. Returns nothing to do for a request that was being aborted (it is surplus).

        Raises
        ------
        ValueError
            ``rid`` was never submitted, or has already finished or been aborted; a success value other than 0, 1 or
            NaN; a negative token count; a completion the policy refuses (``StreamingPolicy.validate``).
        RuntimeError
            :meth:`start` was not called, or the step is finished.
        """
        if not self._started or self._finished:
            raise RuntimeError("complete() needs a started, unfinished step")
        success = _check_outcome(rid, success, tokens)
        if rid in self._rq.aborting:  # finished in the same engine step as its abort: surplus (a finish, not an
            self._surplus(rid, tokens)  # abort: the driver reports it once, here, and never through aborted())
            return StreamActions()
        if rid not in self._rq.flight:
            why = "was never submitted" if not 0 <= rid < self._rq.next_rid else "has already finished or been aborted"
            raise ValueError(f"completion for request {rid}, which {why}: a request is scored once")
        self.policy.validate(rid, success, score)
        slot = self._rq.finished(rid)
        led = self.ledger
        was_mixed = bool(is_mixed(led.s[slot], led.nsc[slot]))
        led.record(slot, success, int(tokens))
        self._ids.append(self._recorded)
        self._recorded += 1
        actions = StreamActions()
        self.policy.outcome(slot, was_mixed, score, actions)
        if not self.done:
            self._refill(actions)
        return actions

    def aborted(self, rid: int, tokens: int) -> None:
        """Report that a request named in :attr:`StreamActions.abort` was aborted after ``tokens`` tokens. Raises
        ``ValueError`` when ``rid`` was not asked to abort (or was already reported), or ``tokens < 0``."""
        if rid not in self._rq.aborting:
            raise ValueError(f"request {rid} was not asked to abort, or its abort was already reported")
        _check_outcome(rid, None, tokens)
        self._surplus(rid, tokens)

    def _surplus(self, rid: int, tokens: int) -> None:
        """Account request ``rid``, given up by the collector, as one surplus rollout of ``tokens`` tokens."""
        self._rq.aborting.discard(rid)
        self.aborted_rollouts += 1
        self.aborted_tokens += int(tokens)

    def withdrawn(self, rid: int) -> None:
        """Report that a request named in :attr:`StreamActions.abort` never reached the engine (submitted and given
        up by the same batch of events): it is no rollout, and the budget gets it back. Raises ``ValueError`` when
        ``rid`` was not asked to abort (or was already reported)."""
        if rid not in self._rq.aborting:
            raise ValueError(f"request {rid} was not asked to abort, or its abort was already reported")
        self._rq.aborting.discard(rid)
        self.submitted -= 1

    # ------------------------------------------------------------------------------------------------ mechanics
    def close(self, slot: int, actions: StreamActions, fate: Fate | None = None) -> None:
        """``slot`` is decided (marked ``fate`` here, unless the policy marked it already): abort its requests in
        flight, drop its queued ones; a committed group goes to ``on_group`` (continuous mode), or, once B groups
        are committed, everything is aborted and the step ends."""
        if fate is not None:
            self.ledger.mark(np.array([slot]), fate)
        self._rq.drop(slot, actions)
        if self.ledger.status[slot] != Fate.COMMITTED:
            return
        if self.continuous:
            rs, success, _ = self.ledger.rollouts()
            mine = np.flatnonzero(rs == slot)
            self._on_group(Group(int(self.ledger.pid[slot]), np.asarray(self._ids, np.int64)[mine], success[mine]))
        elif self.committed >= self.B:
            self._rq.abort_all(actions)
            self.done, self.stop_reason = True, "filled"

    def enqueue(self, slot: int, count: int) -> None:
        """Queue ``count`` more requests of ``slot`` (none when ``count <= 0``)."""
        self._rq.enqueue(slot, count)

    def submit(self, slot: int, actions: StreamActions) -> None:
        """Submit one request of ``slot`` now."""
        self._rq.submit(slot, int(self.ledger.pid[slot]), actions)
        self.submitted += 1

    def _refill(self, actions: StreamActions) -> None:
        """Hold what the policy holds, submit queued requests, then the fresh prompts the policy sizes
        (:meth:`StreamingPolicy.fresh`) within the cap and the budget; end the step when nothing runs."""
        held, rq = self.policy.held(), self._rq
        if held is not None:
            for slot in held:
                rq.drop(slot, actions, abort=not self.config.carry_over)
            if self.config.carry_over:  # a held prompt's requests run on (carried) until a queued top-up needs the slot
                rq.make_room(set(held), min(len(rq.queue), self.budget - self.submitted) - self.free, actions)
        free, left = self.free, self.budget - self.submitted  # after the aborts: their slots go to the queue
        while rq.queue and free > 0 and left > 0:
            self.submit(rq.dequeue(), actions)
            free, left = free - 1, left - 1
        blocked = ""
        if not rq.queue and free > 0 and held is None:
            probe = self.policy.probe
            wanted, fresh = self.policy.fresh(self.need, free, left)
            if wanted > 0 and fresh <= 0 and free >= probe:
                blocked = "budget"
            if fresh > 0:
                led = self.ledger
                pids = np.asarray(self._draw(fresh, led.pid[led.active()] if self.continuous else led.prompt_ids()),
                                  np.int64)
                if len(pids) < fresh:
                    blocked = "stream"
                for slot in led.add(pids).tolist():
                    rq.out[slot] = 0
                    for _ in range(probe):
                        self.submit(slot, actions)
        elif rq.queue and left <= 0:
            blocked = "budget"
        if held is None and not rq.queue:
            self.policy.fill(actions)
        if not rq.flight and not self.done:  # nothing in flight and nothing can be submitted
            self.done, self.stop_reason = True, blocked or "budget"

    # ------------------------------------------------------------------------------------------------ end
    def window(self) -> WindowStats:
        """Continuous mode: close an accounting window (nothing is aborted: requests in flight run on into the
        next one) and forget its decided prompts, so the ledger and the draw's avoid set hold only undecided ones.
        Raises ``RuntimeError`` outside continuous mode or before :meth:`start`."""
        if not (self.continuous and self._started):
            raise RuntimeError("window() needs a started collector in continuous mode (B=None)")
        stats, self._window = _window_stats(self.ledger, self._window, self.aborted_rollouts, self.aborted_tokens,
                                            self.in_flight)
        new, kept = self.ledger.compact()
        self._rq.remap(new)
        self.policy.remap(new)
        self._ids = np.asarray(self._ids, np.int64)[kept].tolist()
        return stats

    def stop(self) -> StreamActions:
        """Continuous mode: end the run, aborting every request in flight (report each with :meth:`aborted`).
        Raises ``RuntimeError`` outside continuous mode."""
        if not self.continuous:
            raise RuntimeError("stop() ends a continuous run (B=None); a step ends with finish()")
        actions = StreamActions()
        self._rq.abort_all(actions)
        self.done, self.stop_reason = True, "stopped"
        return actions

    def finish(self) -> StepResult:
        """The batch: exactly B groups (fill groups if the step stopped short) and the accounting.

        Aborted requests (and those that finished after the batch was full) are added to the generated and
        surplus rollouts and tokens, so ``stats.check()`` holds, and reported on their own as
        ``stats.rollouts_aborted`` / ``stats.tokens_aborted``. ``stats.rounds`` is 0, and so is the ``round`` column.

        Raises
        ------
        RuntimeError
            The step is not done, an abort has not been reported (:meth:`aborted`), it is already finished, or the
            collector is in continuous mode (use :meth:`window`).
        """
        if not self.done or self.continuous:
            raise RuntimeError("finish() before the step is done (B groups committed or nothing left to run), or in "
                               "continuous mode")
        if self._rq.aborting:
            raise RuntimeError(f"{len(self._rq.aborting)} aborted requests have not been reported with aborted(): "
                               "their tokens must be accounted")
        if self._finished:
            raise RuntimeError("finish() was already called")
        self._finished = True
        result, self.carry = self.ledger.finish(self.B, self.stop_reason, self.expected_lost,
                                                carry_over=self.config.carry_over)
        _add_aborted(result.stats, self.aborted_rollouts, self.aborted_tokens)
        if self._on_finish is not None:
            self._on_finish(result)
        return result


def _check_arguments(cfg: AllocationConfig, B, max_in_flight, decide, carry, on_group):
    """:class:`StreamingCollector`'s argument checks (see its Raises); returns the allocator's registry spec."""
    spec = spec_of(cfg.allocator)
    if spec is None or spec.streaming is None:
        raise ValueError(f"streaming collection runs {streaming_allocators()}, not allocator={cfg.allocator!r}")
    if B is None:
        if on_group is None or carry is not None:
            raise ValueError("continuous mode (B=None) hands each committed group to on_group, which it needs, and "
                             "carries nothing (a prompt stays in the collector until decided)")
    elif isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1:
        raise ValueError(f"B must be a positive integer number of groups, got {B!r}")
    elif on_group is not None:
        raise ValueError("on_group is for continuous mode (B=None); a step hands its B groups out with finish()")
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, (int, np.integer)) or max_in_flight < cfg.k:
        raise ValueError(f"max_in_flight={max_in_flight!r} must be an integer >= k={cfg.k}, so that one full "
                         "group can be in flight")
    if decide is None and cfg.stopping_rule == "bayes_optimal":
        raise ValueError("stopping_rule='bayes_optimal' decides on a boundary fitted across steps: build the "
                         "collector with Allocator.streaming(), or pass decide")
    if carry is not None and not cfg.carry_over:
        raise ValueError("a carry was passed to a collector whose config has carry_over=False")
    return spec


def _check_outcome(rid: int, success: float | None, tokens: int) -> float:
    """A finished request's ``success`` (None: NaN) as a float, after checking it is 0, 1 or NaN and ``tokens >= 0``.

    Raises
    ------
    ValueError
        Either value is out of range.
    """
    success = np.nan if success is None else float(success)
    if not (np.isnan(success) or success in (0.0, 1.0)):
        raise ValueError(f"request {rid}: success must be 0, 1 or NaN (unscorable), got {success!r}")
    if int(tokens) < 0:
        raise ValueError(f"request {rid}: token count must be >= 0, got {tokens}")
    return success


def _window_stats(led: Ledger, before: np.ndarray, aborted_rollouts: int, aborted_tokens: int,
                  in_flight: int) -> tuple[WindowStats, np.ndarray]:
    """A continuous window's checked :class:`WindowStats` from its ledger (the prompts decided in the window and the
    undecided ones) and the running abort counts, and the counters the next window starts from
    (``before``: active rollouts and tokens, aborted rollouts and tokens, at this window's start)."""
    rs, _, tokens = led.rollouts()
    fate = led.status[rs]
    emitted, abandoned, active = (fate == Fate.COMMITTED), (fate == Fate.ABANDONED), (fate == Fate.ACTIVE)
    now = np.array([active.sum(), tokens[active].sum(), aborted_rollouts, aborted_tokens], np.int64)
    d = [int(x) for x in now - before]
    stats = WindowStats(rollouts_generated=len(rs) - int(before[0]) + d[2],
                        tokens_generated=int(tokens.sum()) - int(before[1]) + d[3],
                        groups_emitted=len(led.kept_order), rollouts_emitted=int(emitted.sum()),
                        tokens_emitted=int(tokens[emitted].sum()), rollouts_abandoned=int(abandoned.sum()),
                        tokens_abandoned=int(tokens[abandoned].sum()), rollouts_aborted=d[2], tokens_aborted=d[3],
                        rollouts_active=(int(before[0]), int(now[0])), tokens_active=(int(before[1]), int(now[1])),
                        in_flight=in_flight)
    stats.check()
    return stats, now


def _add_aborted(stats: StepStats, rollouts: int, tokens: int) -> None:
    """Count the aborted requests as generated and surplus (and on their own), then check the invariant."""
    stats.rollouts_generated += rollouts
    stats.rollouts_surplus += rollouts
    stats.tokens_generated += tokens
    stats.tokens_surplus += tokens
    stats.rollouts_aborted, stats.tokens_aborted = rollouts, tokens
    stats.check()


def merge_step_results(results: list[StepResult], num_rollouts: list[int]) -> StepResult:
    """One step's batch from the streaming results of several processes, each collected on its own shard.

    Process ``i``'s rollout ids (its carried-in rollouts first, with ``carry_over``, then those it recorded) are
    shifted by the rollouts of processes ``0 .. i-1``, so the merged ids index the concatenation of the processes'
    rollouts in process order; groups, the per-prompt table and round sizes are concatenated in process order and
    the accounting is summed (``stop_reason``: the distinct reasons, comma-joined, in process order). Each rollout
    belongs to exactly one process, so a carried rollout is counted once: as carried in by the process that carried
    it, and, if carried on, in that process's share of ``carry_rollout_ids``.

    With ``carry_over`` every process keeps its own carry (its collector's, for its own next step): the merged
    ``carry_rollout_ids`` are every process's ``carry_rollout_ids`` shifted like its groups, process after process,
    and ``carry_split`` says how many are whose (:meth:`StepResult.carried_by` gives process ``i`` its own, in the
    order its next step numbers them).

    Parameters
    ----------
    results : list of StepResult
        Per process, in process order (each one collector's result: ``carry_split`` empty).
    num_rollouts : list of int
        Per process, the rollouts its ids index: those it carried in plus those it recorded
        (``stats.rollouts_carried_in + StreamingCollector.recorded``).

    Returns
    -------
    StepResult
        ``sum(len(r.groups))`` groups, with a checked accounting (``rollout_fates`` concatenated in process order).

    Raises
    ------
    ValueError
        The two lists differ in length or are empty, a count disagrees with its result's per-prompt table (the sum
        of ``n``), a carried id lies outside its process's rollouts, or a result is itself a merge.
    """
    if len(results) != len(num_rollouts) or not results:
        raise ValueError(f"{len(results)} results for {len(num_rollouts)} rollout counts")
    for i, (res, count) in enumerate(zip(results, num_rollouts)):
        if int(np.sum(res.prompt_table["n"])) != int(count):
            raise ValueError(f"process {i} reports {count} rollouts, its prompt table holds "
                             f"{int(np.sum(res.prompt_table['n']))}")
        if res.carry_split:
            raise ValueError(f"process {i}'s result is already a merge of {len(res.carry_split)} processes")
        carried = np.asarray(res.carry_rollout_ids, np.int64)
        if len(carried) and (carried.min() < 0 or carried.max() >= int(count)):
            raise ValueError(f"process {i} carries rollout ids outside its {count} rollouts")
    offsets = np.concatenate([[0], np.cumsum(num_rollouts)[:-1]]).astype(np.int64).tolist()
    groups = [Group(prompt_id=g.prompt_id, rollout_ids=np.asarray(g.rollout_ids, np.int64) + off,
                    success=g.success, is_fill=g.is_fill)
              for res, off in zip(results, offsets) for g in res.groups]
    totals = {}
    for f in dataclasses.fields(StepStats):
        values = [getattr(res.stats, f.name) for res in results]
        if f.name == "stop_reason":
            totals[f.name] = ",".join(dict.fromkeys(v for v in values if v))
        else:
            totals[f.name] = sum(values)
    stats = StepStats(**totals)
    stats.check()
    table = {key: np.concatenate([res.prompt_table[key] for res in results]) for key in results[0].prompt_table}
    carry_ids = np.concatenate([np.asarray(res.carry_rollout_ids, np.int64) + off
                                for res, off in zip(results, offsets)]).astype(np.int64)
    return StepResult(groups=groups, stats=stats, prompt_table=table,
                      round_sizes=[size for res in results for size in res.round_sizes],
                      carry_rollout_ids=carry_ids, carry_split=[len(res.carry_rollout_ids) for res in results],
                      rollout_fates=np.concatenate([res.rollout_fates for res in results]).astype(np.int8))
