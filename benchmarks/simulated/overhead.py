"""Allocator overhead: wall time of the allocation logic alone, per round, as a function of the prompts in a round.

The rollout source is a precomputed outcome table (indexing only), and the time spent inside it is excluded: the
source stamps ``perf_counter`` on entry and exit, so the logic time of a round is the gap between one call's exit
and the next call's entry (decide, posterior update, refill, priority ordering, ledger updates). The time after the
last call until ``collect`` returns (last decisions plus building the groups and records) is reported separately as
the per-step finish time. Each step is timed several times from identical state and each round keeps its fastest
run, so that time the process spent descheduled on a shared machine is not charged to the allocator. Rounds are
binned by the number of prompts the round decided (the previous call's size).
"""

from __future__ import annotations

import copy
import time

import numpy as np

from benchmarks.simulator import u_shaped_gammas
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, RoundOutcome

__all__ = ["PrecomputedSource", "measure", "summarize", "summarize_finish", "TARGETS"]

TARGETS = (64, 256, 1024, 4096)


class PrecomputedSource:
    """Outcomes and token counts drawn up front for every (prompt, position); a call only indexes the table.

    Args:
        gammas: ``(P,)`` success rates. width: outcomes stored per prompt (positions wrap modulo ``width``).
        seed: seed of the table.
    """

    def __init__(self, gammas: np.ndarray, width: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        g = np.asarray(gammas, np.float64)
        self.success = (rng.random((len(g), width)) < g[:, None]).astype(np.float64)
        self.tokens = rng.integers(100, 1000, size=(len(g), width)).astype(np.int64)
        self.width = width
        self.cursor = np.zeros(len(g), np.int64)
        self.enter: list[float] = []
        self.exit: list[float] = []
        self.sizes: list[int] = []

    def __len__(self) -> int:
        return len(self.cursor)

    def __call__(self, prompt_ids: np.ndarray, counts: np.ndarray) -> RoundOutcome:
        self.enter.append(time.perf_counter())
        rows = np.repeat(prompt_ids, counts)
        starts = np.cumsum(counts) - counts
        offs = np.arange(len(rows)) - np.repeat(starts, counts)
        cols = (np.repeat(self.cursor[prompt_ids], counts) + offs) % self.width
        self.cursor[prompt_ids] += counts
        out = RoundOutcome(self.success[rows, cols], self.tokens[rows, cols])
        self.sizes.append(len(prompt_ids))
        self.exit.append(time.perf_counter())
        return out


def measure(B_values=(16, 64, 256, 1024), steps: int = 5, k: int = 8, allocator: str = "sara", seed: int = 0,
            pool: int = 200_000, repeats: int = 3) -> dict:
    """Run ``steps`` steps per B and record the logic time of every round.

    Each step is run ``repeats`` times from identical copies of the allocator, stream and source (the allocator is
    deterministic, so every repeat makes the same rounds) and each round keeps its fastest repeat: on a shared
    machine this filters out time the process spent descheduled, which is not the allocator's cost.

    Returns:
        dict with ``rounds``: list of ``(prompts decided in the round, seconds)`` pairs and ``finish``: list of
        ``(B, prompts drawn in the step, seconds)`` triples.
    """
    gammas = u_shaped_gammas(pool, seed=seed)
    rounds, finish = [], []
    for B in B_values:
        src = PrecomputedSource(gammas, width=k, seed=seed)
        alloc = Allocator(AllocationConfig(allocator=allocator, k=k))
        stream = PromptStream(pool, seed=seed)
        alloc.collect(src, stream, B)  # warm-up step (imports, first allocations), not timed
        for _ in range(steps):
            best_gaps, best_finish, drawn = None, None, 0
            state = (copy.deepcopy(alloc), copy.deepcopy(stream), src.cursor.copy())
            for rep in range(repeats):
                a, st = (copy.deepcopy(state[0]), copy.deepcopy(state[1])) if rep < repeats - 1 else (alloc, stream)
                src.cursor[:] = state[2]
                src.enter.clear(), src.exit.clear(), src.sizes.clear()
                res = a.collect(src, st, B)
                t1 = time.perf_counter()
                gaps = np.array([src.enter[i] - src.exit[i - 1] for i in range(1, len(src.enter))])
                best_gaps = gaps if best_gaps is None else np.minimum(best_gaps, gaps)
                best_finish = min(best_finish or np.inf, t1 - src.exit[-1])
                drawn = res.stats.prompts_drawn
            rounds.extend(zip(src.sizes[:-1], best_gaps.tolist()))
            finish.append((B, drawn, best_finish))
    return {"rounds": rounds, "finish": finish}


def summarize(meas: dict, targets=TARGETS) -> list[dict]:
    """Median and 90th percentile logic time per round (ms) for rounds whose size lies within a factor sqrt(2) of
    each target, plus the number of such rounds."""
    sizes = np.array([r[0] for r in meas["rounds"]], np.float64)
    secs = np.array([r[1] for r in meas["rounds"]], np.float64)
    out = []
    for t in targets:
        sel = (sizes >= t / np.sqrt(2)) & (sizes < t * np.sqrt(2))
        if sel.any():
            out.append({"target": t, "rounds": int(sel.sum()), "mean_prompts": float(sizes[sel].mean()),
                        "median_ms": float(np.median(secs[sel]) * 1e3),
                        "p90_ms": float(np.percentile(secs[sel], 90) * 1e3)})
        else:
            out.append({"target": t, "rounds": 0, "mean_prompts": float("nan"), "median_ms": float("nan"),
                        "p90_ms": float("nan")})
    return out


def summarize_finish(meas: dict) -> list[dict]:
    """Per batch size B (in measuring order): the median per-step finish time (ms) and the mean prompts drawn."""
    by_batch: dict[int, list[tuple[int, float]]] = {}
    for batch, drawn, secs in meas["finish"]:
        by_batch.setdefault(batch, []).append((drawn, secs))
    return [{"batch_size": batch, "steps": len(v), "median_ms": float(np.median([x[1] for x in v]) * 1e3),
             "mean_prompts_drawn": float(np.mean([x[0] for x in v]))} for batch, v in by_batch.items()]
