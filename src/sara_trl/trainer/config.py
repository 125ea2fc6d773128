"""`SaraConfig` (extends `trl.GRPOConfig`) and `SaraRLOOConfig` (extends `trl.RLOOConfig`).

Both carry the allocation options of :class:`sara_trl.allocation.AllocationConfig`, derived from its fields (same
names, defaults, help texts and checks), plus a few options of the trainer's own (how a rollout is labelled, the
prompt stream's seed, and command-line spellings of two core values). The parent's fields, defaults and checks are
unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from dataclasses import dataclass, field
from typing import Optional

from trl import GRPOConfig, RLOOConfig

from sara_trl.allocation import AllocationConfig
from sara_trl.allocation.config import ROUND_TO_DECISION, AllocationConfigError, check_group_size, options_doc

__all__ = ["STOPPING_RULES", "TRAINER_SPELLINGS", "SaraConfig", "SaraRLOOConfig"]

STOPPING_RULES = ("threshold", "bayes_optimal")
"""``stopping_rule`` values: the paper's fixed threshold on p_eff (``tau_low``), or the core's ``tau_low="auto"``."""

TRAINER_SPELLINGS = {
    "k": "num_generations",
    "tau_low='auto'": "stopping_rule='bayes_optimal'",
    f"round_increment={ROUND_TO_DECISION!r}": "continue_to_decision=True",
}
"""Core spellings that the trainer configs spell differently (error messages name both)."""

# Core options whose trainer field differs (HfArgumentParser gives a field one type): field -> (type, default,
# sentence added to the help). `k` is TRL's `num_generations` and is not repeated.
_FIELD_CHANGES = {
    "tau_low": (float, dataclasses.MISSING, "A float here: for 'auto' set stopping_rule='bayes_optimal'."),
    "round_increment": (int, dataclasses.MISSING, "An integer here: for 'to_decision' set continue_to_decision=True."),
    "selection_seed": (Optional[int], None, "None uses `seed`."),
}


def _as_int(value):
    """``value`` as a plain int when it is an integral number (``2``, ``2.0``, ``numpy.int64(2)``), else unchanged
    (None, ``2.5``, a string: the core then rejects it with its own message)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    return value


def _as_float(value):
    """``value`` as a plain float when it is a real number (not a bool), else unchanged (None, a string)."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else value


def _converter(tp):
    """How a trainer value is passed to the core field of type ``tp``: ints and floats as plain Python numbers when
    that loses nothing, anything else unchanged (never rounded)."""
    kinds = set(typing.get_args(tp)) or {tp}
    if int in kinds and not kinds & {float, bool}:
        return _as_int
    if float in kinds:
        return _as_float
    return lambda value: value


def _derived_fields() -> list[tuple]:
    """The trainer's allocation fields, ``(name, type, field)``, derived from :class:`AllocationConfig`."""
    hints = typing.get_type_hints(AllocationConfig)
    out = []
    for f in dataclasses.fields(AllocationConfig):
        if f.name == "k":
            continue
        tp, default, note = _FIELD_CHANGES.get(f.name, (hints[f.name], dataclasses.MISSING, ""))
        metadata = dict(f.metadata)
        if note:
            metadata["help"] = f"{metadata['help']} {note}"
        out.append((f.name, tp, field(default=f.default if default is dataclasses.MISSING else default,
                                      metadata=metadata)))
    return out


_TRAINER_OWN_FIELDS = [
    ("continue_to_decision", bool, field(default=False, metadata={"help": (
        f"The core's round_increment={ROUND_TO_DECISION!r} (see round_increment), as a flag: HfArgumentParser gives "
        "round_increment one type.")})),
    ("stopping_rule", str, field(default="threshold", metadata={"help": (
        "'threshold' (paper Eq. 3: abandon once p_eff < tau_low) or 'bayes_optimal' (the core's tau_low='auto', see "
        "tau_low; SARA only; tau_low then stays at its default, which is the burn-in rule)."),
        "choices": list(STOPPING_RULES)})),
    ("success_threshold", float, field(default=0.5, metadata={"help": (
        "A rollout is a success when its score is > success_threshold. The score is the weighted reward sum "
        "(reward_weights, as TRL combines rewards), or the raw value of the reward function named by "
        "success_reward_func. A rollout whose score is NaN (every reward function returned None) is unscorable: "
        "it costs a rollout but does not move the posterior.")})),
    ("success_reward_func", Optional[str], field(default=None, metadata={"help": (
        "Name of one reward function (as in the trainer's reward_func_names, i.e. the function's __name__) whose "
        "raw value alone is the score; None uses the weighted reward sum.")})),
    ("streaming_max_in_flight", Optional[int], field(default=None, metadata={"help": (
        "collection='streaming' only: requests each process keeps in flight in its vLLM engine (the concurrency the "
        "collector refills to; >= num_generations). None: the process's share of the batch's rollouts, B / "
        "num_processes * num_generations, which is also the most sequences TRL's colocated engine runs at once "
        "(per_device_train_batch_size * steps_per_generation); a larger value queues the extra requests in the "
        "engine.")})),
    ("stream_seed", Optional[int], field(default=None, metadata={"help": (
        "Seed of the fresh-prompt stream (its own numpy generator, identical on every process); None uses seed. "
        "The stream shuffles only if shuffle_dataset is true.")})),
]


