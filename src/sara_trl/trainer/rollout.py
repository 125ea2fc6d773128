"""What one step's rollouts produced, and how they are scored: the rollout cache and the one reward pass.

Every schedule (:mod:`sara_trl.trainer.collect`) records each scored rollout in a :class:`RolloutCache` (completion
ids, vLLM sampling log-probs, the per-function reward row, its success label, ``log_extra`` columns, and what a
``rollout_func``, TRL's tool loop or an environment produced beyond the completion: a :class:`Trajectory`), indexed
by the step-local rollout id the allocation core uses, so the committed rollouts can later be *replayed* through
TRL's unchanged scoring pipeline without generating, scoring or resetting an environment again. A reward pass is
:func:`reward_pass` (TRL's ``_calculate_rewards``), its rows labelled by :func:`score_rewards`; a custom
``rollout_func`` is called and checked by :func:`call_rollout_func`.
"""

from __future__ import annotations

import copy
import dataclasses
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sara_trl.allocation.labels import SuccessRule
from sara_trl.trainer.trl import port

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.trainer.hooks import RoundTrainer

__all__ = ["RolloutCache", "Trajectory", "call_rollout_func", "make_success_rule", "reward_pass", "reward_score",
           "score_rewards", "score_source", "success_rule", "trainer_scores", "uses_tools"]

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
