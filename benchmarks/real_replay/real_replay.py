# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Replay of the real-training task's bank: ``python -m benchmarks.real_replay.real_replay [--quick] [--out DIR]``.

Drives every allocator with the real SmolLM2-135M outcomes of the task of ``benchmarks/real_task.py`` (bank
``benchmarks/real_task_survey/data/real_task_bank.npz``, written by
``benchmarks/real_task_survey/real_task_report.py``), at group sizes k in {4, 8, 16} and batch sizes B in {16, 64}:
uniform, dynamic sampling (DS, the reference), paper SARA, and the beyond-paper settings the repository benchmarks
elsewhere (``continue_to_decision``, ``carry_over``, ``stopping_rule="bayes_optimal"`` with and without a loss cap,
history-based selection, streaming collection).

The task's family shares are replayed from a pool in which each bank row of a weighted family is repeated
(:func:`benchmarks.real_task.mixture_rows`); copies of a row share its 32 samples (``ReplaySource(rows=...)``).
Every allocator sees the same pool, prompt-stream seed and shuffle seed per seed; ``steps`` consecutive steps per
seed with one allocator, none dropped. Ratios to DS are per seed (sum over steps), with a 95% Student-t interval
over seeds.

Writes ``REAL_REPLAY.md`` and ``real_replay.json`` (default: this folder). ``--quick``: a smoke-sized run
(seconds) with the same code path, used by the test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the allocator's algebra is tiny; BLAS threads only contend
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks import replay, sim  # noqa: E402
from benchmarks.common import EARLIER_STREAMING, current_path, environment, environment_lines, fmt_ci, md_table  # noqa: E402
from benchmarks.real_task import REAL_TASK, RealTask, load_mixture_bank  # noqa: E402
from benchmarks.simulated.suite import DS_BUDGET_CAP, summarize, summary_json  # noqa: E402
from sara_trl.allocation import AllocationConfig  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: the real-training task's bank, written by ``python -m benchmarks.real_task_survey.real_task_report``
BANK = REPO / "benchmarks" / "real_task_survey" / "data" / "real_task_bank.npz"
REFERENCE = "DS"
# label -> AllocationConfig overrides (k is set per run). DS's safety cap is lifted so it always fills (suite.py).
_AUTO = {"allocator": "sara", "stopping_rule": "bayes_optimal"}
_TUNED = {**_AUTO, "history_decay": 0.97, "selection": "greedy", "n0": 1, "selection_floor": 0.05,
          "selection_pool": 8.0}
ALLOCATORS: dict[str, dict] = {
    "uniform": {"allocator": "uniform"},
    "DS": {"allocator": "dynamic_sampling", "budget_cap": DS_BUDGET_CAP},
    "SARA (paper)": {"allocator": "sara"},
    "SARA to_decision": {"allocator": "sara", "continue_to_decision": True},
    "SARA carry_over": {"allocator": "sara", "carry_over": True},
    "SARA to_decision + carry_over": {"allocator": "sara", "continue_to_decision": True, "carry_over": True},
    "auto": _AUTO,
    "auto + carry_over": {**_AUTO, "carry_over": True},
    "auto + loss cap 0.10": {**_AUTO, "auto_loss_cap": 0.10},
    "auto + loss cap 0.10 + carry_over": {**_AUTO, "auto_loss_cap": 0.10, "carry_over": True},
    "auto + history 0.9 + Thompson": {**_AUTO, "history_decay": 0.9, "selection": "thompson"},
    "auto + history 0.97 + greedy, n0=1 + carry_over": {**_TUNED, "carry_over": True},
    # streaming rows pinned to the values they ran with (the rounds' increments and margin), before streaming's own
    # defaults (continue_to_decision, refill_margin 2.0; docs/collection-modes.md "Streaming defaults")
    "DS (streaming)": {"allocator": "dynamic_sampling", "budget_cap": DS_BUDGET_CAP, "collection": "streaming",
                       **EARLIER_STREAMING},
    "SARA (streaming)": {"allocator": "sara", "collection": "streaming", **EARLIER_STREAMING},
    "auto + loss cap 0.10 (streaming)": {**_AUTO, "auto_loss_cap": 0.10, "collection": "streaming",
                                         **EARLIER_STREAMING},
}
HISTORY = ("auto + history 0.9 + Thompson", "auto + history 0.97 + greedy, n0=1 + carry_over")


