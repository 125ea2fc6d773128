"""Streaming collection: decide per finished completion on a running engine, with no round barrier.

The round allocators (:mod:`~sara_trl.allocation.strategies`) wait for a whole generation call before any decision.
:class:`StreamingCollector` instead takes completions one at a time, as a continuous-batching engine (vLLM's
``add_request`` / ``step`` / ``abort_request``) finishes them: each one updates its prompt's counts, and the prompt
is decided at once with the rule the round allocator uses (SARA: paper Eq. 2 and 3 through
:func:`~sara_trl.allocation.rules.decide`; dynamic sampling: keep a full group of k when it is mixed). The collector
then says which requests to submit (a continuing prompt's next rollouts, top-ups of a mixed prompt to the commit
floor, fresh probes of ``n0`` for freed budget) within a concurrency cap, and, once B groups are committed, which
requests still in flight to abort. Once the undecided mixed prompts alone complete the batch (each commits when
topped up to its floor, paper Prop. 2), SARA holds the unmixed prompts: no continuation, no fresh probes, no
top-up for a prompt that mixes later (rounds top up at most the groups still needed), and their requests still in
flight are aborted, since their outcomes could only be dropped (beyond the paper;
benchmarks/streaming_small_batch/STREAMING_SMALL_BATCH.md measures it on replayed outcomes). With ``carry_over``
those outcomes are carried into the next step, so the held requests run on until a top-up needs the slot or the
batch fills. Bookkeeping goes through
the same :class:`~sara_trl.allocation.ledger.Ledger`, so the batch, the per-prompt table and the accounting are built
exactly as for rounds; aborted requests (and requests that finish after the batch is full) are accounted as surplus
rollouts and tokens; held prompts end the step undecided (``active_left``).

The driver's loop (one implementation, :func:`~sara_trl.allocation.event_loop.drive_streaming_engine`, which the
trainer runs on vLLM and :func:`~sara_trl.allocation.simulate.run_streaming_step` on a simulated engine)::

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

from sara_trl.allocation.labels import is_mixed, score_spread_labels, scores_spread
from sara_trl.allocation.ledger import Ledger
from sara_trl.allocation.refill import (
    RefillModel,
    config_rule,
    continuation,
    expected_commits,
    feed_resolved,
    fresh_affordable,
    fresh_to_draw,
    judge_full_groups,
    step_budget,
)
from sara_trl.allocation.types import ABANDON, COMMIT, STREAMING_ALLOCATORS, Fate, Group, StepResult, StepStats

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.allocation.config import AllocationConfig

__all__ = ["STREAMING_ALLOCATORS", "Request", "StreamActions", "StreamingCollector", "merge_step_results"]

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


class StreamingCollector:
    """One step's B groups from completions that arrive one at a time.

    Parameters
    ----------
    config : AllocationConfig
        ``allocator`` must be ``"sara"`` or ``"dynamic_sampling"``. Used: ``k``, ``n0``, ``tau_low``,
        ``commit_min``, the prior, ``budget_cap``, ``round_increment`` (rollouts submitted at once to a continuing
        unmixed prompt whose requests have all finished), ``continue_to_decision`` (instead: up to its next abandon
        point) and ``refill_margin``, the last two as streaming resolves them (``config.to_decision``, True, and
        ``config.margin``, 2.0, unless set). ``max_rounds`` and ``max_rollouts_per_round`` do not apply (no rounds).
    B : int
        Groups the batch needs (>= 1).
    draw : callable
        ``draw(count, avoid) -> (<= count,) int64`` fresh prompt ids not in ``avoid`` (the ids already in the step),
        e.g. ``PromptStream.take``.
    max_in_flight : int
        Concurrency cap: requests submitted and not yet finished or aborted (>= k, so a full group fits).
    decide : callable, optional
        ``decide(pids, n, n_scored, s) -> (decision, p_eff)`` on ``(P,)`` arrays; default: paper Eq. 3
        (:func:`~sara_trl.allocation.rules.decide`) with ``config``'s threshold, floor and prior.
    mix_rate : callable, optional
        ``mix_rate() -> (k + 1,)`` share of unmixed prompts with n rollouts that go on to mix (n = 0: fresh), used
        to size fresh draws as the round allocator does; default: the prior predictive p_eff(n, 0) (Eq. 2).
    fresh_cost : callable, optional
        ``fresh_cost() -> float`` rollouts a fresh prompt costs until decided (caps fresh draws by the budget);
        default: ``n0`` plus a top-up to the floor for the prior's p_eff(0, 0) share.
    resolved : callable, optional
        ``resolved(last_unmixed, mixed, cost)`` fed with each prompt whose fate becomes known (the refill model of
        :class:`~sara_trl.allocation.Allocator`).
    on_finish : callable, optional
        ``on_finish(result)`` called by :meth:`finish`.
    carry : dict, optional
        ``carry_over``: the prompts the previous step left undecided, with their counts and rollouts (what
        :meth:`~sara_trl.allocation.ledger.Ledger.finish` returned, fields
        :data:`~sara_trl.allocation.ledger.CARRY_DTYPES`). They take the step's first slots and rollout ids, are
        decided again by the rule at :meth:`start`, and their continuations are submitted before any fresh probe.
    speculate : bool, default False
        ``streaming_speculate`` (beyond the paper; SARA only, ignored for dynamic sampling): engine slots the rule
        leaves free go to speculative continuations of the undecided unmixed prompts (:meth:`_fill`).

    Attributes
    ----------
    done : bool
        B groups are committed, or nothing is in flight and the budget or the stream allows nothing more.
    stop_reason : str
        ``"filled"``, ``"budget"`` or ``"stream"`` once done, else ``""``.
    submitted : int
        Requests submitted, less those withdrawn (:meth:`withdrawn`); the budget cap (paper App. D) bounds it by
        ``floor(budget_cap * B * k)``.
    aborted_rollouts, aborted_tokens : int
        Requests aborted (or finished after the batch was full) and their tokens: surplus.
    carry : dict or None
        After :meth:`finish` with ``carry_over``: the prompts this step leaves undecided (their requests aborted in
        flight, at the fill or to make room for a top-up, are surplus; their recorded rollouts are ``active_left``
        and go to the next step), in the form ``carry`` takes; None otherwise.

    Raises
    ------
    ValueError
        An allocator other than SARA or dynamic sampling, ``B < 1``, ``max_in_flight < k``, or
        ``stopping_rule="bayes_optimal"`` without ``decide``.
    """

    def __init__(self, config: AllocationConfig, B: int, draw: Callable[[int, np.ndarray], np.ndarray], *,
                 max_in_flight: int, decide=None, mix_rate=None, fresh_cost=None, resolved=None, on_finish=None,
                 carry: dict | None = None, speculate: bool = False):
        cfg = config
        if cfg.allocator not in STREAMING_ALLOCATORS:
            raise ValueError(f"streaming collection runs {STREAMING_ALLOCATORS}, not allocator={cfg.allocator!r}")
        if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1:
            raise ValueError(f"B must be a positive integer number of groups, got {B!r}")
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, (int, np.integer)) \
                or max_in_flight < cfg.k:
            raise ValueError(f"max_in_flight={max_in_flight!r} must be an integer >= k={cfg.k}, so that one full "
                             "group can be in flight")
        if decide is None and cfg.stopping_rule == "bayes_optimal":
            raise ValueError("stopping_rule='bayes_optimal' decides on a boundary fitted across steps: build the "
                             "collector with Allocator.streaming(), or pass decide")
        if carry is not None and not cfg.carry_over:
            raise ValueError("a carry was passed to a collector whose config has carry_over=False")
        self.config = cfg
        self.B = int(B)
        self._carry_in = carry
        self.carry: dict | None = None
        self.max_in_flight = int(max_in_flight)
        self._sara = cfg.allocator == "sara"
        self._speculate = bool(speculate) and self._sara
        # ds_filter="score": a group's scores, kept until all k are in (its labels then follow their spread)
        self._scores: dict[int, list[float]] | None = {} if cfg.ds_filter == "score" else None
        self._draw = draw
        self._decide = decide or config_rule(cfg)
        prior = RefillModel(cfg)  # with nothing learned: the prior's mix rates and fresh-prompt cost
        self._mix_rate = mix_rate or prior.mix_rate
        self._fresh_cost = fresh_cost or prior.fresh_cost
        self._resolved = resolved
        self._on_finish = on_finish
        self.ledger = Ledger()
        self.budget = step_budget(cfg, self.B)
        self.submitted = 0
        self.aborted_rollouts = 0
        self.aborted_tokens = 0
        self.expected_lost = 0.0
        self.done = False
        self.stop_reason = ""
        self._next_rid = 0
        self._req: dict[int, int] = {}  # request id in flight -> slot
        self._aborting: set[int] = set()  # asked to abort, tokens not yet reported
        self._spare_mixed: set[int] = set()  # mixed slots not topped up: the others complete the batch (carried)
        self._out: dict[int, int] = {}  # slot -> requests in flight
        self._queue: deque[int] = deque()  # one entry per wanted request (slot) not yet submitted
        self._queued: dict[int, int] = {}  # slot -> entries in the queue
        self._started = False
        self._finished = False

    # ------------------------------------------------------------------------------------------------ events
    @property
    def in_flight(self) -> int:
        """Requests submitted and neither finished nor aborted."""
        return len(self._req)

    @property
    def committed(self) -> int:
        """Groups committed so far."""
        return len(self.ledger.kept_order)

    @property
    def truncated(self) -> np.ndarray:
        """``(prompts in the step,)`` bool: the prompt had a request aborted, in this step or (``carry_over``) in a
        step it was carried from, so its recorded outcomes are the completions that finished first, i.e. the shorter
        ones, which lean towards successes where failures run longer. The prior fit of
        ``stopping_rule="bayes_optimal"`` leaves these prompts out (:meth:`Allocator.streaming`)."""
        return self.ledger.truncated[: self.ledger.size].copy()

    @property
    def aborting(self) -> frozenset[int]:
        """Requests named in :attr:`StreamActions.abort` and not yet reported (by :meth:`aborted`, or by
        :meth:`complete` when one finished first): a completion of one of these is surplus whatever its outcome, so a
        driver need not score it."""
        return frozenset(self._aborting)

    @property
    def recorded(self) -> int:
        """Completions recorded so far: they take rollout ids ``C .. C + recorded - 1`` in the order :meth:`complete`
        recorded them, after the ``C`` rollouts carried in (``carry_over``; 0 otherwise). A completion of a request
        being aborted is not recorded (it is surplus)."""
        return int(self.ledger.generated)

    def start(self) -> StreamActions:
        """The first requests: fresh probes (``n0`` per prompt; k for dynamic sampling) up to the cap.

        Raises
        ------
        RuntimeError
            Called twice.
        """
        if self._started:
            raise RuntimeError("StreamingCollector.start() was already called")
        self._started = True
        actions = StreamActions()
        if self._carry_in is not None:
            self._seed(self._carry_in, actions)
            self._carry_in = None
        if not self.done:
            self._refill(actions)
        return actions

    def _seed(self, carry: dict, actions: StreamActions) -> None:
        """Start from the carried prompts: committed ones count towards B, undecided ones are decided again (the
        rule may have changed between steps, e.g. a refitted boundary) and their continuations queued first."""
        led = self.ledger
        first = led.size
        led.seed(carry)
        slots = range(first, led.size)
        for slot in slots:
            self._out[slot] = 0
        if self.committed >= self.B:
            self.done, self.stop_reason = True, "filled"
            return
        for slot in slots:
            if led.status[slot] == Fate.ACTIVE and not self.done:
                self._decide_sara(slot, bool(is_mixed(led.s[slot], led.nsc[slot])), actions, queue=False)
        if self.done:
            return
        # Top up at most as many mixed prompts as the groups still needed, chosen as a round serves them (most rollouts
        # first, then in slot order); the mixed prompts beyond those are spare (not topped up in this step; carried
        # on). The unmixed prompts are continued unless the mixed ones alone complete the batch (:meth:`_covered`).
        # Requests are queued in slot order.
        act = led.active()
        is_mix = is_mixed(led.s[act], led.nsc[act])
        mixed = act[is_mix][np.lexsort((act[is_mix], -led.n[act[is_mix]]))]
        need = self.B - self.committed
        self._spare_mixed.update(mixed[need:].tolist())
        covered = self._covered()
        for slot, mix in zip(act.tolist(), is_mix.tolist()):
            if mix and slot not in self._spare_mixed:
                self._enqueue(slot, self.config.commit_floor - int(led.n[slot]))
            elif not mix and not covered:
                self._continue(slot)

    def complete(self, rid: int, success: float, tokens: int, score: float | None = None) -> StreamActions:
        """A request finished: record it, decide its prompt at once, and say what to submit and abort.

        Parameters
        ----------
        rid : int
            The finished request.
        success : float or None
            1.0, 0.0, or NaN / None (unscorable: it costs a rollout but does not move the posterior).
        tokens : int
            Its completion tokens (>= 0).
        score : float, optional
            Its score (the weighted reward sum, NaN where ``success`` is NaN); required, and only read, with
            dynamic sampling's ``ds_filter="score"``: once the group's k scores are in, its labels follow their
            spread (:func:`~sara_trl.allocation.labels.score_spread_labels`), as in rounds.

        Returns
        -------
        StreamActions
            Empty for a request that was being aborted (it finished first; it is counted as surplus).

        Raises
        ------
        ValueError
            ``rid`` was never submitted, or has already finished or been aborted (no request is scored twice); a
            success value other than 0, 1 or NaN; a negative token count; with ``ds_filter="score"``, no score.
        RuntimeError
            :meth:`start` was not called, or the step is finished.
        """
        if not self._started or self._finished:
            raise RuntimeError("complete() needs a started, unfinished step")
        success = np.nan if success is None else float(success)
        if not (np.isnan(success) or success in (0.0, 1.0)):
            raise ValueError(f"request {rid}: success must be 0, 1 or NaN (unscorable), got {success!r}")
        if int(tokens) < 0:
            raise ValueError(f"request {rid}: token count must be >= 0, got {tokens}")
        if rid in self._aborting:  # finished in the same engine step as its abort: surplus
            self._aborting.discard(rid)
            self.aborted_rollouts += 1
            self.aborted_tokens += int(tokens)
            return StreamActions()
        if rid not in self._req:
            why = "was never submitted" if not 0 <= rid < self._next_rid else "has already finished or been aborted"
            raise ValueError(f"completion for request {rid}, which {why}: a request is scored once")
        if self._scores is not None and (score is None or np.isnan(float(score)) != np.isnan(success)):
            raise ValueError(f"request {rid}: ds_filter='score' needs each completion's score (NaN exactly when its "
                             f"success label is NaN), got {score!r}")
        slot = self._req.pop(rid)
        self._out[slot] -= 1
        if self._scores is not None:
            self._scores.setdefault(slot, []).append(float(score))
        led = self.ledger
        was_mixed = bool(is_mixed(led.s[slot], led.nsc[slot]))
        led.record(slot, success, int(tokens))
        actions = StreamActions()
        if self._sara:
            self._decide_sara(slot, was_mixed, actions)
        else:
            self._decide_ds(slot, actions)
        if not self.done:
            self._refill(actions)
        return actions

    def aborted(self, rid: int, tokens: int) -> None:
        """Report that a request named in :attr:`StreamActions.abort` was aborted after ``tokens`` tokens.

        Raises
        ------
        ValueError
            ``rid`` was not asked to abort (or was already reported), or ``tokens < 0``.
        """
        if rid not in self._aborting:
            raise ValueError(f"request {rid} was not asked to abort, or its abort was already reported")
        if int(tokens) < 0:
            raise ValueError(f"request {rid}: token count must be >= 0, got {tokens}")
        self._aborting.discard(rid)
        self.aborted_rollouts += 1
        self.aborted_tokens += int(tokens)

    def withdrawn(self, rid: int) -> None:
        """Report that a request named in :attr:`StreamActions.abort` never reached the engine: it was submitted
        and given up by the same batch of events, before the driver applied them. It is no rollout (nothing was
        generated): it leaves the accounting and the budget gets it back.

        Raises
        ------
        ValueError
            ``rid`` was not asked to abort (or was already reported).
        """
        if rid not in self._aborting:
            raise ValueError(f"request {rid} was not asked to abort, or its abort was already reported")
        self._aborting.discard(rid)
        self.submitted -= 1

    # ------------------------------------------------------------------------------------------------ decisions
    def _decide_sara(self, slot: int, was_mixed: bool, actions: StreamActions, queue: bool = True) -> None:
        """Decide ``slot`` after its latest outcome (``was_mixed``: it was mixed before it): commit, abandon, or
        keep it undecided and, with ``queue``, queue its top-up (a mixed prompt, unless spare) or its continuation
        (an unmixed one). :meth:`_seed` decides the carried prompts with ``queue=False`` and queues them itself."""
        cfg, led = self.config, self.ledger
        sl = np.array([slot])
        dec, p = self._decide(led.pid[sl], led.n[sl], led.nsc[sl], led.s[sl])
        led.p[slot] = p[0]
        n = int(led.n[slot])
        mixed = bool(is_mixed(led.s[slot], led.nsc[slot]))
        feed_resolved(self._resolved, np.array([n - 1]), np.array([n]), np.array([mixed and not was_mixed]),
                      dec == ABANDON, cfg.commit_floor)
        if dec[0] == COMMIT:
            self._close(slot, Fate.COMMITTED, actions)
        elif dec[0] == ABANDON:
            self.expected_lost += float(p[0])
            self._close(slot, Fate.ABANDONED, actions)
        elif not queue:
            return
        elif mixed:
            need = self.B - self.committed
            if slot in self._spare_mixed or (not was_mixed and self._topped_up(excluding=slot) >= need):
                # the mixed prompts being topped up already complete the batch (rounds top up at most the groups still
                # needed): this one is not topped up in this step, now or at a later completion; with carry_over it
                # is carried
                self._spare_mixed.add(slot)
            else:  # top up to the commit floor (certain to be effective, paper Prop. 2)
                self._enqueue(slot, cfg.commit_floor - n - self._out[slot] - self._queued.get(slot, 0))
        elif self._out[slot] == 0 and self._queued.get(slot, 0) == 0 and not self._covered():
            # unmixed, all its requests are in, and the batch still needs prompts that are not yet mixed
            self._continue(slot)

    def _continue(self, slot: int) -> None:
        """Queue an unmixed prompt's continuation (:func:`~sara_trl.allocation.refill.continuation`)."""
        led, sl = self.ledger, np.array([slot])
        self._enqueue(slot, int(continuation(self.config, self._decide, led.pid[sl], led.n[sl], led.nsc[sl],
                                             led.s[sl])[0]))

    def _decide_ds(self, slot: int, actions: StreamActions) -> None:
        led, k = self.ledger, self.config.k
        if led.n[slot] < k:
            return
        if self._scores is not None:
            scores = np.asarray(self._scores.pop(slot), np.float64)
            if scores_spread(scores[~np.isnan(scores)]):
                led.relabel(slot, score_spread_labels(scores, [len(scores)], threshold=0.5))  # (threshold unused)
        judge_full_groups(led, np.array([slot]), k, self._resolved, keep_all=False)
        self._after_close(slot, actions)

    def _close(self, slot: int, fate: Fate, actions: StreamActions) -> None:
        """Mark ``slot`` decided, then :meth:`_after_close`."""
        self.ledger.mark(np.array([slot]), fate)
        self._after_close(slot, actions)

    def _after_close(self, slot: int, actions: StreamActions) -> None:
        """``slot`` was just decided: abort its requests still in flight, drop its queued ones; abort everything
        once B groups are committed."""
        self._drop(slot, actions)
        if self.ledger.status[slot] == Fate.COMMITTED and self.committed >= self.B:
            for rid in list(self._req):
                self._abort(rid, actions)
            self._queue.clear()
            self._queued.clear()
            self.done, self.stop_reason = True, "filled"

    def _drop(self, slot: int, actions: StreamActions, abort: bool = True) -> None:
        if abort and self._out.get(slot, 0):
            for rid in [r for r, s in self._req.items() if s == slot]:
                self._abort(rid, actions)
        if self._queued.pop(slot, 0):
            self._queue = deque(s for s in self._queue if s != slot)

    def _make_room(self, held: set[int], actions: StreamActions) -> None:
        """``carry_over``: a held prompt's requests in flight run on (their outcomes are carried into the next step,
        as rounds carry an undecided prompt's whole round) until a queued top-up needs the slot: then the newest held
        requests (the least decoded, most likely) are aborted, one per top-up that the cap (not the budget) would
        otherwise keep waiting. With a reward lag a request the engine has finished but the driver has not yet
        reported is still in flight here; aborting it makes its completion surplus (:meth:`complete`)."""
        short = min(len(self._queue), self.budget - self.submitted) - (self.max_in_flight - len(self._req))
        if short <= 0:
            return
        for rid in sorted((r for r, slot in self._req.items() if slot in held), reverse=True)[:short]:
            self._abort(rid, actions)

    def _abort(self, rid: int, actions: StreamActions) -> None:
        slot = self._req.pop(rid)
        self.ledger.truncated[slot] = True
        self._out[slot] -= 1
        self._aborting.add(rid)
        actions.abort.append(rid)

    # ------------------------------------------------------------------------------------------------ submissions
    def _enqueue(self, slot: int, count: int) -> None:
        if count > 0:
            self._queue.extend([slot] * count)
            self._queued[slot] = self._queued.get(slot, 0) + count

    def _submit(self, slot: int, actions: StreamActions) -> None:
        rid = self._next_rid
        self._next_rid += 1
        self._req[rid] = slot
        self._out[slot] = self._out.get(slot, 0) + 1
        self.submitted += 1
        actions.submit.append(Request(rid, int(self.ledger.pid[slot])))

    def _covered(self) -> bool:
        """SARA: the undecided mixed prompts alone complete the batch (each commits once topped up to the commit
        floor, paper Prop. 2; a mixed prompt is never abandoned), so unmixed prompts are held: not continued, their
        requests in flight aborted (surplus; with ``carry_over`` only when a top-up needs the slot, :meth:`_make_room`,
        or at the fill), and no fresh prompts drawn. A held prompt stays undecided: its recorded rollouts end the step
        as ``active_left``. Once true, it stays true for the step."""
        if not self._sara:
            return False
        led = self.ledger
        act = led.active()
        return int(is_mixed(led.s[act], led.nsc[act]).sum()) >= self.B - self.committed

    def _topped_up(self, excluding: int) -> int:
        """Undecided mixed prompts other than ``excluding`` that are being topped up (not spare, :meth:`_decide_sara`);
        each commits at the floor (paper Prop. 2), so once they number ``B - committed`` no other prompt is needed."""
        led = self.ledger
        act = led.active()
        act = act[act != excluding]
        mixed = act[is_mixed(led.s[act], led.nsc[act])]
        return sum(int(slot) not in self._spare_mixed for slot in mixed)

    def _expected_commits(self, need: int) -> tuple[float, float]:
        """:func:`~sara_trl.allocation.refill.expected_commits` of the undecided prompts, an unmixed one at the
        learned mix rate of its rollout count (a prompt below its probe counting as fresh)."""
        led = self.ledger
        act = led.active()
        if len(act) == 0:
            return 0.0, 0.0
        rate = self._mix_rate()
        mixed = is_mixed(led.s[act], led.nsc[act])
        n = led.n[act]
        probe = self.config.n0 if self._sara else self.config.k
        return expected_commits(int(mixed.sum()), need, rate[np.where(n < probe, 0, n)][~mixed])

    def _reserved(self) -> float:
        """Rollouts the undecided prompts are expected to need beyond what is submitted or queued: a mixed prompt
        its top-up to the commit floor (exact); an unmixed one the expected cost of a fresh prompt minus what it
        has already been given (SARA; dynamic sampling submits a whole group at once, so it needs nothing more)."""
        if not self._sara:
            return 0.0
        led = self.ledger
        act = led.active()
        if len(act) == 0:
            return 0.0
        given = led.n[act] + np.array([self._out.get(int(s), 0) + self._queued.get(int(s), 0) for s in act])
        mixed = is_mixed(led.s[act], led.nsc[act])
        target = np.where(mixed, self.config.commit_floor, self._fresh_cost())
        return float(np.maximum(target - given, 0.0).sum())

    def _affordable(self, left: int, wanted: int) -> int:
        """``min(wanted, fresh_affordable(left, self._reserved(), fresh cost))``, exactly, without the per-prompt
        sum of :meth:`_reserved` where it cannot bind: the reserve is at most each undecided prompt's whole target
        (a mixed one the commit floor, an unmixed one the fresh cost, > 0) and :func:`fresh_affordable` does not
        increase with the reserve, so when that bound already affords ``wanted`` the exact reserve does too."""
        cost = self._fresh_cost()
        if wanted <= 0:
            return wanted
        if self._sara:
            led = self.ledger
            act = led.active()
            mixed = int(is_mixed(led.s[act], led.nsc[act]).sum())
            bound = mixed * self.config.commit_floor + (len(act) - mixed) * cost
            if fresh_affordable(left, bound, cost) >= wanted:
                return wanted
        return min(wanted, fresh_affordable(left, self._reserved(), cost))

    def _refill(self, actions: StreamActions) -> None:
        """Submit queued requests, then fresh prompts sized to the remaining need (as the round allocator sizes a
        refill: expected commits plus ``refill_margin`` standard deviations), within the cap and the budget."""
        cfg = self.config
        covered = self._covered()
        if covered:  # hold the unmixed prompts (_covered)
            led = self.ledger
            act = led.active()
            held = act[~is_mixed(led.s[act], led.nsc[act])].tolist()
            held += [slot for slot in act.tolist() if slot in self._spare_mixed]
            for slot in held:
                self._drop(slot, actions, abort=not self.config.carry_over)
            if self.config.carry_over:
                self._make_room(set(held), actions)
        free = self.max_in_flight - len(self._req)  # after the aborts: their slots go to the mixed prompts' top-ups
        left = self.budget - self.submitted
        while self._queue and free > 0 and left > 0:
            slot = self._queue.popleft()
            self._queued[slot] -= 1
            self._submit(slot, actions)
            free, left = free - 1, left - 1
        blocked = ""
        if not self._queue and free > 0 and not covered:
            need = self.B - self.committed
            expected, var = self._expected_commits(need)
            wanted = fresh_to_draw(need, expected, var, float(self._mix_rate()[0]), cfg.margin)
            per_prompt = cfg.n0 if self._sara else cfg.k
            # Fresh prompts only as many as the budget left after the undecided prompts' expected remaining cost
            # can see through (rounds reserve the mixed prompts' top-ups the same way).
            fresh = self._affordable(left, min(wanted, free // per_prompt, left // per_prompt))
            if wanted > 0 and fresh <= 0 and free >= per_prompt:
                blocked = "budget"
            if fresh > 0:
                pids = np.asarray(self._draw(fresh, self.ledger.prompt_ids()), np.int64)
                if len(pids) < fresh:
                    blocked = "stream"
                for slot in self.ledger.add(pids).tolist():
                    self._out[slot] = 0
                    for _ in range(per_prompt):
                        self._submit(slot, actions)
        elif self._queue and left <= 0:
            blocked = "budget"
        if self._speculate and not covered and not self._queue:
            self._fill(actions)
        if not self._req and not self.done:  # nothing in flight and nothing can be submitted
            self.done, self.stop_reason = True, blocked or "budget"

    def _fill(self, actions: StreamActions) -> None:
        """``streaming_speculate``: slots the rule leaves free go to speculative continuations. Each undecided,
        unmixed prompt, oldest first, gets one more request per pass (up to the commit floor, counting what is
        recorded and in flight; it runs only with an empty queue) while slots and spare budget (beyond the undecided
        prompts' expected need, :meth:`_reserved`) last. A prompt that mixes then has its top-up already running;
        one that is abandoned or held has its speculative requests aborted (surplus), as any request of a decided
        prompt."""
        led = self.ledger
        act = led.active()
        if len(act) == 0:
            return
        free = self.max_in_flight - len(self._req)
        spare = int(self.budget - self.submitted - self._reserved())
        unmixed = act[~is_mixed(led.s[act], led.nsc[act])]
        room = {int(slot): self.config.commit_floor - int(led.n[slot]) - self._out.get(int(slot), 0)
                for slot in unmixed}
        while free > 0 and spare > 0:
            open_slots = [slot for slot in room if room[slot] > 0]
            if not open_slots:
                return
            for slot in open_slots[:min(free, spare)]:
                self._submit(slot, actions)
                room[slot] -= 1
                free, spare = free - 1, spare - 1

    # ------------------------------------------------------------------------------------------------ end
    def finish(self) -> StepResult:
        """The batch: exactly B groups (fill groups if the step stopped short) and the accounting.

        Aborted requests (and those that finished after the batch was full) are added to the generated and
        surplus rollouts and tokens, so ``stats.check()`` holds, and reported on their own as
        ``stats.rollouts_aborted`` / ``stats.tokens_aborted``. ``stats.rounds`` is 0 (there are no rounds), and
        so is the ``round`` column of the prompt table.

        Raises
        ------
        RuntimeError
            The step is not done, an abort has not been reported (:meth:`aborted`), or it is already finished.
        """
        if not self.done:
            raise RuntimeError("finish() before the step is done (B groups committed or nothing left to run)")
        if self._aborting:
            raise RuntimeError(f"{len(self._aborting)} aborted requests have not been reported with aborted(): "
                               "their tokens must be accounted")
        if self._finished:
            raise RuntimeError("finish() was already called")
        self._finished = True
        result, self.carry = self.ledger.finish(self.B, self.stop_reason, self.expected_lost,
                                                carry_over=self.config.carry_over)
        st = result.stats
        st.rollouts_generated += self.aborted_rollouts
        st.rollouts_surplus += self.aborted_rollouts
        st.tokens_generated += self.aborted_tokens
        st.tokens_surplus += self.aborted_tokens
        st.rollouts_aborted, st.tokens_aborted = self.aborted_rollouts, self.aborted_tokens
        st.check()
        if self._on_finish is not None:
            self._on_finish(result)
        return result


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
