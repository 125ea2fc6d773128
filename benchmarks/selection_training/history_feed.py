# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""How much of a streaming step reaches the prompt history: ``python -m benchmarks.selection_training.history_feed``.

In streaming collection the allocator feeds the beyond-paper extensions only the prompts without an aborted request
(``Allocator.streaming``: ``fed = ~collector.truncated``), which keeps the length-biased prompts out of the prior fit
and, by the same call, out of the per-prompt history that ``selection`` ranks by. This replays issue 56's selection
configuration at the study's shape (B = 4, k = 8, 32 bank rows per seed, 8 steps, 32 requests in flight) and counts,
over the decided prompt rows (trained or abandoned; carried rows are fed in the step that decides them), how many
reached the history. Seconds on 2 cores.
"""

from __future__ import annotations

import argparse

from benchmarks import replay
from benchmarks.real_task import REAL_TASK, load_mixture_bank
from benchmarks.selection_training.selection_replay import AUTO45, BANK, BUDGET_CAP, K, pool_rows
from benchmarks.selection_training.selection_training import SELECTION
from benchmarks.simulator.latency import DecodeEngine
from benchmarks.simulator.simulate import run_streaming_step
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream


def fed_counts(seeds, B: int = 4, prompts: int = 32, steps: int = 8) -> dict:
    """Decided prompt rows (fate trained or abandoned) and how many of them were fed to the history, per fate."""
    success, tokens, meta, task_index, _ = load_mixture_bank(BANK, REAL_TASK.weights)
    out = {"trained": [0, 0], "abandoned": [0, 0]}
    for seed in seeds:
        rows = pool_rows(task_index, meta["task_names"], prompts, seed)
        cfg = AllocationConfig(k=K, budget_cap=BUDGET_CAP, selection_seed=seed, **AUTO45, **SELECTION)
        alloc, stream = Allocator(cfg), PromptStream(prompts, seed=seed)
        source = replay.ReplaySource(success, tokens, seed=seed, rows=rows)
        for _ in range(steps):
            source.start_step()
            collector = alloc.streaming(stream, B, B * K)
            fate = run_streaming_step(collector, source, DecodeEngine(B * K)).prompt_table["fate"]
            truncated = collector.truncated
            for name, code in (("trained", 0), ("abandoned", 2)):
                out[name][0] += int((fate == code).sum())
                out[name][1] += int(((fate == code) & ~truncated).sum())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    args = ap.parse_args(argv)
    counts = fed_counts(range(args.seeds))
    rows, fed = (sum(v[i] for v in counts.values()) for i in (0, 1))
    print(f"{fed} of {rows} decided prompt rows reached the history ({100 * fed / rows:.1f}%): "
          + ", ".join(f"{name} {v[1]} of {v[0]} ({100 * v[1] / v[0]:.1f}%)" for name, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
