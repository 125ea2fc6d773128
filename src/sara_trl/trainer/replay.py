"""Laying out one collected step as B*k rows, and replaying them through TRL's unchanged pipeline from the cache.

Each group becomes k contiguous rows (TRL defines groups by contiguity, ``view(-1, k)``): its rollouts, then padding
rows up to k (short groups when ``commit_min < k``; all k rows for a fill group). Padding rows carry the group's
prompt, a completion of :data:`PADDING_COMPLETION_TOKENS` EOS tokens and an all-NaN reward row (:func:`lay_out`).

The replay: inside ``with replaying(trainer, layout.replay):`` TRL's ``_generate_single_turn`` and
``_calculate_rewards`` are answered from the :class:`Replay` (:func:`active_replay` is not None there), and
``_get_per_token_logps_and_entropies`` records its log-probs; outside it they generate and score as TRL does. With
``tools=``, ``_generate_single_turn`` answers with each rollout's first generation and TRL's ``_tool_call_loop`` with
the cached trajectory (completion ids over every turn, ``tool_mask``, log-probs, messages, tool call counts). With
``environment_factory``, TRL's environment pool holds stand-ins during the replay whose ``reset`` returns each row's
cached observation (:func:`sara_trl.trainer.environment.replayed_environments`): no environment is reset again, and TRL
rebuilds the prompts the rollouts were generated from (checked against the cached prompt ids).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sara_trl.allocation import Group, StepResult
from sara_trl.trainer.environment import environment_name, replayed_environments, uses_environments
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["PADDING_COMPLETION_TOKENS", "PADDING_KEY", "Replay", "RowLayout", "active_replay", "add_trajectories",
           "build_row_plan", "lay_out", "replaying"]

# A padding row's completion: this many EOS tokens. Two, not one, so that a micro-batch holding a padding row is
# always at least two tokens wide: TRL's `_compute_loss` treats a one-column tensor as one value per sequence
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
    prompt_ids : list of list of int or None
        With a custom ``rollout_func``: ``(N,)`` the prompt ids it returned (padding rows: their group's, or TRL's
        tokenization for a fill group); None without one (TRL tokenizes).
    env_mask : list of list of int or None
        With a ``rollout_func`` that returned ``env_mask``: ``(N,)`` masks (all ones where a row has none).
    fields : dict of str to list
        The ``rollout_func``'s extra fields, ``(N,)`` values each (None on padding rows).
    tool_trajectories : list of (Trajectory or None) or None
        With ``tools=``: ``(N,)`` the record of TRL's tool loop for each row (None on padding rows); None without
        tools.
    environment_names, observations : list or None
        With ``environment_factory``: ``(N,)`` each row's environment name and the observation its rollout's
        ``reset`` returned (a padding row: its group's first rollout's; a fill group's rows: None); None without.
    trl_calls_rollout_func : bool
        With a custom ``rollout_func``: whether TRL's pipeline asks for its output (GRPO's ``self.rollout_func``); a
        base without one (RLOO) asks for the prompt ids and the completions instead.
    served : dict of str to int
        How often each answer was handed to TRL (``completions``, ``rollout_output``, ``tool_loop``, ``rewards``,
        ``prompt_tokens``): the replay guard (:meth:`check_served`) wants each answer TRL needs exactly once.
    """

    completion_ids: list[list[int]]
    logprobs: list[list[float]] | None
    rewards: torch.Tensor
    prompt_lengths: list[int] = field(default_factory=list)
    logps: list[torch.Tensor] = field(default_factory=list)
    prompt_ids: list[list[int]] | None = None
    env_mask: list[list[int]] | None = None
    fields: dict[str, list] = field(default_factory=dict)
    tool_trajectories: list[Any] | None = None
    environment_names: list | None = None
    observations: list | None = None
    trl_calls_rollout_func: bool = False
    served: dict[str, int] = field(default_factory=dict)

    def _serve(self, answer: str) -> None:
        self.served[answer] = self.served.get(answer, 0) + 1

    def expected_answers(self) -> tuple[str, ...]:
        """The answers TRL's pipeline must take from this replay, each exactly once: the generation (with a custom
        ``rollout_func``, its output, or for a base without one its ``prompt_tokens`` and ``completions``; else
        ``completions``), ``tool_loop`` with tools, and ``rewards``."""
        generation = ("completions",)
        if self.prompt_ids is not None:
            generation = ("rollout_output",) if self.trl_calls_rollout_func else ("prompt_tokens", "completions")
        tools = ("tool_loop",) if self.tool_trajectories is not None else ()
        return generation + tools + ("rewards",)

    def check_served(self, trl_version: str, hook_of: dict[str, str], environment_resets: list[int] | None = None):
        """The replay guard: raise unless TRL took every cached answer exactly once.

        If TRL routed generation or scoring around the hooks SARA answers, it trained on rows it generated or scored
        itself (plain GRPO at about twice the cost, with SARA's accounting still logged): that must stop the run.

        Parameters
        ----------
        trl_version : str
            The installed TRL version, named in the error.
        hook_of : dict of str to str
            Each answer's TRL hook (the port's ``REPLAY_HOOKS``).
        environment_resets : list of int, optional
            With ``environment_factory``: how often each of the ``(N,)`` stand-in environments was reset.

        Raises
        ------
        RuntimeError
            An answer was served 0 times or more than once, or a stand-in environment was not reset exactly once;
            the message names TRL's hook and the installed TRL version.
        """
        wrong = {answer: self.served.get(answer, 0) for answer in self.expected_answers()
                 if self.served.get(answer, 0) != 1}
        if environment_resets is not None and any(count != 1 for count in environment_resets):
            wrong["environment_resets"] = sum(count != 1 for count in environment_resets)
        if wrong:
            details = "; ".join(
                f"{hook_of[answer]} was not called" if count == 0 else
                f"{hook_of[answer]}: {count} rows not reset exactly once" if answer == "environment_resets" else
                f"{hook_of[answer]} was called {count} times"
                for answer, count in wrong.items())
            raise RuntimeError(
                f"SARA's replay was bypassed: TRL {trl_version} did not take the cached answers once each ({details}). "
                "TRL generated or scored these rows itself, so this step would train on rows SARA did not collect. "
                "This TRL version routes around the hooks sara_trl answers: install a supported TRL "
                "(docs/trl-port.md), or update the port module sara_trl.trainer.trl for it.")

    def _check(self, asked: int) -> None:
        if asked != len(self.completion_ids):
            raise RuntimeError(
                f"replay mismatch: TRL asked for {asked} completions, {len(self.completion_ids)} cached"
            )

    def rollout_output(self, prompts: list) -> dict:
        """What the custom ``rollout_func`` returned, for TRL's ``_generate`` during the replay: the cached prompt
        and completion ids, log-probs, ``env_mask`` and extra fields of these rows.

        Raises
        ------
        RuntimeError
            TRL asked for a different number of rows than the replay holds.
        """
        self._check(len(prompts))
        self._serve("rollout_output")
        self.prompt_lengths = [len(ids) for ids in self.prompt_ids]
        output = {"prompt_ids": [list(ids) for ids in self.prompt_ids],
                  "completion_ids": [list(ids) for ids in self.completion_ids],
                  "logprobs": self.logprobs, **{name: list(values) for name, values in self.fields.items()}}
        if self.env_mask is not None:
            output["env_mask"] = [list(mask) for mask in self.env_mask]
        return output

    def prompt_tokens(self, prompts: list) -> tuple[list[list[int]], None, dict]:
        """What TRL's ``_tokenize_prompts`` returns during the replay of a custom ``rollout_func``'s rows: the
        prompt ids it returned (no images, no multimodal fields)."""
        self._check(len(prompts))
        self._serve("prompt_tokens")
        return [list(ids) for ids in self.prompt_ids], None, {}

    def completions(self, prompt_ids: list[list[int]], with_logprobs: bool) -> Any:
        """What TRL's ``_generate_single_turn`` returns: the cached completions (and log-probs ``with_logprobs``).

        Raises
        ------
        RuntimeError
            TRL asked for a different number of completions than the replay holds.
        """
        self._check(len(prompt_ids))
        self._serve("completions")
        self.prompt_lengths = [len(ids) for ids in prompt_ids]
        completion_ids = [list(ids) for ids in self.completion_ids]
        logprobs = self.logprobs
        if self.tool_trajectories is not None:  # the first generation; `tool_loop` hands back the whole trajectory
            self._check_prompts(prompt_ids)
            completion_ids = [list(t.turn_ids) if t is not None else ids
                              for t, ids in zip(self.tool_trajectories, completion_ids)]
            if logprobs is not None:
                logprobs = [list(lps[:len(ids)]) for lps, ids in zip(logprobs, completion_ids)]
        if with_logprobs:
            return completion_ids, logprobs
        return completion_ids

    def _check_prompts(self, prompt_ids: list[list[int]]) -> None:
        """TRL tokenized each replayed row's prompt as the round did (with environments: the same observation).

        Raises
        ------
        RuntimeError
            A row's prompt ids differ from those its rollout was generated from.
        """
        for row, (ids, trajectory) in enumerate(zip(prompt_ids, self.tool_trajectories)):
            if trajectory is not None and list(ids) != list(trajectory.prompt_ids):
                raise RuntimeError(f"replay mismatch: row {row}'s prompt tokenizes to {len(ids)} ids in the replay, "
                                   f"not the {len(trajectory.prompt_ids)} ids its rollout was generated from")

    def tool_loop(self, completions: list) -> tuple:
        """What TRL's ``_tool_call_loop`` returns during the replay: the cached trajectories of these rows.

        Parameters
        ----------
        completions : list
            The first generations as TRL decoded them in the replay (kept for padding rows).

        Returns
        -------
        tuple
            ``(tool_mask, completions, completion_ids, logprobs, tool_call_count, tool_failure_count, tool_images)``
            as TRL's loop returns them: the cached ``tool_mask`` (all ones on padding rows), messages, completion
            ids over every turn and log-probs, the rows' tool calls and failures summed, and no tool images.

        Raises
        ------
        RuntimeError
            TRL asked for a different number of rows than the replay holds, or the replay has no tool record.
        """
        self._check(len(completions))
        if self.tool_trajectories is None:
            raise RuntimeError("replay mismatch: TRL ran its tool loop on rows replayed without tool trajectories")
        self._serve("tool_loop")
        rows = list(zip(self.tool_trajectories, self.completion_ids, completions))
        tool_mask = [list(t.env_mask) if t is not None else [1] * len(ids) for t, ids, _ in rows]
        messages = [copy.deepcopy(t.messages) if t is not None else decoded for t, _, decoded in rows]
        calls = sum(t.tool_calls for t in self.tool_trajectories if t is not None)
        failures = sum(t.tool_failures for t in self.tool_trajectories if t is not None)
        logprobs = None if self.logprobs is None else [list(lps) for lps in self.logprobs]
        return (tool_mask, messages, [list(ids) for ids in self.completion_ids], logprobs, calls, failures,
                [[] for _ in rows])

    def reward_rows(self, expected: int) -> torch.Tensor:
        """What TRL's ``_calculate_rewards`` returns: the cached, already gathered ``(B*k, F)`` reward rows.

        Raises
        ------
        RuntimeError
            TRL's batch (``expected`` rows over all processes) does not match the cached reward rows.
        """
        if self.rewards.shape[0] != expected:
            raise RuntimeError(f"replay mismatch: {expected} reward rows expected, {self.rewards.shape[0]} cached")
        self._serve("rewards")
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


