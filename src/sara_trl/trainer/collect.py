"""Collecting one training step's B groups, on the road the run's :class:`~sara_trl.trainer.plan.CollectionPlan`
chose once at set-up.

``engine="generate"``: :meth:`sara_trl.allocation.Allocator.collect` runs rounds over SARA's own prompt stream, each
round ONE call of the step's ``rollout_fn`` (:mod:`sara_trl.trainer.rollout`). ``engine="requests"``
(:func:`collect_on_engine`): the allocator's collector (streaming, or rounds with ``overlap_round_scoring``) on the
colocated vLLM engine through the core's event loop, request by request (:mod:`sara_trl.trainer.streaming`); with
streaming on several processes each collects its share and one exchange merges them. Either way every reward pass
goes through :func:`~sara_trl.trainer.rollout.reward_pass` and :func:`~sara_trl.trainer.rollout.score_rewards` into
:meth:`RolloutCache.append <sara_trl.trainer.rollout.RolloutCache.append>`, and the result is exactly B groups
(committed ones first, then fill groups) and a :class:`~sara_trl.trainer.rollout.RolloutCache` of every rollout, ids
as in the result. With ``carry_over`` the rollouts carried from the previous step take the first ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers.utils import logging
from trl.extras.profiling import profiling_context

from sara_trl.allocation import StepResult
from sara_trl.trainer.metrics import collection_warning
from sara_trl.trainer.progress import ALLOCATOR_LABELS, RoundProgress
from sara_trl.trainer.rollout import RolloutCache, make_rollout_fn, trainer_scores
from sara_trl.trainer.streaming import (
    StreamRun,
    TrainerScorer,
    VLLMStreamingEngine,
    default_max_in_flight,
    drive_streaming_engine,
    gather_streaming_step,
    shard_groups,
    slowest_stream_run,
)
from sara_trl.trainer.trajectory import TrajectoryEngine, streams_trajectories
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["CollectedStep", "collect_on_engine", "collect_step"]

logger = logging.get_logger(__name__)


@dataclass
class CollectedStep:
    """One collected step.

    Attributes
    ----------
    result : StepResult
        Exactly B groups and the step's accounting.
    cache : RolloutCache
        Every rollout of the step, ids as in ``result``.
    new_labels : numpy.ndarray
        ``(rollouts generated this step,)`` success labels, NaN = unscorable (carried rollouts left out; on several
        processes, every process's).
    seconds : float
        Wall-clock of the collection.
    stream_run : StreamRun or None
        On the request engine (the plan's ``engine="requests"``): engine steps and reward seconds (of the slowest
        process); None with rounds through ``rollout_fn``.
    """

    result: StepResult
    cache: RolloutCache
    new_labels: np.ndarray
    seconds: float
    stream_run: StreamRun | None


def collect_step(trainer: SaraTrainerBase) -> CollectedStep:
    """Collect one training step's B groups (rounds or streaming), and hand the undecided ones to the next step.

    Sets ``trainer.sara.last_step`` and, with ``carry_over``, ``trainer.sara.carry`` (the rollouts this process
    carries: with streaming on several processes each process its own, :meth:`StepResult.carried_by`); checks on
    the first step with scores that they are success labels; logs a warning for a step that ended short of B groups
    or scored nothing.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer, in training mode.

    Returns
    -------
    CollectedStep
    """
    args, run = trainer.args, trainer.sara
    num_groups = args.num_groups
    cache = run.carry if run.carry is not None else RolloutCache()
    run.carry = None
    if cache.num_rollouts != run.allocator.carried_rollouts:  # pragma: no cover - kept in step by design
        raise RuntimeError(f"SARA carry-over out of sync: {cache.num_rollouts} cached rollouts for "
                           f"{run.allocator.carried_rollouts} carried by the allocator")
    show = trainer.accelerator.is_main_process and not args.disable_tqdm
    start = time.perf_counter()
    stream_run = None
    if run.plan.engine == "requests":
        with port.vllm_awake(trainer):
            result, cache, stream_run = collect_on_engine(trainer, num_groups, cache)
    else:
        label = ALLOCATOR_LABELS.get(args.allocator, args.allocator)
        with RoundProgress(trainer.state.global_step + 1, show, label) as progress, port.vllm_awake(trainer):
            result = run.allocator.collect(make_rollout_fn(trainer, cache, progress), run.stream, num_groups)
    seconds = time.perf_counter() - start
    run.last_step = result
    carried = result.carried_by(trainer.accelerator.process_index)
    if len(carried):
        run.carry = cache.carry(carried)
    generated = cache.generated_ids()
    new_labels = cache.success_labels()[generated]
    if len(new_labels):  # the first step with scores: are they success labels? (same on every process)
        run.success_rule.end_step(trainer_scores(trainer, cache.reward_matrix()[generated]))
    unscorable_by = (run.success_rule.source if args.success_reward_func is not None
                     else f"every reward function ({trainer.reward_func_names})")
    message = collection_warning(trainer.state.global_step + 1, args.allocator, result.stats, new_labels, num_groups,
                                 unscorable_by, tau_low_hint=args.allocator == "sara")
    if message and trainer.accelerator.is_main_process:
        logger.warning(message)
    return CollectedStep(result, cache, new_labels, seconds, stream_run)


def collect_on_engine(
    trainer: SaraTrainerBase, num_groups: int, cache: RolloutCache
) -> tuple[StepResult, RolloutCache, StreamRun]:
    """The plan's request engine (``engine="requests"``): this process's collector on its colocated vLLM engine,
    request by request, through the core's event loop (:func:`_drive_on_engine`). Streaming collects this process's
    share of the batch, then, with several processes, the one exchange gives every process the merged batch and
    rollouts; rounds (``overlap_round_scoring``, one process) run the allocator's rounds
    (:meth:`~sara_trl.allocation.Allocator.rounds`), each round's rollouts single requests scored in reward passes
    that overlap the round's slowest completions, the strategy deciding once the whole round is in.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer (``use_vllm=True, vllm_mode="colocate"``).
    num_groups : int
        B, the groups of the whole batch.
    cache : RolloutCache
        Receives this process's rollouts; with ``carry_over`` it starts with the ones this process carried in.

    Returns
    -------
    result : StepResult
        Exactly ``num_groups`` groups (with streaming, this process's share first on process 0, in process order;
        with ``carry_over`` on several processes, every process's carried ids, :meth:`StepResult.carried_by`).
    cache : RolloutCache
        Every process's rollouts (carried in and recorded), ids as in ``result``.
    run : StreamRun
        Engine steps, reward passes and the seconds spent scoring and waiting for scores (of the slowest process:
        the one with the most engine steps).
    """
    run = trainer.sara
    world = trainer.accelerator.num_processes
    if run.plan.schedule == "rounds":
        port.sync_weights_once(trainer)
        collector = run.allocator.rounds(run.stream, num_groups, threshold=run.success_rule.threshold)
        round_of, profile = collector.round_of, "vLLM.rounds"
    else:
        groups = shard_groups(num_groups, world)
        port.sync_weights_once(trainer)
        max_in_flight = trainer.args.streaming_max_in_flight or default_max_in_flight(
            groups, trainer.num_generations, getattr(trainer.vllm_generation, "max_num_seqs", None))
        collector = run.allocator.streaming(run.stream, groups, max_in_flight)
        round_of, profile = None, "vLLM.stream"
    result, error, stream_run = None, None, StreamRun()
    try:
        stream_run = _drive_on_engine(trainer, collector, cache, profile, round_of)
        result = collector.finish()
    except Exception as exc:  # with several processes, fail every process at the exchange below
        if world == 1:
            raise
        error = exc
    if world == 1:
        return result, cache, stream_run
    local = None if result is None else result.stats  # None only on a failed process, which raises below
    # the ids this process's result indexes: the rollouts it carried in, then those it recorded (= its cache)
    result, payloads = gather_streaming_step(trainer.accelerator, result, cache.num_rollouts, (cache, stream_run),
                                             error)
    run.allocator.account_merged(local, result.stats)  # its collector counted only this process's share
    return result, RolloutCache.concat([c for c, _ in payloads]), slowest_stream_run([r for _, r in payloads])


def _drive_on_engine(trainer: SaraTrainerBase, collector: Any, cache: RolloutCache, profile: str,
                     round_of=None) -> StreamRun:
    """Drive ``collector`` (streaming or rounds) on this process's colocated vLLM engine to the end of the step,
    scoring through the trainer's reward functions into ``cache``
    (:func:`~sara_trl.allocation.event_loop.drive_streaming_engine`, ``streaming_reward_lag``)."""
    tokens: dict[int, list[int]] = {}

    def prompt_tokens(prompt_id: int) -> list[int]:
        if prompt_id not in tokens:
            ids, _, _ = port.tokenize_prompts(trainer, [trainer._sara_row(prompt_id)["prompt"]])
            tokens[prompt_id] = list(ids[0])
        return tokens[prompt_id]

    engine = trainer._sara_request_engine(f"sara-{trainer.state.global_step}-")
    chains = None
    if streams_trajectories(trainer):  # tools / environment_factory: each rollout a chain of requests
        engine = chains = TrajectoryEngine(trainer, engine)
    scorer = TrainerScorer(trainer, cache, prompt_tokens, round_of=round_of, chains=chains)
    try:
        with profiling_context(trainer, profile):
            return drive_streaming_engine(collector, engine, prompt_tokens, scorer,
                                          reward_lag=trainer.args.streaming_reward_lag)
    finally:
        if chains is not None:  # every environment back in the pool; what never reached the cache is surplus
            chains.close()
            cache.env_resets += chains.env_resets
            for unit, value in chains.uncached.items():
                cache.uncached[unit] = cache.uncached.get(unit, 0) + value


def request_engine(trainer: SaraTrainerBase, tag: str) -> VLLMStreamingEngine:
    """The request-level engine of a step on this process: TRL's colocated vLLM engine with TRL's sampling
    parameters (:class:`~sara_trl.trainer.streaming.VLLMStreamingEngine`), request ids prefixed with ``tag``."""
    gen = trainer.vllm_generation
    return VLLMStreamingEngine(gen.llm, port.colocate_sampling_params(gen),
                               keep_logprobs=trainer._sara_returns_logprobs, tag=tag)
