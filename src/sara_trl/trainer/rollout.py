"""The rollout source of one training step: ``rollout_fn(prompt_ids, counts)`` as a closure over the trainer.

One call = one round = ONE batched generation call through TRL's own generation path (vLLM colocate/server engine,
transformers continuous batching or ``model.generate``), then ONE pass of the reward functions over the new rollouts.
With ``tools=`` (GRPO), the first generation is followed by TRL's own tool loop (:func:`run_tool_loop`): the rollouts
that called a tool get its output appended and are generated again together, until none calls one. With
``environment_factory`` (GRPO), the round first draws one environment instance per rollout from TRL's pool, resets it
with the rollout's row and appends its observation to the prompt (:mod:`sara_trl.trainer.environment`); the
instances' methods are the rollouts' tools and they reach the reward functions as ``environments``. Everything a rollout
produced (completion ids, vLLM sampling log-probs, the per-function reward row, extra log columns, with tools its
``tool_mask``, messages and tool call counts, with environments its observation) is kept in a :class:`RolloutCache`,
indexed by the step-local rollout id the allocation core uses, so the committed rollouts can later be *replayed*
through TRL's unchanged scoring pipeline without generating, scoring or resetting an environment again.

Distributed layout (lock-step rounds): every process runs the same allocator on the same
outcomes, so every process builds the same global request list. It is padded to a multiple of the world size W with
copies of its last request (their results are discarded) and cut into W equal contiguous chunks, one per process.
TRL's reward gather (inside ``_calculate_rewards``) and one ``gather_object`` of the completions then give every
process all outcomes, in global request order. One more small ``gather_object`` per round exchanges error state
(:mod:`sara_trl.trainer.distributed`): if generation or a reward function raises on one process, that process joins
the reward gather with a dummy tensor, and every process then raises at the same point (the original exception on
the failing process, a ``RuntimeError`` naming it on the others) instead of hanging in the next collective.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers.utils import logging

from sara_trl.allocation import RoundOutcome
from sara_trl.allocation.labels import SuccessRule, allocator_labels
from sara_trl.trainer.distributed import (
    match_reward_gather,
    raise_if_any_failed,
    split_round,
)
from sara_trl.trainer.environment import reset_environments, rollout_tools, uses_environments
from sara_trl.trainer.trl import port

logger = logging.get_logger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.trainer.hooks import RoundTrainer

__all__ = ["RolloutCache", "Trajectory", "call_rollout_func", "keep_observations", "make_rollout_fn",
           "make_success_rule", "reward_pass", "reward_score", "run_tool_loop", "score_rewards", "score_source",
           "success_rule", "trainer_scores", "uses_tools"]

# The keys every ``rollout_func`` output must hold (TRL's GRPO generation step); the others are extra fields.
ROLLOUT_FUNC_KEYS = ("prompt_ids", "completion_ids", "logprobs")


@dataclass
class Trajectory:
    """What one rollout produced besides its completion ids and log-probs: what a custom ``rollout_func`` returned,
    or the multi-turn record of TRL's tool loop (``tools=``).

    Attributes
    ----------
    prompt_ids : list of int
        The prompt ids: those the ``rollout_func`` returned (its own chat templating; the replay hands them back to
        TRL), or TRL's tokenization of the prompt (tools; the replay lets TRL tokenize again).
    env_mask : list of int or None
        1 = model token, 0 = tool/environment token, one per completion token: the ``rollout_func``'s ``env_mask``,
        or the ``tool_mask`` TRL's tool loop built; None when there is none.
    fields : dict
        A ``rollout_func``'s other extra fields, this rollout's value of each (what TRL merges into the rollout's
        input row).
    turn_ids : list of int or None
        Tools: the completion ids of the first generation (before any tool call), what TRL's ``_generate`` decodes
        before it enters the tool loop; None without tools.
    messages : list of dict or None
        Tools: the completion as TRL's tool loop left it (assistant turns and tool messages), what the reward
        functions received and TRL logs.
    tool_calls, tool_failures : int
        Tools: the tool calls the loop ran for this rollout, and how many of them failed (TRL's ``tools/*`` metrics).
    observation : any
        ``environment_factory``: what the rollout's ``environment.reset(**row)`` returned (appended to the prompt's
        last message; None: nothing appended), handed back to TRL in the replay instead of resetting again.
    """

    prompt_ids: list[int]
    env_mask: list[int] | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    turn_ids: list[int] | None = None
    messages: list[dict] | None = None
    tool_calls: int = 0
    tool_failures: int = 0
    observation: Any = None


@dataclass
class RolloutCache:
    """What every rollout of one step produced, indexed by step-local rollout id (generation order).

    Attributes
    ----------
    completion_ids : list of list of int
        Per rollout, the completion token ids (as TRL's generation path returned them).
    logprobs : list of (list of float or None)
        Per rollout, the sampled tokens' log-probs from vLLM (``None`` entries when the backend gives none:
        transformers generation, RLOO).
    rewards : list of torch.Tensor
        Per round, the ``(R_round, F)`` float32 reward rows (NaN where a function returned ``None``), CPU.
    success : list of numpy.ndarray
        Per round, ``(R_round,)`` float64 threshold labels (1, 0, NaN unscorable): what ``sara/raw_success_rate``
        reports.
    tokens : list of numpy.ndarray
        Per round, ``(R_round,)`` int64 completion lengths.
    round_index : list of int
        Per rollout, the 1-based round that generated it.
    extra_logs : dict of str to list
        Per column logged by a reward function through ``log_extra``, one value per rollout (``None`` where a round
        did not log that column).
    carried : int
        Rollouts carried in from the previous step (``carry_over``; round index 0): the first ``carried`` ids, the
        step's own rollouts following; in a concatenation of several processes' caches (:meth:`concat`), the sum of
        theirs, which lie where :attr:`carried_runs` says.
    uncached : dict of str to int
        Streaming multi-turn rollouts (:class:`~sara_trl.trainer.trajectory.TrajectoryEngine`): the model tokens,
        tool tokens and tool calls (``model_tokens``, ``tool_tokens``, ``tool_calls``) of this step's rollouts the
        cache does not hold (aborted, or finished and given up before they were recorded), all surplus; empty
        otherwise (rounds cache every rollout). :meth:`concat` sums them.
    carried_runs : list of (int, int)
        :meth:`concat` only: ``(first id, count)`` of each part's carried rollouts, in id order; empty: the first
        ``carried`` ids (:meth:`generated_ids` reads either).
    trajectories : dict of int to Trajectory
        By rollout id, what a custom ``rollout_func`` returned beyond the completion, or the record of TRL's tool
        loop and the environment's observation (empty without any of them).
    env_resets : int
        ``environment_factory``: the ``reset`` calls this step's rounds made, on every process (a round split over W
        processes also resets its padding copies, see :func:`~sara_trl.trainer.distributed.split_round`); 0 for a
        cache carried in (those resets were counted in the step that generated the rollouts).
    """

    completion_ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float] | None] = field(default_factory=list)
    rewards: list[torch.Tensor] = field(default_factory=list)
    success: list[np.ndarray] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    round_index: list[int] = field(default_factory=list)
    extra_logs: dict[str, list] = field(default_factory=dict)
    carried: int = 0
    trajectories: dict[int, Trajectory] = field(default_factory=dict)
    env_resets: int = 0
    uncached: dict[str, int] = field(default_factory=dict)
    carried_runs: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_rollouts(self) -> int:
        """Rollouts held (carried ones included)."""
        return len(self.completion_ids)

    def generated_ids(self) -> np.ndarray:
        """Ids of the rollouts generated in this step, ascending: ``(num_rollouts - carried,)`` int64 (every id but
        the carried ones, wherever :attr:`carried_runs` puts them)."""
        generated = np.ones(self.num_rollouts, bool)
        for start, count in self.carried_runs or [(0, self.carried)]:
            generated[start: start + count] = False
        return np.flatnonzero(generated).astype(np.int64)

    def carry(self, ids: np.ndarray) -> RolloutCache:
        """The rollouts ``ids`` as the start of the next step's cache.

        Parameters
        ----------
        ids : numpy.ndarray
            ``(C,)`` step-local rollout ids (``StepResult.carry_rollout_ids``).

        Returns
        -------
        RolloutCache
            A cache whose rollouts ``0 .. C-1`` are ``ids`` in this order, with round index 0 (carried).
        """
        ids = np.asarray(ids, dtype=np.int64)
        pick = ids.tolist()
        rewards = self.reward_matrix()
        return RolloutCache(
            completion_ids=[self.completion_ids[i] for i in pick],
            logprobs=[self.logprobs[i] for i in pick],
            rewards=[rewards[torch.as_tensor(ids)]] if len(ids) else [],
            success=[self.success_labels()[ids]] if len(ids) else [],
            tokens=[np.concatenate(self.tokens)[ids]] if len(ids) else [],
            round_index=[0] * len(pick),
            extra_logs={name: [values[i] for i in pick] for name, values in self.extra_logs.items()},
            carried=len(pick),
            trajectories={new: self.trajectories[old] for new, old in enumerate(pick) if old in self.trajectories},
        )

    def state(self) -> dict:
        """Plain-Python/tensor form for ``torch.save`` (checkpointing a carried cache)."""
        return {"completion_ids": self.completion_ids, "logprobs": self.logprobs, "rewards": self.reward_matrix(),
                "success": self.success_labels(), "tokens": np.concatenate(self.tokens) if self.tokens else
                np.zeros(0, np.int64), "round_index": self.round_index, "extra_logs": self.extra_logs,
                "carried": self.carried,
                "trajectories": {i: {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
                                 for i, t in self.trajectories.items()}}

    @classmethod
    def from_state(cls, state: dict) -> RolloutCache:
        """Rebuild a cache from :meth:`state` (a carried cache loaded from a checkpoint's ``sara_carry.pt``)."""
        n = len(state["completion_ids"])
        return cls(completion_ids=list(state["completion_ids"]), logprobs=list(state["logprobs"]),
                   rewards=[state["rewards"]] if n else [], success=[np.asarray(state["success"])] if n else [],
                   tokens=[np.asarray(state["tokens"], np.int64)] if n else [],
                   round_index=list(state["round_index"]), extra_logs=dict(state["extra_logs"]),
                   carried=int(state["carried"]),
                   trajectories={int(i): Trajectory(**t) for i, t in state.get("trajectories", {}).items()})

    @classmethod
    def concat(cls, caches: list[RolloutCache]) -> RolloutCache:
        """The rollouts of ``caches`` one after the other (the per-process caches of a streaming step, in process
        order, so the ids match :func:`sara_trl.allocation.merge_step_results`). With ``carry_over`` each part starts
        with the rollouts its process carried in: the result's ``carried`` is their sum and :attr:`carried_runs`
        says where each part's lie.
        """
        out = cls()
        for cache in caches:
            count = cache.num_rollouts
            offset = out.num_rollouts
            out.carried_runs.extend((offset + start, run) for start, run in
                                    cache.carried_runs or [(0, cache.carried)] if run)
            out.carried += cache.carried
            out.env_resets += cache.env_resets
            for unit, value in cache.uncached.items():
                out.uncached[unit] = out.uncached.get(unit, 0) + value
            out.trajectories.update({offset + i: t for i, t in cache.trajectories.items()})
            out.completion_ids.extend(cache.completion_ids)
            out.logprobs.extend(cache.logprobs)
            if count:
                out.rewards.append(cache.reward_matrix())
                out.success.append(cache.success_labels())
                out.tokens.append(np.concatenate(cache.tokens).astype(np.int64))
            out.round_index.extend(cache.round_index)
            out.add_extra_logs(cache.extra_logs, count)
        return out

    def reward_matrix(self) -> torch.Tensor:
        """All reward rows, ``(num_rollouts, F)`` float32 on CPU."""
        return torch.cat(self.rewards, dim=0) if self.rewards else torch.zeros(0, 0)

    def success_labels(self) -> np.ndarray:
        """All threshold labels, ``(num_rollouts,)`` float64 (NaN = unscorable)."""
        return np.concatenate(self.success) if self.success else np.zeros(0)

    def append(self, completion_ids: list[list[int]], logprobs: list, rewards: torch.Tensor, labels: np.ndarray,
               round_index: list[int], columns: dict[str, list],
               trajectories: list[Trajectory | None] | None = None) -> np.ndarray:
        """Record N scored rollouts (a round, or the kept completions of a reward pass) under the next N ids: the
        one way every schedule writes the cache.

        Parameters
        ----------
        completion_ids : list of list of int
            ``(N,)`` completion ids.
        logprobs : list
            ``(N,)`` sampled-token log-probs, None entries where the backend gives none.
        rewards : torch.Tensor
            ``(N, F)`` float32 reward rows, CPU.
        labels : numpy.ndarray
            ``(N,)`` success labels (1, 0, NaN unscorable).
        round_index : list of int
            ``(N,)`` the round of each (0: none, streaming).
        columns : dict of str to list
            ``log_extra`` columns, each ``N`` long.
        trajectories : list of Trajectory or None, optional
            ``(N,)`` what each rollout produced besides its completion (None entries: nothing).

        Returns
        -------
        numpy.ndarray
            ``(N,)`` int64 completion lengths (tokens), as recorded.
        """
        first = self.num_rollouts
        self.trajectories.update({first + i: t for i, t in enumerate(trajectories or []) if t is not None})
        tokens = np.asarray([len(ids) for ids in completion_ids], dtype=np.int64)
        self.completion_ids.extend(completion_ids)
        self.logprobs.extend(logprobs)
        self.rewards.append(rewards)
        self.success.append(labels)
        self.tokens.append(tokens)
        self.round_index.extend(round_index)
        self.add_extra_logs(columns, len(completion_ids))
        return tokens

    def add_extra_logs(self, columns: dict[str, list], count: int) -> None:
        """Append one round's ``log_extra`` columns (each ``count`` long), padding absent columns with None."""
        before = self.num_rollouts - count
        for name in columns:
            if name not in self.extra_logs:
                self.extra_logs[name] = [None] * before
        for name, values in self.extra_logs.items():
            values.extend(columns.get(name, [None] * count))


def reward_score(
    rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, func_index: int | None = None
) -> torch.Tensor:
    """Score each rollout the way TRL combines rewards (``sum_then_normalize``), before any normalization.

    Parameters
    ----------
    rewards_per_func : torch.Tensor
        ``(R, F)`` rewards, NaN where a function returned ``None``.
    reward_weights : torch.Tensor
        ``(F,)`` weights (``args.reward_weights``).
    func_index : int, optional
        If given, the score is that function's raw (unweighted) value instead.

    Returns
    -------
    torch.Tensor
        ``(R,)`` float32 scores; NaN when every function returned ``None`` (or, with ``func_index``, when that one
        did): the rollout is unscorable.
    """
    if func_index is not None:
        return rewards_per_func[:, func_index].clone()
    weights = reward_weights.to(rewards_per_func.device, rewards_per_func.dtype)
    score = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    score[torch.isnan(rewards_per_func).all(dim=1)] = float("nan")
    return score


def score_source(trainer: RoundTrainer) -> str:
    """What a rollout's score is, in words, for messages: the function named by ``success_reward_func``, or the
    weighted sum of every reward function (with its ``reward_weights`` when they are not all 1)."""
    args = trainer.args
    if args.success_reward_func is not None:
        return f"the reward function {args.success_reward_func!r} (success_reward_func)"
    names = list(trainer.reward_func_names)
    weights = [float(w) for w in trainer.reward_weights]
    if len(names) == 1 and weights == [1.0]:
        return f"the reward function {names[0]!r}"
    shown = "" if all(w == 1.0 for w in weights) else f" with reward_weights {[round(w, 6) for w in weights]}"
    return f"the weighted sum of the reward functions {names}{shown}"


def make_success_rule(trainer: RoundTrainer) -> SuccessRule:
    """The :class:`~sara_trl.allocation.labels.SuccessRule` of a trainer: its threshold, whether the user set it
    (``args.success_threshold_explicit``), the score's source and the allocator, checking from the next step on."""
    args = trainer.args
    return SuccessRule(float(args.success_threshold), explicit=args.success_threshold_explicit,
                       source=score_source(trainer), allocator=args.allocator, ds_filter=args.ds_filter)


def success_rule(trainer: RoundTrainer) -> SuccessRule:
    """The trainer's rule (``trainer.sara.success_rule``); a stand-in trainer without a run state gets a rule that
    labels without checking."""
    run = getattr(trainer, "sara", None)
    rule = None if run is None else run.success_rule
    if rule is None:
        rule = make_success_rule(trainer)
        rule.checking = False
    return rule


def trainer_scores(trainer: RoundTrainer, rewards: torch.Tensor) -> np.ndarray:
    """:func:`reward_score` of ``(R, F)`` reward rows as the trainer scores them (``success_reward_func`` or the
    weighted sum), ``(R,)`` float32 as numpy."""
    name = trainer.args.success_reward_func
    func_index = trainer.reward_func_names.index(name) if name is not None else None
    return reward_score(rewards, trainer.reward_weights, func_index).numpy()


def reward_pass(trainer: RoundTrainer, rows: list[dict], prompts: list, completions: list,
                completion_ids: list[list[int]], local: bool = False) -> tuple[torch.Tensor, dict[str, list]]:
    """ONE pass of the trainer's reward functions (TRL's ``_calculate_rewards``) over N rollouts: the one reward
    call of every schedule.

    Parameters
    ----------
    rows, prompts, completions, completion_ids : list
        ``(N,)`` each: the rollouts' dataset rows, prompts, completions as the reward functions receive them, and
        completion ids.
    local : bool
        Score on this process alone (streaming: the port's ``local_reward_pass``); False: TRL's gather over processes
        (lock-step rounds), every process receiving every process's rows in process order.

    Returns
    -------
    rewards : torch.Tensor
        ``(N * processes, F)`` rows as TRL returns them (NaN where a function returned None); ``(N, F)`` with ``local``.
    extra : dict of str to list
        This process's ``log_extra`` columns.
    """
    with port.captured_extra_logs(trainer) as extra, port.local_reward_pass(trainer) if local else nullcontext():
        rewards = port.calculate_rewards(trainer, rows, prompts, completions, completion_ids)
    return rewards, extra


def score_rewards(trainer: RoundTrainer, rewards: torch.Tensor, count: int) -> tuple[torch.Tensor, np.ndarray,
                                                                                      np.ndarray]:
    """The first ``count`` reward rows of a :func:`reward_pass`, scored and labelled as every schedule labels them.

    Returns
    -------
    rewards : torch.Tensor
        ``(count, F)`` float32 on CPU.
    score : numpy.ndarray
        ``(count,)`` float32 scores (:func:`trainer_scores`).
    labels : numpy.ndarray
        ``(count,)`` success labels of the trainer's rule (:func:`success_rule`; it raises on the first scored step if
        the scores are not success labels, see :class:`~sara_trl.allocation.labels.SuccessRule`).
    """
    rewards = rewards[:count].detach().float().cpu()
    score = trainer_scores(trainer, rewards)
    return rewards, score, success_rule(trainer).labels(score)


def call_rollout_func(trainer: RoundTrainer, prompts: list) -> tuple[list, list, list | None, list[Trajectory]]:
    """One call of the trainer's custom ``rollout_func`` for a round's prompts, checked as SARA needs it.

    The contract is TRL's (GRPO's generation step): ``rollout_func(prompts, trainer)`` receives this process's
    prompts as they are (a copy; each prompt repeated once per rollout SARA asks of it, as TRL's sampler repeats it
    ``num_generations`` times) and returns a dict with ``prompt_ids``, ``completion_ids`` and ``logprobs`` (one entry
    per prompt; ``logprobs`` may be None), and optionally ``env_mask`` (one 0/1 list per completion, 0 = tokens not
    generated by the model) and any other fields (a list, one value per prompt, or one value for all), which TRL
    merges into the input rows the reward functions receive.

    Returns
    -------
    prompt_ids, completion_ids : list of list of int
        One per prompt.
    logprobs : list or None
        One list per prompt, or None.
    trajectories : list of Trajectory
        One per prompt: its prompt ids, ``env_mask`` and extra fields.

    Raises
    ------
    ValueError
        A required key is missing, a list has the wrong length, or ``env_mask`` does not match the completion (or is
        returned to a trainer whose TRL loss has no such mask: RLOO).
    """
    n = len(prompts)
    if getattr(trainer, "use_vllm", False):  # as TRL: keep vLLM's weights in sync for rollouts that use its engine
        port.sync_weights_once(trainer)
    output = trainer.sara.rollout_func(copy.deepcopy(prompts), trainer)
    if not isinstance(output, dict):
        raise ValueError(f"rollout_func must return a dict, got {type(output).__name__}.")
    missing = sorted(set(ROLLOUT_FUNC_KEYS) - output.keys())
    if missing:
        raise ValueError(f"rollout_func must return keys {missing} in its output dict.")
    prompt_ids, completion_ids, logprobs = (output[key] for key in ROLLOUT_FUNC_KEYS)
    for name, values in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids), ("logprobs", logprobs)):
        if values is not None and len(values) != n:
            raise ValueError(
                f"rollout_func returned {len(values)} `{name}` for {n} prompts: SARA asks for exactly one completion "
                "per prompt it passes (a prompt comes once per rollout SARA wants of it, already repeated)."
            )
    if prompt_ids is None or completion_ids is None:
        raise ValueError("rollout_func must return `prompt_ids` and `completion_ids` lists, not None.")
    prompt_ids = [list(ids) for ids in prompt_ids]
    completion_ids = [list(ids) for ids in completion_ids]
    env_mask = output.get("env_mask")
    if env_mask is not None:
        if not getattr(trainer, "_sara_accepts_env_mask", False):
            raise ValueError(
                f"{type(trainer).__name__}: rollout_func returned `env_mask`, but the loss of its TRL base has no "
                "tool/environment mask: the environment tokens would be trained as the model's. Drop `env_mask`, or "
                "use SaraGRPOTrainer (whose TRL loss masks them)."
            )
        if len(env_mask) != n or any(len(m) != len(ids) for m, ids in zip(env_mask, completion_ids)):
            raise ValueError("rollout_func's `env_mask` must hold one 0/1 list per completion, as long as it.")
    fields = {key: value for key, value in output.items() if key not in ROLLOUT_FUNC_KEYS and key != "env_mask"}
    for key, values in fields.items():
        if isinstance(values, list) and len(values) != n:
            raise ValueError(
                f"rollout_func's extra field {key!r} is a list of {len(values)} values for {n} prompts: SARA keeps "
                "one value per rollout (to replay any subset), so return one per prompt, or a single non-list value."
            )
    trajectories = [
        Trajectory(prompt_ids=prompt_ids[i], env_mask=None if env_mask is None else list(env_mask[i]),
                   fields={key: values[i] if isinstance(values, list) else values for key, values in fields.items()})
        for i in range(n)
    ]
    return prompt_ids, completion_ids, None if logprobs is None else list(logprobs), trajectories


