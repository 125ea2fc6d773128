"""`SaraConfig` (extends `trl.GRPOConfig`) and `SaraRLOOConfig` (extends `trl.RLOOConfig`).

Both carry the allocation options of :class:`sara_trl.allocation.AllocationConfig`, derived from its fields (same
names, defaults, help texts and checks; the group size k is TRL's ``num_generations``), plus a few options of the
trainer's own (how a rollout is labelled, streaming's engine settings, the prompt stream's seed). The parent's
fields, defaults and checks are unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

from trl import GRPOConfig, RLOOConfig

from sara_trl.allocation import AllocationConfig
from sara_trl.allocation.config import (
    STOPPING_RULES,
    AllocationConfigError,
    check_group_size,
    inert_options,
    options_doc,
    streaming_abandons_every_prompt,
    upgrade_spellings,
)
from sara_trl.allocation.labels import DEFAULT_SUCCESS_THRESHOLD
from sara_trl.allocation.registry import spec_of

__all__ = ["COLLECTION_CHOICES", "STOPPING_RULES", "SaraConfig", "SaraRLOOConfig"]

# Core options whose trainer field differs: field -> (type, default, sentence added to the help). `k` is TRL's
# `num_generations` and is not repeated.
_FIELD_CHANGES = {
    "selection_seed": (Optional[int], None, "None uses `seed`."),
    "collection": (str, "auto", (
        "'auto' (the default) resolves, in __post_init__, to the collection measured faster: 'streaming' for "
        "allocator='sara' wherever streaming runs (use_vllm=True, vllm_mode='colocate', vllm_tensor_parallel_size=1), "
        "'rounds' everywhere else, including "
        "dynamic sampling, whose few large rounds streaming did not speed up (docs/collection-modes.md). Set "
        "'rounds' for the paper's Algorithm 1 exactly.")),
}
COLLECTION_CHOICES = ("auto", "rounds", "streaming")
"""``collection`` values of the trainer configs: the core's two schedules, or ``"auto"`` (the default)."""


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
        if f.name == "collection":
            metadata["choices"] = list(COLLECTION_CHOICES)
        out.append((f.name, tp, field(default=f.default if default is dataclasses.MISSING else default,
                                      metadata=metadata)))
    return out


_TRAINER_OWN_FIELDS = [
    ("success_threshold", Optional[float], field(default=None, metadata={"help": (
        "A rollout is a success when its score is > success_threshold. The score is the weighted reward sum "
        "(reward_weights, as TRL combines rewards), or the raw value of the reward function named by "
        "success_reward_func. A rollout whose score is NaN (every reward function returned None) is unscorable: "
        "it costs a rollout but does not move the posterior. None (the default) means 0.5, checked: a reward model "
        "in the score is refused when the trainer is built (a logit is not a 0/1 label), and if the first "
        "step's scores are not 0/1 success labels (a value outside [0, 1], or every rollout labelled the same way "
        "while the scores differ), training stops with an error naming the fixes (a warning instead with "
        "allocator='uniform' or ds_filter='score', which do not choose groups by the labels). A continuous reward "
        "(a reward model's score, a length or format score) is binarized at this threshold (paper App. F): set it "
        "explicitly to the score above which a rollout counts as a success (for a reward model, e.g. the median "
        "score of the starting policy's completions); an explicit value is used as set, with a warning when the "
        "scores are not 0/1 labels. See docs/rewards.md. After construction the field holds the float in use (0.5 "
        "when left unset).")})),
    ("success_reward_func", Optional[str], field(default=None, metadata={"help": (
        "Name of one reward function (as in the trainer's reward_func_names, i.e. the function's __name__) whose "
        "raw value alone is the score; None uses the weighted reward sum.")})),
    ("streaming_max_in_flight", Optional[int], field(default=None, metadata={"help": (
        "collection='streaming' only: requests each process keeps in flight in its vLLM engine (the concurrency the "
        "collector refills to; >= num_generations). None: the process's share of the batch's rollouts, B / "
        "num_processes * num_generations, which is also the most sequences TRL's colocated engine runs at once "
        "(per_device_train_batch_size * steps_per_generation); a larger value queues the extra requests in the "
        "engine.")})),
    ("overlap_round_scoring", bool, field(default=False, metadata={"help": (
        "collection='rounds' on the colocated vLLM engine (one process): add each round's rollouts to the engine "
        "as single requests and score them as they finish, in reward passes that overlap the round's slowest "
        "completions (streaming_reward_lag), instead of one generate call per round scored after it. The round "
        "barrier stays, so every decision is the paper's (Algorithm 1) on the same outcomes; only the reward time "
        "leaves the engine's critical path (sara/reward_wait_seconds). Not with rollout_func, tools or "
        "environment_factory (TRL generates those trajectories), or on several processes (a round there is one "
        "sharded generate call and one gather). False (the default): TRL's generate call per round.")})),
    ("streaming_reward_lag", int, field(default=2, metadata={"help": (
        "collection='streaming' (and overlap_round_scoring): engine steps a reward pass overlaps. The completions "
        "finished in each window "
        "of this many engine steps are scored in one reward pass on a background thread while the engine keeps "
        "stepping, and their labels reach the collector this many engine steps later, so the decisions do not "
        "depend on how fast the rewards are; the engine waits only for a pass that is late "
        "(sara/reward_wait_seconds). 0: score every engine step's completions before the next engine step "
        "(blocking). A larger value batches more completions per pass, and delays each decision by up to twice "
        "as many engine steps.")})),
    ("stream_seed", Optional[int], field(default=None, metadata={"help": (
        "Seed of the fresh-prompt stream (its own numpy generator, identical on every process); None uses seed. "
        "The stream shuffles only if shuffle_dataset is true.")})),
]


