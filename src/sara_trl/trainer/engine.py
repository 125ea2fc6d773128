"""TRL's vLLM engine during SARA: built with the CPU adjustments, weights synced once per step, kept awake for rounds.

The CPU-only adjustments themselves (packed kernels, precision, eager engine) are in :mod:`sara_trl.trainer.vllm_cpu`;
this module decides when they and the weight syncs apply to a trainer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from trl.extras.profiling import profiling_context

from sara_trl.trainer.vllm_cpu import colocated_engine_on_cpu

__all__ = ["engine_context", "sync_weights_once", "vllm_awake"]


def engine_context(args: Any) -> contextlib.AbstractContextManager:
    """Context wrapped around TRL's construction: the CPU-only adjustments of :mod:`sara_trl.trainer.vllm_cpu`.

    Active only for ``use_vllm=True, vllm_mode="colocate"`` on vLLM's CPU platform (a no-op elsewhere, GPUs
    included). The engine is built in the precision the trainer computes log-probs in: bfloat16 with ``bf16``,
    float16 with ``fp16``, float32 otherwise.
    """
    if not (getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
    return colocated_engine_on_cpu(dtype)


def sync_weights_once(trainer: Any) -> None:
    """Push the policy's weights into the colocated engine if the optimizer step changed since the last push (as
    TRL's ``_generate_single_turn`` does: once per step)."""
    if trainer.state.global_step != trainer._last_loaded_step:
        with profiling_context(trainer, "sync_weights"):
            trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


@contextlib.contextmanager
def vllm_awake(trainer: Any) -> Iterator[None]:
    """Keep a sleeping colocated vLLM engine awake for all rounds of one step (weights pushed once per step).

    TRL's ``VLLMGeneration.generate`` puts the engine to sleep (level 2, weights discarded) after every call and
    re-pushes all weights on the next one; with several rounds per step that would cost one full (collective)
    weight transfer per round. Here the weights are synced once (if the optimizer step changed, or they sleep),
    the KV cache is woken, sleep mode is switched off for the rounds, and restored (engine put back to sleep)
    afterwards. Other setups (no vLLM, server mode, sleep mode off) need nothing: TRL syncs once per step.
    """
    engine = getattr(trainer, "vllm_generation", None) if trainer.use_vllm else None
    if (engine is None or getattr(engine, "mode", None) != "colocate"
            or not getattr(engine, "enable_sleep_mode", False)):
        yield
        return
    if trainer.state.global_step != trainer._last_loaded_step or getattr(engine, "_llm_weights_sleeping", False):
        with profiling_context(trainer, "sync_weights"):
            engine.sync_weights()  # wakes the weights first (sleep mode is on)
        trainer._last_loaded_step = trainer.state.global_step
    engine.llm.wake_up(tags=["kv_cache"])
    engine.enable_sleep_mode = False
    try:
        yield
    finally:
        engine.enable_sleep_mode = True
        engine.llm.sleep(level=2)
        engine._llm_weights_sleeping = True
