"""Streaming collection in the trainer: drive a continuous-batching engine request by request
(``collection="streaming"``).

:class:`~sara_trl.allocation.StreamingCollector` decides each prompt as soon as one of its completions is scored;
this module holds the engine the trainer drives and the scorer through the trainer's reward functions:

- :class:`VLLMStreamingEngine` wraps the ``LLMEngine`` of TRL's colocated ``vllm.LLM``: one request per rollout
  (``n=1``, the prompt's token ids as TRL passes them), the sampling parameters TRL's colocate path builds
  (the port's ``colocate_sampling_params``, sampled-token log-probs included), ``add_request`` / ``step`` /
  ``abort_request``. Outputs are requested as deltas, so the tokens of an aborted request are known exactly.
- Any object with the same three methods (:class:`StreamingEngine`) can stand in for it (the tests script one).
- :class:`TrainerScorer` is the one scorer of every schedule: streaming and overlapped rounds here, and the rounds
  of the batch engine (:mod:`sara_trl.trainer.round_engine`) in lock-step over the processes.

The loop itself, and how reward passes overlap generation (``streaming_reward_lag``), is
:mod:`sara_trl.allocation.event_loop` (torch-free, shared with the simulator and the benchmarks); this module
re-exports its names.

Several processes (the trainer's layout): each process runs its own engine and collector on its own shard of the
prompts (:class:`~sara_trl.allocation.ShardStream`) for B / world groups, with no collective during the step;
:func:`gather_streaming_step` then exchanges the results once (one ``gather_object``) and every process holds the
same merged batch of B groups (:func:`~sara_trl.allocation.merge_step_results`) and rollout cache. With
``carry_over`` each process carries its own undecided prompts (with their rollouts) into its own next step: its
allocator keeps their counts, and its slice of the merged carry ids (``StepResult.carried_by``) picks their
completions out of the merged cache. The reward pass runs locally on each process (the port's ``local_reward_pass``
keeps TRL's ``_calculate_rewards`` from gathering).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import gather_object

from sara_trl.allocation import StepResult, merge_step_results
from sara_trl.allocation.event_loop import Finished, Scorer, StreamingEngine, StreamRun, drive_streaming_engine
from sara_trl.trainer.distributed import match_reward_gather, raise_if_any_failed
from sara_trl.trainer.environment import uses_environments
from sara_trl.trainer.rollout import RolloutCache, reward_pass, score_rewards
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = [
    "Finished",
    "Scorer",
    "StreamRun",
    "StreamingEngine",
    "VLLMStreamingEngine",
    "default_max_in_flight",
    "gather_streaming_step",
    "drive_streaming_engine",
    "shard_groups",
    "slowest_stream_run",
]


# ------------------------------------------------------------------------------------------------------------ vLLM
class VLLMStreamingEngine:
    """:class:`StreamingEngine` over the ``LLMEngine`` of a ``vllm.LLM`` (vLLM 0.31's V1 engine).

    Parameters
    ----------
    llm : vllm.LLM
        TRL's colocated engine (``trainer.vllm_generation.llm``), with no request in flight.
    sampling_params : vllm.SamplingParams
        Per request (``n`` must be 1), e.g. the port's ``colocate_sampling_params``; copied, and set to return deltas.
    keep_logprobs : bool
        Return the sampled tokens' log-probs (GRPO's importance-sampling correction); needs
        ``sampling_params.logprobs`` set.
    tag : str
        Prefix of the engine's request ids (``f"{tag}{rid}"``), unique per step.
    request_seed : callable, optional
        ``request_seed(prompt_ids) -> int``: a sampling seed for each request (vLLM's per-request ``seed``), called
        once per :meth:`add`. The benchmarks use it for common random numbers (the j-th completion of a prompt is the
        same draw in every configuration); None (the trainer) samples from the engine's own generator.

    Attributes
    ----------
    running : dict of int to list of int
        Request id -> completion tokens received so far, for every request in the engine.

    Raises
    ------
    ValueError
        ``sampling_params.n != 1``, or ``keep_logprobs`` without ``sampling_params.logprobs``.
    """

    def __init__(self, llm: Any, sampling_params: Any, keep_logprobs: bool, tag: str,
                 request_seed: Callable[[list[int]], int] | None = None):
        from vllm.sampling_params import RequestOutputKind

        if sampling_params.n != 1:
            raise ValueError(f"one completion per request: sampling_params.n must be 1, got {sampling_params.n}")
        if keep_logprobs and sampling_params.logprobs is None:
            raise ValueError("keep_logprobs needs sampling_params.logprobs (0: the sampled token's log-prob)")
        self._llm = llm
        self._engine = llm.llm_engine
        self._params = sampling_params.clone()
        self._params.output_kind = RequestOutputKind.DELTA
        self._keep_logprobs = keep_logprobs
        self._tag = tag
        self._request_seed = request_seed
        self.running: dict[int, list[int]] = {}
        self._logprobs: dict[int, list] = {}
        # vLLM's own conversion of a prompt into an engine input (what LLM.generate does); older releases take the
        # raw {"prompt_token_ids": ...} prompt in add_request.
        self._render = getattr(llm, "_preprocess_cmpl_one", None)

    @property
    def pending(self) -> int:
        """Requests added and neither finished nor aborted."""
        return len(self.running)

    def add(self, rid: int, prompt_ids: list[int], max_tokens: int | None = None) -> None:
        """Queue one request for ``prompt_ids``; ``max_tokens`` (tokens, >= 1) caps this request's completion below
        ``max_completion_length`` (a post-tool turn gets what is left of the trajectory's budget).

        Raises
        ------
        ValueError
            ``rid`` is already in the engine, or ``max_tokens < 1``.
        """
        if rid in self.running:
            raise ValueError(f"request {rid} is already in the engine")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        prompt = {"prompt_token_ids": list(prompt_ids)}
        if self._render is not None:
            prompt = self._render(prompt)
        params = self._params
        if self._request_seed is not None or max_tokens is not None:
            params = params.clone()
        if self._request_seed is not None:
            params.seed = int(self._request_seed(prompt_ids))
        if max_tokens is not None:
            params.max_tokens = min(int(max_tokens), params.max_tokens or int(max_tokens))
        self._engine.add_request(f"{self._tag}{rid}", prompt, params)
        self.running[rid] = []
        self._logprobs[rid] = []

    def step(self) -> list[Finished]:
        """One ``LLMEngine.step()``; the requests that finished in it, in the engine's order."""
        finished = []
        for output in self._engine.step():
            rid = int(output.request_id.removeprefix(self._tag))
            if rid not in self.running:  # pragma: no cover - an output for a request aborted earlier
                continue
            completion = output.outputs[0]
            self.running[rid].extend(completion.token_ids)
            if self._keep_logprobs and completion.logprobs is not None:
                self._logprobs[rid].extend(completion.logprobs)
            if output.finished:
                ids = self.running.pop(rid)
                position_logprobs = self._logprobs.pop(rid)
                logprobs = port.sampled_logprobs(position_logprobs) if self._keep_logprobs else None
                finished.append(Finished(rid, ids, logprobs))
        return finished

    def abort(self, rids: list[int]) -> list[int]:
        """Abort requests; returns the completion tokens each had generated (0 for an id not in the engine)."""
        live = [rid for rid in rids if rid in self.running]
        if live:
            self._engine.abort_request([f"{self._tag}{rid}" for rid in live])
        tokens = {rid: len(self.running.pop(rid)) for rid in live}
        for rid in live:
            self._logprobs.pop(rid, None)
        return [tokens.get(rid, 0) for rid in rids]


# ------------------------------------------------------------------------------------------------ several processes
def gather_streaming_step(accelerator: Any, result: StepResult | None, num_rollouts: int, payload: Any,
                          error: BaseException | None) -> tuple[StepResult, list]:
    """The one collective of a streaming step on several processes: exchange every process's result.

    Parameters
    ----------
    accelerator : accelerate.Accelerator
        ``num_processes``, ``process_index``.
    result : StepResult or None
        This process's result (None if it failed).
    num_rollouts : int
        Rollouts its ids index: those it carried in (``carry_over``), then those it recorded.
    payload : object
        Anything picklable to hand to every process with the result (the trainer's rollout cache).
    error : BaseException or None
        The exception this process caught during its collection.

    Returns
    -------
    result : StepResult
        The merged batch (:func:`~sara_trl.allocation.merge_step_results`).
    payloads : list
        Every process's ``payload``, in process order.

    Raises
    ------
    BaseException
        ``error`` itself on the failing process; a ``RuntimeError`` naming it on the others (every process raises at
        the same point instead of one waiting forever for the others).
    """
    report = None if error is None else f"{type(error).__name__}: {error}"
    items = gather_object([(accelerator.process_index, report, result, num_rollouts, payload)])
    items.sort(key=lambda item: item[0])
    if error is not None:
        raise error
    failed = [(rank, report) for rank, report, *_ in items if report is not None]
    if failed:
        rank, report = failed[0]
        raise RuntimeError(f"SARA streaming collection failed on process {rank}: {report}")
    merged = merge_step_results([item[2] for item in items], [item[3] for item in items])
    return merged, [item[4] for item in items]


def slowest_stream_run(runs: list[StreamRun]) -> StreamRun:
    """The run of the process that took the most engine steps (the step waits for it), from every process's
    :class:`StreamRun`; ties go to the first process.

    Raises
    ------
    ValueError
        ``runs`` is empty.
    """
    if not runs:
        raise ValueError("slowest_stream_run needs one StreamRun per process, got none")
    return max(runs, key=lambda run: run.engine_steps)


def shard_groups(num_groups: int, world: int) -> int:
    """Groups each process collects: ``num_groups / world``.

    Raises
    ------
    ValueError
        ``num_groups`` is not a multiple of ``world`` (every process must train the same number of rows, and a
        process's rows must be its own groups).
    """
    if num_groups % world:
        raise ValueError(
            f"collection='streaming' on {world} processes collects B / {world} groups per process, so B = "
            f"generation_batch_size / num_generations = {num_groups} must be a multiple of {world}; change "
            "per_device_train_batch_size, steps_per_generation or num_generations"
        )
    return num_groups // world


def default_max_in_flight(groups: int, k: int, max_num_seqs: int | None) -> int:
    """Requests a process keeps in flight when ``streaming_max_in_flight`` is unset: its share of the batch's
    rollouts (``groups * k``), capped by the engine's ``max_num_seqs`` when set (more would only queue), and at
    least k (one full group)."""
    cap = groups * k if not max_num_seqs else min(groups * k, int(max_num_seqs))
    return max(cap, k)


# ------------------------------------------------------------------------------------------------------------ trainer
class TrainerScorer:
    """:class:`Scorer` through the trainer's own decoding and reward functions, filling a rollout cache: the one scorer
    of every schedule (rounds on the batch engine, overlapped rounds and streaming on the request engine).

    Each reward pass's completions (a round, or a window of engine steps, see :func:`drive_streaming_engine`; on the
    scoring thread when the passes overlap generation) are scored in ONE call of TRL's ``_calculate_rewards``
    (:func:`~sara_trl.trainer.rollout.reward_pass`); labels come from the reward rows (threshold on the weighted sum,
    or the function named by ``success_reward_func``, :func:`~sara_trl.trainer.rollout.score_rewards`). A completion
    with a record (:class:`~sara_trl.trainer.trajectory.ChainRecord`: a round's, or a multi-turn chain's) reaches the
    reward functions as its record says (its prompt, its completion or messages, its environment instance, a
    ``rollout_func``'s extra fields merged into its row); one without is decoded as the base's ``_generate`` decodes
    it (``_sara_decode``). The recorded completions go to ``cache`` (:meth:`RolloutCache.append`) with their ids,
    log-probs, reward rows, labels, ``log_extra`` columns and trajectories.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer (training mode).
    cache : RolloutCache
        Receives the recorded rollouts.
    prompt_tokens : callable
        ``prompt_tokens(prompt_id) -> list of int`` (the ids the engine received; some decoders need them).
    round_of : callable, optional
        ``round_of(request id) -> int``, the round a request belongs to (:meth:`RoundCollector.round_of`); None: 0
        (streaming has no rounds).
    chains : TrajectoryEngine, optional
        Streaming multi-turn rollouts: the engine whose finished chains the scorer hands back after each pass (the
        recorded ones released, the others forgotten: surplus).
    lockstep : RoundEngine, optional
        Rounds on the batch engine: each process scores its own share of the round (:attr:`RoundEngine.local`,
        padding copies included) and TRL's reward gather gives every process the round's rows, in request order; a
        reward function's failure on one process is raised on every process at one exchange
        (:func:`~sara_trl.trainer.distributed.raise_if_any_failed`). None: this process scores what it finished
        (the port's ``local_reward_pass``).
    on_pass : callable, optional
        ``on_pass(rollouts, labels)`` after each reward pass (the round's progress line).
    """

    def __init__(self, trainer: SaraTrainerBase, cache: RolloutCache, prompt_tokens: Callable[[int], list[int]],
                 round_of: Callable[[int], int] | None = None, chains: Any = None, lockstep: Any = None,
                 on_pass: Callable[[int, Any], None] | None = None):
        self._trainer, self._cache, self._prompt_tokens = trainer, cache, prompt_tokens
        self._round_of, self._chains, self._lockstep, self._on_pass = round_of, chains, lockstep, on_pass
        self._pending: deque = deque()  # scored passes awaiting keep(), oldest first (see drive_streaming_engine)
        self.scored = 0

    def _inputs(self, prompt_ids: list[int], batch: list[Finished]) -> tuple[list, list, list, list]:
        """The reward functions' rows, prompts, completions and completion ids of ``batch``; with environments,
        ``trainer.environments`` set to the completions' instances."""
        trainer = self._trainer
        rows = [trainer._sara_row(int(pid)) for pid in prompt_ids]
        completion_ids = [list(done.completion_ids) for done in batch]
        if all(done.record is not None for done in batch):
            rows = [{**row, **done.record.trajectory.fields} if done.record.trajectory is not None else row
                    for row, done in zip(rows, batch)]
            prompts = [done.record.prompt for done in batch]
            completions = [done.record.completion for done in batch]
            if uses_environments(trainer):
                trainer.environments = [done.record.environment for done in batch]
        else:
            prompts = [row["prompt"] for row in rows]
            completions = trainer._sara_decode(prompts, [self._prompt_tokens(pid) for pid in prompt_ids],
                                               completion_ids)
        return rows, prompts, completions, completion_ids

    def _round_pass(self, count: int) -> tuple[torch.Tensor, dict[str, list]]:
        """Lock-step: this process's share of the round through TRL's gathering reward pass; ``(per_rank * W, F)``
        reward rows in request order (padding last) and every process's ``log_extra`` columns, cut to the round's
        ``count`` requests."""
        trainer, engine = self._trainer, self._lockstep
        accelerator = trainer.accelerator
        world = accelerator.num_processes
        error = None
        try:
            rewards, extra = reward_pass(trainer, *self._inputs([pid for pid, _ in engine.local],
                                                                [done for _, done in engine.local]))
        except Exception as exc:  # a failure on one process must fail the round everywhere, not hang the others
            if world == 1:
                raise
            error = exc
            match_reward_gather(accelerator, engine.per_rank, len(trainer.reward_funcs))
        raise_if_any_failed(accelerator, error, f"SARA round {engine.rounds} (rewards)")
        if world == 1:
            return rewards, extra
        columns = {}
        for name in sorted(set(gather_object(list(extra)))):
            values = extra.get(name, [])
            columns[name] = gather_object(values if len(values) == engine.per_rank else [None] * engine.per_rank)
        return rewards, {name: values[:count] for name, values in columns.items()}

    def score(self, prompt_ids: list[int], batch: list[Finished]):
        """One reward pass: ``(len,)`` success labels, or ``(labels, scores)`` with ``ds_filter="score"``."""
        trainer = self._trainer
        if self._lockstep is not None:
            rewards, extra = self._round_pass(len(batch))
        else:
            rewards, extra = reward_pass(trainer, *self._inputs(prompt_ids, batch), local=True)
        # the first step checks the scores' scale (SuccessRule)
        rewards, score, labels = score_rewards(trainer, rewards, len(batch))
        columns = {name: values for name, values in extra.items() if len(values) == len(batch)}
        self._pending.append((batch, rewards, labels, columns))
        self.scored += len(batch)
        if self._on_pass is not None:
            self._on_pass(len(batch), labels)
        if trainer.args.ds_filter == "score":  # DS decides a full group on its scores' spread
            return labels, score
        return labels

    def keep(self, positions: list[int]) -> None:
        batch, rewards, labels, columns = self._pending.popleft()
        if self._chains is not None:
            kept = {batch[i].rid for i in positions}
            for done in batch:
                (self._chains.release if done.rid in kept else self._chains.forget)(done.rid)
        if not positions:
            return
        self._cache.append(
            [list(batch[i].completion_ids) for i in positions], [batch[i].logprobs for i in positions],
            rewards[torch.as_tensor(positions)], labels[positions],
            [0 if self._round_of is None else self._round_of(batch[i].rid) for i in positions],
            {name: [values[i] for i in positions] for name, values in columns.items()},
            [None if batch[i].record is None else batch[i].record.trajectory for i in positions])
