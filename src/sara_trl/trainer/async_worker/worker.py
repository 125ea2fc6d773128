"""`SaraAsyncRolloutWorker`: SARA (or dynamic sampling) as a rollout worker of TRL 1.16's ``AsyncGRPOTrainer``.

It implements TRL's public ``RolloutWorkerProtocol`` (trl/experimental/async_grpo/async_grpo_trainer.py):
``rollout_buffer`` and ``metrics_queue`` (``queue.Queue``s, the in-process kind the protocol allows), ``start``,
``stop``, ``update_model_version`` and ``check_health``. Generation runs on one background thread
(:class:`~sara_trl.trainer.async_worker.loop.RolloutLoop`, an asyncio loop) that streams one request per rollout to an
OpenAI-compatible server; the allocation core's continuous collector decides after each finished completion; only
committed (mixed) groups reach the trainer, each as it commits, of any size between ``commit_min`` and k.

Checkpoints: :meth:`SaraAsyncRolloutWorker.state_dict` / ``load_state_dict`` (the prompt stream, the refill model, the
seed generator; :class:`~sara_trl.SaraAsyncGRPOTrainer` saves them with each checkpoint). What it does not do (yet):
tools, environments, multimodal prompts, several processes. TRL's epoch count assumes every
drawn prompt is trained: use ``max_steps`` as the stopping rule.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from sara_trl.allocation import AllocationConfig
from sara_trl.allocation.beyond_paper import extensions_enabled
from sara_trl.allocation.registry import spec_of, streaming_allocators
from sara_trl.trainer.async_worker.client import CompletionsClient, OpenAICompletionsClient
from sara_trl.trainer.async_worker.config import AsyncWorkerConfig
from sara_trl.trainer.async_worker.loop import RolloutLoop
from sara_trl.trainer.async_worker.scoring import RewardScorer

__all__ = ["SaraAsyncRolloutWorker", "check_allocation"]

METRICS_QUEUE_SIZE = 4096
"""``metrics_queue`` capacity in windows (a full queue drops the newest window's dict, as TRL's worker does)."""


class SaraAsyncRolloutWorker:
    """A rollout worker for ``AsyncGRPOTrainer(rollout_worker=...)`` that pushes only committed (mixed) groups.

    ``allocation.allocator`` picks the worker: ``"sara"`` (paper Alg. 1 per completion: probe ``n0``, abandon once
    p_eff (Eq. 2) < ``tau_low`` (Eq. 3), top a mixed prompt up to the commit floor, refill freed slots with fresh
    prompts) or ``"dynamic_sampling"`` (the baseline: k requests per fresh prompt at once, the group pushed if
    mixed, dropped if saturated). Each pushed group is ``m`` rows (``commit_min <= m <= k``), one TRL
    ``RolloutSample`` per completion: ``input_ids`` prompt + completion, ``completion_mask`` 1 on the completion,
    ``old_log_probs`` the sampled log-probs (0 on the prompt), ``advantage`` TRL's asynchronous formula
    ``(r - mean) / (std + 1e-8)`` over the group (population std), ``model_version`` the oldest policy version under
    which one of its completions was requested (so TRL's staleness drop stays conservative), a fresh ``group_id``.

    Parameters
    ----------
    dataset : sequence of dict
        Map-style rows (``datasets.Dataset`` or a list), each with a conversational ``"prompt"`` (a list of messages);
        its other columns are passed to the reward functions, one entry per completion.
    reward_funcs : list of callable
        TRL reward functions (sync or async), ``(prompts, completions, completion_ids, **columns) -> list[float |
        None]``; a completion's reward is their sum (TRL's asynchronous reward).
    processing_class : tokenizer or None
        Renders prompts (``apply_chat_template``) and decodes completions (``decode``); None: given later through
        :meth:`bind` (before :meth:`start`).
    allocation : AllocationConfig, optional
        ``collection="streaming"`` (default: SARA's defaults with streaming). Not supported here: ``carry_over``
        (continuous collection keeps every undecided prompt anyway) and the beyond-paper options
        (``stopping_rule="bayes_optimal"``, ``history_decay``, ``selection``).
    config : AsyncWorkerConfig, optional
        Server, sampling, success rule, windows.
    client : CompletionsClient, optional
        The server seam; default :class:`OpenAICompletionsClient` on ``config.vllm_server_url``.

    Attributes
    ----------
    rollout_buffer : queue.Queue
        ``RolloutSample`` rows for the trainer (capacity ``config.queue_maxsize``).
    metrics_queue : queue.Queue
        One dict per accounting window (:func:`~sara_trl.trainer.async_worker.accounting.window_metrics`).
    model_version : int
        The live policy version (:meth:`update_model_version`).

    Raises
    ------
    ValueError
        ``allocation.collection`` is not ``"streaming"``, an allocator without a streaming policy (``"uniform"``), an
        unsupported option (above), ``max_inflight_tasks < k``, an empty dataset, no reward function, an unknown
        ``success_reward_func``.
    """

    def __init__(self, *, dataset: Any, reward_funcs: list[Callable], processing_class: Any,
                 allocation: AllocationConfig | None = None, config: AsyncWorkerConfig | None = None,
                 client: CompletionsClient | None = None):
        allocation = allocation if allocation is not None else AllocationConfig(collection="streaming")
        config = config if config is not None else AsyncWorkerConfig()
        _check(allocation, config, dataset)
        self.allocation, self.dataset, self.tokenizer = allocation, dataset, processing_class
        self.reward_funcs = list(reward_funcs)
        self._own_client = client is None
        self.client = client
        self._configure(config)
        self.rollout_buffer: queue.Queue = queue.Queue(maxsize=config.queue_maxsize)
        self.metrics_queue: queue.Queue = queue.Queue(maxsize=METRICS_QUEUE_SIZE)
        self._model_version = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._heartbeat = time.time()
        self.loop: RolloutLoop | None = None
        self._pending_state: dict | None = None

    def _configure(self, config: AsyncWorkerConfig) -> None:
        self.config = config
        self.scorer = RewardScorer(self.reward_funcs, config.success_reward_func, config.success_threshold,
                                   self.allocation.allocator, self.allocation.ds_filter)
        if self._own_client:
            self.client = OpenAICompletionsClient(config.vllm_server_url, timeout_s=config.request_timeout,
                                                  max_connections=config.max_inflight_tasks)

    def bind(self, *, processing_class: Any = None, config: AsyncWorkerConfig | None = None) -> None:
        """Settle what is known only once the trainer is built (:class:`~sara_trl.SaraAsyncGRPOTrainer` calls it
        after TRL's ``__init__``): the tokenizer TRL resolved, and the worker config from TRL's resolved arguments
        (``max_inflight_tasks``, the LoRA adapter name). Before :meth:`start` only.

        Raises
        ------
        RuntimeError
            The worker was already started.
        ValueError
            The new config fails the worker's checks (``max_inflight_tasks < k``, an unknown ``success_reward_func``).
        """
        if self._thread is not None:
            raise RuntimeError("SaraAsyncRolloutWorker.bind() must come before start()")
        if processing_class is not None:
            self.tokenizer = processing_class
        if config is not None:
            _check(self.allocation, config, self.dataset)
            self._configure(config)

    @property
    def reward_func_names(self) -> list[str]:
        """The reward functions' names (their ``rewards/<name>`` sample metrics)."""
        return list(self.scorer.names)

    @property
    def model_version(self) -> int:
        return self._model_version

    # ------------------------------------------------------------------------------------------------ protocol
    def start(self) -> None:
        """Start the worker's thread (called once by the trainer, after the first weight sync).

        Raises
        ------
        RuntimeError
            The worker was already started.
        """
        if self._thread is not None:
            raise RuntimeError("SaraAsyncRolloutWorker.start() was already called")
        if self.tokenizer is None:
            raise RuntimeError("SaraAsyncRolloutWorker has no processing_class: pass one, or bind() it before start()")
        self._heartbeat = time.time()
        self.loop = RolloutLoop(
            allocation=self.allocation, config=self.config, dataset=self.dataset, tokenizer=self.tokenizer,
            scorer=self.scorer, client=self.client, rollout_buffer=self.rollout_buffer,
            metrics_queue=self.metrics_queue, model_version=lambda: self._model_version, stopping=self._stopping,
            beat=self._beat, tag=f"sara-{uuid.uuid4().hex[:8]}")
        if self._pending_state is not None:
            self.loop.load_state_dict(self._pending_state)
        self._thread = threading.Thread(target=self._main, name="sara-async-rollout", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """End the thread: every request in flight is cancelled (and accounted as aborted), a last accounting window
        is closed, the client is closed. Waits up to ``timeout_s`` seconds (a warning if the thread is still alive
        then: a reward function that does not return). A no-op before :meth:`start`."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            warnings.warn(f"the SARA rollout worker's thread did not end within {timeout_s:.0f} s", RuntimeWarning,
                          stacklevel=2)

    def update_model_version(self, model_version: int) -> None:
        """The policy version now live on the server (after a weight sync); requests sent from now on are tagged
        with it."""
        self._model_version = int(model_version)

    def check_health(self, stale_after_s: float) -> None:
        """Raise if the worker's thread failed, ended on its own, or has not turned its loop for ``stale_after_s``
        seconds.

        Raises
        ------
        RuntimeError
            Chained (``__cause__``) to the thread's exception when it failed.
        """
        if self._error is not None:
            raise RuntimeError(f"the SARA rollout worker's thread failed: {type(self._error).__name__}: "
                               f"{self._error}") from self._error
        if self._thread is None:
            return
        if not self._thread.is_alive() and not self._stopping.is_set():
            reason = self.loop.collector.stop_reason if self.loop is not None else ""
            raise RuntimeError(f"the SARA rollout worker's thread ended on its own (collector: {reason!r})")
        age = time.time() - self._heartbeat
        if self._thread.is_alive() and age > stale_after_s:
            raise RuntimeError(f"the SARA rollout worker's heartbeat is stale: {age:.0f} s > {stale_after_s:.0f} s")

    # ------------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self, timeout_s: float = 30.0) -> dict:
        """The worker's own state for a checkpoint (JSON-serializable; :meth:`RolloutLoop.state_dict`): the prompt
        stream's position (prompts undecided now are drawn again first on resume), the refill model, the sampling
        seeds' generator, the next ``group_id``. While the worker runs, the snapshot is taken on its own thread
        between two events; before :meth:`start`, a state given to :meth:`load_state_dict` is returned as is.

        Raises
        ------
        RuntimeError
            Never started and no state loaded (nothing to save), or the worker's thread did not answer within
            ``timeout_s`` seconds.
        """
        if self.loop is None:
            if self._pending_state is None:
                raise RuntimeError("the worker has no state before start() (and none was loaded)")
            return self._pending_state
        aloop = self.loop.event_loop
        if self._thread is not None and self._thread.is_alive() and aloop is not None and aloop.is_running():
            async def snapshot() -> dict:
                return self.loop.state_dict()

            try:
                return asyncio.run_coroutine_threadsafe(snapshot(), aloop).result(timeout=timeout_s)
            except RuntimeError:  # the loop closed in between: the thread has ended, read it directly below
                pass
            except concurrent.futures.TimeoutError as exc:
                raise RuntimeError(f"the SARA rollout worker's thread did not give its state within {timeout_s} s") \
                    from exc
        return self.loop.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`'s values: the next :meth:`start` continues that prompt stream, refill
        model, seed generator and ``group_id`` sequence.

        Raises
        ------
        RuntimeError
            The worker was already started.
        ValueError
            (at :meth:`start`) The state was saved for another dataset size, stream seed or k.
        """
        if self._thread is not None:
            raise RuntimeError("SaraAsyncRolloutWorker.load_state_dict() must come before start()")
        self._pending_state = state

    # ------------------------------------------------------------------------------------------------ thread
    def _beat(self) -> None:
        self._heartbeat = time.time()

    def _main(self) -> None:
        try:
            asyncio.run(self.loop.run())
        except BaseException as exc:  # surfaced by check_health
            self._error = exc


def check_allocation(allocation: AllocationConfig) -> None:
    """The allocation options the asynchronous worker runs (see :class:`SaraAsyncRolloutWorker`, Raises).

    Raises
    ------
    ValueError
        An allocator without a streaming policy, ``collection != "streaming"``, ``carry_over``, a beyond-paper option.
    """
    spec = spec_of(allocation.allocator)
    if spec is None or spec.streaming is None:
        raise ValueError(f"the asynchronous worker runs {streaming_allocators()}, not allocator="
                         f"{allocation.allocator!r} (TRL's own AsyncRolloutWorker is the keep-every-group baseline)")
    if allocation.collection != "streaming":
        raise ValueError("the asynchronous worker decides per completion: build its AllocationConfig with "
                         f"collection='streaming' (got {allocation.collection!r})")
    if allocation.carry_over:
        raise ValueError("carry_over does not apply to the asynchronous worker: its collection never ends a step, so "
                         "every undecided prompt continues anyway")
    if extensions_enabled(allocation):
        raise ValueError("the beyond-paper options (stopping_rule='bayes_optimal', history_decay, selection) are not "
                         "supported by the asynchronous worker yet")


def _check(allocation: AllocationConfig, config: AsyncWorkerConfig, dataset: Any) -> None:
    """The worker's argument checks (see :class:`SaraAsyncRolloutWorker`, Raises)."""
    check_allocation(allocation)
    if config.max_inflight_tasks < allocation.k:
        raise ValueError(f"max_inflight_tasks={config.max_inflight_tasks} must be >= k={allocation.k}, so that one "
                         "full group can be in flight")
    if len(dataset) < 1:
        raise ValueError("the dataset is empty")
