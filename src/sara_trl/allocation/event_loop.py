"""The one event loop of the collection core: drive a collector of either schedule on an engine that runs requests one
completion at a time, with reward passes overlapping generation.

The collector is a :class:`~sara_trl.allocation.StreamingCollector` (streaming: decide per completion, abort once B
groups commit) or a :class:`~sara_trl.allocation.rounds.RoundCollector` (the paper's rounds: a round's requests are
submitted at once and the strategy decides when the last one is in; nothing is aborted). Both answer the same
events (``start``, ``complete``, ``aborted``, ``withdrawn``) and expose ``done``, ``recorded``, ``aborting`` and
``in_flight``.

:func:`drive_streaming_engine` is shared by every driver: the trainer (``collection="streaming"`` on TRL's colocated
vLLM engine, :mod:`sara_trl.trainer.streaming`), the benchmarks on the real engine, and the simulator
(:func:`benchmarks.simulator.simulate.run_streaming_step` on a decode-step engine model). What it needs is two small
protocols: an engine (:class:`StreamingEngine`: ``add`` / ``step`` / ``abort`` / ``pending``) and a scorer
(:class:`Scorer`: ``score`` one reward pass, ``keep`` the completions the collector recorded).

Scoring (``reward_lag``): the completions that finished in a window of engine steps are scored in ONE reward pass
on a background thread while the engine keeps stepping, and fed to the collector one by one, in the engine's order,
a fixed number of engine steps later; what the collector asks for (new requests, aborts) is applied once the whole
pass's completions are in. With ``reward_lag=0`` each engine step's completions are scored before the next engine
step (blocking). A request that finished before its abort reached the engine is not aborted in the engine (it is
already done): the collector counts it as surplus. No request is scored twice: a completion reaches the scorer at
most once, after the engine reports it finished, and the collector rejects a second ``complete`` of the same request.

Torch-free (numpy and the standard library only).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from sara_trl.allocation.rounds import RoundCollector
from sara_trl.allocation.streaming import StreamingCollector

__all__ = ["Finished", "Scorer", "StreamRun", "StreamingEngine", "drive_streaming_engine"]


@dataclass
class Finished:
    """A request the engine finished.

    Attributes
    ----------
    rid : int
        The collector's request id.
    completion_ids : list of int
        Completion token ids (as TRL's generation path returns them).
    logprobs : list of float or None
        One sampling log-prob per completion token (as TRL's GRPO keeps them), or None when not requested.
    record : object, optional
        What else the engine hands the scorer for this request (a multi-turn rollout's trajectory,
        :class:`sara_trl.trainer.trajectory.ChainRecord`); None for a single completion.
    """

    rid: int
    completion_ids: list[int]
    logprobs: list[float] | None = None
    record: Any = None


class StreamingEngine(Protocol):
    """What :func:`drive_streaming_engine` needs from an engine (vLLM's ``LLMEngine`` through
    :class:`VLLMStreamingEngine`, or a scripted stand-in).

    An engine that starts a request from its dataset prompt rather than from token ids (a multi-turn rollout,
    :class:`sara_trl.trainer.trajectory.TrajectoryEngine`) sets ``needs_prompt_id = True`` and has
    ``add_prompt(rid, prompt_id)``, which the loop calls instead of ``add``."""

    def add(self, rid: int, prompt_ids: list[int]) -> None:
        """Queue one request (one completion) for prompt token ids ``prompt_ids``."""
        ...

    def step(self) -> list[Finished]:
        """Run one engine step (one decode step of every running request); return the requests that finished."""
        ...

    def abort(self, rids: list[int]) -> list[int]:
        """Abort requests; return the completion tokens each had generated (same order; 0 for an id that is not in
        the engine, which is ignored)."""
        ...

    @property
    def pending(self) -> int:
        """Requests added and neither finished nor aborted."""
        ...


class Scorer(Protocol):
    """Scores finished completions, one reward pass at a time, and keeps those the collector recorded.

    :func:`drive_streaming_engine` calls ``keep`` once per ``score``, in the same order; with ``reward_lag >= 1``
    the next ``score`` may already run (on the scoring thread) before the last one's ``keep``, so a scorer holds its
    scored passes in a first-in, first-out queue."""

    def score(self, prompt_ids: list[int], batch: list[Finished]):
        """ONE reward pass over ``batch`` (dataset index of each one's prompt in ``prompt_ids``); returns ``(len,)``
        success labels in {0, 1, NaN}, or ``(labels, scores)``, two ``(len,)`` arrays, where the collector decides on
        scores too (dynamic sampling's ``ds_filter="score"``)."""
        ...

    def keep(self, positions: list[int]) -> None:
        """The positions in the oldest scored batch not yet kept that the collector recorded, in recording order
        (they take the next rollout ids)."""
        ...


@dataclass
class StreamRun:
    """What one step's :func:`drive_streaming_engine` did, in engine steps and seconds.

    Attributes
    ----------
    engine_steps : int
        ``engine.step()`` calls.
    reward_passes : int
        ``scorer.score`` calls (each one reward pass over the completions of one window of engine steps).
    scored : int
        Completions scored. A completion whose request the collector had already given up before its pass started
        is not scored (its label could not change anything); it is counted as surplus all the same.
    reward_seconds : float
        Seconds inside ``scorer.score`` (on the scoring thread when the passes overlap generation).
    reward_wait_seconds : float
        Seconds the engine loop waited for a reward pass instead of stepping the engine: the generation time lost to
        scoring. With ``reward_lag=0`` (blocking) it equals ``reward_seconds``.
    """

    engine_steps: int = 0
    reward_passes: int = 0
    scored: int = 0
    reward_seconds: float = 0.0
    reward_wait_seconds: float = 0.0


@dataclass
class _Pass:
    """One reward pass: the completions of a window of engine steps, the engine step after which its labels are
    applied, and its labels (a future while it runs on the scoring thread)."""

    due: int
    batch: list[Finished]
    labels: Any


def drive_streaming_engine(collector: StreamingCollector | RoundCollector, engine: StreamingEngine,
                           prompt_tokens: Callable[[int], list[int]], scorer: Scorer, *,
                           reward_lag: int = 0) -> StreamRun:
    """Run one step's collection to its end (B groups committed, or the budget or stream exhausted), streaming or
    rounds (the collector decides which; with rounds nothing is ever given up, so what is said below about aborts
    applies to streaming only).

    Scoring is off the engine's critical path when ``reward_lag = d >= 1``: the completions that finished in each
    window of ``d`` engine steps go to ONE reward pass on a background thread while the engine keeps stepping, and
    their labels are fed to the collector (in the engine's finishing order) once ``d`` more engine steps have run.
    The engine loop waits for a pass only when its labels are due and it is still running, or when the engine holds
    no request and nothing can be decided without a pending label; that wait is
    :attr:`StreamRun.reward_wait_seconds`. Because the labels are applied at fixed engine steps, the decisions do
    not depend on how fast the reward functions are: a run is as deterministic as the engine itself. ``d = 0``
    scores each engine step's completions before the next engine step (blocking, the scorer's whole time is lost).

    What the delay costs is at most ``2 d`` engine steps per decision: a request the collector gives up runs up to
    that many more decode steps before its abort (counted as surplus tokens), and a continuing prompt's next
    requests start that much later. A completion that finishes after its request's abort was decided, but before
    the decision reached the engine, is surplus as well (never trained, never scored if its pass had not started).

    Parameters
    ----------
    collector : StreamingCollector or RoundCollector
        A fresh collector (``start()`` not yet called): :meth:`Allocator.streaming` or :meth:`Allocator.rounds`.
    engine : StreamingEngine
        An engine with no request in flight.
    prompt_tokens : callable
        ``prompt_tokens(prompt_id) -> list of int``, the prompt's token ids (not called for an engine with
        ``needs_prompt_id``).
    scorer : Scorer
        Scores finished completions and keeps the recorded ones. With ``reward_lag >= 1`` its ``score`` runs on one
        background thread (one pass at a time, in order) while ``keep`` runs on the calling thread, once per pass in
        the same order: a scorer keeps its passes in a first-in, first-out queue.
    reward_lag : int
        ``d`` above, in engine steps (>= 0).

    Returns
    -------
    StreamRun
        Engine steps, reward passes and the seconds spent scoring and waiting for scores.

    Raises
    ------
    ValueError
        ``reward_lag`` is not an integer >= 0, or the scorer returned the wrong number of labels.
    RuntimeError
        The engine lost requests (the collector waits for requests the engine no longer has), or it holds
        requests when the step ends.
    Exception
        Whatever the engine or the scorer raises; every request still in the engine is aborted first, so the engine
        is left empty, and the scoring thread is stopped.
    """
    if isinstance(reward_lag, bool) or not isinstance(reward_lag, int) or reward_lag < 0:
        raise ValueError(f"reward_lag must be an integer number of engine steps >= 0, got {reward_lag!r}")
    return _EngineLoop(collector, engine, prompt_tokens, scorer, reward_lag).run()


class _EngineLoop:
    """One step of :func:`drive_streaming_engine`: its state (requests' prompts, finished requests, the window of
    unscored completions, the pending reward passes, the scoring thread) and the four things it does with them."""

    def __init__(self, collector, engine: StreamingEngine, prompt_tokens, scorer: Scorer, reward_lag: int):
        self.collector, self.engine, self.prompt_tokens, self.scorer = collector, engine, prompt_tokens, scorer
        self.lag = reward_lag
        self.stats = StreamRun()
        self.prompt_of: dict[int, int] = {}
        self.finished: set[int] = set()  # requests the engine reported finished (never aborted in the engine again)
        self.window: list[Finished] = []  # finished, not yet in a reward pass
        self.passes: deque[_Pass] = deque()  # reward passes whose labels are not yet applied, oldest first
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sara-reward") if reward_lag else None
        self.by_prompt = bool(getattr(engine, "needs_prompt_id", False))

    def apply(self, submit, abort) -> None:
        """Apply the collector's requests: abort what the engine still runs, withdraw what never reached it, add
        the rest."""
        collector, engine = self.collector, self.engine
        submit_ids = {req.rid for req in submit}
        live = [rid for rid in abort if rid not in self.finished and rid not in submit_ids]
        if live:
            for rid, tokens in zip(live, engine.abort(live)):
                collector.aborted(rid, tokens)
        for rid in abort:
            if rid in submit_ids:  # asked for and given up by one batch of events: never reaches the engine
                collector.withdrawn(rid)
        aborted = set(abort)
        for req in submit:
            if req.rid not in aborted:
                self.prompt_of[req.rid] = req.prompt_id
                if self.by_prompt:
                    engine.add_prompt(req.rid, req.prompt_id)
                else:
                    engine.add(req.rid, self.prompt_tokens(req.prompt_id))

    def score(self, batch: list[Finished]) -> tuple[np.ndarray, np.ndarray | None]:
        """ONE reward pass (on the scoring thread when the passes overlap generation)."""
        run = self.stats
        start = time.perf_counter()
        out = self.scorer.score([self.prompt_of[f.rid] for f in batch], batch)
        labels, scores = out if isinstance(out, tuple) else (out, None)
        run.reward_seconds += time.perf_counter() - start
        run.reward_passes += 1
        run.scored += len(batch)
        return np.asarray(labels, dtype=np.float64), None if scores is None else np.asarray(scores, np.float64)

    def start_pass(self, due: int) -> None:
        """Send the window to a reward pass; completions of requests already given up are surplus at once."""
        given_up = self.collector.aborting
        batch = [f for f in self.window if f.rid not in given_up]
        for f in self.window:
            if f.rid in given_up:
                self.collector.complete(f.rid, float("nan"), len(f.completion_ids))
        self.window = []
        if not batch:
            return
        if self.pool is None:
            labels = self.score(batch)
            self.stats.reward_wait_seconds = self.stats.reward_seconds
        else:
            labels = self.pool.submit(self.score, batch)
        self.passes.append(_Pass(due, batch, labels))

    def finish_pass(self, p: _Pass) -> None:
        """Wait for a pass if it still runs, then decide its completions in the engine's order."""
        collector, labels = self.collector, p.labels
        if self.pool is not None:
            if not labels.done():
                start = time.perf_counter()
                labels.result()
                self.stats.reward_wait_seconds += time.perf_counter() - start
            labels = labels.result()
        labels, scores = labels
        if labels.shape != (len(p.batch),) or (scores is not None and scores.shape != labels.shape):
            raise ValueError(f"the scorer returned {labels.shape} labels for {len(p.batch)} completions")
        submit, abort, kept = [], [], []
        for i, (done, label) in enumerate(zip(p.batch, labels)):
            before = collector.recorded
            step_actions = collector.complete(done.rid, label, len(done.completion_ids),
                                              None if scores is None else float(scores[i]))
            if collector.recorded > before:
                kept.append(i)
            submit.extend(step_actions.submit)
            abort.extend(step_actions.abort)
        self.scorer.keep(kept)
        self.apply(submit, abort)

    def run(self) -> StreamRun:
        """The loop: apply due passes, step the engine, start a pass per window; see :func:`drive_streaming_engine`."""
        collector, engine, run, passes = self.collector, self.engine, self.stats, self.passes
        try:
            actions = collector.start()
            self.apply(actions.submit, actions.abort)
            while not collector.done:
                if passes and (passes[0].due <= run.engine_steps or engine.pending == 0):
                    self.finish_pass(passes.popleft())
                    continue
                if engine.pending == 0:
                    if self.window:  # nothing left to overlap with: score now
                        self.start_pass(run.engine_steps)
                        continue
                    raise RuntimeError(f"the engine holds no request while the collector waits for "
                                       f"{collector.in_flight}")
                batch = engine.step()
                run.engine_steps += 1
                self.finished.update(f.rid for f in batch)
                self.window.extend(batch)
                if self.window and (self.lag == 0 or run.engine_steps % self.lag == 0):
                    self.start_pass(run.engine_steps + self.lag)
            # The batch is full: completions still unscored or in a pass are surplus (the collector gave them up).
            for f in [f for p in passes for f in p.batch] + self.window:
                collector.complete(f.rid, float("nan"), len(f.completion_ids))
        except BaseException:
            if engine.pending:  # leave the engine empty for whatever runs next (evaluation, the next step)
                with contextlib.suppress(Exception):
                    engine.abort(list(self.prompt_of))
            raise
        finally:
            if self.pool is not None:  # no reward pass may outlive the step (the trainer's buffers are reused)
                start = time.perf_counter()
                self.pool.shutdown(wait=True, cancel_futures=True)
                run.reward_wait_seconds += time.perf_counter() - start
        for p in passes:  # passes that ran after the batch was full: nothing of theirs is kept
            if self.pool is not None and not p.labels.cancelled() and p.labels.exception() is None:
                self.scorer.keep([])
        if engine.pending:
            raise RuntimeError(f"{engine.pending} requests are still in the engine after the step ended")
        return run