@dataclass(frozen=True)
class Settings:
    """Sizes of one run (``FULL`` for the committed results, ``QUICK`` for the smoke test)."""

    seeds: tuple[int, ...]
    steps: int  # consecutive steps per seed
    ks: tuple[int, ...]
    batches: tuple[int, ...]
    allocators: tuple[str, ...]


FULL = Settings(seeds=tuple(range(10)), steps=10, ks=(4, 8, 16), batches=(16, 64), allocators=tuple(ALLOCATORS))
QUICK = Settings(seeds=(0, 1), steps=2, ks=(8,), batches=(16,),
                 allocators=("uniform", "DS", "SARA (paper)", "SARA carry_over", "SARA (streaming)"))


def config_for(label: str, k: int) -> AllocationConfig:
    """The :class:`AllocationConfig` of allocator ``label`` at group size ``k``."""
    return AllocationConfig(k=k, **ALLOCATORS[label])


def replay_seeds(success, tokens, rows, cfg: AllocationConfig, B: int, seeds, steps: int) -> list[dict]:
    """``steps`` replayed steps of ``cfg`` at batch size ``B`` for each seed in ``seeds`` (each seed its own prompt
    stream over ``rows`` of the bank): :func:`benchmarks.sim.run_steps` rows tagged with ``seed``."""
    out = []
    for seed in seeds:
        source = replay.ReplaySource(success, tokens, seed=seed, rows=rows)
        steps_run, _ = sim.run_steps(source, cfg, B, steps, seed)
        out.extend({**row, "seed": seed} for row in steps_run)
    return out


def run_cell(success, tokens, rows, label: str, k: int, B: int, settings: Settings) -> list[dict]:
    """Every seed of one (allocator, k, B): :func:`replay_seeds` of :func:`config_for`."""
    return replay_seeds(success, tokens, rows, config_for(label, k), B, settings.seeds, settings.steps)


def run_all(settings: Settings, bank: Path, task: RealTask = REAL_TASK, log=print) -> dict:
    """Every allocator x k x B; returns the ``real_replay.json`` document."""
    success, tokens, meta, task_index, rows = load_mixture_bank(bank, task.weights)
    mix = success[rows]
    families = {f: float((success[task_index == meta["task_names"].index(f)] == 1).mean()) for f in task.weights}
    cells = {}
    for k in settings.ks:
        for B in settings.batches:
            t0 = time.perf_counter()
            runs = {label: run_cell(success, tokens, rows, label, k, B, settings) for label in settings.allocators}
            cells[f"k={k},B={B}"] = {"k": k, "B": B, "bank": replay.bank_summary(mix, k),
                                     "summary": {n: summary_json(summarize(r, runs[REFERENCE]))
                                                 for n, r in runs.items()}}
            log(f"  k={k:2d} B={B:2d}: {time.perf_counter() - t0:6.1f}s  SARA/DS rollouts "
                f"{cells[f'k={k},B={B}']['summary'].get('SARA (paper)', {}).get('rollouts_ratio', [np.nan])[0]:.3f}")
    return {"settings": dataclasses.asdict(settings), "bank": str(bank.relative_to(REPO))
            if bank.is_relative_to(REPO) else str(bank),
            "bank_meta": {k: meta[k] for k in ("generation", "date", "sampling", "num_prompts", "k")},
            "task": {"cell": task.cell, "weights": task.weights}, "replayed_rows": int(len(rows)),
            "distinct_prompts": int(len(np.unique(rows))), "family_success": families,
            "allocators": {n: ALLOCATORS[n] for n in settings.allocators}, "cells": cells,
            "environment": environment()}


# ------------------------------------------------------------------------------------------------ rendering
def _iv(v, digits=3, pct=False) -> str:
    from benchmarks.common import Interval

    return "n/a" if v is None else fmt_ci(Interval(*v), digits, pct)


def _table(cell: dict) -> str:
    rows = []
    for name, s in cell["summary"].items():
        rows.append([name, f"{s['rollouts'][0]:.0f}", _iv(s["rollouts_ratio"]), _iv(s["tokens_ratio"]),
                     _iv(s["rollouts_useful_ratio"]), f"{s['rounds_median']:g} (p90 {s['rounds_p90']:g})",
                     _iv(s["effective_fraction"]), _iv(s["wrong_exact_rate"], 1, pct=True),
                     f"{s['steps_filled']}/{s['steps']}"])
    return md_table(["allocator", "rollouts/step", "rollouts x DS", "tokens x DS", "x DS excl. surplus+active",
                     "rounds/step: median", "effective fraction", "abandoned that would mix", "steps filled"], rows)


