"""The asynchronous worker's event loop: the continuous collector driven by HTTP requests, one per rollout.

One asyncio loop (on the worker's thread) owns everything here. The collector (:class:`StreamingCollector` with
``B=None``) says which requests to send and which to cancel; each request is an ``asyncio`` task of the client. The
loop waits for finished requests, scores the ones that finished together in ONE reward pass, feeds each to the
collector (``complete``), applies what the collector asks (new requests; cancellations, whose tokens so far are
reported as ``aborted``), and pushes every committed group to ``rollout_buffer`` as TRL ``RolloutSample`` rows
(one per completion, TRL's asynchronous advantages, tagged with the oldest policy version among the group's
completions), as room in the buffer allows (a full buffer holds the loop back: backpressure). Every
``window_groups`` committed groups or ``window_seconds`` it closes an accounting window and puts its metrics on
``metrics_queue`` (:mod:`~sara_trl.trainer.async_worker.accounting`).
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sara_trl.allocation import AllocationConfig, PromptStream, StreamingCollector
from sara_trl.allocation.allocator import plain_json
from sara_trl.allocation.refill import RefillModel
from sara_trl.allocation.streaming import Request, StreamActions
from sara_trl.allocation.types import Fate, Group
from sara_trl.trainer.async_worker.accounting import WindowMeter, window_metrics
from sara_trl.trainer.async_worker.client import Completion, CompletionsClient
from sara_trl.trainer.async_worker.config import AsyncWorkerConfig
from sara_trl.trainer.async_worker.scoring import RewardScorer
from sara_trl.trainer.trl import port

__all__ = ["RolloutLoop"]


@dataclass
class _Request:
    """A request in flight: its prompt, the policy version it was sent under, what it streamed so far, its task, and
    whether that task has started (a task cancelled before its first step never reaches the client or server)."""

    prompt_id: int
    version: int
    out: Completion
    task: asyncio.Future | None = None
    started: bool = False


@dataclass
class _Record:
    """A completion the collector recorded, kept until its prompt is committed (then pushed) or decided otherwise."""

    prompt_id: int
    version: int
    completion_ids: list[int]
    logprobs: list[float]
    completion: list
    reward: float
    columns: np.ndarray


@dataclass
class _Ready:
    """A committed group's samples, waiting for room in ``rollout_buffer``."""

    samples: list
    version: int
    spread: int
    row_tokens: list[int]  # completion tokens of each row
    pushed: int = 0

    def left(self) -> tuple[int, int]:
        """Rows (rollouts) and their completion tokens not yet on the buffer."""
        return len(self.samples) - self.pushed, sum(self.row_tokens[self.pushed:])


@dataclass
class _Prompt:
    row: dict
    messages: list
    ids: list[int]


@dataclass
class _Window:
    groups: int = 0
    scores: list = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)