def lay_out(trainer: SaraTrainerBase, result: StepResult, cache: Any) -> RowLayout:
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
    eos = port.tokenizer(trainer).eos_token_id

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
    # Copies: TRL writes a custom rollout's extra fields into its input rows, one value per row.
    rows = [dict(trainer._sara_row(int(pid))) for pid in plan_prompts[local]]

    # Extra completions-table columns, one value per local row (flushed by TRL's pipeline).
    port.log_completion_extra(trainer, "sara_round", [cache.round_index[r] if r >= 0 else None for r in local_rollouts])
    for name, values in cache.extra_logs.items():
        port.log_completion_extra(trainer, name, [values[r] if r >= 0 else None for r in local_rollouts])

    replay = Replay(completion_ids=completion_ids, logprobs=logprobs,
                    rewards=reward_rows.to(trainer.accelerator.device))
    if trainer.sara.rollout_func is not None:
        replay.trl_calls_rollout_func = getattr(trainer, "rollout_func", None) is not None
        add_trajectories(trainer, replay, cache, plan_rollouts, local, rows)
    elif getattr(trainer, "tools", None):  # TRL's tool loop made each trajectory; the replay hands it back
        replay.tool_trajectories = [cache.trajectories[r] if r >= 0 else None for r in local_rollouts]
    if uses_environments(trainer):  # TRL resets stand-ins that return the cached observations
        replay.environment_names = [environment_name(trainer, row) for row in rows]
        found = [_trajectory_of_row(cache, plan_rollouts, trainer.num_generations, j)
                 for j in range(local.start, local.stop)]
        replay.observations = [t.observation if t is not None else None for t in found]
    return RowLayout(plan_prompts, plan_rollouts, is_padding, local, rows, replay)