def _targets(doc: dict) -> str:
    cell = doc["cells"].get("k=8,B=64")
    if cell is None:
        return "Targets (k=8, B=64): not run in this mode."
    rows = []
    for name, s in cell["summary"].items():
        if name in ("uniform", REFERENCE, "DS (streaming)"):
            continue
        r, t, w = s["rollouts_ratio"], s["tokens_ratio"], s["wrong_exact_rate"]
        met = lambda ok: "met" if ok else "missed"  # noqa: E731 - judged on the interval's upper end
        rows.append([name, f"{_iv(r)} {met(r[2] <= 0.80)}", f"{_iv(t)} {met(t[2] <= 0.75)}",
                     "n/a" if w is None else f"{_iv(w, 1, pct=True)} {met(w[2] <= 0.10)}"])
    return ("Issue 15's replay targets at k=8, B=64, judged on the upper end of the interval over seeds: rollouts "
            "<= 0.80 of DS's, tokens <= 0.75 of DS's, abandoned prompts that would have mixed <= 10%.\n\n"
            + md_table(["allocator", "rollouts x DS (<= 0.80)", "tokens x DS (<= 0.75)", "would mix (<= 10%)"], rows))


def render(doc: dict, command: str) -> str:
    st = doc["settings"]
    fams = ", ".join(f"`{f}` {100 * w:g}% (success {doc['family_success'][f]:.3f})"
                     for f, w in doc["task"]["weights"].items())
    lines = [
        "# Replay of the real-training task's outcomes (issue 15)",
        "",
        f"Generated by `{command}`. Bank `{doc['bank']}`: {doc['bank_meta']['num_prompts']} prompts x "
        f"{doc['bank_meta']['k']} samples, {current_path(doc['bank_meta']['generation'])}, "
        f"{doc['bank_meta']['date']}. The task "
        f"(`benchmarks/real_task.py`, measured in `benchmarks/real_task_survey/REAL_TASK.md`): cell "
        f"`{doc['task']['cell']}`, {fams}. "
        f"Its shares are replayed from a pool of {doc['replayed_rows']} prompt ids over "
        f"{doc['distinct_prompts']} distinct bank rows (a family's rows repeated so its share is exact; copies "
        "of a row draw from the same samples without replacement within a step). A static bank has no learning: "
        "prompts keep their success rate, which favours the history-based settings (they learn each prompt's rate "
        f"and never see it move) and the replay reuses the {doc['distinct_prompts']:,} bank rows more than a "
        "training run would reuse its prompts.",
        "",
        f"Each cell: {len(st['seeds'])} seeds x {st['steps']} consecutive steps, all counted; every allocator on the "
        "same seeds. Ratios to DS are per seed (sums over the steps), mean and 95% interval over seeds. 'Abandoned "
        "that would mix' is the exact (hypergeometric) probability that an abandoned prompt's group would have "
        "mixed had it been completed to k, summed and divided by the abandoned prompts. Streaming rows run one "
        "continuous engine of 256 concurrent requests per step (no rounds); their time is not modelled here.",
        "",
        _targets(doc),
        "",
    ]
    for key, cell in doc["cells"].items():
        b = cell["bank"]
        lines += [f"## k={cell['k']}, B={cell['B']}", "",
                  f"Task mixture at k={cell['k']}: Phi {b['phi']:.3f}, mean success {b['mean_success']:.3f}.", "",
                  _table(cell), ""]
    env = doc["environment"]
    seeds = f"{st['seeds'][0]}..{st['seeds'][-1]} ({len(st['seeds'])} seeds) x {st['steps']} steps"
    lines += [environment_lines(command, seeds, env), ""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-sized run (seconds)")
    ap.add_argument("--out", type=Path, default=HERE, help="where REAL_REPLAY.md and real_replay.json go")
    ap.add_argument("--bank", type=Path, default=BANK, help="the task's bank (.npz with a task column)")
    args = ap.parse_args(argv)
    settings = QUICK if args.quick else FULL
    command = "python -m benchmarks.real_replay.real_replay" + (" --quick" if args.quick else "")
    t0 = time.perf_counter()
    doc = run_all(settings, args.bank)
    doc["quick"], doc["command"], doc["elapsed_s"] = args.quick, command, round(time.perf_counter() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "real_replay.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "REAL_REPLAY.md").write_text(render(doc, command))
    print(f"wrote {args.out / 'REAL_REPLAY.md'} in {doc['elapsed_s']} s")
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
