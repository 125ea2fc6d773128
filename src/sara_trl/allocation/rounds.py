"""Rounds, the paper's schedule (Alg. 1), as a policy of the event-driven collection core.

A strategy (:mod:`sara_trl.allocation.strategies`) is a generator: it yields each round's
:class:`~sara_trl.allocation.types.RoundRequest` and is sent that round's outcomes. Two drivers answer it:

- :func:`run_rounds`: each round is ONE ``rollout_fn`` call (:meth:`Allocator.collect`; transformers ``generate``,
  TRL's ``vllm_generation.generate``, the simulator, the replays).
- :class:`RoundCollector`: each round's rollouts are requests of the event loop
  (:func:`~sara_trl.allocation.event_loop.drive_streaming_engine`, the same loop streaming collection runs). They
  are scored as they finish, while the round's slowest completions still generate, and the strategy decides once
  the whole round is in: the round barrier stays (paper-exact decisions), only the scoring moves off the engine's
  critical path.

Both drivers run the same strategy code on the same outcomes, so they make the same decisions; the one difference is
which id each rollout of a round takes: prompt-major with ``rollout_fn``, finishing order with the event loop
(:attr:`RoundOutcome.order`). Torch-free.
"""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Generator

import numpy as np

from sara_trl.allocation.labels import allocator_labels
from sara_trl.allocation.streaming import Request, StreamActions
from sara_trl.allocation.types import RolloutFn, RoundOutcome, RoundRequest, StepResult

__all__ = ["RoundCollector", "run_rounds"]

RoundSteps = Generator[RoundRequest, object, StepResult]
"""One step of rounds (:meth:`Allocator.round_steps`): yields requests, is sent outcomes, returns the result."""


def run_rounds(steps: RoundSteps, rollout_fn: RolloutFn) -> StepResult:
    """Drive one step of rounds with ONE ``rollout_fn`` call per round.

    Parameters
    ----------
    steps : generator
        :meth:`Allocator.round_steps` (yields :class:`RoundRequest`, is sent outcomes, returns the result).
    rollout_fn : RolloutFn
        ``rollout_fn(prompt_ids (P,) int64, counts (P,) int64) -> RoundOutcome`` (prompt-major).

    Returns
    -------
    StepResult

    Raises
    ------
    ValueError
        ``rollout_fn`` returned malformed outcomes (:meth:`RoundOutcome.coerce`).
    """
    try:
        request = next(steps)
        while True:
            request = steps.send(rollout_fn(request.prompt_ids.copy(), request.counts.copy()))
    except StopIteration as stop:
        return stop.value


