"""Ending a multi-process test script: destroy the process group while the interpreter is still fully alive."""

from __future__ import annotations

import gc
from pathlib import Path

import torch.distributed as dist


def end_distributed() -> list[str] | None:
    """Collect reference cycles, destroy the default process group (if any), and return the names of the gloo threads
    still running afterwards (``None`` where ``/proc`` does not list a process's threads).

    The trainers' reference cycles (trainer, accelerator, the DDP wrapper) hold the gloo process group, so
    ``destroy_process_group()`` alone leaves its threads (``gloo_tcp_loop``, ``pt_gloo_runloop``) running until
    interpreter finalization, where they can abort the process ("terminate called without an active exception",
    SIGABRT; seen once in CI in a 2-process launch of tests/_mp_train.py; pytorch/pytorch#179291 describes the
    mechanism). Collecting the cycles first lets ``destroy_process_group()`` free the group and join its threads now.
    """
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return None
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended while the folder was listed
            continue
    return sorted(name for name in names if "gloo" in name)