class RolloutLoop:
    """One run of the worker (see the module docstring); built in ``start()``, run on the worker's thread.

    Parameters
    ----------
    allocation : AllocationConfig
        ``collection="streaming"``, an allocator with a streaming policy.
    config : AsyncWorkerConfig
    dataset : sequence of dict
        ``len(dataset)`` rows, each with a conversational ``"prompt"``; the other columns go to the reward functions.
    tokenizer : object
        ``apply_chat_template`` (prompts) and ``decode`` (completions for the reward functions).
    scorer : RewardScorer
    client : CompletionsClient
    rollout_buffer, metrics_queue : queue.Queue
    model_version : callable
        ``model_version() -> int``, the live policy version.
    stopping : threading.Event
        Set by ``stop()``.
    beat : callable
        Called at every turn of the loop (the worker's heartbeat).
    tag : str
        Prefix of the request ids sent to the server (``f"{tag}-{rid}"``).
    """

    def __init__(self, *, allocation: AllocationConfig, config: AsyncWorkerConfig, dataset: Any, tokenizer: Any,
                 scorer: RewardScorer, client: CompletionsClient, rollout_buffer: queue.Queue,
                 metrics_queue: queue.Queue, model_version: Callable[[], int], stopping: threading.Event,
                 beat: Callable[[], None], tag: str):
        self.allocation, self.config, self.dataset, self.tokenizer = allocation, config, dataset, tokenizer
        self.scorer, self.client, self.buffer, self.metrics_queue = scorer, client, rollout_buffer, metrics_queue
        self.model_version, self.stopping, self.beat, self.tag = model_version, stopping, beat, tag
        self.stream = PromptStream(len(dataset), seed=config.seed)
        self.refill = RefillModel(allocation)
        self.collector = StreamingCollector(
            allocation, None, self._draw, max_in_flight=config.max_inflight_tasks, mix_rate=self.refill.mix_rate,
            fresh_cost=self.refill.fresh_cost, resolved=self.refill.resolve,
            speculate=allocation.streaming_speculate, on_group=self._on_group)
        self.requests: dict[int, _Request] = {}
        self.records: dict[int, _Record] = {}  # the collector's rollout id -> recorded completion
        self.prompts: dict[int, _Prompt] = {}
        self.ready: deque[_Ready] = deque()
        self.cancelled: list[asyncio.Future] = []
        self.cancelled_ids: list[str] = []  # server request ids of the running requests cancelled, in order
        self.meter, self.window = WindowMeter(), _Window()
        self.rng = random.Random(config.seed)
        self.next_group_id = 0
        self.windows_closed = 0
        self.waiting_before = (0, 0)  # self.waiting() when the last window closed
        self.event_loop: asyncio.AbstractEventLoop | None = None  # set when run() starts

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The worker's own state, as plain Python values (JSON-serializable), for a checkpoint:

        - ``stream``: the prompt stream's position (:meth:`PromptStream.state_dict`), with the prompts still
          undecided now put first among the ids it owes, so that a resumed worker draws them again (their rollouts
          so far are not saved);
        - ``refill``: the refill model (:meth:`RefillModel.state_dict`: learned mix rates and fresh-prompt cost);
        - ``rng``: the state of the generator of per-request sampling seeds;
        - ``next_group_id``: the next pushed group's ``group_id``.

        Call it on the loop's own thread (:meth:`SaraAsyncRolloutWorker.state_dict` does), or when the loop is not
        running."""
        led = self.collector.ledger
        undecided = led.pid[: led.size][led.status[: led.size] == Fate.ACTIVE]
        stream = self.stream.state_dict()
        seen, first = set(), []
        for pid in [int(p) for p in undecided]:
            if pid not in seen:
                seen.add(pid)
                first.append(pid)
        stream["owed"] = first + [p for p in stream["owed"] if p not in seen]
        version, internal, gauss = self.rng.getstate()
        return {"stream": stream, "refill": plain_json(self.refill.state_dict()),
                "rng": [version, list(internal), gauss], "next_group_id": int(self.next_group_id)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s values (before :meth:`run`).

        Raises
        ------
        ValueError
            The stream was saved for another dataset size, seed or order.
        """
        self.stream.load_state_dict(state["stream"])
        self.refill.load_state_dict(state["refill"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((int(version), tuple(int(x) for x in internal), gauss))
        self.next_group_id = int(state["next_group_id"])

    # ------------------------------------------------------------------------------------------------ requests
    def _draw(self, count: int, avoid: np.ndarray) -> np.ndarray:
        pids = self.stream.take(count, avoid)
        self.meter.prompts_drawn += len(pids)
        return pids

    def _prompt(self, prompt_id: int) -> _Prompt:
        if prompt_id not in self.prompts:
            row = dict(self.dataset[int(prompt_id)])
            messages = row.get("prompt")
            ids = port.async_prompt_ids(self.tokenizer, messages, self.config.chat_template_kwargs)
            self.prompts[prompt_id] = _Prompt(row, messages, ids)
        return self.prompts[prompt_id]

    def _send(self, req: Request) -> None:
        cfg, prompt = self.config, self._prompt(req.prompt_id)
        version = int(self.model_version())
        payload = port.async_completion_payload(
            model=port.async_request_model(cfg.model_name, cfg.lora_name, version), prompt_ids=prompt.ids,
            max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
            min_p=cfg.min_p, repetition_penalty=cfg.repetition_penalty, seed=self.rng.getrandbits(63))
        entry = self.requests[req.rid] = _Request(req.prompt_id, version, Completion())

        async def run() -> None:
            entry.started = True
            await self.client.complete(payload, entry.out, f"{self.tag}-{req.rid}")

        entry.task = asyncio.ensure_future(run())

    def apply(self, actions: StreamActions, finishing: set[int]) -> None:
        """Cancel what the collector gives up (reporting the tokens each had streamed), then send its new requests.
        A request in ``finishing`` (finished, in the reward pass being decided) is left to its ``complete``, which
        counts it as surplus; one that finished while the pass was scored is reported finished, as surplus."""
        collector = self.collector
        sent_now = {req.rid for req in actions.submit}
        for rid in actions.abort:
            if rid in sent_now:  # asked for and given up by one event: it never reaches the server
                collector.withdrawn(rid)
                continue
            if rid in finishing:
                continue
            req = self.requests.pop(rid)
            if not req.started:  # cancelled before its task ran: it never reached the server, no rollout
                req.task.cancel()
                self.cancelled.append(req.task)
                collector.withdrawn(rid)
            elif req.task.done() and not req.task.cancelled() and req.task.exception() is None:
                collector.complete(rid, float("nan"), len(req.out.token_ids))
            else:
                req.task.cancel()
                self.cancelled.append(req.task)
                self.cancelled_ids.append(f"{self.tag}-{rid}")
                collector.aborted(rid, len(req.out.token_ids))
        given_up = set(actions.abort)
        for req in actions.submit:
            if req.rid not in given_up:
                self._send(req)

    # ------------------------------------------------------------------------------------------------ completions
    async def process(self, done: set) -> None:
        """Score the requests that finished (one reward pass), then decide them one by one in request order."""
        batch = []
        for rid in sorted(rid for rid, req in self.requests.items() if req.task in done):
            req = self.requests.pop(rid)
            if req.task.exception() is not None:
                raise req.task.exception()
            batch.append((rid, req))
        if not batch:
            return
        prompts = [self._prompt(req.prompt_id) for _, req in batch]
        completions = [[{"role": "assistant",
                         "content": self.tokenizer.decode(req.out.token_ids, skip_special_tokens=True)}]
                       for _, req in batch]
        scored = await self.scorer.score([p.row for p in prompts], [p.messages for p in prompts], completions,
                                         [list(req.out.token_ids) for _, req in batch])
        finishing = {rid for rid, _ in batch}
        collector = self.collector
        for i, (rid, req) in enumerate(batch):
            finishing.discard(rid)
            tokens = len(req.out.token_ids)
            if rid in collector.aborting:  # given up by an earlier completion of this pass: surplus
                collector.complete(rid, float("nan"), tokens)
                continue
            index = collector.recorded  # the rollout id complete() gives it (on_group may need it at once)
            self.records[index] = _Record(req.prompt_id, req.version, list(req.out.token_ids),
                                          list(req.out.logprobs), completions[i], float(scored.rewards[i]),
                                          scored.columns[:, i].copy())
            self.window.scores.append(float(scored.scores[i]))
            actions = collector.complete(rid, float(scored.labels[i]), tokens, float(scored.scores[i]))
            if collector.recorded == index:  # pragma: no cover - not recorded (cannot happen: it was not given up)
                self.records.pop(index, None)
            self.apply(actions, finishing)

    def _on_group(self, group: Group) -> None:
        """A committed group (the collector's ``on_group``): its rows, with TRL's asynchronous advantages."""
        recs = [self.records.pop(int(i)) for i in group.rollout_ids]
        if any(rec.prompt_id != group.prompt_id for rec in recs):
            raise RuntimeError(f"group of prompt {group.prompt_id} holds completions of another prompt")
        advantages, _, reward_std = port.async_group_advantages(np.array([rec.reward for rec in recs]))
        versions = [rec.version for rec in recs]
        prompt = self._prompt(group.prompt_id)
        group_id, self.next_group_id = self.next_group_id, self.next_group_id + 1
        samples = []
        for rec, advantage in zip(recs, advantages):
            metrics = {"reward": rec.reward, "reward_std": reward_std,
                       **{f"rewards/{name}": float(v) for name, v in zip(self.scorer.names, rec.columns)},
                       "sara/group_size": float(len(recs))}
            samples.append(port.async_rollout_sample(
                prompt=prompt.messages, completion=rec.completion, prompt_ids=prompt.ids,
                completion_ids=rec.completion_ids, logprobs=rec.logprobs, advantage=float(advantage),
                model_version=min(versions), group_id=group_id, metrics=metrics))
        self.ready.append(_Ready(samples, min(versions), max(versions) - min(versions),
                                 [len(rec.completion_ids) for rec in recs]))
        self.window.groups += 1

    async def push_ready(self) -> None:
        """Put the committed groups' samples on ``rollout_buffer``, waiting while it is full (backpressure) unless
        the worker is stopping."""
        while self.ready:
            item = self.ready[0]
            while item.pushed < len(item.samples):
                sample = item.samples[item.pushed]
                sample.enqueued_at = time.time()
                try:
                    self.buffer.put_nowait(sample)
                except queue.Full:
                    if self.stopping.is_set():
                        return
                    self.beat()
                    await asyncio.sleep(0.05)
                    continue
                self.meter.row_pushed(item.row_tokens[item.pushed])
                item.pushed += 1
            self.ready.popleft()
            self.meter.group_pushed(int(self.model_version()) - item.version, item.spread)

    # ------------------------------------------------------------------------------------------------ windows
    def waiting(self) -> tuple[int, int]:
        """Rows (rollouts) of committed groups, and their completion tokens, still waiting for room in
        ``rollout_buffer`` (backpressure)."""
        left = [item.left() for item in self.ready]
        return sum(r for r, _ in left), sum(t for _, t in left)

    def window_due(self) -> bool:
        cfg = self.config
        return self.window.groups >= cfg.window_groups or time.monotonic() - self.window.start >= cfg.window_seconds

    def close_window(self) -> dict:
        """Close the collector's accounting window, check the success rule on its scores (the first window with a
        scorable rollout), put the window's metrics on ``metrics_queue`` and forget what the decided prompts left."""
        led = self.collector.ledger
        abandoned = int(np.sum(led.status[: led.size] == Fate.ABANDONED))
        stats = self.collector.window()
        if self.window.scores:
            self.scorer.rule.end_step(np.asarray(self.window.scores))
        waiting = self.waiting()
        metrics = window_metrics(stats, self.meter, abandoned, waiting, self.waiting_before)
        self.waiting_before = waiting
        try:
            self.metrics_queue.put_nowait(metrics)
        except queue.Full:  # never block generation (as TRL's worker)
            pass
        self.refill.decay()
        self.meter, self.window = WindowMeter(), _Window()
        self.windows_closed += 1
        live = set(led.pid[: led.size].tolist()) | {req.prompt_id for req in self.requests.values()}
        self.records = {i: rec for i, rec in self.records.items() if rec.prompt_id in live}
        self.prompts = {pid: p for pid, p in self.prompts.items() if pid in live}
        return metrics

    # ------------------------------------------------------------------------------------------------ the run
    async def run(self) -> None:
        """Until ``stopping`` is set (or the prompt stream is exhausted): send, score, decide, push, account. On the
        way out every request in flight is cancelled and accounted, and a last window is closed."""
        self.event_loop = asyncio.get_running_loop()
        failed = True
        try:
            self.apply(self.collector.start(), set())
            while not self.stopping.is_set():
                self.beat()
                if not self.requests:
                    if self.collector.done:
                        break
                    await asyncio.sleep(self.config.poll_seconds)  # pragma: no cover - the collector is done then
                    continue
                done, _ = await asyncio.wait([req.task for req in self.requests.values()],
                                             timeout=self.config.poll_seconds, return_when=asyncio.FIRST_COMPLETED)
                if done:
                    await self.process(done)
                await self.push_ready()
                if self.window_due():
                    self.close_window()
            failed = False
        finally:
            await self.shutdown(failed)

    async def shutdown(self, failed: bool) -> None:
        """Cancel and account every request in flight, count the groups never pushed as dropped, close the last
        window; after a failure only cancel (the collector's state may be inconsistent), then close the client."""
        try:
            if not failed:
                self.apply(self.collector.stop(), set())
                for item in self.ready:
                    self.meter.dropped(*item.left())
                self.ready.clear()
                self.close_window()
        finally:
            for req in self.requests.values():
                req.task.cancel()
                self.cancelled.append(req.task)
            self.requests.clear()
            if self.cancelled:
                await asyncio.gather(*self.cancelled, return_exceptions=True)
            await self.client.aclose()
