"""The allocator registry: the one place that knows which allocators exist and what each one does.

Each allocator registers an :class:`AllocatorSpec` (its rounds strategy, its streaming policy, the options only it
accepts, the options it never reads, and whether ``collection="auto"`` streams it) with :func:`register`, from its
own module under :mod:`sara_trl.allocation.strategies`. The config, the CLI choices, ``collection="auto"``, the
round allocator and the streaming collector read the registry; none of them names an allocator. A new allocator is
one module that calls :func:`register` (``tests/test_allocation_openness.py`` registers one from a test file).

A leaf module: it imports nothing from :mod:`sara_trl.allocation`, so every module of the core may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["REGISTRY", "STRATEGIES", "AllocatorSpec", "accepts", "owner", "register", "spec_of", "streaming_allocators"]


@dataclass(frozen=True)
class AllocatorSpec:
    """One allocator's two faces and its options.

    Attributes
    ----------
    name : str
        The ``allocator`` value.
    rounds : callable
        ``rounds(ctx: StepContext) -> Rounds``, the round-synchronous strategy
        (:class:`~sara_trl.allocation.strategies.base.Strategy`).
    streaming : callable, optional
        ``streaming(collector, speculate: bool) -> StreamingPolicy``: its decisions per completion
        (:class:`~sara_trl.allocation.strategies.base.StreamingPolicy`). None: it has nothing to decide per
        completion, and ``collection="streaming"`` is refused for it.
    auto_streams : bool
        ``collection="auto"`` picks streaming for it (where the engine allows streaming).
    owns : dict
        Options only this allocator accepts away from their defaults: option name -> ``(head, tail)`` of the error
        another allocator gets, ``"{head}; allocator={name!r} {tail}"`` (``head`` may hold ``{value!r}``).
    ignores : callable, optional
        ``ignores(config) -> set of option names`` it never reads (:func:`~sara_trl.allocation.config.inert_options`
        warns when they are set); None: it reads every option.
    keeps_every_group : bool
        It trains every group it draws, so the success labels decide nothing (only the ``sara/*`` success metrics
        read them; :class:`~sara_trl.allocation.labels.SuccessRule` does not insist on 0/1 scores).
    """

    name: str
    rounds: Callable[..., Any]
    streaming: Callable[..., Any] | None = None
    auto_streams: bool = False
    owns: dict[str, tuple[str, str]] = field(default_factory=dict)
    ignores: Callable[[Any], set[str]] | None = None
    keeps_every_group: bool = False


REGISTRY: dict[str, AllocatorSpec] = {}
"""Allocator name -> :class:`AllocatorSpec`, in registration order (the order of ``ALLOCATORS``)."""


def register(spec: AllocatorSpec) -> AllocatorSpec:
    """Add ``spec`` to :data:`REGISTRY` (replacing an allocator of the same name) and return it.

    Raises
    ------
    ValueError
        ``spec.name`` is not a non-empty string, or ``spec.rounds`` / ``spec.streaming`` is not callable.
    """
    if not isinstance(spec.name, str) or not spec.name:
        raise ValueError(f"an allocator needs a non-empty string name, got {spec.name!r}")
    if not callable(spec.rounds) or (spec.streaming is not None and not callable(spec.streaming)):
        raise ValueError(f"allocator {spec.name!r}: rounds (and streaming, when given) must be callable")
    REGISTRY[spec.name] = spec
    return spec


def spec_of(name: str) -> AllocatorSpec | None:
    """The registered spec of allocator ``name``, or None."""
    return REGISTRY.get(name) if isinstance(name, str) else None


def accepts(name: str, option: str) -> bool:
    """Whether allocator ``name`` accepts ``option`` away from its default: no allocator owns the option, or
    ``name`` does (:attr:`AllocatorSpec.owns`)."""
    owners = [spec.name for spec in REGISTRY.values() if option in spec.owns]
    return not owners or name in owners


def owner(option: str) -> str | None:
    """The first registered allocator that owns ``option`` (:attr:`AllocatorSpec.owns`), or None."""
    return next((spec.name for spec in REGISTRY.values() if option in spec.owns), None)


def streaming_allocators() -> tuple[str, ...]:
    """The registered allocators with a streaming face, in registry order."""
    return tuple(spec.name for spec in REGISTRY.values() if spec.streaming is not None)


class _Strategies(MutableMapping):
    """Allocator name -> rounds strategy, a live view of :data:`REGISTRY`. Setting a new name registers a
    rounds-only allocator (no streaming policy, no options of its own), an existing one replaces only its rounds
    strategy; deleting a name unregisters it."""

    def __getitem__(self, name: str):
        return REGISTRY[name].rounds

    def __setitem__(self, name: str, strategy) -> None:
        old = REGISTRY.get(name)
        register(AllocatorSpec(name=name, rounds=strategy) if old is None else replace(old, rounds=strategy))

    def __delitem__(self, name: str) -> None:
        del REGISTRY[name]

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(REGISTRY))

    def __len__(self) -> int:
        return len(REGISTRY)

    def __repr__(self) -> str:
        return f"STRATEGIES({list(REGISTRY)})"


STRATEGIES = _Strategies()
"""Allocator name -> rounds strategy (:class:`~sara_trl.allocation.strategies.base.Strategy`), read from and written
to :data:`REGISTRY`."""
