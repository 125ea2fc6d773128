"""Process memory on CPU: keep glibc's malloc from holding on to the training step's freed buffers."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["return_large_frees_to_os"]

_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's <malloc.h>


def return_large_frees_to_os(threshold_bytes: int = 1 << 20) -> bool:
    """Serve every allocation of at least ``threshold_bytes`` with its own ``mmap``, so that freeing it returns it.

    glibc's malloc starts with a 128 KiB threshold but raises it (up to 32 MiB) each time a large block is freed; from
    then on, the multi-MiB activation, logit and gradient buffers of a CPU training step are carved from its heaps,
    which fragment and keep their peak size. Fixing the threshold (``mallopt(M_MMAP_THRESHOLD, ...)``) hands each such
    buffer back to the operating system when torch frees it. On the CPU quickstart (SmolLM2-135M, 2 steps) this
    lowered the peak resident memory by about 0.8 GiB; the cost is one ``mmap``/``munmap`` pair per large buffer.

    Parameters
    ----------
    threshold_bytes : int
        Allocations of at least this many bytes get their own mapping (default 1 MiB; glibc caps it at 32 MiB).

    Returns
    -------
    bool
        True if the setting was applied; False where it does not apply (not Linux, or a C library without
        ``mallopt``, e.g. musl), in which case nothing changed.

    Raises
    ------
    ValueError
        ``threshold_bytes`` is not a positive integer.
    """
    if isinstance(threshold_bytes, bool) or not isinstance(threshold_bytes, int) or threshold_bytes <= 0:
        raise ValueError(f"threshold_bytes must be a positive integer, got {threshold_bytes!r}")
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold_bytes)))
