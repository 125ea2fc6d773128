"""``SaraGRPOTrainer``: TRL's ``GRPOTrainer`` with SARA rollout allocation."""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer

from sara_trl.trainer.config import SaraConfig
from sara_trl.trainer.metric_repair import CLIP_RATIO_METRICS, repair_grpo_sampling_metrics
from sara_trl.trainer.mixin import SaraTrainerMixin
from sara_trl.trainer.model_card import SaraModelCardMixin, sara_paper
from sara_trl.trainer.progress import use_numeric_logs
from sara_trl.trainer.trl import port

__all__ = ["SaraGRPOTrainer"]


class SaraGRPOTrainer(SaraTrainerMixin, SaraModelCardMixin, GRPOTrainer):
    """TRL's ``GRPOTrainer`` whose generation batches are collected by SARA (or the DS / uniform baselines).

    A drop-in replacement: swap ``GRPOTrainer``/``GRPOConfig`` for ``SaraGRPOTrainer``/:class:`SaraConfig` and set
    ``max_steps``. Only rollout collection changes; TRL's padding, masks, old/ref log-probs, importance sampling,
    advantages, loss and metrics run unchanged on the B = ``generation_batch_size / num_generations`` groups SARA
    commits. See :mod:`sara_trl.trainer.mixin` for the mechanism, the padding of short groups (``commit_min < k``) and
    which ``loss_type`` values stay exact.

    Parameters
    ----------
    model, reward_funcs, eval_dataset, processing_class, reward_processing_classes, callbacks, optimizers, \
quantization_config, peft_config
        As in ``trl.GRPOTrainer``.
    args : SaraConfig, optional
        GRPO settings plus the allocation fields.
    train_dataset : datasets.Dataset
        Map-style, with a ``"prompt"`` column (text or conversational).
    rollout_func : callable, optional
        As in ``trl.GRPOTrainer`` (``rollout_func(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs",
        ...}``), with ``collection="rounds"`` (what ``"auto"`` resolves to with it): each round calls it once for the
        round's prompts, each repeated once per rollout SARA asks of it. Its ``env_mask`` and extra fields are kept
        per rollout and handed back to TRL unchanged in the replay.
    tools : list of callable, optional
        As in ``trl.GRPOTrainer`` (function calling). With ``collection="rounds"`` (what ``"auto"`` resolves to with
        it) each round generates once for its rollouts, then runs TRL's own tool loop (``_tool_call_loop``: tool
        calls, their output appended, generation again, up to ``max_tool_calling_iterations``). Each trajectory's
        completion ids over every turn, ``tool_mask``, log-probs, messages and tool call / failure counts are kept and
        handed back to TRL in the replay, so the loss (tool output masked), ``tools/*`` metrics and completion logs are
        TRL's own. With ``collection="streaming"`` each rollout is a chain of engine requests, TRL's tool loop run
        per rollout between them (:mod:`sara_trl.trainer.trajectory`). Not together with ``rollout_func``.
    environment_factory : callable or dict of str to callable, optional
        As in ``trl.GRPOTrainer`` (experimental in TRL), with ``collection="rounds"`` (what ``"auto"`` resolves to
        with it): each round draws one instance per rollout from TRL's pool, resets it with the rollout's dataset row
        (its observation appended to the prompt), exposes its public methods as that rollout's tools, runs TRL's tool
        loop and scores the trajectories with the instances as ``environments`` (the environment's ``get_reward``
        included, a reward column named after its class: ``success_reward_func`` may name it). The replay does not
        reset the instances again (:mod:`sara_trl.trainer.environment`). With ``collection="streaming"`` each
        rollout leases an instance for its request chain (:mod:`sara_trl.trainer.trajectory`). Not together with
        ``rollout_func``; the dataset keeps its ``prompt`` column.

    Raises
    ------
    ValueError
        An unsupported feature (tools or environment_factory together with rollout_func, rollout_func with
        collection='streaming', vision-language model or image columns), a dataset SARA
        cannot index, or a ``success_reward_func`` that names no reward function.
    TypeError
        ``args`` is not a :class:`SaraConfig`.

    Notes
    -----
    Logged metrics besides TRL's: see :func:`sara_trl.trainer.metrics.log_step_metrics`. TRL's ``reward`` metrics only
    see the committed groups; ``sara/raw_success_rate`` covers every generated rollout.

    Examples
    --------
    >>> from datasets import load_dataset
    >>> from trl.rewards import accuracy_reward
    >>> from sara_trl import SaraConfig, SaraGRPOTrainer
    >>> args = SaraConfig(output_dir="out", max_steps=300, num_generations=8, n0=2, tau_low=0.45)
    >>> trainer = SaraGRPOTrainer(
    ...     model="Qwen/Qwen2.5-0.5B-Instruct",
    ...     reward_funcs=accuracy_reward,
    ...     args=args,
    ...     train_dataset=load_dataset("trl-lib/DeepMath-103K", split="train"),
    ... )  # doctest: +SKIP
    >>> trainer.train()  # doctest: +SKIP
    """

    _tag_names = ["trl", "grpo", "sara"]
    _name = "SARA-GRPO"
    _paper = sara_paper(port.trl_paper(GRPOTrainer))
    _sara_returns_logprobs = True
    _sara_accepts_env_mask = True  # TRL's GRPO loss masks a rollout_func's env_mask (as its tool_mask)

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: SaraConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        tools=None,
        rollout_func=None,
        environment_factory=None,
    ):
        args, plan = self._sara_prepare(
            model,
            args,
            SaraConfig,
            train_dataset,
            processing_class,
            {  # a string: refused, for this reason
                name: "together with `rollout_func` yet: pass one of them (SARA replays either a rollout_func's "
                      "output or TRL's tool loop)." if value and rollout_func is not None else None
                for name, value in (("tools", bool(tools)), ("environment_factory", environment_factory is not None))
            },
            rounds_only={"rollout_func": rollout_func is not None, "tools": bool(tools),
                         "environment_factory": environment_factory is not None},
            reward_funcs=reward_funcs,
        )
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
                tools=tools,
                rollout_func=rollout_func,
                environment_factory=environment_factory,
            )
        # A round calls the user's rollout_func (sara_trl.trainer.rollout.call_rollout_func); TRL's own calls of
        # `self.rollout_func` (the replay, evaluation) go through the stand-in, answered from the cache in the replay.
        self._sara_setup(plan, rollout_func)
        if rollout_func is not None:
            self.rollout_func = self._sara_replayed_rollout_func
        use_numeric_logs(self)  # the console prints logged numbers as numbers, not strings

    # ------------------------------------------------------------------ hooks (see sara_trl.trainer.hooks)
    def _sara_generate_round(self, prompt_ids: list[list[int]], images: Any, multimodal_fields: dict):
        """ONE batched generation call through GRPO's backend, one completion per entry (the port's
        ``grpo_generate_round``).

        Returns
        -------
        completion_ids : list of list of int
            One completion per entry of ``prompt_ids``.
        logprobs : list of list of float or None
            vLLM's sampled-token log-probs (one per completion token), None for transformers generation.
        """
        return port.grpo_generate_round(self, prompt_ids, images, multimodal_fields)

    def _sara_decode(self, prompts: list, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list:
        """Decode completions exactly as GRPO's generation step does (what reward functions receive; the port's
        ``grpo_decode``): with ``environment_factory``, each with the tools its prompt was rendered with."""
        return port.grpo_decode(self, prompts, prompt_ids, completion_ids)

    def _sara_row_metrics(self) -> tuple[str, ...]:
        """GRPO's metrics averaged over rows: the clip ratios under ``importance_sampling_level="sequence"`` (one
        ratio per sequence), and ``vespo/phi_seq_mean`` (one weight per sequence)."""
        names: tuple[str, ...] = ()
        if self.importance_sampling_level == "sequence":
            names += CLIP_RATIO_METRICS + ("cispo_clip_ratio",)
        if self.loss_type == "vespo":
            names += ("vespo/phi_seq_mean",)
        return names

    def _sara_fix_replay_metrics(self, output: dict, is_padding_local: torch.Tensor, replay_logps: list) -> None:
        """Recompute the vLLM importance-sampling metrics (``sampling/*``) over real tokens
        (:func:`sara_trl.trainer.metric_repair.repair_grpo_sampling_metrics`)."""
        repair_grpo_sampling_metrics(self, output, is_padding_local)
