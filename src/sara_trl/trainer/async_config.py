"""`SaraAsyncGRPOConfig` (extends TRL 1.16's ``trl.experimental.async_grpo.AsyncGRPOConfig``): SARA's allocation
options for the asynchronous trainer.

The allocation fields are :class:`~sara_trl.SaraConfig`'s (derived from :class:`sara_trl.allocation.AllocationConfig`:
same names, defaults, help texts and checks; k is TRL's ``num_generations``), except ``collection``, which is always
``"streaming"`` here (the worker decides per finished completion). The success rule is the synchronous trainers'
(``success_threshold``, ``success_reward_func``); ``stream_seed`` seeds the prompt stream. The parent's fields, defaults
and checks are unchanged; ``max_steps`` must be set (see :class:`SaraAsyncGRPOConfig`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field

from trl.experimental.async_grpo import AsyncGRPOConfig

from sara_trl.allocation import AllocationConfig
from sara_trl.allocation.config import AllocationConfigError, check_group_size, options_doc
from sara_trl.trainer.async_worker.config import AsyncWorkerConfig
from sara_trl.trainer.config import _TRAINER_OWN_FIELDS, _as_int, _derived_fields, _for_trainer, _SaraArguments

__all__ = ["SaraAsyncGRPOConfig"]

_ASYNC_OWN = {"success_threshold", "success_reward_func", "stream_seed"}


def _async_fields() -> list[tuple]:
    out = []
    for name, tp, f in _derived_fields() + [t for t in _TRAINER_OWN_FIELDS if t[0] in _ASYNC_OWN]:
        if name == "collection":
            f = field(default="streaming", metadata={**f.metadata, "choices": ["streaming"], "help": (
                "Always 'streaming' in the asynchronous trainer: the rollout worker decides each prompt after each "
                "finished completion (rounds have no place in a never-ending stream).")})
        elif name == "success_threshold":
            f = field(default=None, metadata={"help": (
                "A rollout is a success when its score is > success_threshold (paper App. F). The score is the raw "
                "value of success_reward_func, or the reward (the sum of the reward functions, as TRL's asynchronous "
                "worker sums them). None: 0.5, checked on the first accounting window (an error if the scores are "
                "not 0/1 labels).")})
        out.append((name, tp, f))
    out += [
        ("sara_window_groups", int, field(default=8, metadata={"help": (
            "The rollout worker closes an accounting window (one dict of sara/* metrics to TRL's metrics queue) "
            "after this many committed groups ...")})),
        ("sara_window_seconds", float, field(default=10.0, metadata={"help": "... or after this many seconds."})),
    ]
    return out


_AsyncFields = dataclasses.make_dataclass("_AsyncFields", _async_fields())
_AsyncFields.__module__ = __name__


@dataclass
class SaraAsyncGRPOConfig(_AsyncFields, AsyncGRPOConfig):
    __doc__ = (
        """Configuration class for :class:`~sara_trl.SaraAsyncGRPOTrainer`: every field of TRL 1.16's
    ``AsyncGRPOConfig``, plus SARA's allocation options below (paper §3, Alg. 1; defaults from App. D). Parseable with
    :class:`transformers.HfArgumentParser`.

    ``max_steps`` (optimizer steps) is the stopping rule and must be > 0: TRL's epoch count stops after
    ``num_train_epochs * len(train_dataset)`` distinct groups trained, which assumes every drawn prompt is trained;
    SARA abandons prompts, so an "epoch" would not be a pass over the data. Not supported here: ``carry_over`` (the
    worker never ends a step, every undecided prompt continues anyway), the beyond-paper options
    (``stopping_rule="bayes_optimal"``, ``history_decay``, ``selection``), ``collection="rounds"``, the allocator
    ``"uniform"`` (TRL's own worker is the keep-every-group baseline).

"""
        + options_doc(_AsyncFields, indent=4)
        + """
    Raises
    ------
    ValueError
        From ``__post_init__``: ``max_steps <= 0``, an invalid allocation option or combination (the message names
        the rule; where it names k, k is ``num_generations``), an option the asynchronous worker does not support,
        ``0 < max_inflight_tasks < num_generations``, a bad window or success threshold.
"""
    )

    def __post_init__(self):
        try:
            check_group_size(_as_int(self.num_generations))
        except AllocationConfigError as err:
            raise _for_trainer(err, type(self).__name__) from None
        _SaraArguments._upgrade_spellings(self)
        super().__post_init__()
        name = type(self).__name__
        if not (isinstance(self.max_steps, numbers.Integral) and self.max_steps > 0):
            raise ValueError(
                f"{name}: set max_steps > 0 (got {self.max_steps!r}): it is the stopping rule of the asynchronous "
                "trainer. TRL's epoch count stops after num_train_epochs * len(train_dataset) distinct groups "
                "trained, which assumes every drawn prompt is trained; SARA abandons prompts (and pushes only "
                "committed groups), so an epoch would not be a pass over the data.")
        if self.collection != "streaming":
            raise ValueError(f"{name}: collection={self.collection!r}: the asynchronous worker always decides per "
                             "completion ('streaming'); rounds have no place in a never-ending stream.")
        if self.success_threshold is not None and not (isinstance(self.success_threshold, numbers.Real)
                                                       and math.isfinite(self.success_threshold)):
            raise ValueError(f"{name}: success_threshold ({self.success_threshold!r}) must be a finite number or None.")
        allocation = _SaraArguments._checked_allocation_config(self)
        from sara_trl.trainer.async_worker.worker import check_allocation

        try:
            check_allocation(allocation)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        if 0 < self.max_inflight_tasks < self.num_generations:
            raise ValueError(f"{name}: max_inflight_tasks={self.max_inflight_tasks} must be >= num_generations="
                             f"{self.num_generations}, so that one full group can be in flight (or -1: TRL's default, "
                             "max(max_staleness, 1) * samples per step).")
        self.to_worker_config(model_name="model", lora_name=None, max_inflight_tasks=max(
            self.max_inflight_tasks, self.num_generations))  # checks the windows and sampling values now
        _SaraArguments._warn_inert_options(self)

    def to_allocation_config(self) -> AllocationConfig:
        """The :class:`sara_trl.allocation.AllocationConfig` of these fields (``k = num_generations``,
        ``selection_seed=None`` -> ``seed``; see :meth:`sara_trl.SaraConfig.to_allocation_config`).

        Raises
        ------
        AllocationConfigError
            (a ``ValueError``) for an invalid value or combination.
        """
        return _SaraArguments.to_allocation_config(self)

    def to_worker_config(self, *, model_name: str, lora_name: str | None, max_inflight_tasks: int) -> AsyncWorkerConfig:
        """The rollout worker's settings from TRL's own worker arguments (the ones TRL 1.16's trainer passes to its
        ``AsyncRolloutWorker``: server URL, sampling, completion length, request timeout, queue size, chat template
        arguments) plus SARA's success rule, windows and stream seed.

        Parameters
        ----------
        model_name : str
            The base model name requests use (TRL: the model's config id).
        lora_name : str or None
            The adapter base name under TRL's LoRA sync (``"trl-policy"``), else None.
        max_inflight_tasks : int
            Requests in flight (TRL's resolved ``max_inflight_tasks``), >= ``num_generations``.

        Raises
        ------
        ValueError
            From :class:`AsyncWorkerConfig`.
        """
        kwargs = self.chat_template_kwargs
        if isinstance(kwargs, str):
            import json

            kwargs = json.loads(kwargs)
        return AsyncWorkerConfig(
            model_name=model_name, vllm_server_url=self.vllm_server_base_url, lora_name=lora_name,
            max_inflight_tasks=int(max_inflight_tasks), queue_maxsize=int(self.queue_maxsize),
            max_tokens=int(self.max_completion_length), temperature=self.temperature, top_p=self.top_p,
            top_k=self.top_k, min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            request_timeout=float(self.request_timeout), chat_template_kwargs=kwargs,
            success_reward_func=self.success_reward_func, success_threshold=self.success_threshold,
            window_groups=self.sara_window_groups, window_seconds=self.sara_window_seconds,
            seed=self.seed if self.stream_seed is None else self.stream_seed)
