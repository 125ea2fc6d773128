"""Multi-process helpers for SARA's lock-step rounds.

Every process runs the same allocator on the same (gathered) outcomes, so each round's global request list is
identical everywhere. This module holds the two pieces of that protocol that must be exactly right on every rank:

- :func:`split_round`: pad a round's requests to a multiple of the world size W and cut W equal contiguous chunks,
  so that every process makes ONE generation call with the same number of rows, never zero (ZeRO-3/FSDP generation
  and vLLM tensor parallelism are collective and hang when a rank skips a call or sends a different row count).
- :func:`match_reward_gather` and :func:`raise_if_any_failed`: a reward function (or generation) that raises on one
  process must fail the step on *every* process instead of leaving the others blocked in the next collective. The
  failing process first joins the reward gather the others are waiting in, then all processes exchange their error
  state at the same point and raise together: the original exception on the failing process, a ``RuntimeError``
  naming the failing process and its message on the others.

And one for the end of a launched script: :func:`end_distributed` destroys the process group while the interpreter is
still fully alive.
"""

from __future__ import annotations

import gc
import math
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object

__all__ = ["end_distributed", "match_reward_gather", "raise_if_any_failed", "split_round"]


def split_round(requests: np.ndarray, world: int, rank: int) -> tuple[np.ndarray, int]:
    """This process's share of one round's global request list.

    The list is padded to ``per_rank * world`` entries with copies of its last request (their results are
    discarded by the caller), then cut into ``world`` contiguous chunks; process ``rank`` takes chunk ``rank``.
    With ``total >= 1`` requests every process gets ``per_rank = ceil(total / world) >= 1`` rows, also when
    ``total < world``.

    Parameters
    ----------
    requests : numpy.ndarray
        ``(total,)`` int64 dataset indices, one per requested rollout (prompt-major), ``total >= 1``.
    world : int
        Number of processes W (>= 1).
    rank : int
        This process's index in ``[0, world)``.

    Returns
    -------
    local : numpy.ndarray
        ``(per_rank,)`` int64, the slice of the padded list this process generates; global request ``i``
        (``i < total``) is row ``i - rank * per_rank`` of process ``i // per_rank``.
    per_rank : int
        Rows per process, ``ceil(total / world)``.

    Raises
    ------
    ValueError
        ``requests`` is empty, or ``world``/``rank`` are out of range.
    """
    requests = np.asarray(requests, dtype=np.int64).reshape(-1)
    total = len(requests)
    if total == 0:
        raise ValueError("a round must request at least one rollout; got an empty request list")
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"invalid process layout: rank {rank} of world size {world}")
    per_rank = math.ceil(total / world)
    padded = np.concatenate([requests, np.full(per_rank * world - total, requests[-1], dtype=np.int64)])
    return padded[rank * per_rank : (rank + 1) * per_rank], per_rank


def match_reward_gather(accelerator: Any, num_rows: int, num_funcs: int) -> None:
    """Join, with a dummy tensor, the reward gather that TRL's ``_calculate_rewards`` ends with.

    Called by a process whose generation or reward pass raised *before* its own gather: the other processes are
    (or will be) blocked in ``gather(rewards_per_func)`` with a ``(num_rows, num_funcs)`` tensor, and accelerate's
    gather is ``all_gather``, which needs the same shape and dtype on every process. The gathered values are
    discarded. This mirrors TRL's tensor exactly (``torch.zeros(len(prompts), len(reward_funcs))``, default dtype,
    on ``accelerator.device``).

    Parameters
    ----------
    accelerator : accelerate.Accelerator
        The trainer's accelerator (or an object with ``gather`` and ``device``).
    num_rows : int
        Rows this process scores per round (``per_rank`` of :func:`split_round`).
    num_funcs : int
        Number of reward functions F.
    """
    accelerator.gather(torch.zeros(num_rows, num_funcs, device=accelerator.device))


def raise_if_any_failed(accelerator: Any, error: BaseException | None, what: str) -> None:
    """Collective error check: every process calls it at the same point; if any process failed, all raise.

    Parameters
    ----------
    accelerator : accelerate.Accelerator
        The trainer's accelerator (``num_processes``, ``process_index``).
    error : BaseException or None
        The exception this process caught since the previous collective, or None.
    what : str
        What was being done, for the message (e.g. ``"SARA round 3 (generation and rewards)"``).

    Raises
    ------
    BaseException
        ``error`` itself (original type and traceback) on a process that failed.
    RuntimeError
        On the other processes, naming the first failing process and its exception's type and message, e.g.
        ``"SARA round 3 (generation and rewards) failed on process 1: ValueError: boom"``.
    """
    if accelerator.num_processes == 1:
        if error is not None:
            raise error
        return
    report = None if error is None else (accelerator.process_index, f"{type(error).__name__}: {error}")
    failures = [item for item in gather_object([report]) if item is not None]
    if error is not None:
        raise error
    if failures:
        rank, message = failures[0]
        others = f" (and on processes {[r for r, _ in failures[1:]]})" if len(failures) > 1 else ""
        raise RuntimeError(f"{what} failed on process {rank}{others}: {message}")


def end_distributed() -> None:
    """End a launched script: collect reference cycles, then destroy the default process group if one is initialized.

    Call it once the trainers are no longer used (``del trainer`` first where a name still holds one). The trainer,
    its accelerator and the DDP wrapper hold the process group in reference cycles, so ``destroy_process_group()``
    alone does not free a gloo group: its threads (``gloo_tcp_loop``, ``pt_gloo_runloop``) keep running until the
    interpreter exits, and torn down there they can abort the process with "terminate called without an active
    exception" (SIGABRT; the mechanism: pytorch/pytorch#179291; docs/multiprocess.md, "Ending the script").
    ``gc.collect()`` first frees the group, and destroying it joins those threads at once. In a single process
    without a group, or where another component (vLLM's clean-up) has already destroyed it, it only collects.

    Raises nothing of its own; an error from ``destroy_process_group()`` propagates.
    """
    gc.collect()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
