"""TRL's ``environment_factory`` (GRPO) in SARA's rounds, and in the replay.

A round does for its rows what TRL's GRPO generation batch does for a batch before it
generates (:func:`reset_environments`): it draws one instance per rollout from TRL's pool
(the port's ``environment_pool``, grown by the factory when a round needs more instances than exist), records each
row's environment name (the port's ``set_batch_environments``, which TRL's tokenization and tool loop read for the
per-prompt tool schema), calls ``environment.reset(**row)`` and appends the observation it returns to the prompt's last
message. The drawn instances are ``trainer.environments``, which TRL's ``_calculate_rewards`` hands the reward
functions (the environment's own ``get_reward`` among them) as ``environments``. Their public methods, bound to each
rollout's instance, are that rollout's tools (:func:`rollout_tools`). Instances are reused from round to round (reset
again), as TRL reuses them from batch to batch: the rewards of a round are computed before the next round resets them.

The replay must not reset the real instances again (a reset may be costly, or may advance the environment's own
random state): while TRL's unchanged pipeline replays the committed rows, its pool holds stand-ins
(:class:`ReplayedEnvironment`, one per row) whose ``reset`` returns the observation the row's rollout was generated
with, so TRL rebuilds the same prompt (and the same prompt ids) without touching an environment
(:func:`replayed_environments`). Their rewards come from the cache.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import RoundTrainer

__all__ = ["ReplayedEnvironment", "append_observation", "check_environment_names", "draw_environments",
           "environment_methods", "environment_name", "replayed_environments", "reset_environments", "rollout_tools",
           "uses_environments"]


def uses_environments(trainer: RoundTrainer) -> bool:
    """Whether the trainer was built with ``environment_factory`` (TRL's ``environment_factories`` is set)."""
    return getattr(trainer, "environment_factories", None) is not None


def environment_name(trainer: RoundTrainer, row: dict) -> Any:
    """The name of a row's environment: its ``environment`` field with a dict ``environment_factory``, else None
    (TRL's single unnamed environment)."""
    return row.get("environment") if port.multi_environment(trainer) else None


def check_environment_names(trainer: RoundTrainer, names: list) -> None:
    """Raise as TRL does when a row names an environment ``environment_factory`` does not have.

    Raises
    ------
    ValueError
        A name in ``names`` is not among ``trainer.environment_factories``.
    """
    unknown = sorted({repr(name) for name in names if name not in trainer.environment_factories})
    if unknown:
        raise ValueError(f"Example has `environment={unknown[0]}`, which is not among the environments passed to "
                         f"`environment_factory`. Expected one of: {list(trainer.environment_factories)}.")


def draw_environments(trainer: RoundTrainer, rows: list[dict]) -> list:
    """Draw one environment instance per row from TRL's pool, as TRL does for a batch.

    Records each row's environment name (the port's ``set_batch_environments``) and ``trainer.environments`` (the drawn
    instances, what ``_calculate_rewards`` hands the reward functions); the pool grows by one factory call for each
    instance a name lacks.

    Parameters
    ----------
    rows : list of dict
        ``(N,)`` dataset rows of this process's share of the round.

    Returns
    -------
    list
        ``(N,)`` instances, the i-th for ``rows[i]`` (distinct within the call).

    Raises
    ------
    ValueError
        A row names an environment that is not among ``environment_factory``'s (dict factory only).
    """
    names = [environment_name(trainer, row) for row in rows]
    check_environment_names(trainer, names)
    port.set_batch_environments(trainer, names)
    drawn, cursor = [], {}
    for name in names:
        pool = port.environment_pool(trainer, name)
        index = cursor.get(name, 0)
        if index == len(pool):
            pool.append(trainer.environment_factories[name]())
        cursor[name] = index + 1
        drawn.append(pool[index])
    trainer.environments = drawn
    return drawn


def environment_methods(environment: Any) -> list[Callable]:
    """The tools an environment instance exposes, as TRL lists them: its class's public functions other than
    ``reset`` and ``get_reward``, bound to the instance."""
    members = inspect.getmembers(type(environment), predicate=inspect.isfunction)  # on the class: no properties run
    return [getattr(environment, name) for name, _ in members
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def rollout_tools(trainer: RoundTrainer, n: int) -> list[list[Callable]]:
    """``(n,)`` the tools of each rollout of a round: the standalone ``tools``, then, with environments, the methods
    of the rollout's drawn instance (``trainer.environments``, :func:`draw_environments`)."""
    standalone = port.standalone_tools(trainer)
    if not uses_environments(trainer):
        return [standalone] * n
    return [standalone + environment_methods(environment) for environment in trainer.environments]


def append_observation(prompt: list, observation: Any) -> list:
    """The prompt with ``observation`` (what ``reset`` returned) appended to its last message's content, as TRL
    appends it (a new last message; the prompt is left untouched). None leaves the prompt as it is."""
    if observation is None:
        return prompt
    content = prompt[-1]["content"]
    if isinstance(observation, list) and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(observation, str) and isinstance(content, list):
        observation = [{"type": "text", "text": observation}]
    return prompt[:-1] + [{**prompt[-1], "content": content + observation}]


def reset_environments(trainer: RoundTrainer, rows: list[dict], prompts: list) -> tuple[list, list]:
    """Before a round generates: draw one instance per row (:func:`draw_environments`), reset each with its row
    (``reset(**row)``, without the ``environment`` field of a dict factory) and append the observations.

    Parameters
    ----------
    rows : list of dict
        ``(N,)`` dataset rows of this process's share of the round.
    prompts : list
        ``(N,)`` their prompts.

    Returns
    -------
    prompts : list
        ``(N,)`` the prompts with each observation appended (what TRL tokenizes and the reward functions receive).
    observations : list
        ``(N,)`` what each ``reset`` returned (None: nothing appended), kept for the replay.
    """
    environments = draw_environments(trainer, rows)
    observations = []
    for environment, row in zip(environments, rows):
        kwargs = {k: v for k, v in row.items() if k != "environment"} if port.multi_environment(trainer) else row
        observations.append(environment.reset(**kwargs))
    return [append_observation(p, o) for p, o in zip(prompts, observations)], observations


class ReplayedEnvironment:
    """A stand-in for one row's environment in the replay: ``reset`` returns (a copy of) the observation the row's
    rollout was generated with and touches no environment. It exposes no tools (the replay answers TRL's tool loop
    from the cache) and no ``get_reward`` (nor do the reward functions run: their rows come from the cache)."""

    def __init__(self, observation: Any):
        self._observation = observation
        self.resets = 0  # how often TRL reset it (the replay guard wants exactly once)

    def reset(self, **kwargs: Any) -> Any:
        """The cached observation (``kwargs``, the row, are ignored)."""
        self.resets += 1
        return copy.deepcopy(self._observation)


@contextmanager
def replayed_environments(trainer: RoundTrainer, names: list,
                          observations: list) -> Iterator[list[ReplayedEnvironment]]:
    """While the block runs (TRL's replay of the committed rows), TRL's pool holds one :class:`ReplayedEnvironment`
    per row, in row order under each environment name, so TRL's draw hands row i the stand-in with
    ``observations[i]``; the real pool and ``trainer.environments`` are restored afterwards.

    Parameters
    ----------
    names : list
        ``(N,)`` the environment name of each row handed to TRL's pipeline (:func:`environment_name`).
    observations : list
        ``(N,)`` each row's cached observation (None: nothing is appended).

    Yields
    ------
    list of ReplayedEnvironment
        The ``(N,)`` stand-ins (each counts its resets, for the replay guard).
    """
    stand_ins: dict[Any, list] = {name: [] for name in trainer.environment_factories}
    for name, observation in zip(names, observations):
        stand_ins.setdefault(name, []).append(ReplayedEnvironment(observation))
    with port.replaced_environment_pool(trainer, stand_ins):
        yield [env for name in stand_ins for env in stand_ins[name]]
