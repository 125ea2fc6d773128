"""Which gloo threads a test process still runs after ``sara_trl.trainer.distributed.end_distributed``."""

from __future__ import annotations

from pathlib import Path


def gloo_threads() -> list[str] | None:
    """Sorted names of this process's threads whose name holds "gloo" (``gloo_tcp_loop``, ``pt_gloo_runloop``), or
    ``None`` where ``/proc`` does not list a process's threads."""
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
