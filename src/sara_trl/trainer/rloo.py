"""``SaraRLOOTrainer``: TRL's ``RLOOTrainer`` with SARA rollout allocation."""

from __future__ import annotations

from typing import Any

import torch
from trl import RLOOTrainer

from sara_trl.trainer.config import SaraRLOOConfig
from sara_trl.trainer.metric_repair import CLIP_RATIO_METRICS, repair_rloo_kl
from sara_trl.trainer.mixin import SaraTrainerMixin
from sara_trl.trainer.model_card import SaraModelCardMixin, sara_paper
from sara_trl.trainer.progress import use_numeric_logs
from sara_trl.trainer.trl import port

__all__ = ["SaraRLOOTrainer"]


class SaraRLOOTrainer(SaraTrainerMixin, SaraModelCardMixin, RLOOTrainer):
    """TRL's ``RLOOTrainer`` whose generation batches are collected by SARA (or the DS / uniform baselines).

    A drop-in replacement: swap ``RLOOTrainer``/``RLOOConfig`` for ``SaraRLOOTrainer``/:class:`SaraRLOOConfig` and set
    ``max_steps``. TRL's leave-one-out baseline, KL-in-reward (``beta``, default 0.05, which loads a reference model),
    clipping and loss run unchanged on the committed groups; padding rows of short groups (``commit_min < k``) have
    NaN rewards, so they leave the baseline and get a zero advantage. RLOO's loss is a mean over sequences, so padding
    rows scale it by real/total rows (see :mod:`sara_trl.trainer.mixin`).

    Parameters
    ----------
    model, reward_funcs, eval_dataset, processing_class, reward_processing_classes, callbacks, optimizers, \
quantization_config, peft_config
        As in ``trl.RLOOTrainer``.
    args : SaraRLOOConfig, optional
        RLOO settings plus the allocation fields.
    train_dataset : datasets.Dataset
        Map-style, with a ``"prompt"`` column.
    rollout_func : callable, optional
        A SARA addition (TRL's ``RLOOTrainer`` has none), with the contract of ``trl.GRPOTrainer``'s:
        ``rollout_func(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs", ...}``, called once per round
        (``collection="rounds"``) for the round's prompts, each repeated once per rollout. Extra fields reach the reward
        functions as in GRPO; ``logprobs`` are not used (RLOO uses none); an ``env_mask`` raises (RLOO's loss has no
        such mask). TRL's replay then trains on the returned prompt and completion ids. Evaluation generates with
        RLOO's own backend.
    tools, environment_factory
        Refused with ``ValueError``: TRL's ``RLOOTrainer`` has no tool loop (use :class:`SaraGRPOTrainer`).

    Raises
    ------
    ValueError
        ``tools`` or ``environment_factory``, a vision-language model or image columns, a dataset SARA cannot index,
        or a ``success_reward_func`` that names no reward function.
    TypeError
        ``args`` is not a :class:`SaraRLOOConfig`.
    """

    _tag_names = ["trl", "rloo", "sara"]
    _name = "SARA-RLOO"
    _paper = sara_paper(port.trl_paper(RLOOTrainer))
    _sara_returns_logprobs = False

    def __init__(
        self,
        model,
        reward_funcs,
        args: SaraRLOOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        rollout_func=None,
        tools=None,
        environment_factory=None,
    ):
        no_tool_loop = ("TRL's RLOOTrainer has no tool loop (no `tools` / `environment_factory`, no tool mask "
                        "in its loss), so there is nothing for SARA to replay. Use SaraGRPOTrainer for tool use.")
        args, plan = self._sara_prepare(model, args, SaraRLOOConfig, train_dataset, processing_class,
                                  {"tools": no_tool_loop if tools else None,
                                   "environment_factory": no_tool_loop if environment_factory is not None else None},
                                  rounds_only={"rollout_func": rollout_func is not None}, reward_funcs=reward_funcs)
        with self._sara_engine_context(args):
            super().__init__(
                model=model,
                reward_funcs=reward_funcs,
                args=args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                reward_processing_classes=reward_processing_classes,
                callbacks=callbacks,
                optimizers=optimizers,
                quantization_config=quantization_config,
                peft_config=peft_config,
            )
        self._sara_setup(plan, rollout_func)  # a round calls rollout_func; the replay answers TRL from the cache
        use_numeric_logs(self)  # the console prints logged numbers as numbers, not strings

    # ------------------------------------------------------------------ hooks (see sara_trl.trainer.hooks)
    def _sara_generate_round(self, prompt_ids: list[list[int]], images: Any, multimodal_fields: dict):
        """ONE batched generation call through RLOO's backend, one completion per entry (the port's
        ``rloo_generate_round``). Returns ``(completion_ids (R,), None)``: RLOO generation returns no log-probs."""
        return port.rloo_generate_round(self, prompt_ids, images, multimodal_fields)

    def _sara_decode(self, prompts: list, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list:
        """Decode completions exactly as RLOO's generation step does (the port's ``rloo_decode``)."""
        return port.rloo_decode(self, prompts, prompt_ids, completion_ids)

    def _sara_row_metrics(self) -> tuple[str, ...]:
        """RLOO's clip ratios are per sequence (one importance ratio per sequence), so they average over rows."""
        return CLIP_RATIO_METRICS

    def _sara_fix_replay_metrics(self, output: dict, is_padding_local: torch.Tensor, replay_logps: list) -> None:
        """Recompute RLOO's ``kl`` metric over real tokens, NaN when there is none
        (:func:`sara_trl.trainer.metric_repair.repair_rloo_kl`)."""
        repair_rloo_kl(self, output, replay_logps)
