"""Process-local counters of verifier outcomes (thread-safe).

Keys are ``"<verifier>/<status or event>"``, e.g. ``"math/correct"``, ``"math/timeout"``, ``"math/fast_path"``,
``"math/cache_hit"``, ``"countdown/wrong"``, plus the worker-pool events ``"pool/kills"`` (workers killed at the hard
limit) and ``"pool/restarts"``. Timeouts are counted apart from wrong answers so a trainer can log them
(e.g. as ``sara/verifier_timeouts``).
"""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["stats", "reset_stats", "count"]

_LOCK = threading.Lock()
_COUNTS: Counter = Counter()


def count(key: str, n: int = 1) -> None:
    """Add ``n`` to counter ``key``."""
    if n:
        with _LOCK:
            _COUNTS[key] += n


def stats() -> dict[str, int]:
    """Snapshot of all counters in this process, including the verifier worker pools' kills/restarts/timeouts.

    Returns
    -------
    dict of str to int
        ``{key: count}``, sorted by key. Counts are per process (each rank or data-loader worker has its own).
    """
    from .pool import pool_counters

    with _LOCK:
        out = dict(_COUNTS)
    for k, v in pool_counters().items():
        out[f"pool/{k}"] = out.get(f"pool/{k}", 0) + v
    return dict(sorted(out.items()))


def reset_stats() -> None:
    """Zero every counter (including the pools')."""
    from .pool import reset_pool_counters

    with _LOCK:
        _COUNTS.clear()
    reset_pool_counters()