def _trajectory_of_row(cache: Any, plan_rollouts: np.ndarray, k: int, j: int) -> Any:
    """The cached trajectory row ``j`` of the plan replays: its rollout's, for a padding row its group's first
    rollout's, None for a fill group's row (or a rollout without one)."""
    r = int(plan_rollouts[j])
    if r < 0:
        real = [int(i) for i in plan_rollouts[(j // k) * k:(j // k + 1) * k] if i >= 0]
        if not real:
            return None
        r = real[0]
    return cache.trajectories.get(r)


def add_trajectories(trainer: SaraTrainerBase, replay: Replay, cache: Any, plan_rollouts: np.ndarray, local: slice,
                     rows: list[dict]) -> None:
    """Give the replay what a custom ``rollout_func`` returned for this process's rows (prompt ids, ``env_mask``,
    extra fields), so TRL's ``_generate`` receives it unchanged.

    A padding row takes the prompt ids of its group's first rollout; a fill group's rows (no rollout) are tokenized
    by TRL (they are masked out of the loss: only their shape matters). ``env_mask`` is all ones where a row has none.
    """
    k = trainer.num_generations
    indices = range(local.start, local.stop)
    first_of_group = {}
    for g in {j // k for j in indices}:
        real = [int(r) for r in plan_rollouts[g * k:(g + 1) * k] if r >= 0]
        first_of_group[g] = real[0] if real else None
    prompt_ids, trajectories = [], []
    for j, row in zip(indices, rows):
        r = int(plan_rollouts[j])
        source = r if r >= 0 else first_of_group[j // k]
        trajectory = cache.trajectories.get(source) if source is not None else None
        if trajectory is not None:
            prompt_ids.append(list(trajectory.prompt_ids))
        else:
            ids, _, _ = port.tokenize_prompts(trainer, [row["prompt"]])
            prompt_ids.append(list(ids[0]))
        trajectories.append(cache.trajectories.get(r) if r >= 0 else None)
    replay.prompt_ids = prompt_ids
    if any(t is not None and t.env_mask is not None for t in trajectories):
        replay.env_mask = [list(t.env_mask) if t is not None and t.env_mask is not None else [1] * len(ids)
                           for t, ids in zip(trajectories, replay.completion_ids)]
    names = sorted({name for t in trajectories if t is not None for name in t.fields})
    replay.fields = {name: [t.fields.get(name) if t is not None else None for t in trajectories] for name in names}


@contextmanager
def replaying(trainer: SaraTrainerBase, replay: Replay) -> Iterator[Replay]:
    """While the block runs, TRL's generation and reward hooks answer from ``replay`` (:func:`active_replay`), and
    with ``environment_factory`` TRL's pool holds stand-ins that return the cached observations instead of resetting
    (:func:`sara_trl.trainer.environment.replayed_environments`).

    Raises
    ------
    RuntimeError
        On leaving the block without an error: TRL did not take every cached answer exactly once (the replay guard,
        :meth:`Replay.check_served`): it generated or scored the rows itself.
    """
    run = trainer.sara
    run.replay = replay
    try:
        if replay.observations is None:
            yield replay
            resets = None
        else:
            with replayed_environments(trainer, replay.environment_names, replay.observations) as stand_ins:
                yield replay
            resets = [env.resets for env in stand_ins]
        replay.check_served(port.TRL_VERSION, port.REPLAY_HOOKS, resets)
    finally:
        run.replay = None


def active_replay(trainer: SaraTrainerBase) -> Replay | None:
    """The replay in progress (inside :func:`replaying`), or None: TRL generates and scores for real."""
    run = getattr(trainer, "sara", None)
    return None if run is None else run.replay
