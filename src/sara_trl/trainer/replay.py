"""Laying out one collected step as B*k rows, and replaying them through TRL's unchanged pipeline from the cache.

Each group becomes k contiguous rows (TRL defines groups by contiguity, ``view(-1, k)``): its rollouts, then padding
rows up to k (short groups when ``commit_min < k``; all k rows for a fill group). Padding rows carry the group's
prompt, a completion of :data:`PADDING_COMPLETION_TOKENS` EOS tokens and an all-NaN reward row (:func:`lay_out`).

The replay: inside ``with replaying(trainer, layout.replay):`` TRL's ``_generate_single_turn`` and
``_calculate_rewards`` are answered from the :class:`Replay` (:func:`active_replay` is not None there), and
``_get_per_token_logps_and_entropies`` records its log-probs; outside it they generate and score as TRL does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from sara_trl.allocation import Group, StepResult

__all__ = ["PADDING_COMPLETION_TOKENS", "PADDING_KEY", "Replay", "RowLayout", "active_replay", "build_row_plan",
           "lay_out", "replaying"]

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
class Replay:
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

    def completions(self, prompt_ids: list[list[int]], with_logprobs: bool) -> Any:
        """What TRL's ``_generate_single_turn`` returns: the cached completions (and log-probs ``with_logprobs``).

        Raises
        ------
        RuntimeError
            TRL asked for a different number of completions than the replay holds.
        """
        if len(prompt_ids) != len(self.completion_ids):
            raise RuntimeError(
                f"replay mismatch: TRL asked for {len(prompt_ids)} completions, {len(self.completion_ids)} cached"
            )
        self.prompt_lengths = [len(ids) for ids in prompt_ids]
        completion_ids = [list(ids) for ids in self.completion_ids]
        if with_logprobs:
            return completion_ids, self.logprobs
        return completion_ids

    def reward_rows(self, expected: int) -> torch.Tensor:
        """What TRL's ``_calculate_rewards`` returns: the cached, already gathered ``(B*k, F)`` reward rows.

        Raises
        ------
        RuntimeError
            TRL's batch (``expected`` rows over all processes) does not match the cached reward rows.
        """
        if self.rewards.shape[0] != expected:
            raise RuntimeError(f"replay mismatch: {expected} reward rows expected, {self.rewards.shape[0]} cached")
        return self.rewards


@dataclass
class RowLayout:
    """One generation batch as rows: the global plan, this process's share, and what the replay answers with.

    Attributes
    ----------
    plan_prompts, plan_rollouts : numpy.ndarray
        ``(B*k,)`` of :func:`build_row_plan`.
    is_padding : numpy.ndarray
        ``(B*k,)`` bool, padding row.
    local : slice
        This process's contiguous share of the rows, as TRL's sampler would give it.
    rows : list of dict
        The dataset rows of this process's share (what TRL's pipeline is handed).
    replay : Replay
        The cached completions and reward rows.
    """

    plan_prompts: np.ndarray
    plan_rollouts: np.ndarray
    is_padding: np.ndarray
    local: slice
    rows: list[dict]
    replay: Replay


def lay_out(trainer: Any, result: StepResult, cache: Any) -> RowLayout:
    """Lay out the step's B*k rows; this process takes its contiguous share, as TRL's sampler would.

    Also adds the completions-table columns ``sara_round`` and the reward functions' extra logs, one value per local
    row (flushed by TRL's pipeline during the replay).

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer.
    result : StepResult
        The collected step (exactly B groups).
    cache : sara_trl.trainer.rollout.RolloutCache
        Its rollouts, ids as in ``result``.

    Returns
    -------
    RowLayout
    """
    args = trainer.args
    world, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    plan_prompts, plan_rollouts = build_row_plan(result.groups, trainer.num_generations)
    total_rows = len(plan_rollouts)
    if total_rows != args.generation_batch_size:  # pragma: no cover - guaranteed by the core
        raise RuntimeError(f"SARA built {total_rows} rows for a generation batch of {args.generation_batch_size}")
    is_padding = plan_rollouts < 0
    per_rank = total_rows // world
    local = slice(rank * per_rank, (rank + 1) * per_rank)
    eos = trainer._tokenizer.eos_token_id

    rewards_all = cache.reward_matrix()
    reward_rows = torch.full((total_rows, len(trainer.reward_funcs)), float("nan"), dtype=torch.float32)
    if (~is_padding).any():
        reward_rows[torch.as_tensor(~is_padding)] = rewards_all[torch.as_tensor(plan_rollouts[~is_padding])]
    local_rollouts = plan_rollouts[local]
    padding_ids = [eos] * PADDING_COMPLETION_TOKENS
    completion_ids = [cache.completion_ids[r] if r >= 0 else padding_ids for r in local_rollouts]
    logprobs = None
    if trainer._sara_returns_logprobs and any(lp is not None for lp in cache.logprobs):
        padding_logprobs = [float("nan")] * PADDING_COMPLETION_TOKENS
        logprobs = [cache.logprobs[r] if r >= 0 else padding_logprobs for r in local_rollouts]
    rows = [trainer._sara_row(int(pid)) for pid in plan_prompts[local]]

    # Extra completions-table columns, one value per local row (flushed by TRL's pipeline).
    trainer._log_completion_extra("sara_round", [cache.round_index[r] if r >= 0 else None for r in local_rollouts])
    for name, values in cache.extra_logs.items():
        trainer._log_completion_extra(name, [values[r] if r >= 0 else None for r in local_rollouts])

    replay = Replay(completion_ids=completion_ids, logprobs=logprobs,
                    rewards=reward_rows.to(trainer.accelerator.device))
    return RowLayout(plan_prompts, plan_rollouts, is_padding, local, rows, replay)


@contextmanager
def replaying(trainer: Any, replay: Replay) -> Iterator[Replay]:
    """While the block runs, TRL's generation and reward hooks answer from ``replay`` (:func:`active_replay`)."""
    trainer._sara_replay = replay
    try:
        yield replay
    finally:
        trainer._sara_replay = None


def active_replay(trainer: Any) -> Replay | None:
    """The replay in progress (inside :func:`replaying`), or None: TRL generates and scores for real."""
    return getattr(trainer, "_sara_replay", None)
