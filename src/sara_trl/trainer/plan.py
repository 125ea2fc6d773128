"""How a SARA trainer collects, decided once: :class:`CollectionPlan`.

:func:`plan_collection` decides it before TRL's construction, from the config (what the user asked,
:attr:`SaraConfig.schedule`), the trainer's features (``rollout_func``, ``tools``, ``environment_factory``, a reward
model sharded under ZeRO-3) and the process count; :func:`sara_trl.trainer.prepare.setup` logs it with its reasons
and keeps it in the run state (``trainer.sara.plan``). The config is never written: it stays a record of what the
user asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CollectionPlan", "plan_collection"]

# Why a rounds-only feature cannot stream: (what it does that streaming cannot drive, the reason for "auto").
_ROUNDS_ONLY_REASONS = {
    "rollout_func": ("streaming adds, steps and aborts single requests (one per completion) on the colocated vLLM "
                     "engine, while `rollout_func` generates whole batches itself, so SARA cannot stop one of its "
                     "rollouts early",
                     "`rollout_func` generates whole batches, which only rounds collection can use"),
    "reward_funcs": ("each scoring pass of a ZeRO-3 reward model gathers its parameters from every process, so all "
                     "processes must score in the same passes, while streaming scores each process's completions in "
                     "passes of its own (the processes would hang in the gather)",
                     "a reward model under DeepSpeed ZeRO-3 on several processes scores in lock-step rounds only"),
}
# How an error names a rounds-only feature, where not as `name`.
_ROUNDS_ONLY_LABELS = {"reward_funcs": "a reward model under DeepSpeed ZeRO-3 on several processes"}
# Features streaming runs (one request chain per rollout, sara_trl.trainer.trajectory) but "auto" keeps in rounds:
# the reason for "auto".
_AUTO_ROUNDS_REASONS = {
    "tools": "`tools` trajectories run in rounds by default (each turn of a round in one TRL generation call); "
             "collection='streaming' runs each as a chain of single requests, not yet measured faster than rounds",
    "environment_factory": "`environment_factory` rollouts run in rounds by default (each turn of a round in one "
                           "TRL generation call); collection='streaming' runs each as a chain of single requests, not "
                           "yet measured faster than rounds",
}
# The features that generate multi-turn (or whole) rollouts themselves, in the order the plan names them.
_MULTI_TURN = ("rollout_func", "tools", "environment_factory")


@dataclass(frozen=True)
class CollectionPlan:
    """How a trainer collects, decided once at set-up (:func:`plan_collection`).

    Attributes
    ----------
    schedule : str
        ``"rounds"`` (paper Alg. 1: the strategy decides once each round is in) or ``"streaming"`` (each prompt
        decided as its completions finish); the allocator's ``AllocationConfig.collection``.
    engine : str
        ``"generate"``: one TRL generation call per round (TRL's backend: vLLM, transformers); ``"requests"``: the
        colocated vLLM engine driven request by request on the core's event loop (streaming, and rounds with
        ``overlap_round_scoring``).
    multi_turn : str or None
        What generates a rollout beyond one completion: ``"rollout_func"`` (the user's, whole batches), ``"tools"``
        or ``"environment_factory"`` (a chain of turns per rollout on either engine,
        :class:`~sara_trl.trainer.trajectory.TrajectoryEngine`); None: one completion per rollout.
    processes : int
        Processes of the run (with streaming, each collects its own share of the batch from its own shard).
    schedule_reason, engine_reason : str
        Why each choice was made, in words (logged at set-up).
    """

    schedule: str
    engine: str
    multi_turn: str | None
    processes: int
    schedule_reason: str
    engine_reason: str

    @property
    def sharded(self) -> bool:
        """Whether each process collects its own share from its own prompt shard (streaming on several processes)."""
        return self.schedule == "streaming" and self.processes > 1

    def describe(self) -> str:
        """The plan in one line, with its reasons (what set-up logs)."""
        turns = "" if self.multi_turn is None else f", multi-turn through {self.multi_turn}"
        return (f"collection={self.schedule!r} ({self.schedule_reason}) on the {self.engine!r} engine "
                f"({self.engine_reason}){turns}, {self.processes} process{'es' if self.processes > 1 else ''}")


def plan_collection(cls: type, args: Any, *, processes: int, rollout_func: bool = False, tools: bool = False,
                    environment_factory: bool = False, sharded_reward_model: bool = False) -> CollectionPlan:
    """Decide how a trainer collects (before TRL's construction; the config is only read).

    ``collection="auto"`` starts from what the config alone resolves it to (:attr:`SaraConfig.schedule`); a
    rounds-only feature then keeps it in rounds (``rollout_func``, a reward model under ZeRO-3 on several processes;
    ``tools`` and ``environment_factory`` too, which an explicit ``collection="streaming"`` runs as request chains).
    ``overlap_round_scoring`` moves rounds onto the request engine.

    Parameters
    ----------
    cls : type
        The SARA trainer class (named in errors).
    args : SaraConfig or SaraRLOOConfig
        Read: ``collection``, ``schedule``, ``streaming_max_in_flight``, ``overlap_round_scoring``.
    processes : int
        Processes of the run.
    rollout_func, tools, environment_factory : bool
        Whether the trainer was given each.
    sharded_reward_model : bool
        A reward model that TRL runs sharded over the processes (DeepSpeed ZeRO-3,
        :func:`~sara_trl.trainer.prepare.shards_reward_model`).

    Returns
    -------
    CollectionPlan

    Raises
    ------
    ValueError
        ``collection="streaming"`` set explicitly with ``rollout_func`` or a ZeRO-3 reward model;
        ``streaming_max_in_flight`` set while ``"auto"`` resolves to rounds; ``overlap_round_scoring`` with a
        feature that generates whole trajectories, or on several processes.
    """
    explicit = args.collection != "auto"
    schedule = args.schedule
    schedule_reason = ("as set" if explicit else
                       "collection='auto': " + (args.auto_reason() or "streaming runs on the colocated vLLM engine"))
    features = {"reward_funcs": sharded_reward_model, "rollout_func": rollout_func, "tools": tools,
                "environment_factory": environment_factory}
    for name in (name for name, given in features.items() if given):
        if schedule != "streaming":
            break
        label = _ROUNDS_ONLY_LABELS.get(name, f"`{name}`")
        if name in _AUTO_ROUNDS_REASONS:
            if explicit:
                continue
            auto_reason = _AUTO_ROUNDS_REASONS[name]
        else:
            why, auto_reason = _ROUNDS_ONLY_REASONS[name]
            if explicit:
                raise ValueError(f"{cls.__name__} does not support {label} with collection='streaming': {why}. Use "
                                 "collection='rounds' (or leave collection='auto').")
        if args.streaming_max_in_flight is not None:
            raise ValueError(f"streaming_max_in_flight ({args.streaming_max_in_flight}) is used only with "
                             f"collection='streaming', which {label} does not run under collection='auto'; leave "
                             "it unset, or set collection='streaming'.")
        schedule, schedule_reason = "rounds", f"collection='auto': {auto_reason}"
    multi_turn = next((name for name in _MULTI_TURN if features[name]), None)
    if schedule == "streaming":
        engine, engine_reason = "requests", "streaming adds, steps and aborts single requests"
    elif args.overlap_round_scoring:
        if multi_turn is not None:
            raise ValueError(f"{cls.__name__}: overlap_round_scoring=True adds a round's rollouts to the engine as "
                             f"single requests, while `{multi_turn}` has TRL generate whole trajectories in one "
                             "call; leave overlap_round_scoring=False.")
        if processes > 1:
            raise ValueError(f"{cls.__name__}: overlap_round_scoring=True runs on one process ({processes} here): "
                             "on several, a round is one sharded generate call and one gather of its outcomes. Leave "
                             "it False, or use collection='streaming', which overlaps its reward passes on every "
                             "process.")
        engine, engine_reason = "requests", "overlap_round_scoring=True: a round's rollouts are single requests"
    else:
        engine, engine_reason = "generate", "one TRL generation call per round"
    return CollectionPlan(schedule, engine, multi_turn, processes, schedule_reason, engine_reason)