def _core_value(args, name: str):
    """The core's value of option ``name`` from the trainer fields (the few spelled differently, then the rest)."""
    if name == "k":
        return args.num_generations
    if name == "tau_low":
        return "auto" if args.stopping_rule == "bayes_optimal" else args.tau_low
    if name == "round_increment":
        return ROUND_TO_DECISION if args.continue_to_decision else args.round_increment
    if name == "selection_seed":
        return args.seed if args.selection_seed is None else args.selection_seed
    return getattr(args, name)


_SaraFields = dataclasses.make_dataclass("_SaraFields", _derived_fields() + _TRAINER_OWN_FIELDS)
_SaraFields.__module__ = __name__
_DEFAULT_TAU_LOW = next(f.default for f in dataclasses.fields(AllocationConfig) if f.name == "tau_low")


class _SaraArguments(_SaraFields):
    """Allocation fields and checks shared by :class:`SaraConfig` and :class:`SaraRLOOConfig`."""

    def _check_group_size(self) -> None:
        """Reject a bad ``num_generations`` before the parent's ``__post_init__`` divides by it."""
        try:
            check_group_size(_as_int(self.num_generations))
        except AllocationConfigError as err:
            raise err.respelled(type(self).__name__, TRAINER_SPELLINGS) from None

    def _adopt_trl_checkpointing_default(self) -> None:
        """Carry TRL's ``gradient_checkpointing=True`` default over to ``activation_checkpointing``.

        TRL 1.16 configs default the field that recent transformers releases (e.g. 5.24) renamed
        (``gradient_checkpointing``), so there every config that leaves ``activation_checkpointing`` unset made
        transformers raise a FutureWarning about a setting the user never made. Same result (checkpointing on), without
        the warning; a no-op where transformers has only the old name. An explicit ``gradient_checkpointing=False``
        is left alone (transformers then warns about the old name and honours it).
        """
        if getattr(self, "activation_checkpointing", False) is None and self.gradient_checkpointing is True:
            self.activation_checkpointing = True

    def _validate_sara(self) -> None:
        """Check the trainer's own fields, then every allocation option through :class:`AllocationConfig`.

        Raises
        ------
        ValueError
            With a message naming the field and the invariant it protects (the core's messages name the trainer
            spelling of a core option, see :data:`TRAINER_SPELLINGS`).
        """
        name = type(self).__name__
        if self.stopping_rule not in STOPPING_RULES:
            raise ValueError(f"stopping_rule must be one of {list(STOPPING_RULES)}, got {self.stopping_rule!r}.")
        if isinstance(self.tau_low, str):
            raise ValueError(
                f"tau_low={self.tau_low!r}: tau_low is a float in [0, 1) here; for the core's tau_low='auto' set "
                "stopping_rule='bayes_optimal' (one spelling on the command line and in Python)."
            )
        if self.continue_to_decision and self.round_increment != 1:
            raise ValueError(
                f"round_increment ({self.round_increment}) is not used with continue_to_decision=True (an unmixed "
                "prompt then gets all its rollouts up to the next abandon point in one round): leave it at 1."
            )
        if self.stopping_rule == "bayes_optimal" and self.tau_low != _DEFAULT_TAU_LOW:
            raise ValueError(
                f"tau_low ({self.tau_low}) is not used with stopping_rule='bayes_optimal' (its burn-in runs the "
                f"paper's rule at {_DEFAULT_TAU_LOW}): leave tau_low at its default or use stopping_rule='threshold'."
            )
        if not (isinstance(self.success_threshold, numbers.Real) and math.isfinite(self.success_threshold)):
            raise ValueError(f"success_threshold ({self.success_threshold}) must be a finite number.")
        # The parent already checks divisibility; B*k must be exactly the generation batch, because TRL splits it
        # into steps_per_generation micro-batches and silently drops any remainder rows.
        if self.generation_batch_size % self.num_generations != 0:  # pragma: no cover - the parent raises first
            raise ValueError(
                f"generation_batch_size ({self.generation_batch_size}) must be divisible by num_generations "
                f"({self.num_generations}): SARA hands TRL exactly B = generation_batch_size / num_generations "
                "groups of num_generations rows."
            )
        if self.use_vllm and self.generation_kwargs and "seed" in self.generation_kwargs:
            raise ValueError(
                "generation_kwargs must not set `seed` with use_vllm=True: SARA sends each prompt's repeated ids in "
                "one call, and a fixed per-request seed would make the repeated rollouts of a prompt identical (never "
                "mixed). Remove `seed` from generation_kwargs."
            )
        try:
            self.to_allocation_config()
        except AllocationConfigError as err:
            raise err.respelled(name, TRAINER_SPELLINGS) from None
        if self.collection == "streaming":
            self._check_streaming(name)
        elif self.streaming_max_in_flight is not None:
            raise ValueError(f"streaming_max_in_flight ({self.streaming_max_in_flight}) is used only with "
                             "collection='streaming'; leave it unset.")

    def _check_streaming(self, name: str) -> None:
        """``collection="streaming"`` drives a colocated vLLM engine request by request: refuse every setup that has
        no such engine (no silent fallback to rounds: that would run a different collector than the one asked for)."""
        if not (self.use_vllm and self.vllm_mode == "colocate"):
            backend = f"use_vllm=True, vllm_mode={self.vllm_mode!r}" if self.use_vllm else "use_vllm=False"
            raise ValueError(
                f"{name}: collection='streaming' needs use_vllm=True with vllm_mode='colocate' (got {backend}): it "
                "adds, steps and aborts requests on the engine one completion at a time, which only the colocated "
                "vLLM engine in the training process allows (transformers generation and the vLLM server take whole "
                "batches). Use collection='rounds' with this backend."
            )
        if self.vllm_tensor_parallel_size != 1:
            raise ValueError(
                f"{name}: collection='streaming' needs vllm_tensor_parallel_size=1 (got "
                f"{self.vllm_tensor_parallel_size}): every process drives its own engine at its own pace, while a "
                "tensor-parallel engine needs the same requests on every process of its group."
            )
        if self.streaming_max_in_flight is not None and (
            isinstance(self.streaming_max_in_flight, bool) or not isinstance(self.streaming_max_in_flight, int)
            or self.streaming_max_in_flight < self.num_generations
        ):
            raise ValueError(
                f"streaming_max_in_flight ({self.streaming_max_in_flight}) must be an integer >= num_generations "
                f"({self.num_generations}), so that one full group can be in flight."
            )

    def to_allocation_config(self) -> AllocationConfig:
        """The :class:`sara_trl.allocation.AllocationConfig` these fields describe.

        ``k = num_generations``; ``stopping_rule="bayes_optimal"`` becomes ``tau_low="auto"``;
        ``continue_to_decision=True`` becomes ``round_increment="to_decision"``; ``selection_seed=None`` becomes
        ``seed``. Numbers are converted to plain ``int``/``float`` only when that loses nothing (``2.0`` -> ``2``,
        ``numpy.int64`` -> ``int``); anything else reaches the core unchanged and is rejected there, never rounded.

        Raises
        ------
        AllocationConfigError
            (a ``ValueError``) from :class:`AllocationConfig` for an invalid value or combination.
        """
        hints = typing.get_type_hints(AllocationConfig)
        return AllocationConfig(**{f.name: _converter(hints[f.name])(_core_value(self, f.name))
                                   for f in dataclasses.fields(AllocationConfig)})

    @property
    def num_groups(self) -> int:
        """B: groups per generation batch, ``generation_batch_size // num_generations``."""
        return self.generation_batch_size // self.num_generations

    def __post_init__(self):
        self._check_group_size()
        self._adopt_trl_checkpointing_default()
        super().__post_init__()
        self._validate_sara()


