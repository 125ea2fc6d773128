"""TRL's ``environment_factory`` (GRPO) in SARA's collection, and in the replay.

Every rollout leases one instance from TRL's pool (the port's ``environment_pool``, grown by the factory when every
instance is leased), resets it with its row and appends the observation to its prompt's last message
(:class:`~sara_trl.trainer.trajectory.TrajectoryEngine`, the one multi-turn path, with the helpers here:
:func:`environment_name`, :func:`check_environment_names`, :func:`append_observation`); the instance's public methods
are the rollout's tools (:func:`environment_methods`) and it reaches the reward functions as ``environments``. Instances
are reused (reset again), as TRL reuses them from batch to batch: a rollout's rewards are computed before its instance
is leased again.

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

__all__ = ["ReplayedEnvironment", "append_observation", "check_environment_names", "environment_methods",
           "environment_name", "replayed_environments", "uses_environments"]


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


def environment_methods(environment: Any) -> list[Callable]:
    """The tools an environment instance exposes, as TRL lists them: its class's public functions other than
    ``reset`` and ``get_reward``, bound to the instance."""
    members = inspect.getmembers(type(environment), predicate=inspect.isfunction)  # on the class: no properties run
    return [getattr(environment, name) for name, _ in members
            if name not in ("reset", "get_reward") and not name.startswith("_")]


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
