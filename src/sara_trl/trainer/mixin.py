"""`SaraTrainerMixin`: SARA rollout collection inside TRL's GRPO/RLOO trainers, by *collect, then replay*.

How one generation batch is built:

1. **Collect.** :meth:`sara_trl.allocation.Allocator.collect` runs rounds over SARA's own prompt stream. Each round is
   ONE call of the step's ``rollout_fn`` (:mod:`sara_trl.trainer.rollout`): TRL's own ``_tokenize_prompts`` and
   ``_generate_single_turn`` with every prompt's ids repeated ``count`` times (``num_generations=1``), then ONE pass of
   the reward functions (TRL's ``_calculate_rewards``). Success labels come from the rewards (threshold on the
   weighted sum, or one named function). The result is exactly B groups: committed ones first, then fill groups.
2. **Lay out.** Each group becomes k contiguous rows (TRL defines groups by contiguity, ``view(-1, k)``): its
   rollouts, then padding rows up to k (short groups when ``commit_min < k``; all k rows for a fill group). Padding
   rows carry the group's prompt, a completion of :data:`PADDING_COMPLETION_TOKENS` EOS tokens and an all-NaN reward
   row.
3. **Replay.** The *unchanged* ``super()._generate_and_score_completions(rows)`` runs on those B*k rows with two
   hooks answering from the cache: ``_generate_single_turn`` returns the cached completion ids (and vLLM sampling
   log-probs, so importance sampling sees the real sampling distribution), ``_calculate_rewards`` returns the cached
   reward rows. Reward functions are therefore called exactly once per generated rollout. Everything else (padding,
   old/ref log-probs, IS ratios, advantages, metrics, completion logs, output keys) is TRL's own code.
4. **Mask.** Padding rows get ``completion_mask = 0`` (and RLOO's ``old_logps = 0``); ``num_items_in_batch`` is
   recomputed over the real tokens (a collective, done on every process). Their NaN rewards already kept them out
   of the group mean/std (GRPO) and the leave-one-out baseline (RLOO), and gave them a zero advantage.

Loss exactness with padding rows (rows = B*k per generation batch, real = non-padding rows):

- ``dapo`` (TRL's default), ``cispo``, ``vespo``: exact (normalized by ``num_items_in_batch``, recomputed).
- ``bnpo``: exact (token mean over the micro-batch mask).
- ``dr_grpo``: unchanged constant normalizer ``rows x max_completion_length``; padding rows add zero, which is
  Dr. GRPO's own definition with a fixed batch size.
- ``grpo``, ``sapo``, ``luspo`` and RLOO (mean over sequences): padding rows count in the denominator, so the
  loss is scaled by real/rows of the micro-batch. The direction of the update is unchanged; only its size shrinks
  when groups are short or the step ended with fill groups.

Metrics: TRL's ``reward``, ``reward_std``, ``rewards/*`` and the completions table only see the *committed* rows (for
SARA and dynamic sampling these are mostly mixed groups, so the mean reward is biased towards 0.5); SARA logs
``sara/raw_success_rate`` over every generated rollout and the full rollout/token accounting as ``sara/*``
(:mod:`sara_trl.trainer.metrics`). Every TRL metric computed per row or per token excludes padding rows, and is NaN
(logged as NaN, never None: every logged metric is a number) when no real row is left: the completion-length metrics and
``num_tokens`` (:func:`~sara_trl.trainer.metrics.correct_padding_metrics`), the loss-time ``kl``, ``entropy`` and clip
ratios (:func:`~sara_trl.trainer.metrics.correct_loss_metrics`), and the replay-time metrics each trainer recomputes in
its ``_sara_fix_replay_metrics`` hook (RLOO's ``kl``, GRPO's vLLM ``sampling/*``). ``frac_reward_zero_std`` counts fill
groups as zero-std groups.

Steps and data: prompts come from SARA's stream (seeded, identical on every process, wrapping at epoch end), not
from the dataloader; the dataloader's batches only count steps. Set ``max_steps``. A ``datasets.IterableDataset`` is
read in order by :class:`~sara_trl.allocation.IterablePromptStream` through a bounded buffer (shuffle, epochs,
processes and resume: :mod:`sara_trl.trainer.iterable`), and TRL's dataloader then iterates a placeholder.

The members this mixin needs from the TRL base and from the trainer file are declared in
:class:`sara_trl.trainer.hooks.SaraTrainerBase`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from datasets import Dataset, IterableDataset
from transformers import ProcessorMixin
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging
from trl.extras.profiling import profiling_context
from trl.trainer.utils import get_config_model_id

from sara_trl.allocation import (
    DEFAULT_SHUFFLE_BUFFER,
    Allocator,
    Group,
    IterablePromptStream,
    PromptStream,
    ShardStream,
    StepResult,
)
from sara_trl.trainer.hooks import check_trainer_class
from sara_trl.trainer.iterable import DatasetRows, step_counter_dataset
from sara_trl.trainer.metrics import (
    collection_warning,
    correct_loss_metrics,
    correct_padding_metrics,
    log_step_metrics,
    masked_group_counts,
    numeric_logs,
    round_barrier_metrics,
    zero_padding_rows,
)
from sara_trl.trainer.progress import RoundProgress
from sara_trl.trainer.rollout import RolloutCache, make_rollout_fn, make_success_rule, score_source, trainer_scores
from sara_trl.trainer.streaming import (
    StreamRun,
    TrainerScorer,
    VLLMStreamingEngine,
    colocate_sampling_params,
    default_max_in_flight,
    gather_streaming_step,
    drive_streaming_engine,
    slowest_stream_run,
    shard_groups,
)
from sara_trl.trainer.vllm_cpu import colocated_engine_on_cpu, repack_after_sync

__all__ = ["PADDING_COMPLETION_TOKENS", "PADDING_KEY", "SARA_STATE_NAME", "SaraTrainerMixin", "build_row_plan"]

logger = logging.get_logger(__name__)

SARA_STATE_NAME = "sara_state.json"
SARA_CARRY_NAME = "sara_carry.pt"  # carry_over: completions of the prompts carried into the next step
SARA_ROWS_NAME = "sara_stream_rows.pt"  # iterable train set: the rows its prompt stream holds (buffer, carried)

# A padding row's completion: this many EOS tokens. Two, not one, so that a micro-batch holding a padding row is
# always at least two tokens wide: TRL 1.16's `_compute_loss` treats a one-column tensor as one value per sequence
# and then averages its metrics over every row, padding rows included, ignoring the mask.
PADDING_COMPLETION_TOKENS = 2

# Key of TRL's batch dict marking padding rows, `(N,)` bool; present only in a generation batch with padding rows.
# TRL's shuffling and splitting carry it along with the other per-row tensors into every micro-batch.
PADDING_KEY = "sara_padding"


def build_row_plan(groups: list[Group], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Lay B groups out as B*k contiguous rows: each group's rollouts, then padding rows up to k.

    Parameters
    ----------
    groups : list of Group
        The B groups of a :class:`~sara_trl.allocation.StepResult` (real groups first, fill groups last).
    k : int
        Group size (``num_generations``).

    Returns
    -------
    prompt_ids : numpy.ndarray
        ``(B*k,)`` int64, the dataset index of each row's prompt.
    rollout_ids : numpy.ndarray
        ``(B*k,)`` int64, the step-local rollout id each row replays, ``-1`` for a padding row.

    Raises
    ------
    ValueError
        A group holds more than k rollouts.
    """
    prompt_ids, rollout_ids = [], []
    for group in groups:
        ids = np.asarray(group.rollout_ids, dtype=np.int64)
        if len(ids) > k:
            raise ValueError(f"group of prompt {group.prompt_id} holds {len(ids)} rollouts, more than k={k}")
        # A fill group's rows are all masked; its prompt only has to exist (the core uses a drawn prompt).
        prompt_ids.extend([max(int(group.prompt_id), 0)] * k)
        rollout_ids.extend(ids.tolist() + [-1] * (k - len(ids)))
    return np.asarray(prompt_ids, dtype=np.int64), np.asarray(rollout_ids, dtype=np.int64)