_OPTIONS_DOC = options_doc(_SaraFields, indent=4) + """
    Raises
    ------
    ValueError
        From ``__post_init__``, for an invalid value or combination, with a message that names the rule.
"""


@dataclass
class SaraConfig(_SaraArguments, GRPOConfig):
    __doc__ = (
        """Configuration class for :class:`~sara_trl.SaraGRPOTrainer`: every :class:`trl.GRPOConfig` field, plus the
    allocation options below (paper §3, Alg. 1; defaults from App. D). Parseable with
    :class:`transformers.HfArgumentParser`.

    Each generation batch holds exactly B = ``generation_batch_size / num_generations`` groups of
    ``num_generations`` rows (k, the group size), as in TRL; SARA only changes how those groups are collected.
    Because the prompts come from SARA's own stream (not from the dataloader), set ``max_steps``: the dataloader
    only counts steps, so the logged ``epoch`` does not measure passes over the data. With ``carry_over`` and vLLM,
    GRPO's ``vllm_importance_sampling_correction`` reweights (or masks) the carried, one-step-stale rollouts; with
    transformers generation they are trained as if on-policy. Checkpoints save the carried completions
    (``sara_carry.pt``). Each step's allocation metrics are logged as ``sara/<name>``.

"""
        + _OPTIONS_DOC
    )


@dataclass
class SaraRLOOConfig(_SaraArguments, RLOOConfig):
    __doc__ = (
        """Configuration class for :class:`~sara_trl.SaraRLOOTrainer`: every :class:`trl.RLOOConfig` field, plus the
    allocation options below (shared with :class:`~sara_trl.SaraConfig`). Parseable with
    :class:`transformers.HfArgumentParser`.

    RLOO's default ``num_generations`` is 2, so ``n0`` and ``commit_min`` can be at most 2 unless you raise it.

"""
        + _OPTIONS_DOC
    )