class RoundCollector:
    """One step of rounds behind the event interface of :class:`~sara_trl.allocation.streaming.StreamingCollector`,
    so :func:`~sara_trl.allocation.event_loop.drive_streaming_engine` drives either schedule.

    :meth:`start` submits the first round's rollouts (one request each, prompt-major, request ids counting on across
    rounds); :meth:`complete` records a finished one; once the round's last request is in, the strategy decides the
    whole round (paper Alg. 1, lines 6-12) and the next round's requests are returned. Nothing is aborted: a round
    runs to its end, as in the paper. The rollouts of a round take their ids in the order they finished
    (:attr:`RoundOutcome.order`), after the rollouts of earlier rounds (and, with ``carry_over``, the carried ones).

    Parameters
    ----------
    steps : generator
        :meth:`Allocator.round_steps` (not started).
    B : int
        Groups the batch needs (for the progress a driver shows).
    relabel_by_score : bool
        Dynamic sampling's ``ds_filter="score"``: once a round is in, its labels are
        :func:`~sara_trl.allocation.labels.allocator_labels` of its scores (a group whose scores spread beyond float
        noise is mixed; any other is labelled by its mean score against ``threshold``), exactly as the trainer's
        ``rollout_fn`` labels a round; :meth:`complete` then needs every completion's score.
    threshold : float
        ``success_threshold``, read only with ``relabel_by_score``.

    Attributes
    ----------
    done : bool
        The strategy returned (B groups committed, or a limit bound).
    rounds : int
        Rounds submitted.
    """

    def __init__(self, steps: RoundSteps, B: int, relabel_by_score: bool = False, threshold: float = 0.5):
        self._steps = steps
        self.B = int(B)
        self._relabel = bool(relabel_by_score)
        self._threshold = float(threshold)
        self._error: BaseException | None = None
        self.done = False
        self.rounds = 0
        self._result: StepResult | None = None
        self._started = self._finished = False
        self._next_rid = 0
        self._base = 0  # first request id of the current round
        self._request: RoundRequest | None = None
        self._success = self._tokens = self._scores = None
        self._order: list[int] = []
        self._recorded_before = 0  # rollouts recorded in earlier rounds
        self._bases: list[int] = []  # first request id of each round

    # ------------------------------------------------------------------------------------------------ events
    @property
    def in_flight(self) -> int:
        """Requests of the current round not yet finished."""
        return 0 if self._request is None else self._request.total - len(self._order)

    @property
    def recorded(self) -> int:
        """Completions recorded so far (every finished request is: rounds never give one up); they take rollout
        ids in this order, after the carried ones."""
        return self._recorded_before + len(self._order)

    @property
    def aborting(self) -> frozenset[int]:
        """Always empty: rounds never abort."""
        return frozenset()

    def _check_usable(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"this step failed ({type(self._error).__name__}: {self._error}); start a new one")

    def round_of(self, rid: int) -> int:
        """The round (1-based) request ``rid`` was submitted in.

        Raises
        ------
        ValueError
            ``rid`` was never submitted.
        """
        if not 0 <= int(rid) < self._next_rid:
            raise ValueError(f"request {rid} was never submitted")
        return bisect.bisect_right(self._bases, int(rid))

    def start(self) -> StreamActions:
        """The first round's requests (none if the strategy returns at once).

        Raises
        ------
        RuntimeError
            Called twice.
        """
        self._check_usable()
        if self._started:
            raise RuntimeError("RoundCollector.start() was already called")
        self._started = True
        return self._advance(next, self._steps)

    def complete(self, rid: int, success: float, tokens: int, score: float | None = None) -> StreamActions:
        """A request of the current round finished.

        Parameters
        ----------
        rid : int
            The request.
        success : float or None
            1.0, 0.0, or NaN / None (unscorable).
        tokens : int
            Its completion tokens (>= 0).
        score : float, optional
            Its score; required with ``relabel_by_score``.

        Returns
        -------
        StreamActions
            The next round's requests once this one is complete (empty otherwise, and once the step is done).

        Raises
        ------
        ValueError
            ``rid`` is not an integer request id of the current round, or has already finished (no request is
            scored twice); a success value other than 0, 1, NaN or None; a token count that is not an integer >= 0;
            with ``relabel_by_score``, a missing score, or one that is NaN where the success label is not (or the
            reverse).
        RuntimeError
            :meth:`start` was not called, the step is done, or it failed earlier.
        Exception
            Whatever the strategy raises when it decides the round; the step has then failed (every later call
            raises ``RuntimeError``).
        """
        self._check_usable()
        if not self._started or self.done:
            raise RuntimeError("complete() needs a started step that is not done")
        rid = _integer(rid, "request id")
        j = rid - self._base
        if not 0 <= j < self._request.total:
            raise ValueError(f"completion for request {rid}, which is not a request of the current round "
                             f"({self._base} .. {self._base + self._request.total - 1})")
        if self._tokens[j] >= 0:
            raise ValueError(f"completion for request {rid}, which has already finished: a request is scored once")
        success = _label(success, rid)
        tokens = _integer(tokens, f"request {rid}: token count")
        if tokens < 0:
            raise ValueError(f"request {rid}: token count must be >= 0, got {tokens}")
        if self._relabel:
            score = None if score is None else _real(score, f"request {rid}: score")
            if score is None or np.isnan(score) != np.isnan(success):
                raise ValueError(f"request {rid}: ds_filter='score' needs each completion's score (NaN exactly "
                                 f"when its success label is NaN), got {score!r}")
            self._scores[j] = score
        self._success[j], self._tokens[j] = success, tokens
        self._order.append(j)
        if len(self._order) < self._request.total:
            return StreamActions()
        return self._advance(self._steps.send, self._outcome())

    def aborted(self, rid: int, tokens: int) -> None:
        """Rounds never ask for an abort.

        Raises
        ------
        ValueError
            Always.
        """
        raise ValueError(f"request {rid} was not asked to abort: rounds never abort")

    def withdrawn(self, rid: int) -> None:
        """Rounds never ask for an abort, so no request is withdrawn.

        Raises
        ------
        ValueError
            Always.
        """
        raise ValueError(f"request {rid} was not asked to abort: rounds never abort")

    def finish(self) -> StepResult:
        """The batch: exactly B groups and the step's accounting (that of :meth:`Allocator.collect`).

        Raises
        ------
        RuntimeError
            The step is not done, or is already finished.
        """
        self._check_usable()
        if not self.done:
            raise RuntimeError("finish() before the step is done")
        if self._finished:
            raise RuntimeError("finish() was already called")
        self._finished = True
        return self._result

    # ------------------------------------------------------------------------------------------------ rounds
    def _outcome(self) -> RoundOutcome:
        """The round's outcomes in finishing order, labelled from the scores where asked."""
        success = self._success
        if self._relabel:  # prompt-major, as the request laid them out
            success = allocator_labels(self._scores, self._request.counts, self._threshold, "score")
        order = np.asarray(self._order, np.int64)
        return RoundOutcome(success=success[order], tokens=self._tokens[order], order=order)

    def _advance(self, resume, value) -> StreamActions:
        """Resume the strategy; submit its next round, or end the step. A round of nothing is answered at once (no
        request of it would ever finish); it counts as a round, as :attr:`StepStats.rounds` counts it."""
        try:
            request = resume(value)
            while request.total == 0:
                self.rounds += 1
                self._bases.append(self._next_rid)
                request = self._steps.send(RoundOutcome(np.zeros(0), np.zeros(0, np.int64)))
        except StopIteration as stop:
            self._recorded_before += len(self._order)
            self._result, self._request, self.done = stop.value, None, True
            self._order = []
            return StreamActions()
        except BaseException as err:  # the strategy failed: so has the step
            self._error = err
            raise
        self._recorded_before += len(self._order)
        total = request.total
        self._request, self.rounds = request, self.rounds + 1
        self._base, self._next_rid = self._next_rid, self._next_rid + total
        self._bases.append(self._base)
        self._success = np.full(total, np.nan)
        self._tokens = np.full(total, -1, np.int64)
        self._scores = np.full(total, np.nan) if self._relabel else None
        self._order = []
        pids = np.repeat(request.prompt_ids, request.counts).tolist()
        return StreamActions([Request(self._base + j, int(pid)) for j, pid in enumerate(pids)])


def _integer(value, what: str) -> int:
    """``value`` as an int, refusing what would be truncated (2.9), a bool and a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            return int(value)
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return int(value)


def _real(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def _label(value, rid: int) -> float:
    """A success label: 0.0, 1.0 or NaN (None: NaN)."""
    label = np.nan if value is None else _real(value, f"request {rid}: success")
    if not (np.isnan(label) or label in (0.0, 1.0)):
        raise ValueError(f"request {rid}: success must be 0, 1 or NaN (unscorable), got {value!r}")
    return label
