"""Stand-ins that let TRL 1.16's ``AsyncGRPOTrainer`` train on a CPU (tests, the CPU example): nothing here runs on a
GPU, where TRL's own code is used unchanged.

Two pieces of TRL's trainer are CUDA-only:

1. **Packed attention.** The trainer loads its model with ``attn_implementation="tree_fa3"``: samples of one group
   share their prompt in a packed row, and each segment of the row attends to its own path through the tree
   (``trl/experimental/async_grpo/packing.py``, ``tree_attention``). The kernel is FlashAttention-3's
   ``flash_attn_varlen_func``, fetched from the Hub (``kernels-community/flash-attn3``, CUDA only). Here
   :func:`sdpa_varlen` computes the same thing per segment with ``torch.nn.functional.scaled_dot_product_attention``
   (causal mask aligned bottom-right: a segment's queries are the last ``Lq`` of its ``Lk`` keys; grouped-query heads
   through ``enable_gqa``).
2. **Peak FLOPs.** ``AsyncGRPOTrainer.__init__`` calls ``torch.cuda.get_device_name`` (for MFU metrics), which raises
   on a CPU-only torch. Here it reports no peak (None): MFU is not logged, everything else is.

:func:`install_cpu_stand_ins` puts both in place (the TRL side is in the port, ``sara_trl.trainer.trl``); it refuses
to run where CUDA is available.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from sara_trl.trainer.trl import port

__all__ = ["install_cpu_stand_ins", "sdpa_varlen", "stand_ins_installed"]


def sdpa_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float | None = None,
                causal: bool = True, window_size: tuple[int, int] = (-1, -1), **kwargs) -> torch.Tensor:
    """FlashAttention's ``flash_attn_varlen_func`` as TRL's tree attention calls it, with torch SDPA per segment.

    Parameters
    ----------
    q : Tensor, shape (total_q, H, D)
        Queries of every segment, concatenated.
    k, v : Tensor, shape (total_k, H_kv, D)
        Keys and values of every segment (each segment's path through the tree), concatenated; ``H % H_kv == 0``.
    cu_seqlens_q, cu_seqlens_k : Tensor of int, shape (S + 1,)
        Segment boundaries in ``q`` and in ``k``/``v``.
    max_seqlen_q, max_seqlen_k : int
        Not needed here (FlashAttention's buffer sizes).
    softmax_scale : float, optional
        None: ``D ** -0.5``.
    causal : bool
        Query ``i`` of a segment with ``Lq`` queries and ``Lk`` keys sees keys ``j <= i + Lk - Lq`` (bottom-right
        alignment, FlashAttention's convention for ``Lq != Lk``).
    window_size : tuple of int
        Only ``(-1, -1)`` (no sliding window).

    Returns
    -------
    Tensor, shape (total_q, H, D)

    Raises
    ------
    NotImplementedError
        A sliding window, or a soft-cap (``softcap`` in ``kwargs``): SmolLM2 / Llama / Qwen2 use neither.
    """
    if tuple(window_size) != (-1, -1) or kwargs.get("softcap"):
        raise NotImplementedError("the CPU attention stand-in has no sliding window and no soft-cap")
    out = torch.empty_like(q)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for s in range(len(cq) - 1):
        qs = q[cq[s]:cq[s + 1]].transpose(0, 1)  # (H, Lq, D)
        ks = k[ck[s]:ck[s + 1]].transpose(0, 1)
        vs = v[ck[s]:ck[s + 1]].transpose(0, 1)
        lq, lk = qs.shape[1], ks.shape[1]
        mask = None
        if causal:
            mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(diagonal=lk - lq)
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=softmax_scale,
                                           enable_gqa=ks.shape[0] != qs.shape[0])
        out[cq[s]:cq[s + 1]] = o.transpose(0, 1)
    return out


_KERNEL = SimpleNamespace(flash_attn_varlen_func=sdpa_varlen)


def install_cpu_stand_ins() -> None:
    """Put the CPU stand-ins in place for this process (idempotent): TRL's tree attention runs :func:`sdpa_varlen`,
    and the trainer's peak-FLOPs lookup answers None on a CPU device.

    Raises
    ------
    RuntimeError
        CUDA is available: TRL's own kernels are used there, unchanged.
    """
    if torch.cuda.is_available():
        raise RuntimeError("the CPU stand-ins are for a machine without CUDA; on a GPU TRL's own FlashAttention-3 "
                           "kernel and peak-FLOPs lookup are used")
    port.install_async_cpu_stand_ins(_KERNEL)


def stand_ins_installed() -> bool:
    """Whether :func:`install_cpu_stand_ins` ran in this process."""
    return port.async_cpu_stand_ins_installed(_KERNEL)
