"""`sara_trl.utils.return_large_frees_to_os`: the glibc setting that lowers the CPU quickstart's peak memory."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from sara_trl.utils import return_large_frees_to_os


def test_bad_threshold_is_refused():
    for bad in (0, -1, 1.5, True, "1MiB"):
        with pytest.raises(ValueError, match="threshold_bytes"):
            return_large_frees_to_os(bad)


_CHECK = """
import ctypes, os, sys
from sara_trl.utils import return_large_frees_to_os

def resident():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

if sys.argv[1] == "apply":
    assert return_large_frees_to_os(1 << 20) is True
# what a training step does first: free a large buffer, after which glibc raises its mmap threshold (up to 32 MiB)
warm = ctypes.create_string_buffer(24 << 20)
del warm
before = resident()
blocks, pins = [], []
# 128 MiB in 8 MiB blocks, each followed by a live 256 KiB allocation that pins the heap (4 KiB pins could land in
# holes that importing the package left in the heap, depending on its source sizes, and then pin nothing)
for _ in range(16):
    blocks.append(ctypes.create_string_buffer(8 << 20))
    ctypes.memset(blocks[-1], 1, 8 << 20)  # touch every page
    pins.append(ctypes.create_string_buffer(256 << 10))
grown = resident() - before
del blocks
print(grown, resident() - before)
"""


def _run_check(mode: str) -> tuple[int, int]:
    # a fresh interpreter: the test session's other threads and earlier heaps would blur the resident-size deltas
    done = subprocess.run([sys.executable, "-c", _CHECK, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    grown, left = (int(x) for x in done.stdout.split())
    assert grown > 120 << 20  # the 128 MiB were resident while held
    return grown, left


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_applies_on_glibc_and_large_frees_leave_no_heap_behind():
    # with the setting, each 8 MiB block had its own mapping, so freeing them returned the memory
    assert _run_check("apply")[1] < 16 << 20
    # without it (glibc's raised dynamic threshold), the same blocks came from the heap and stayed resident
    assert _run_check("none")[1] > 100 << 20


def test_cpu_engine_kv_cache_is_sized_to_the_run(tiny_model_dir):
    """KV cache = (max_num_seqs x blocks per sequence + 2) blocks of 128 tokens x 2 x layers x KV heads x head dim x
    dtype bytes, capped at the former fixed 1 GiB, never under one full-length sequence; None when unbounded."""
    from sara_trl.trainer.vllm_cpu import DEFAULT_CPU_KVCACHE_GIB, kv_cache_bytes

    block = 128 * 2 * 2 * 2 * (64 // 4) * 4  # the tiny Llama: 2 layers, 2 KV heads of 16, float32 -> 64 KiB a block
    assert kv_cache_bytes(tiny_model_dir, 4, 128, 32) == (32 + 2) * block == 34 << 16
    assert kv_cache_bytes(tiny_model_dir, 4, 129, 32) == (32 * 2 + 2) * block  # 129 tokens take two blocks
    assert kv_cache_bytes(tiny_model_dir, 2, 128, 32) == (32 + 2) * block // 2  # bfloat16: half
    cap = DEFAULT_CPU_KVCACHE_GIB << 30
    assert kv_cache_bytes(tiny_model_dir, 4, 1 << 16, 64) == cap  # 4 GiB needed: capped
    assert kv_cache_bytes(tiny_model_dir, 4, 1 << 22, 8) == ((1 << 22) // 128 + 2) * block > cap  # the floor
    assert kv_cache_bytes(tiny_model_dir, 4, None, 32) is None and kv_cache_bytes(tiny_model_dir, 4, 128, None) is None
