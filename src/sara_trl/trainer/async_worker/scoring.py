"""One reward pass of the asynchronous worker: the completions that finished together, from different prompts.

Each reward function is called once per pass with TRL's keyword arguments (``prompts``, ``completions``,
``completion_ids`` and every other dataset column, one entry per completion: here from each completion's own row).
The reward of a completion is TRL 1.16's asynchronous reward (the port's ``async_group_rewards``: the sum of the
functions, NaN when every one returned None); its success label is the synchronous trainers' rule
(:class:`~sara_trl.allocation.labels.SuccessRule`: the raw value of ``success_reward_func`` if named, else that reward,
``> success_threshold``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from trl.trainer.utils import get_callable_name, is_async_callable

from sara_trl.allocation.labels import DEFAULT_SUCCESS_THRESHOLD, SuccessRule
from sara_trl.trainer.trl import port

__all__ = ["Scored", "RewardScorer"]

_NOT_COLUMNS = {"prompt", "completion", "completion_ids"}


@dataclass
class Scored:
    """A reward pass over ``m`` completions.

    Attributes
    ----------
    columns : ndarray of float64, shape (F, m)
        Each reward function's value (NaN: it returned None).
    rewards : ndarray of float64, shape (m,)
        TRL's asynchronous reward (sum over the functions; NaN: unscorable). Advantages are computed from these.
    scores : ndarray of float64, shape (m,)
        What the success rule labels: ``success_reward_func``'s column, or ``rewards``.
    labels : ndarray of float64, shape (m,)
        Success labels in {0, 1, NaN} (``scores > threshold``).
    """

    columns: np.ndarray
    rewards: np.ndarray
    scores: np.ndarray
    labels: np.ndarray


class RewardScorer:
    """Scores finished completions with the user's reward functions (see the module docstring).

    Parameters
    ----------
    reward_funcs : list of callable
        TRL reward functions ``(prompts, completions, completion_ids, **columns) -> list[float | None]``, sync or
        async; at least one.
    success_reward_func : str or None
        Name (``trl.trainer.utils.get_callable_name``) of the function whose raw value labels success.
    success_threshold : float or None
        None: 0.5, not explicit (a scale check on the first window raises if the scores are not 0/1 labels).
    allocator, ds_filter : str
        The allocation config's, for the success rule's messages and strictness.

    Raises
    ------
    ValueError
        No reward function, or ``success_reward_func`` names none of them.
    """

    def __init__(self, reward_funcs: list[Callable], success_reward_func: str | None, success_threshold: float | None,
                 allocator: str = "sara", ds_filter: str = "success"):
        if not reward_funcs:
            raise ValueError("the asynchronous worker needs at least one reward function")
        self.reward_funcs = list(reward_funcs)
        self.names = [get_callable_name(f) for f in self.reward_funcs]
        if success_reward_func is not None and success_reward_func not in self.names:
            raise ValueError(f"success_reward_func={success_reward_func!r} is none of the reward functions "
                             f"{self.names}")
        self.success_index = None if success_reward_func is None else self.names.index(success_reward_func)
        if success_reward_func is not None:
            source = f"the reward function {success_reward_func!r} (success_reward_func)"
        elif len(self.names) == 1:
            source = f"the reward function {self.names[0]!r}"
        else:
            source = f"the sum of the reward functions {self.names}"
        explicit = success_threshold is not None
        self.rule = SuccessRule(DEFAULT_SUCCESS_THRESHOLD if success_threshold is None else float(success_threshold),
                                explicit=explicit, source=source, allocator=allocator, ds_filter=ds_filter)

    async def score(self, rows: list[dict], prompts: list, completions: list,
                    completion_ids: list[list[int]]) -> Scored:
        """ONE reward pass over ``m = len(rows)`` completions (``rows[i]``: the dataset row of completion ``i``'s
        prompt). Synchronous functions run on a worker thread (``asyncio.to_thread``), as in TRL's worker.

        Raises
        ------
        ValueError
            A reward function returned other than ``m`` values, or the success rule rejects the scores' scale.
        Exception
            Whatever a reward function raises.
        """
        m = len(rows)
        kwargs = {"prompts": list(prompts), "completions": list(completions), "completion_ids": list(completion_ids)}
        for key in rows[0] if rows else ():
            if key not in _NOT_COLUMNS:
                kwargs[key] = [row.get(key) for row in rows]
        calls = [f(**kwargs) if is_async_callable(f) else asyncio.to_thread(f, **kwargs) for f in self.reward_funcs]
        outputs = await asyncio.gather(*calls)
        for name, values in zip(self.names, outputs):
            if values is None or len(values) != m:
                raise ValueError(f"reward function {name!r} returned {0 if values is None else len(values)} values "
                                 f"for {m} completions")
        rewards = port.async_group_rewards([list(v) for v in outputs])
        columns = np.array([[np.nan if r is None else float(r) for r in v] for v in outputs], dtype=np.float64)
        scores = rewards if self.success_index is None else columns[self.success_index]
        return Scored(columns=columns, rewards=rewards, scores=scores, labels=self.rule.labels(scores))