@dataclass
class _Replay:
    """Cached results handed to TRL's pipeline for the local rows of one generation batch.

    Attributes
    ----------
    completion_ids : list of list of int
        ``(N,)`` completions of this process's rows.
    logprobs : list of list of float or None
        ``(N,)`` vLLM sampling log-probs, or None.
    rewards : torch.Tensor
        ``(B*k, F)`` gathered reward rows of the whole batch, NaN rows for padding.
    prompt_lengths : list of int
        ``(N,)`` prompt lengths in tokens, filled by the replayed generation hook.
    logps : list of torch.Tensor
        ``(N, T)`` per-token log-probs of each forward pass TRL made during the replay, in call order.
    """

    completion_ids: list[list[int]]
    logprobs: list[list[float]] | None
    rewards: torch.Tensor
    prompt_lengths: list[int] = field(default_factory=list)
    logps: list[torch.Tensor] = field(default_factory=list)


def _stream_states(state: dict) -> list[dict]:
    """The prompt-stream states in a ``sara_state.json`` dict: the main one, then each process's (``"ranks"``)."""
    return [state["stream"], *(entry["stream"] for entry in state.get("ranks") or [])]


def _pop_stream_rows(state: dict) -> list | None:
    """Take the held rows out of an iterable stream's states (they go to ``sara_stream_rows.pt``, in the order of
    :func:`_stream_states`); None for a map-style stream, which holds none."""
    streams = _stream_states(state)
    if streams[0].get("kind") != "iterable":
        return None
    return [stream.pop("rows") for stream in streams]