def uses_tools(trainer: RoundTrainer) -> bool:
    """Whether the trainer trains with ``tools=`` (TRL's GRPO tool loop runs in every round)."""
    return bool(getattr(trainer, "tools", None))


class _CountingTools(dict):
    """One rollout's synchronous tool dict for TRL's loop, counting its tool calls and failures as TRL counts them.

    TRL's ``_tool_call_loop`` counts every call of type ``function`` and tests ``name in`` this dict exactly once
    for each; a call fails when its tool raises or its name is in neither dict (TRL's "Tool ... not found").
    """

    def __init__(self, counter: _ToolCallCounter, index: int, tools: dict, async_names: set):
        super().__init__(tools)
        self._counter, self._index, self._async_names = counter, index, async_names

    def __contains__(self, name) -> bool:
        found = super().__contains__(name)
        self._counter.calls[self._index] += 1
        if not found and name not in self._async_names:
            self._counter.failures[self._index] += 1
        return found


class _ToolCallCounter:
    """Per-rollout tool dicts for one round of TRL's tool loop, with the tool calls and failures of each rollout
    (TRL's loop returns only the batch's totals; SARA replays subsets of the rollouts)."""

    def __init__(self, tools: list[list[Callable]]):
        self.n, self.tools = len(tools), [list(t) for t in tools]
        self.calls, self.failures = [0] * self.n, [0] * self.n

    def _counted(self, tool: Callable, index: int) -> Callable:
        failures = self.failures
        if inspect.iscoroutinefunction(tool):
            async def call_async(**kwargs):
                try:
                    return await tool(**kwargs)
                except Exception:
                    failures[index] += 1
                    raise

            return call_async

        def call(**kwargs):
            try:
                return tool(**kwargs)
            except Exception:
                failures[index] += 1
                raise

        return call

    def tool_dicts(self) -> tuple[list[dict], list[dict]]:
        """``(sync, async)``: one ``{name: tool}`` dict per rollout each, as TRL's ``_sync_tool_dicts`` /
        ``_async_tool_dicts`` (built as ``_generate_and_score_completions`` builds them: each rollout's standalone
        tools, then its environment's methods)."""
        sync_dicts, async_dicts = [], []
        for i, tools in enumerate(self.tools):
            async_names = {tool.__name__ for tool in tools if inspect.iscoroutinefunction(tool)}
            sync = {tool.__name__: self._counted(tool, i) for tool in tools if not inspect.iscoroutinefunction(tool)}
            async_dicts.append({tool.__name__: self._counted(tool, i) for tool in tools
                                if inspect.iscoroutinefunction(tool)})
            sync_dicts.append(_CountingTools(self, i, sync, async_names))
        return sync_dicts, async_dicts


