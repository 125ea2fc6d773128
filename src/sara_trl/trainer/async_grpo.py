"""`SaraAsyncGRPOTrainer`: TRL 1.16's ``AsyncGRPOTrainer`` with SARA's rollout worker.

The trainer builds :class:`~sara_trl.trainer.async_worker.SaraAsyncRolloutWorker` from TRL's own worker arguments
(the ones TRL passes to its default ``AsyncRolloutWorker``) and hands it to TRL through the public ``rollout_worker=``
constructor argument; training, batching, the loss, staleness drops and weight sync are TRL's, unchanged. The worker's
own state (prompt stream, refill model, seed generator) is saved with every checkpoint (``sara_async_worker.json``)
and restored by ``train(resume_from_checkpoint=...)``, along with TRL's policy version (so adapter names keep
counting).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.trainer.utils import get_config_model_id

from sara_trl.trainer.async_config import SaraAsyncGRPOConfig
from sara_trl.trainer.async_worker.worker import SaraAsyncRolloutWorker
from sara_trl.trainer.trl import port

__all__ = ["WORKER_STATE_NAME", "SaraAsyncGRPOTrainer"]

WORKER_STATE_NAME = "sara_async_worker.json"
"""The worker's state file in a checkpoint folder."""


class _SaveWorkerState(TrainerCallback):
    """Writes the worker's state (and TRL's policy version) into each checkpoint folder, on the main process."""

    def __init__(self, trainer: SaraAsyncGRPOTrainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        trainer = self.trainer
        if not state.is_world_process_zero or trainer.rollout_worker is None:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        os.makedirs(folder, exist_ok=True)
        payload = {"worker": trainer.rollout_worker.state_dict(), "model_version": int(trainer.model_version)}
        tmp = os.path.join(folder, f".{WORKER_STATE_NAME}.tmp")
        with open(tmp, "w") as f:
            json.dump(payload, f)
        os.replace(tmp, os.path.join(folder, WORKER_STATE_NAME))


class SaraAsyncGRPOTrainer(AsyncGRPOTrainer):
    """TRL 1.16's asynchronous GRPO trainer that trains only effective (mixed) groups, collected by SARA (or dynamic
    sampling) per finished completion (paper §3, Alg. 1; continuous collection is beyond the paper).

    Parameters
    ----------
    model : str
        A model id or local checkpoint path, as TRL's ``AsyncGRPOTrainer`` takes it; the vLLM server must serve the
        same name (vLLM's default served name is its ``--model`` argument).
    reward_funcs : callable or list of callable
        TRL reward functions (at least one); a completion's reward is their sum (TRL's asynchronous reward).
    args : SaraAsyncGRPOConfig
        Required (``max_steps > 0`` is the stopping rule).
    train_dataset : datasets.Dataset or sequence of dict
        Map-style rows with a conversational ``"prompt"``; other columns go to the reward functions.
    processing_class, callbacks, optimizers, peft_config, weight_transfer
        As TRL's ``AsyncGRPOTrainer``. With a PEFT LoRA model and a server started with ``--enable-lora``, TRL's
        adapter sync is used and requests name ``trl-policy-v{N}``.

    Attributes
    ----------
    rollout_worker : SaraAsyncRolloutWorker
        On the main process (None elsewhere, as TRL's).

    Raises
    ------
    TypeError
        ``args`` is not a :class:`SaraAsyncGRPOConfig`.
    ValueError
        No reward function, no (or an unsized) ``train_dataset``, ``tools`` / ``environment_factory`` /
        ``rollout_worker`` given (this trainer builds its own worker, for single-turn prompts), TRL's resolved
        ``max_inflight_tasks`` below ``num_generations``.
    RuntimeError
        On a machine without CUDA when the CPU stand-ins are not installed
        (:func:`sara_trl.trainer.async_worker.cpu.install_cpu_stand_ins`; TRL's packed attention needs a CUDA
        FlashAttention-3 kernel).
    """

    def __init__(self, model: str, reward_funcs: Callable | list[Callable] | None = None,
                 args: SaraAsyncGRPOConfig | None = None, train_dataset: Any = None, processing_class: Any = None,
                 callbacks: list | None = None, optimizers: tuple = (None, None), peft_config: Any = None,
                 tools: list | None = None, environment_factory: Any = None, rollout_worker: Any = None,
                 weight_transfer: Any = None):
        if not isinstance(args, SaraAsyncGRPOConfig):
            raise TypeError(f"SaraAsyncGRPOTrainer needs args=SaraAsyncGRPOConfig(..., max_steps=...), got "
                            f"{type(args).__name__}")
        if tools or environment_factory is not None:
            raise ValueError("SaraAsyncGRPOTrainer's worker generates single-turn completions: tools and "
                             "environment_factory are not supported (use TRL's AsyncGRPOTrainer for them)")
        if rollout_worker is not None:
            raise ValueError("SaraAsyncGRPOTrainer builds its own rollout worker (SaraAsyncRolloutWorker); to use "
                             "another worker, pass it to TRL's AsyncGRPOTrainer")
        reward_funcs = [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, list) \
            else [reward_funcs]
        if not reward_funcs:
            raise ValueError("SaraAsyncGRPOTrainer needs at least one reward function (the success labels come from "
                             "the rewards)")
        if train_dataset is None or not hasattr(train_dataset, "__len__"):
            raise ValueError("SaraAsyncGRPOTrainer needs a map-style train_dataset (a datasets.Dataset or a list of "
                             "rows): SARA's prompt stream draws rows by index")
        if not torch.cuda.is_available():
            from sara_trl.trainer.async_worker.cpu import stand_ins_installed

            if not stand_ins_installed():
                raise RuntimeError(
                    "no CUDA here: TRL's AsyncGRPOTrainer trains with a CUDA FlashAttention-3 kernel from the Hub and "
                    "reads the GPU's name in __init__. On a CPU, call "
                    "sara_trl.trainer.async_worker.cpu.install_cpu_stand_ins() first (per-segment torch SDPA for the "
                    "packed attention; no MFU metric).")
        worker = SaraAsyncRolloutWorker(
            dataset=train_dataset, reward_funcs=reward_funcs, processing_class=processing_class,
            allocation=args.to_allocation_config(),
            config=args.to_worker_config(model_name=str(model), lora_name=None,
                                         max_inflight_tasks=max(args.max_inflight_tasks, args.num_generations)))
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
                         processing_class=processing_class, callbacks=callbacks, optimizers=optimizers,
                         peft_config=peft_config, rollout_worker=worker, weight_transfer=weight_transfer)
        if self.accelerator.is_main_process:
            # TRL resolved these in its __init__: the tokenizer, max_inflight_tasks (-1 -> max_staleness * samples
            # per step), whether weights sync as LoRA adapters (requests then name trl-policy-v{N}).
            base = self.accelerator.unwrap_model(self.model)
            worker.bind(processing_class=self.processing_class, config=args.to_worker_config(
                model_name=get_config_model_id(base.config), lora_name=port.async_lora_name(self),
                max_inflight_tasks=self.args.max_inflight_tasks))
        self.add_callback(_SaveWorkerState(self))

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """TRL's ``train``; with ``resume_from_checkpoint``, the worker's state and TRL's policy version are restored
        from the checkpoint's ``sara_async_worker.json`` first (the worker then continues its prompt stream).

        Raises
        ------
        FileNotFoundError
            ``resume_from_checkpoint`` names a checkpoint without the worker's state file (not written by this
            trainer), or is True with no checkpoint in ``output_dir``.
        """
        if resume_from_checkpoint is not None and resume_from_checkpoint is not False:
            folder = resume_from_checkpoint
            if folder is True:
                folder = get_last_checkpoint(self.args.output_dir)
                if folder is None:
                    raise FileNotFoundError(f"no checkpoint found in output_dir {self.args.output_dir!r}")
            path = os.path.join(folder, WORKER_STATE_NAME)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path} is missing: the checkpoint was not written by SaraAsyncGRPOTrainer, "
                                        "so the rollout worker's prompt stream cannot be resumed")
            with open(path) as f:
                saved = json.load(f)
            if self.rollout_worker is not None:
                self.rollout_worker.load_state_dict(saved["worker"])
                self.model_version = int(saved["model_version"])
                self.rollout_worker.update_model_version(self.model_version)
            resume_from_checkpoint = folder
        return super().train(resume_from_checkpoint, *args, **kwargs)