class SaraTrainerMixin:
    """Shared SARA logic for :class:`SaraGRPOTrainer` and :class:`SaraRLOOTrainer` (put it first in the bases).

    A subclass implements the hooks of :class:`sara_trl.trainer.hooks.SaraTrainerBase` (``_sara_returns_logprobs``,
    ``_sara_generate_round``, ``_sara_decode``, ``_sara_row_metrics``, ``_sara_fix_replay_metrics``); the class
    docstring there has the checklist for a new TRL trainer base.

    Attributes
    ----------
    sara_allocator : sara_trl.allocation.Allocator
        The allocation core (set after construction).
    sara_stream : sara_trl.allocation.PromptStream, ShardStream or IterablePromptStream
        SARA's prompt stream over ``train_dataset`` (an ``IterablePromptStream`` for a ``datasets.IterableDataset``).
    sara_last_step : sara_trl.allocation.StepResult or None
        The latest step's result, with per-prompt records; None before the first step.
    """

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def _sara_prepare(
        cls, model: Any, args: Any, config_class: type, train_dataset: Any, processing_class: Any, unsupported: dict
    ) -> Any:
        """Validate what can be validated before TRL's (slow) construction; return the args to use.

        Parameters
        ----------
        model : str or transformers.PreTrainedModel
            As passed to the trainer (names the default output folder when ``args`` is None).
        args : config_class or None
            The trainer's config; None builds a default one.
        config_class : type
            The SARA config class of this trainer (e.g. ``SaraConfig``).
        train_dataset : datasets.Dataset or datasets.IterableDataset
            The training data (an iterable one needs ``max_steps``, and its rows are checked as they are read).
        processing_class : tokenizer or processor
            As passed to the trainer.
        unsupported : dict
            ``{argument name: value}`` of TRL features SARA cannot replay; a truthy value raises.

        Returns
        -------
        config_class
            ``args``, or a default config when it was None.

        Raises
        ------
        ValueError
            An unsupported feature was passed (tools, environment_factory, rollout_func, multimodal input), or the
            dataset cannot feed SARA's prompt stream.
        TypeError
            ``args`` is not a ``config_class``, or the class lacks a member of
            :class:`~sara_trl.trainer.hooks.SaraTrainerBase`.
        """
        check_trainer_class(cls)
        for name, value in unsupported.items():
            if value:
                raise ValueError(
                    f"{cls.__name__} does not support `{name}` yet: SARA replays single-turn completions and their "
                    f"rewards through TRL's pipeline, and `{name}` changes how rollouts are generated. Use the plain "
                    f"TRL trainer for `{name}`."
                )
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = config_class(f"{str(model_name).split('/')[-1]}-{cls._name}")
        elif not isinstance(args, config_class):
            raise TypeError(
                f"{cls.__name__} needs a `{config_class.__name__}` (it carries the allocation settings), got "
                f"`{type(args).__name__}`. Replace your config class with `{config_class.__name__}`; it accepts "
                "the same fields."
            )
        if isinstance(processing_class, ProcessorMixin):
            raise ValueError(
                f"{cls.__name__} does not support multimodal (vision-language) models yet: pass a text tokenizer "
                "as `processing_class`."
            )
        if train_dataset is None:
            raise ValueError(f"{cls.__name__} needs a `train_dataset`: SARA draws fresh prompts from it.")
        if isinstance(train_dataset, IterableDataset):
            cls._sara_check_iterable(train_dataset, args)
            return args
        if not isinstance(train_dataset, Dataset):
            raise ValueError(
                f"{cls.__name__} needs a `datasets.Dataset` or `datasets.IterableDataset` as `train_dataset` (got "
                f"{type(train_dataset).__name__})."
            )
        columns = set(train_dataset.column_names)
        if "prompt" not in columns:
            raise ValueError(f"`train_dataset` must have a 'prompt' column, found {sorted(columns)}.")
        if columns & {"image", "images"}:
            raise ValueError(
                f"{cls.__name__} does not support multimodal input yet: remove the 'image'/'images' columns."
            )
        num_groups = args.num_groups
        if len(train_dataset) < num_groups:
            raise ValueError(
                f"`train_dataset` has {len(train_dataset)} prompts but one generation batch needs B = "
                f"generation_batch_size / num_generations = {num_groups} distinct prompts; TRL's sampler would "
                "yield no batch."
            )
        return args

    @classmethod
    def _sara_check_iterable(cls, train_dataset: IterableDataset, args: Any) -> None:
        """What an iterable ``train_dataset`` needs (its columns, when known; rows are checked as they are read).

        Raises
        ------
        ValueError
            No ``max_steps``, a dataset split by process, a known column set without ``prompt`` or with images, or
            an option that needs the dataset size (``history_decay``, ``selection``).
        """
        if args.max_steps <= 0:
            raise ValueError(
                f"{cls.__name__} with an IterableDataset needs `max_steps` > 0 (as TRL): its length is unknown, and "
                "SARA's stream re-reads it epoch after epoch."
            )
        if getattr(train_dataset, "_distributed", None) is not None:
            raise ValueError(
                f"{cls.__name__} needs every process to read the same iterable dataset (SARA's stream makes the same "
                "decisions on every process, and shards it itself for collection='streaming'): pass it without "
                "`split_dataset_by_node`."
            )
        for name in ("history_decay", "selection"):
            if getattr(args, name, None) is not None:
                raise ValueError(
                    f"{name}={getattr(args, name)!r} keeps a table indexed by prompt over the whole dataset, which "
                    "an IterableDataset (unknown size) does not have: use a map-style `datasets.Dataset`, or leave "
                    f"{name} unset."
                )
        columns = train_dataset.column_names  # None when unknown (e.g. after map): then checked row by row
        if columns is not None and "prompt" not in columns:
            raise ValueError(f"`train_dataset` must have a 'prompt' column, found {sorted(columns)}.")
        if columns is not None and set(columns) & {"image", "images"}:
            raise ValueError(
                f"{cls.__name__} does not support multimodal input yet: remove the 'image'/'images' columns."
            )

    def _sara_setup(self) -> None:
        """Create the allocator and the prompt stream (after TRL's construction).

        Raises
        ------
        ValueError
            A vision-language processor was resolved, or ``success_reward_func`` names no reward function.
        """
        if getattr(self, "_is_vlm", False):
            raise ValueError(
                f"{type(self).__name__} does not support multimodal (vision-language) models yet: the resolved "
                "processing class is a processor, not a tokenizer."
            )
        args = self.args
        if args.success_reward_func is not None and args.success_reward_func not in self.reward_func_names:
            raise ValueError(
                f"success_reward_func={args.success_reward_func!r} names no reward function of this trainer; "
                f"available: {self.reward_func_names}."
            )
        self._sara_success_rule = make_success_rule(self)  # labels; checks the scores' scale on the first step
        if getattr(args, "collection_auto", False) and self.accelerator.is_main_process:
            logger.info(f"{type(self).__name__}: collection='auto' runs {args.collection!r} collection"
                        + (" (the colocated vLLM engine, driven request by request)" if args.collection == "streaming"
                           else " (streaming needs use_vllm=True with vllm_mode='colocate'); set collection "
                           "explicitly to choose"))
        if getattr(self, "use_vllm", False):  # vLLM's CPU platform: repack its kernels after every weight sync
            repack_after_sync(self.vllm_generation)
        self.sara_allocator = Allocator(args.to_allocation_config())
        seed = args.seed if args.stream_seed is None else args.stream_seed
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        if isinstance(self.train_dataset, IterableDataset):
            # Read in order through a bounded buffer by every process (sara_trl.trainer.iterable); with streaming
            # collection on several processes, each keeps its own share (positions % world == rank).
            shard = args.collection == "streaming" and world > 1
            self.sara_stream = IterablePromptStream(
                DatasetRows(self.train_dataset), seed=seed, shuffle=bool(args.shuffle_dataset),
                buffer_size=DEFAULT_SHUFFLE_BUFFER, wrap=True, rank=rank if shard else 0, world=world if shard else 1)
        elif args.collection == "streaming" and world > 1:
            # Each process collects its own B / world groups from its own shard of the prompts (no collective
            # during the step; see sara_trl.trainer.streaming).
            groups = shard_groups(args.num_groups, world)
            self.sara_stream = ShardStream(len(self.train_dataset), rank, world, seed=seed,
                                           shuffle=bool(args.shuffle_dataset), wrap=True)
            if self.sara_stream.num_prompts < groups:
                raise ValueError(
                    f"`train_dataset` has {len(self.train_dataset)} prompts; split over {world} processes for "
                    f"collection='streaming', process {rank} holds {self.sara_stream.num_prompts}, fewer than the "
                    f"{groups} distinct prompts its share of the batch needs."
                )
        else:
            self.sara_stream = PromptStream(num_prompts=len(self.train_dataset), seed=seed,
                                            shuffle=bool(args.shuffle_dataset), wrap=True)
        if args.max_steps <= 0:
            logger.warning(
                "SARA draws prompts from its own stream; the dataloader only counts steps, so `num_train_epochs` "
                "counts batches of B prompts, not passes over the data. Set `max_steps` to fix the training length."
            )
        self.sara_last_step: StepResult | None = None
        self._sara_replay: _Replay | None = None
        self._sara_row_cache: dict[int, dict] = {}
        self._sara_carry: RolloutCache | None = None  # carry_over: rollouts handed to the next step

    # ------------------------------------------------------------------------------------------ data access
    def _sara_row(self, prompt_id: int) -> dict:
        """Dataset row ``prompt_id`` as a dict (cached for the current step); of an iterable dataset, the row its
        prompt stream holds (``prompt_id`` is the row's position in a pass)."""
        row = self._sara_row_cache.get(prompt_id)
        if row is None:
            if isinstance(self.sara_stream, IterablePromptStream):
                row = dict(self.sara_stream.row(int(prompt_id)))
            else:
                row = dict(self.train_dataset[int(prompt_id)])
            self._sara_row_cache[prompt_id] = row
        return row

    def get_train_dataloader(self):
        """TRL's dataloader; with an iterable ``train_dataset``, over an endless placeholder
        (:func:`~sara_trl.trainer.iterable.step_counter_dataset`: its batches only count steps), so the data are read
        by SARA's stream alone and a resumed run does not re-read them to skip the dataloader's batches."""
        dataset = self.train_dataset
        if not isinstance(dataset, IterableDataset):
            return super().get_train_dataloader()
        self.train_dataset = step_counter_dataset()
        try:
            return super().get_train_dataloader()
        finally:
            self.train_dataset = dataset

    # ------------------------------------------------------------------------------------------ entry point
    def _generate_and_score_completions(self, inputs):
        """Training: collect with the allocator, then replay the committed rows through TRL (see the module doc).

        Evaluation (and the replay itself) pass straight to TRL. In training, ``inputs`` (the dataloader batch) is
        ignored: prompts come from ``sara_stream``.

        Parameters
        ----------
        inputs : list of dict
            The dataloader's batch (used in evaluation only).

        Returns
        -------
        dict
            TRL's batch dict for this process's rows (padding rows masked, :data:`PADDING_KEY` added when there are
            padding rows).
        """
        if not self.model.training or getattr(self, "_sara_replay", None) is not None:
            return super()._generate_and_score_completions(inputs)
        return self._sara_generate_and_score()

    def _sara_generate_and_score(self) -> dict:
        """One training generation batch: collect, lay out, replay, mask (steps 1 to 4 of the module doc)."""
        args = self.args
        k = self.num_generations
        num_groups = args.num_groups
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        device = self.accelerator.device
        self._sara_row_cache = {}

        # 1. Collect (with carry_over, the rollouts carried from the previous step take the first ids).
        cache = self._sara_carry if self._sara_carry is not None else RolloutCache()
        self._sara_carry = None
        if cache.num_rollouts != self.sara_allocator.carried_rollouts:  # pragma: no cover - kept in step by design
            raise RuntimeError(f"SARA carry-over out of sync: {cache.num_rollouts} cached rollouts for "
                               f"{self.sara_allocator.carried_rollouts} carried by the allocator")
        show = self.accelerator.is_main_process and not args.disable_tqdm
        collect_start = time.perf_counter()
        stream_run = None
        if args.collection == "streaming":
            with self._sara_vllm_awake():
                result, cache, stream_run = self._sara_collect_streaming(num_groups, cache)
        else:
            with RoundProgress(self.state.global_step + 1, show) as progress, self._sara_vllm_awake():
                result = self.sara_allocator.collect(make_rollout_fn(self, cache, progress), self.sara_stream,
                                                     num_groups)
        collect_seconds = time.perf_counter() - collect_start
        self.sara_last_step = result
        if len(result.carry_rollout_ids):
            self._sara_carry = cache.carry(result.carry_rollout_ids)
        new_labels = cache.success_labels()[cache.carried:]
        if len(new_labels):  # the first step with scores: are they success labels? (same on every process)
            self._sara_success_rule.end_step(trainer_scores(self, cache.reward_matrix()[cache.carried:]))
        unscorable_by = (score_source(self) if args.success_reward_func is not None
                         else f"every reward function ({self.reward_func_names})")
        message = collection_warning(self.state.global_step + 1, args.allocator, result.stats, new_labels, num_groups,
                                     unscorable_by, tau_low_hint=args.allocator == "sara")
        if message and self.accelerator.is_main_process:
            logger.warning(message)

        # 2. Lay out B*k rows; this process takes its contiguous share, as TRL's sampler would.
        plan_prompts, plan_rollouts = build_row_plan(result.groups, k)
        total_rows = len(plan_rollouts)
        if total_rows != args.generation_batch_size:  # pragma: no cover - guaranteed by the core
            raise RuntimeError(f"SARA built {total_rows} rows for a generation batch of {args.generation_batch_size}")
        is_padding = plan_rollouts < 0
        per_rank = total_rows // world
        local = slice(rank * per_rank, (rank + 1) * per_rank)
        eos = self._tokenizer.eos_token_id

        rewards_all = cache.reward_matrix()
        reward_rows = torch.full((total_rows, len(self.reward_funcs)), float("nan"), dtype=torch.float32)
        if (~is_padding).any():
            reward_rows[torch.as_tensor(~is_padding)] = rewards_all[torch.as_tensor(plan_rollouts[~is_padding])]
        local_rollouts = plan_rollouts[local]
        padding_ids = [eos] * PADDING_COMPLETION_TOKENS
        completion_ids = [cache.completion_ids[r] if r >= 0 else padding_ids for r in local_rollouts]
        logprobs = None
        if self._sara_returns_logprobs and any(lp is not None for lp in cache.logprobs):
            padding_logprobs = [float("nan")] * PADDING_COMPLETION_TOKENS
            logprobs = [cache.logprobs[r] if r >= 0 else padding_logprobs for r in local_rollouts]
        rows = [self._sara_row(int(pid)) for pid in plan_prompts[local]]

        # Extra completions-table columns, one value per local row (flushed by TRL's pipeline).
        self._log_completion_extra("sara_round", [cache.round_index[r] if r >= 0 else None for r in local_rollouts])
        for name, values in cache.extra_logs.items():
            self._log_completion_extra(name, [values[r] if r >= 0 else None for r in local_rollouts])

        # 3. Replay through TRL's unchanged pipeline.
        self._sara_replay = _Replay(completion_ids=completion_ids, logprobs=logprobs, rewards=reward_rows.to(device))
        replay = self._sara_replay
        try:
            output = super()._generate_and_score_completions(rows)
        finally:
            self._sara_replay = None
        if isinstance(self.sara_stream, IterablePromptStream):  # the step's rows are done with, but the carried ones
            self.sara_stream.release(keep=self.sara_allocator.carried_prompt_ids)

        # 4. Mask padding rows (decided from the global plan, so every process takes part in the collectives).
        metrics = self._metrics["train"]
        if is_padding.any():
            pad_local = torch.as_tensor(is_padding[local], device=device)
            zero_padding_rows(output, pad_local)
            if "num_items_in_batch" in output:
                loss_mask = output["completion_mask"]
                if "tool_mask" in output:
                    loss_mask = loss_mask * output["tool_mask"]
                output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
            # TRL counted each padding row's prompt and its EOS tokens in `num_input_tokens_seen`.
            pad_tokens = sum(length + PADDING_COMPLETION_TOKENS
                             for length, pad in zip(replay.prompt_lengths, is_padding[local]) if pad)
            pad_tokens = self.accelerator.gather(torch.tensor([pad_tokens], device=device)).sum().item()
            self.state.num_input_tokens_seen -= pad_tokens
            metrics["num_tokens"] = [self.state.num_input_tokens_seen]
            eos_and_pad = {*self.eos_token_ids, self._tokenizer.pad_token_id}
            lengths = np.asarray([len(cache.completion_ids[r]) if r >= 0 else PADDING_COMPLETION_TOKENS
                                  for r in plan_rollouts])
            truncated = np.asarray(
                [r >= 0 and (not cache.completion_ids[r] or cache.completion_ids[r][-1] not in eos_and_pad)
                 for r in plan_rollouts]
            )
            correct_padding_metrics(metrics, lengths, truncated, is_padding, result.stats.unfilled, num_groups)
            self._sara_fix_replay_metrics(output, pad_local, replay.logps)
            output[PADDING_KEY] = pad_local

        log_step_metrics(
            metrics,
            result.stats,
            new_labels,
            cumulative_rollouts=self.sara_allocator.total_rollouts,
            cumulative_tokens=self.sara_allocator.total_tokens,
            diagnostics=self.sara_allocator.diagnostics(),
            masked=masked_group_counts(result.groups, self._sara_masked_rollouts(cache)),
        )
        # Wall-clock of the collection (every round's generation call and reward pass, plus the allocator): what a
        # step's rollouts cost in time, beside sara/rollouts_generated and sara/tokens_generated.
        metrics["sara/collect_seconds"].append(collect_seconds)
        if stream_run is not None:  # streaming: no rounds (sara/rounds is 0); the slowest process's engine and rewards
            metrics["sara/engine_steps"].append(stream_run.engine_steps)
            metrics["sara/reward_passes"].append(stream_run.reward_passes)
            metrics["sara/reward_seconds"].append(stream_run.reward_seconds)
            metrics["sara/reward_wait_seconds"].append(stream_run.reward_wait_seconds)
        else:  # rounds: the decode steps each call spent on its longest completion (the round barrier's cost)
            tokens = np.concatenate(cache.tokens) if cache.tokens else np.zeros(0, np.int64)
            for name, value in round_barrier_metrics(np.asarray(cache.round_index), tokens).items():
                metrics[f"sara/{name}"].append(value)
        return output

    def _sara_collect_streaming(
        self, num_groups: int, cache: RolloutCache
    ) -> tuple[StepResult, RolloutCache, StreamRun]:
        """``collection="streaming"``: this process's share of the batch through its colocated vLLM engine, request
        by request (:func:`sara_trl.trainer.streaming.drive_streaming_engine`), then, with several processes, the one
        exchange that gives every process the merged batch and rollouts.

        Parameters
        ----------
        num_groups : int
            B, the groups of the whole batch.
        cache : RolloutCache
            Receives this process's rollouts; with ``carry_over`` it starts with the carried ones (one process).

        Returns
        -------
        result : StepResult
            Exactly ``num_groups`` groups (this process's share first on process 0, in process order).
        cache : RolloutCache
            Every recorded rollout, ids as in ``result``.
        run : StreamRun
            Engine steps and reward seconds of the slowest process (the one with the most engine steps).
        """
        args = self.args
        world = self.accelerator.num_processes
        k = self.num_generations
        groups = shard_groups(num_groups, world)
        gen = self.vllm_generation
        if self.state.global_step != self._last_loaded_step:  # as TRL's _generate_single_turn: once per step
            with profiling_context(self, "sync_weights"):
                gen.sync_weights()
            self._last_loaded_step = self.state.global_step
        max_in_flight = args.streaming_max_in_flight or default_max_in_flight(
            groups, k, getattr(gen, "max_num_seqs", None)
        )
        collector = self.sara_allocator.streaming(self.sara_stream, groups, max_in_flight)
        tokens: dict[int, list[int]] = {}

        def prompt_tokens(prompt_id: int) -> list[int]:
            if prompt_id not in tokens:
                ids, _, _ = self._tokenize_prompts([self._sara_row(prompt_id)["prompt"]])
                tokens[prompt_id] = list(ids[0])
            return tokens[prompt_id]

        engine = VLLMStreamingEngine(gen.llm, colocate_sampling_params(gen), keep_logprobs=self._sara_returns_logprobs,
                                     tag=f"sara-{self.state.global_step}-")
        result, error, run = None, None, StreamRun()
        try:
            with profiling_context(self, "vLLM.stream"):
                run = drive_streaming_engine(collector, engine, prompt_tokens,
                                             TrainerScorer(self, cache, prompt_tokens),
                                             reward_lag=args.streaming_reward_lag)
            result = collector.finish()
        except Exception as exc:  # with several processes, fail every process at the exchange below
            if world == 1:
                raise
            error = exc
        if world == 1:
            return result, cache, run
        local = None if result is None else result.stats  # None only on a failed process, which raises below
        result, payloads = gather_streaming_step(self.accelerator, result, collector.recorded, (cache, run), error)
        # The cumulative totals count every process's rollouts (this process's allocator saw only its own).
        self.sara_allocator.total_rollouts += result.stats.rollouts_generated - local.rollouts_generated
        self.sara_allocator.total_tokens += result.stats.tokens_generated - local.tokens_generated
        return result, RolloutCache.concat([c for c, _ in payloads]), slowest_stream_run([r for _, r in payloads])

    # ------------------------------------------------------------------------------------------ replay hooks
    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        """Replay: return the cached completions (and vLLM log-probs for GRPO) instead of generating.

        Raises
        ------
        RuntimeError
            TRL asked for a different number of completions than the replay holds.
        """
        replay = getattr(self, "_sara_replay", None)
        if replay is None:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        if len(prompt_ids) != len(replay.completion_ids):
            raise RuntimeError(
                f"replay mismatch: TRL asked for {len(prompt_ids)} completions, {len(replay.completion_ids)} cached"
            )
        replay.prompt_lengths = [len(ids) for ids in prompt_ids]
        completion_ids = [list(ids) for ids in replay.completion_ids]
        if self._sara_returns_logprobs:
            return completion_ids, replay.logprobs
        return completion_ids

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """Replay: return the cached, already gathered ``(B*k, F)`` reward rows instead of scoring again.

        Raises
        ------
        RuntimeError
            TRL's batch does not match the cached reward rows.
        """
        replay = getattr(self, "_sara_replay", None)
        if replay is None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        expected = len(prompts) * self.accelerator.num_processes
        if replay.rewards.shape[0] != expected:
            raise RuntimeError(f"replay mismatch: {expected} reward rows expected, {replay.rewards.shape[0]} cached")
        return replay.rewards

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        """TRL's forward pass; during the replay, its per-token log-probs are also kept for
        ``_sara_fix_replay_metrics``."""
        result = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        replay = getattr(self, "_sara_replay", None)
        if replay is not None:
            replay.logps.append(result[0].detach())
        return result

    def _sara_masked_rollouts(self, cache: RolloutCache) -> np.ndarray:
        """``(rollouts,)`` bool by rollout id: TRL masks the completion out of the loss (``mask_truncated_completions``
        and no EOS/pad at its end, TRL's own test)."""
        if not getattr(self, "mask_truncated_completions", False):
            return np.zeros(cache.num_rollouts, dtype=bool)
        eos_and_pad = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        return np.asarray([not ids or ids[-1] not in eos_and_pad for ids in cache.completion_ids], dtype=bool)

    def log(self, logs: dict, start_time: float | None = None) -> None:
        """TRL's ``log``, with every metric a number: one with no valid value in the window is logged as NaN, where
        TRL logs None (e.g. ``reward`` when no group was committed), so callbacks can do arithmetic on any value."""
        mode = "train" if self.model.training else "eval"
        numeric_logs(self._metrics[mode], logs, prefix="eval_" if mode == "eval" else "")
        super().log(logs, start_time)

    # ------------------------------------------------------------------------------------------ loss metrics
    def _compute_loss(self, model, inputs):
        """TRL's loss, unchanged; then the per-token and per-row metrics it appended are made to exclude padding rows.

        Only for micro-batches of a generation batch with padding rows (marked by :data:`PADDING_KEY`, which is
        removed before TRL sees the batch). One extra small collective per such micro-batch counts real tokens and
        rows over all processes; see :func:`sara_trl.trainer.metrics.correct_loss_metrics` for the rules.
        """
        padding = inputs.get(PADDING_KEY) if isinstance(inputs, dict) else None
        if padding is None:
            return super()._compute_loss(model, inputs)
        inputs = {key: value for key, value in inputs.items() if key != PADDING_KEY}
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        before = {name: len(values) for name, values in metrics.items()}
        loss = super()._compute_loss(model, inputs)
        appended = {name for name, values in metrics.items() if len(values) > before.get(name, 0)}
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        local = torch.tensor([float(mask.sum()), float((~padding).sum()), float(len(padding))], device=mask.device)
        real_tokens, real_rows, rows = (int(v) for v in self.accelerator.reduce(local, reduction="sum").tolist())
        correct_loss_metrics(metrics, appended, real_tokens, real_rows, rows, self._sara_row_metrics())
        return loss

    # ------------------------------------------------------------------------------------------ vLLM
    @staticmethod
    def _sara_engine_context(args):
        """Context wrapped around TRL's construction: the CPU-only adjustments of :mod:`sara_trl.trainer.vllm_cpu`.

        Active only for ``use_vllm=True, vllm_mode="colocate"`` on vLLM's CPU platform (a no-op elsewhere, GPUs
        included). The engine is built in the precision the trainer computes log-probs in: bfloat16 with ``bf16``,
        float16 with ``fp16``, float32 otherwise.
        """
        if not (getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
        return colocated_engine_on_cpu(dtype)

    @contextmanager
    def _sara_vllm_awake(self):
        """Keep a sleeping colocated vLLM engine awake for all rounds of one step (weights pushed once per step).

        TRL's ``VLLMGeneration.generate`` puts the engine to sleep (level 2, weights discarded) after every call and
        re-pushes all weights on the next one; with several rounds per step that would cost one full (collective)
        weight transfer per round. Here the weights are synced once (if the optimizer step changed, or they sleep),
        the KV cache is woken, sleep mode is switched off for the rounds, and restored (engine put back to sleep)
        afterwards. Other setups (no vLLM, server mode, sleep mode off) need nothing: TRL syncs once per step.
        """
        engine = getattr(self, "vllm_generation", None) if self.use_vllm else None
        if (engine is None or getattr(engine, "mode", None) != "colocate"
                or not getattr(engine, "enable_sleep_mode", False)):
            yield
            return
        if self.state.global_step != self._last_loaded_step or getattr(engine, "_llm_weights_sleeping", False):
            with profiling_context(self, "sync_weights"):
                engine.sync_weights()  # wakes the weights first (sleep mode is on)
            self._last_loaded_step = self.state.global_step
        engine.llm.wake_up(tags=["kv_cache"])
        engine.enable_sleep_mode = False
        try:
            yield
        finally:
            engine.enable_sleep_mode = True
            engine.llm.sleep(level=2)
            engine._llm_weights_sleeping = True

    # ------------------------------------------------------------------------------------------ checkpoints
    def _sara_state_dict(self, ranks: list[dict] | None = None) -> dict:
        """The allocator, stream and allocation config as JSON-ready data (written to ``sara_state.json``).

        ``ranks``: with streaming collection on several processes, every process's own allocator and stream shard
        (:meth:`_sara_rank_states`), saved under ``"ranks"`` in process order.
        """
        state = {
            "version": 1,
            "allocator": self.sara_allocator.state_dict(),
            "stream": self.sara_stream.state_dict(),
            "allocation_config": self.args.to_allocation_config().__dict__,
        }
        if ranks is not None:
            state["ranks"] = ranks
        return state

    def _sara_rank_states(self) -> list[dict] | None:
        """Streaming collection on several processes: every process's allocator and stream shard (they differ per
        process), gathered on every process (a collective: call it on all of them). None otherwise."""
        if self.args.collection != "streaming" or self.accelerator.num_processes == 1:
            return None
        from accelerate.utils import gather_object

        return gather_object([{"allocator": self.sara_allocator.state_dict(), "stream": self.sara_stream.state_dict()}])

    def _save_checkpoint(self, model, trial):
        """Write ``sara_state.json`` (allocator and stream state) into the checkpoint, then TRL's own save.

        Written first so that a ``push_to_hub`` of the checkpoint includes it. With ``carry_over``, the carried
        prompts' completions go to ``sara_carry.pt`` beside it. With an iterable ``train_dataset``, the rows its
        stream holds (shuffle buffer, carried prompts; any Python values) go to ``sara_stream_rows.pt``.
        """
        ranks = self._sara_rank_states()  # every process takes part
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial),
                                  f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            state = self._sara_state_dict(ranks)
            rows = _pop_stream_rows(state)
            with open(os.path.join(folder, SARA_STATE_NAME), "w") as handle:
                json.dump(state, handle, indent=2)
            if rows is not None:
                torch.save(rows, os.path.join(folder, SARA_ROWS_NAME))
            if self._sara_carry is not None:  # the carried prompts' completions, for the next step
                torch.save(self._sara_carry.state(), os.path.join(folder, SARA_CARRY_NAME))
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """Also restore the allocator and stream state saved by :meth:`_save_checkpoint` when resuming.

        A checkpoint without ``sara_state.json`` (e.g. from a plain TRL run) starts a fresh stream, with a warning.

        Raises
        ------
        FileNotFoundError
            The state carries undecided prompts into the next step but ``sara_carry.pt`` is missing, or was saved
            from an iterable dataset without its ``sara_stream_rows.pt``.
        """
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, SARA_STATE_NAME)
        if not os.path.isfile(path):
            warnings.warn(
                f"{checkpoint} has no {SARA_STATE_NAME}; the SARA prompt stream and allocator restart from scratch.",
                stacklevel=2,
            )
            return
        with open(path) as handle:
            state = json.load(handle)
        if _stream_states(state)[0].get("kind") == "iterable":
            rows_path = os.path.join(checkpoint, SARA_ROWS_NAME)
            if not os.path.isfile(rows_path):
                raise FileNotFoundError(f"{path} was saved from an iterable dataset but {rows_path} with the rows its "
                                        "prompt stream held is missing; restore the whole checkpoint folder.")
            for stream_state, rows in zip(_stream_states(state), torch.load(rows_path, weights_only=False)):
                stream_state["rows"] = rows
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        sharded = isinstance(self.sara_stream, ShardStream) or (
            isinstance(self.sara_stream, IterablePromptStream) and self.sara_stream.world > 1)
        if sharded:  # streaming on several processes: this process's own state
            ranks = state.get("ranks")
            if ranks is None or len(ranks) != world:
                raise ValueError(
                    f"{path} holds no per-process state for {world} processes (saved with "
                    f"{'one process or rounds' if ranks is None else f'{len(ranks)} processes'}); streaming "
                    "collection on several processes resumes only with the process count it was saved with."
                )
            state = {**state, **ranks[rank]}
        elif "ranks" in state:
            raise ValueError(f"{path} was saved by streaming collection on {len(state['ranks'])} processes; resume it "
                             f"with collection='streaming' on {len(state['ranks'])} processes.")
        self.sara_allocator.load_state_dict(state["allocator"])
        self.sara_stream.load_state_dict(state["stream"])
        self._sara_carry = None
        if self.sara_allocator.carried_rollouts:
            carry_path = os.path.join(checkpoint, SARA_CARRY_NAME)
            if not os.path.isfile(carry_path):
                raise FileNotFoundError(
                    f"{path} carries {self.sara_allocator.carried_prompts} undecided prompts into the next step "
                    f"(carry_over) but {carry_path} with their completions is missing; restore the whole checkpoint "
                    "folder."
                )
            self._sara_carry = RolloutCache.from_state(torch.load(carry_path, weights_only=False))