def run_tool_loop(
    trainer: RoundTrainer, prompts: list, prompt_ids: list[list[int]], completion_ids: list[list[int]],
    completions: list, logprobs: list | None, images: Any, multimodal_fields: dict,
) -> tuple[list[list[int]], list | None, list, list[Trajectory]]:
    """TRL's multi-turn tool loop (the port's ``run_tool_call_loop``) over one round's first generation.

    As TRL's ``_generate_and_score_completions`` does before it generates, one tool dict per rollout is built (the
    standalone ``tools``, then the methods of the rollout's environment instance with ``environment_factory``,
    :func:`~sara_trl.trainer.environment.rollout_tools`; each counts its rollout's tool calls and failures),
    then TRL's loop runs the tool calls, appends their output and generates again through ``_generate_single_turn``
    (one completion per rollout, all rollouts still calling tools in one batch), up to
    ``max_tool_calling_iterations``.

    Parameters
    ----------
    prompts : list
        The round's prompts (copied: TRL's loop appends to them).
    prompt_ids, completion_ids : list of list of int
        TRL's tokenization of the prompts and the first generation's completions.
    completions : list
        The first generation decoded as TRL's ``_generate`` decodes it (``parse_response``, which finds tool calls).
    logprobs : list or None
        The first generation's sampling log-probs (vLLM), or None.
    images, multimodal_fields
        As ``_tokenize_prompts`` returned them.

    Returns
    -------
    completion_ids : list of list of int
        The whole trajectories (model turns and tool output), one per rollout.
    logprobs : list or None
        Their sampling log-probs (0.0 on tool tokens, as TRL's loop fills them), or None.
    completions : list
        The trajectories as messages (what the reward functions receive).
    trajectories : list of Trajectory
        One per rollout: its prompt ids, first-generation ids, ``tool_mask`` (as ``env_mask``), messages and tool call
        and failure counts.
    """
    n = len(prompts)
    counter = _ToolCallCounter(rollout_tools(trainer, n))
    turn_ids = [list(ids) for ids in completion_ids]
    logprobs = None if logprobs is None else [list(lps) for lps in logprobs]
    tool_mask, completions, completion_ids, logprobs, calls, failures, _ = port.run_tool_call_loop(
        trainer, counter.tool_dicts(), copy.deepcopy(prompts), prompt_ids, [list(ids) for ids in completion_ids],
        completions, logprobs, images, multimodal_fields)
    if (sum(counter.calls), sum(counter.failures)) != (calls, failures):  # pragma: no cover - see _ToolCallCounter
        # Calls of a type other than "function" never reach the dicts; TRL counts each as a failed call and answers
        # with an "Unsupported tool call type" error message (unless rolled back as overlong).
        for i, messages in enumerate(completions):
            unsupported = sum(1 for m in messages if m.get("role") == "tool"
                              and str(m.get("content", "")).startswith("{'error': 'Unsupported tool call type"))
            counter.calls[i] += unsupported
            counter.failures[i] += unsupported
        if (sum(counter.calls), sum(counter.failures)) != (calls, failures):
            logger.warning(
                f"TRL's tool loop counted {calls} tool calls ({failures} failed); SARA attributed "
                f"{sum(counter.calls)} ({sum(counter.failures)}) to single rollouts, so the replayed tools/* metrics "
                "may differ slightly from TRL's for this round.")
    trajectories = [
        Trajectory(prompt_ids=list(prompt_ids[i]), env_mask=list(tool_mask[i]), turn_ids=turn_ids[i],
                   messages=copy.deepcopy(completions[i]), tool_calls=counter.calls[i],
                   tool_failures=counter.failures[i])
        for i in range(n)
    ]
    return [list(ids) for ids in completion_ids], logprobs, completions, trajectories


