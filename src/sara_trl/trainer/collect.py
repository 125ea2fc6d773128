"""Collecting one training step's B groups: every schedule on the core's event loop
(:func:`~sara_trl.allocation.event_loop.drive_streaming_engine`) with one scorer
(:class:`~sara_trl.trainer.streaming.TrainerScorer`), on the engine the run's
:class:`~sara_trl.trainer.plan.CollectionPlan` chose once at set-up.

``engine="generate"``: the allocator's rounds (:meth:`~sara_trl.allocation.Allocator.rounds`) on the batch engine,
one TRL generation call per round, lock-step across processes (:mod:`sara_trl.trainer.round_engine`).
``engine="requests"``: streaming, or rounds with ``overlap_round_scoring``, on the colocated vLLM engine request by
request (:mod:`sara_trl.trainer.streaming`); with streaming on several processes each collects its share and one
exchange merges them. ``tools`` and ``environment_factory`` wrap either engine in a
:class:`~sara_trl.trainer.trajectory.TrajectoryEngine`. The result is exactly B groups (committed ones first, then
fill groups) and a :class:`~sara_trl.trainer.rollout.RolloutCache` of every rollout, ids as in the result; with
``carry_over`` the rollouts carried from the previous step take the first ids.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers.utils import logging
from trl.extras.profiling import profiling_context

from sara_trl.allocation import StepResult
from sara_trl.trainer.metrics import collection_warning
from sara_trl.trainer.progress import ALLOCATOR_LABELS, RoundProgress
from sara_trl.trainer.rollout import RolloutCache, trainer_scores
from sara_trl.trainer.round_engine import GenerateEngine, RoundEngine
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
        process); None on the batch engine (the round metrics stand for it).
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
    with RoundProgress(trainer.state.global_step + 1, show and run.plan.engine == "generate",
                       ALLOCATOR_LABELS.get(args.allocator, args.allocator)) as progress, port.vllm_awake(trainer):
        result, cache, stream_run = collect_on_engine(trainer, num_groups, cache, progress)
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
    trainer: SaraTrainerBase, num_groups: int, cache: RolloutCache, progress: RoundProgress | None = None
) -> tuple[StepResult, RolloutCache, StreamRun | None]:
    """This process's collector on the plan's engine, through the core's event loop (:func:`_drive_on_engine`).

    Rounds (paper Alg. 1; :meth:`~sara_trl.allocation.Allocator.rounds`) run on the batch engine (lock-step: every
    process makes the same decisions and ends with the same result and cache) or, with ``overlap_round_scoring``, as
    single requests on the colocated vLLM engine, scored while the round's slowest completions still generate.
    Streaming collects this process's share of the batch on its colocated vLLM engine; with several processes the
    one exchange then gives every process the merged batch and rollouts.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer.
    num_groups : int
        B, the groups of the whole batch.
    cache : RolloutCache
        Receives this process's rollouts; with ``carry_over`` it starts with the ones this process carried in.
    progress : RoundProgress, optional
        Counts the rounds of the batch engine.

    Returns
    -------
    result : StepResult
        Exactly ``num_groups`` groups (with streaming on several processes, this process's share first on process 0,
        in process order; with ``carry_over``, every process's carried ids, :meth:`StepResult.carried_by`).
    cache : RolloutCache
        Every process's rollouts (carried in and recorded), ids as in ``result``.
    run : StreamRun or None
        On the request engine: engine steps, reward passes and the seconds spent scoring and waiting for scores (of
        the slowest process: the one with the most engine steps); None on the batch engine (its rounds are the
        metrics).
    """
    run = trainer.sara
    plan = run.plan
    if plan.engine == "requests":
        port.sync_weights_once(trainer)
    if plan.schedule == "rounds":
        collector = run.allocator.rounds(run.stream, num_groups, threshold=run.success_rule.threshold)
    else:
        groups = shard_groups(num_groups, plan.processes)
        max_in_flight = trainer.args.streaming_max_in_flight or default_max_in_flight(
            groups, trainer.num_generations, getattr(trainer.vllm_generation, "max_num_seqs", None))
        collector = run.allocator.streaming(run.stream, groups, max_in_flight)
    result, error, stream_run = None, None, StreamRun()
    try:
        stream_run = _drive_on_engine(trainer, collector, cache, progress)
        result = collector.finish()
    except Exception as exc:  # sharded: fail every process at the exchange below
        if not plan.sharded:
            raise
        error = exc
    if not plan.sharded:
        return result, cache, stream_run if plan.engine == "requests" else None
    local = None if result is None else result.stats  # None only on a failed process, which raises below
    # the ids this process's result indexes: the rollouts it carried in, then those it recorded (= its cache)
    result, payloads = gather_streaming_step(trainer.accelerator, result, cache.num_rollouts, (cache, stream_run),
                                             error)
    run.allocator.account_merged(local, result.stats)  # its collector counted only this process's share
    return result, RolloutCache.concat([c for c, _ in payloads]), slowest_stream_run([r for _, r in payloads])


def _drive_on_engine(trainer: SaraTrainerBase, collector: Any, cache: RolloutCache,
                     progress: RoundProgress | None) -> StreamRun:
    """Drive ``collector`` (rounds or streaming) on the plan's engine to the end of the step, scoring through the
    trainer's reward functions into ``cache``: the batch engine wrapped in a lock-step :class:`RoundEngine` (a reward
    pass per round), or this process's colocated vLLM engine (``streaming_reward_lag``); ``tools`` and
    ``environment_factory`` put a :class:`TrajectoryEngine` around either."""
    tokens: dict[int, list[int]] = {}

    def prompt_tokens(prompt_id: int) -> list[int]:
        if prompt_id not in tokens:
            ids, _, _ = port.tokenize_prompts(trainer, [trainer._sara_row(prompt_id)["prompt"]])
            tokens[prompt_id] = list(ids[0])
        return tokens[prompt_id]

    plan = trainer.sara.plan
    batch = plan.engine == "generate"
    engine = GenerateEngine(trainer) if batch else trainer._sara_request_engine(f"sara-{trainer.state.global_step}-")
    chains = None
    if streams_trajectories(trainer):  # tools / environment_factory: each rollout a chain of requests
        engine = chains = TrajectoryEngine(trainer, engine)
    rounds = None
    if batch:
        engine = rounds = RoundEngine(trainer, engine)
    on_pass = None if rounds is None or progress is None else (
        lambda count, labels: progress(rounds.rounds, count, labels))
    round_of = collector.round_of if plan.schedule == "rounds" else None
    scorer = TrainerScorer(trainer, cache, prompt_tokens, round_of=round_of, chains=None if batch else chains,
                           lockstep=rounds, on_pass=on_pass)
    profile = nullcontext() if batch else profiling_context(
        trainer, "vLLM.rounds" if plan.schedule == "rounds" else "vLLM.stream")
    try:
        with profile:
            return drive_streaming_engine(collector, engine, prompt_tokens, scorer,
                                          reward_lag=0 if batch else trainer.args.streaming_reward_lag)
    finally:
        if rounds is not None:
            rounds.close()  # the trajectory engine inside it too
        elif chains is not None:
            chains.close()
        if chains is not None:  # every environment back in the pool; what never reached the cache is surplus
            cache.env_resets += chains.env_resets if rounds is None else rounds.env_resets
            for unit, value in chains.uncached.items():
                cache.uncached[unit] = cache.uncached.get(unit, 0) + value


def request_engine(trainer: SaraTrainerBase, tag: str) -> VLLMStreamingEngine:
    """The request-level engine of a step on this process: TRL's colocated vLLM engine with TRL's sampling
    parameters (:class:`~sara_trl.trainer.streaming.VLLMStreamingEngine`), request ids prefixed with ``tag``."""
    gen = trainer.vllm_generation
    return VLLMStreamingEngine(gen.llm, port.colocate_sampling_params(gen),
                               keep_logprobs=trainer._sara_returns_logprobs, tag=tag)
