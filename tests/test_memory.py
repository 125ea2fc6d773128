"""`sara_trl.utils.return_large_frees_to_os`: the glibc setting that lowers the CPU quickstart's peak memory."""

from __future__ import annotations

import ctypes
import os
import platform
import sys

import pytest

from sara_trl.utils import return_large_frees_to_os


def test_bad_threshold_is_refused():
    for bad in (0, -1, 1.5, True, "1MiB"):
        with pytest.raises(ValueError, match="threshold_bytes"):
            return_large_frees_to_os(bad)


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_applies_on_glibc_and_large_frees_leave_no_heap_behind():
    def resident() -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    assert return_large_frees_to_os(1 << 20) is True
    before = resident()
    blocks = [ctypes.create_string_buffer(8 << 20) for _ in range(16)]  # 128 MiB in 8 MiB blocks, touched (zeroed)
    assert resident() - before > 100 << 20
    del blocks
    # each block had its own mapping, so freeing them returned the memory (a heap would have kept most of it)
    assert resident() - before < 32 << 20