def keep_observations(trajectories: list[Trajectory] | None, prompt_ids: list[list[int]],
                      observations: list) -> list[Trajectory]:
    """Each rollout's trajectory with the observation its environment's ``reset`` returned (a new trajectory holding
    only the prompt ids and the observation for an environment without tools, where TRL runs no tool loop).

    Parameters
    ----------
    trajectories : list of Trajectory or None
        ``(N,)`` the tool loop's records, or None without tools.
    prompt_ids : list of list of int
        ``(N,)`` TRL's tokenization of the prompts (observation appended).
    observations : list
        ``(N,)`` what each ``reset`` returned.

    Returns
    -------
    list of Trajectory
        ``(N,)``.
    """
    if trajectories is None:
        trajectories = [Trajectory(prompt_ids=list(ids)) for ids in prompt_ids]
    for trajectory, observation in zip(trajectories, observations):
        trajectory.observation = copy.deepcopy(observation)
    return trajectories


def make_rollout_fn(
    trainer: RoundTrainer, cache: RolloutCache, on_round: Callable[[int, int, np.ndarray], None] | None = None
) -> Callable[[np.ndarray, np.ndarray], RoundOutcome]:
    """Build the step's ``rollout_fn`` (see :class:`sara_trl.allocation.types.RolloutFn`).

    Parameters
    ----------
    trainer : RoundTrainer
        A SARA trainer in training mode; only the members of :class:`sara_trl.trainer.hooks.RoundTrainer` are used
        (the hooks ``_sara_row``, ``_sara_generate_round``, ``_sara_decode`` and TRL's ``_tokenize_prompts``,
        ``_calculate_rewards`` and ``_pending_extra_logs``).
    cache : RolloutCache
        Receives every rollout's completion ids, log-probs, rewards and labels.
    on_round : callable, optional
        Called after each round with ``(round_number, rollouts_in_round, success_labels)`` (progress display).

    Returns
    -------
    callable
        ``rollout_fn(prompt_ids (P,) int64, counts (P,) int64) -> RoundOutcome`` with ``counts.sum()`` outcomes in
        prompt-major order. It raises ``ValueError`` on an empty request, and on malformed outcomes (via
        :class:`~sara_trl.allocation.RoundOutcome`), and propagates any error of generation or of a reward function;
        with several processes, such an error on one process makes every process raise in the same round (see
        :func:`sara_trl.trainer.distributed.raise_if_any_failed`).
    """
    accelerator = trainer.accelerator
    world, rank = accelerator.num_processes, accelerator.process_index
    rule = success_rule(trainer)
    custom = getattr(getattr(trainer, "sara", None), "rollout_func", None) is not None
    tools = uses_tools(trainer)
    environments = uses_environments(trainer)
    round_number = 0

    def rollout_fn(prompt_ids: np.ndarray, counts: np.ndarray) -> RoundOutcome:
        nonlocal round_number
        round_number += 1
        prompt_ids = np.asarray(prompt_ids, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        requests = np.repeat(prompt_ids, counts)  # prompt-major: counts[0] copies of prompt 0, then ...
        total = len(requests)
        if total == 0:
            raise ValueError("rollout_fn was asked for 0 rollouts; the allocator must request at least one")
        local, per_rank = split_round(requests, world, rank)  # >= 1 row on every process, equal counts

        error = None
        try:
            rows = [trainer._sara_row(int(pid)) for pid in local]
            prompts = [row["prompt"] for row in rows]
            trajectories = None
            if custom:  # the user's rollout_func generates the round; its extra fields join the rows (as in TRL)
                prompt_token_ids, completion_ids, logprobs, trajectories = call_rollout_func(trainer, prompts)
                rows = [{**row, **t.fields} for row, t in zip(rows, trajectories)]
                completions = trainer._sara_decode(prompts, prompt_token_ids, completion_ids)
            else:
                observations = None
                if environments:  # as TRL: draw an instance per rollout, reset it with the row, append the observation
                    prompts, observations = reset_environments(trainer, rows, prompts)
                    cache.env_resets += per_rank * world
                prompt_token_ids, images, multimodal_fields = port.tokenize_prompts(trainer, prompts)
                completion_ids, logprobs = trainer._sara_generate_round(prompt_token_ids, images, multimodal_fields)
                completion_ids = [list(ids) for ids in completion_ids]
                completions = trainer._sara_decode(prompts, prompt_token_ids, completion_ids)
                if tools:  # TRL's tool loop turns each first generation into a whole trajectory
                    completion_ids, logprobs, completions, trajectories = run_tool_loop(
                        trainer, prompts, prompt_token_ids, completion_ids, completions, logprobs, images,
                        multimodal_fields)
                if observations is not None:
                    trajectories = keep_observations(trajectories, prompt_token_ids, observations)

            # ONE reward pass over this round's rollouts. TRL's `_calculate_rewards` gathers over processes, so
            # every process receives all (per_rank * world, F) rows in global request order.
            rewards, extra = reward_pass(trainer, rows, prompts, completions, completion_ids)
        except Exception as exc:  # a failure on one process must fail the step everywhere, not hang the others
            if world == 1:
                raise
            error = exc
            match_reward_gather(accelerator, per_rank, len(trainer.reward_funcs))
        if world > 1:
            raise_if_any_failed(accelerator, error, f"SARA round {round_number} (generation and rewards)")

        if world > 1:
            gathered = gather_object([(ids, lps, t) for ids, lps, t in zip(
                completion_ids, logprobs or [None] * len(rows), trajectories or [None] * len(rows))])
            all_ids = [item[0] for item in gathered][:total]
            all_lps = [item[1] for item in gathered][:total]
            all_trajectories = [item[2] for item in gathered][:total]
            columns = {}
            for name in sorted(set(gather_object(list(extra)))):
                values = extra.get(name, [])
                values = values if len(values) == len(rows) else [None] * len(rows)
                columns[name] = gather_object(values)[:total]
        else:
            all_ids = completion_ids
            all_lps = list(logprobs) if logprobs is not None else [None] * total
            all_trajectories = trajectories
            columns = {name: values for name, values in extra.items() if len(values) == total}

        # raises on the first step if the scores are not success labels (see SuccessRule)
        rewards, score, labels = score_rewards(trainer, rewards, total)
        decide_on = allocator_labels(score, counts, rule.threshold, trainer.args.ds_filter)
        tokens = cache.append(all_ids, all_lps, rewards, labels, [round_number] * total, columns, all_trajectories)
        if on_round is not None:
            on_round(round_number, total, labels)
        return RoundOutcome(success=decide_on, tokens=tokens)

    return rollout_fn