def _for_trainer(err: AllocationConfigError, owner: str) -> AllocationConfigError:
    """``err`` reported for the trainer config ``owner``, noting where the message says k that k is
    ``num_generations`` here (e.g. ``"SaraConfig: n0=5 must satisfy 1 <= n0 <= k=4: ... (here k is
    num_generations)"``)."""
    note = " (here k is num_generations)" if "k" in err.terms else ""
    return AllocationConfigError(err.message + note, err.terms, owner)


_SaraFields = dataclasses.make_dataclass("_SaraFields", _derived_fields() + _TRAINER_OWN_FIELDS)
_SaraFields.__module__ = __name__


class _SaraArguments(_SaraFields):
    """Allocation fields and checks shared by :class:`SaraConfig` and :class:`SaraRLOOConfig`."""

    def _check_group_size(self) -> None:
        """Reject a bad ``num_generations`` before the parent's ``__post_init__`` divides by it."""
        try:
            check_group_size(_as_int(self.num_generations))
        except AllocationConfigError as err:
            raise _for_trainer(err, type(self).__name__) from None

    def _upgrade_spellings(self) -> None:
        """Replace the old spellings ``tau_low="auto"`` and ``round_increment="to_decision"`` by
        ``stopping_rule="bayes_optimal"`` and ``continue_to_decision=True``, with a FutureWarning (until sara_trl
        0.3; :func:`sara_trl.allocation.config.upgrade_spellings`)."""
        for name, value in upgrade_spellings(self, stacklevel=5).items():  # the line that built the config
            setattr(self, name, value)

    def _adopt_trl_checkpointing_default(self) -> None:
        """Carry TRL's ``gradient_checkpointing=True`` default over to ``activation_checkpointing``.

        TRL configs default the field that recent transformers releases (e.g. 5.24) renamed
        (``gradient_checkpointing``), so there every config that leaves ``activation_checkpointing`` unset made
        transformers raise a FutureWarning about a setting the user never made. Same result (checkpointing on), without
        the warning; a no-op where transformers has only the old name. An explicit ``gradient_checkpointing=False``
        is left alone (transformers then warns about the old name and honours it).
        """
        if getattr(self, "activation_checkpointing", False) is None and self.gradient_checkpointing is True:
            self.activation_checkpointing = True

    def _resolve_success_threshold(self) -> None:
        """Replace an unset ``success_threshold`` (None) by 0.5 and remember that it was not chosen, so that the
        trainer checks on the first step that the scores are 0/1 labels (see :attr:`success_threshold_explicit`)."""
        self._success_threshold_defaulted = self.success_threshold is None
        if self.success_threshold is None:
            self.success_threshold = DEFAULT_SUCCESS_THRESHOLD

    @property
    def success_threshold_explicit(self) -> bool:
        """Whether ``success_threshold`` was set by the user: passed, or changed after construction (a value left
        unset is 0.5 and checked against the scores' scale on the first step; an explicit one is used as set)."""
        return (not getattr(self, "_success_threshold_defaulted", False)
                or self.success_threshold != DEFAULT_SUCCESS_THRESHOLD)

    def _warn_inert_options(self) -> None:
        """One warning naming the allocation options set away from their defaults that the configured allocator
        never reads (e.g. ``n0`` or ``tau_low`` with ``allocator="dynamic_sampling"``); defaults never warn."""
        names = [f"{name}={getattr(self, name)!r}" for name in inert_options(self.to_allocation_config())]
        if names:
            where = f"allocator={self.allocator!r}" + (
                f" and collection={self.schedule!r}" if self.allocator == "dynamic_sampling" else "")
            they = "it" if len(names) == 1 else "them"
            warnings.warn(
                f"{type(self).__name__}: {', '.join(names)} {'has' if len(names) == 1 else 'have'} no effect with "
                f"{where}, which never reads {they} ({'an option' if len(names) == 1 else 'options'} of the other "
                f"allocators). Leave {they} at the default or choose an allocator that uses {they}.",
                UserWarning, stacklevel=4,  # the line that built the config
            )

    def _validate_sara(self) -> None:
        """Check the trainer's own fields, then every allocation option through :class:`AllocationConfig`.

        Raises
        ------
        ValueError
            With a message naming the field and the invariant it protects (the allocation options' messages are
            :class:`AllocationConfig`'s, with a note where they name k, which is ``num_generations`` here).
        """
        name = type(self).__name__
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
        self._checked_allocation_config()
        if self.schedule == "streaming":
            self._check_streaming(name)
        elif self.streaming_max_in_flight is not None:
            raise ValueError(f"streaming_max_in_flight ({self.streaming_max_in_flight}) is used only with "
                             "collection='streaming'; leave it unset.")
        if not isinstance(self.overlap_round_scoring, bool):
            raise ValueError(f"overlap_round_scoring ({self.overlap_round_scoring!r}) must be True or False.")
        if self.overlap_round_scoring:
            self._check_overlap_round_scoring(name)
        if isinstance(self.streaming_reward_lag, bool) or not isinstance(self.streaming_reward_lag, int) \
                or self.streaming_reward_lag < 0:
            raise ValueError(f"streaming_reward_lag ({self.streaming_reward_lag!r}) must be an integer number of "
                             "engine steps >= 0 (0: blocking reward passes).")

    def _check_overlap_round_scoring(self, name: str) -> None:
        """``overlap_round_scoring=True`` drives a round's requests on the colocated engine: refuse a setup that
        has no such engine, or no rounds to overlap."""
        if self.schedule == "streaming":
            if self.collection == "auto":
                return  # collection='auto' chose streaming, which overlaps its reward passes already
            raise ValueError(f"{name}: overlap_round_scoring=True overlaps the reward passes of collection='rounds'; "
                             "collection='streaming' overlaps them already (streaming_reward_lag). Leave it unset.")
        if not (self.use_vllm and self.vllm_mode == "colocate" and self.vllm_tensor_parallel_size == 1):
            raise ValueError(
                f"{name}: overlap_round_scoring=True adds a round's rollouts to the colocated vLLM engine one request "
                f"at a time and scores them as they finish; it needs use_vllm=True, vllm_mode='colocate' and "
                f"vllm_tensor_parallel_size=1 (got use_vllm={self.use_vllm}, vllm_mode={self.vllm_mode!r}, "
                f"vllm_tensor_parallel_size={self.vllm_tensor_parallel_size}). Leave it False with this backend."
            )

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

    def to_allocation_config(self, schedule: str | None = None) -> AllocationConfig:
        """The :class:`sara_trl.allocation.AllocationConfig` these fields describe: each field copied, with
        ``k = num_generations``, ``selection_seed=None`` as ``seed`` and ``collection`` as ``schedule`` (None:
        :attr:`schedule`; the trainer passes its plan's). Numbers are converted to plain
        ``int``/``float`` only when that loses nothing (``2.0`` -> ``2``, ``numpy.int64`` -> ``int``); anything
        else reaches the core unchanged and is rejected there, never rounded.

        Raises
        ------
        AllocationConfigError
            (a ``ValueError``) from :class:`AllocationConfig` for an invalid value or combination.
        """
        hints = typing.get_type_hints(AllocationConfig)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(AllocationConfig) if f.name != "k"}
        values.update(k=self.num_generations,
                      selection_seed=self.seed if self.selection_seed is None else self.selection_seed,
                      collection=_SaraArguments._resolved_schedule(self) if schedule is None else schedule)
        return AllocationConfig(**{name: _converter(hints[name])(value) for name, value in values.items()})

    def _checked_allocation_config(self) -> AllocationConfig:
        """:meth:`to_allocation_config`, its error reported for this class (``"SaraConfig: ..."``; where the message
        names k, with a note that k is ``num_generations`` here).

        Raises
        ------
        AllocationConfigError
            (a ``ValueError``) for an invalid value or combination of the allocation options.
        """
        try:
            # called unbound, so that the torch-free flag preview (sara_trl._cli_preview) checks plain values
            return _SaraArguments.to_allocation_config(self)
        except AllocationConfigError as err:
            raise _for_trainer(err, type(self).__name__) from None

    @property
    def num_groups(self) -> int:
        """B: groups per generation batch, ``generation_batch_size // num_generations``."""
        return self.generation_batch_size // self.num_generations

    def _auto_streams(self) -> bool:
        """What ``collection="auto"`` picks streaming for: SARA (measured faster in streaming than in rounds on the
        real engine over seeds; dynamic sampling was not), where streaming runs (the rules :meth:`_check_streaming`
        and :class:`AllocationConfig` enforce for it)."""
        return (bool(self.use_vllm) and self.vllm_mode == "colocate" and self.vllm_tensor_parallel_size == 1
                and getattr(spec_of(self.allocator), "auto_streams", False)
                and not _SaraArguments._abandons_every_prompt(self))

    def _abandons_every_prompt(self) -> bool:
        """Whether SARA's rule would abandon every prompt at its first outcome in streaming
        (:func:`~sara_trl.allocation.config.streaming_abandons_every_prompt`: k = 2 at the paper's tau_low); then
        ``"auto"`` picks rounds, which decide after the n0 first outcomes. Values the config rejects later count as
        False here."""
        values = SimpleNamespace(k=self.num_generations, allocator=self.allocator, stopping_rule=self.stopping_rule,
                                 tau_low=self.tau_low, prior_alpha=self.prior_alpha, prior_beta=self.prior_beta)
        try:
            return streaming_abandons_every_prompt(values) is not None
        except (TypeError, ValueError):
            return False

    @property
    def schedule(self) -> str:
        """The schedule this config asks for, ``"rounds"`` or ``"streaming"``: ``collection`` itself, or what
        ``collection="auto"`` resolves to from the config alone (see the field's help). The trainer's
        :class:`~sara_trl.trainer.plan.CollectionPlan` starts from it and may keep a trainer with a rounds-only
        feature (``rollout_func``, ``tools``, ...) in rounds; the config itself is never written."""
        return _SaraArguments._resolved_schedule(self)

    def _resolved_schedule(self) -> str:
        # called unbound, so that the torch-free flag preview (sara_trl._cli_preview) resolves it on plain values
        if self.collection != "auto":
            return self.collection
        return "streaming" if _SaraArguments._auto_streams(self) else "rounds"

    def auto_reason(self) -> str | None:
        """Why ``collection="auto"`` resolves to rounds from the config alone (None where it streams, or where
        ``collection`` was set explicitly)."""
        if self.collection != "auto" or _SaraArguments._auto_streams(self):
            return None
        if self.allocator == "sara" and _SaraArguments._abandons_every_prompt(self):
            return (f"with num_generations={self.num_generations} and tau_low={self.tau_low}, streaming would abandon "
                    "every prompt at its first outcome; rounds decide after the n0 first outcomes")
        if not (self.use_vllm and self.vllm_mode == "colocate" and self.vllm_tensor_parallel_size == 1):
            return "streaming needs use_vllm=True with vllm_mode='colocate'"
        return f"allocator={self.allocator!r} was not measured faster in streaming"

    def _check_collection(self) -> None:
        if self.collection not in COLLECTION_CHOICES:
            raise ValueError(f"collection={self.collection!r} must be one of {list(COLLECTION_CHOICES)}.")

    def __post_init__(self):
        self._upgrade_spellings()
        self._check_group_size()
        self._adopt_trl_checkpointing_default()
        super().__post_init__()
        self._resolve_success_threshold()
        self._check_collection()
        self._validate_sara()
        self._warn_inert_options()


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
    (``sara_carry.pt``; with streaming on several processes, each process's own in ``sara_carry_rank<R>.pt``). Each
    step's allocation metrics are logged as ``sara/<name>``.

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
