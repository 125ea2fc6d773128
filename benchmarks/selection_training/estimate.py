# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Wall time of issue 56's study, estimated from the run files of ``benchmarks/real_training/runs`` (B = 8, 2,048
prompts), before running it.

    python -m benchmarks.selection_training.selection_training --estimate [--groups 4] [--steps 8] [--seeds 3] ...

Per machine kind (the CPU model each run file records), from the DS and SARA-auto45 runs there: the mean generation
and training seconds per step, scaled by ``groups / 8`` (a step trains B k rows and generates about B / 8 of the
rollouts of a B = 8 step); the mean seconds of one held-out evaluation, scaled by ``eval_prompts x eval_samples /
256``; trainer construction as measured; plus :data:`PROCESS_SECONDS` per run for the subprocess's imports and the
engine's start, which the run files do not time. SARA-auto45-sel is costed as SARA-auto45 (the replay gives it
fewer rollouts, so this errs long), uniform as a step that generates B k rollouts (its own runs' seconds). DS's draws
per step (its rollouts / k: DS draws whole groups) give the expected draws per prompt of the pool.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "benchmarks" / "real_training" / "runs"
#: seconds per run outside the run's own clocks (python, torch and vLLM imports, the engine's start, the file write);
#: an assumption, checked against the smoke run in README.md
PROCESS_SECONDS = 60.0
#: which measured configuration each study configuration is costed as
COSTED_AS = {"DS": "DS", "SARA-auto45": "SARA-auto45", "SARA-auto45-sel": "SARA-auto45", "uniform": "uniform"}


def measured(runs: Path = RUNS) -> dict:
    """``{cpu: {config: {"generation", "training", "eval", "build", "draws_per_step", "runs"}}}``: per-step means
    (seconds, and DS's draws per step = rollouts / k) over the B = 8 runs of each machine kind."""
    settings = json.loads((runs / "settings.json").read_text())
    k, groups = settings["settings"]["k"], settings["settings"]["groups"]
    out: dict = {}
    for path in sorted(runs.glob("*_seed*.json")):
        rec = json.loads(path.read_text())
        name = rec["allocator"]
        if name not in set(COSTED_AS.values()):
            continue
        cpu = (rec.get("machine") or {}).get("cpu") or settings["environment"]["cpu"]
        acc = out.setdefault(cpu, {}).setdefault(name, {"generation": [], "training": [], "eval": [], "build": [],
                                                          "draws_per_step": [], "runs": 0})
        acc["generation"] += [s["generation_seconds"] for s in rec["steps"]]
        acc["training"] += [s["training_seconds"] for s in rec["steps"]]
        acc["draws_per_step"] += [s["rollouts"] / k for s in rec["steps"]]
        acc["eval"] += [e["seconds"] for e in rec["evals"]]
        acc["build"].append(rec.get("build_seconds", 0.0))
        acc["runs"] += 1
    return {cpu: {name: {key: (float(np.mean(v)) if isinstance(v, list) else v) for key, v in acc.items()}
                  | {"groups": groups} for name, acc in by.items()} for cpu, by in out.items()}


def evaluations(steps: int, every: int) -> int:
    """Held-out evaluations of a run: before the first step, every ``every`` steps, and after the last."""
    return 1 + steps // every + (steps % every != 0)


def estimate(m: dict, configs: list[str], seeds: int, steps: int, groups: int, every: int, eval_prompts: int,
             eval_samples: int, process_seconds: float = PROCESS_SECONDS) -> dict:
    """Seconds per run of each configuration and the study's total on one machine kind (``m``: one CPU's entry of
    :func:`measured`). Raises KeyError when a configuration's costing run is missing there."""
    per_run = {}
    for name in configs:
        c = m[COSTED_AS[name]]
        scale = groups / c["groups"]
        step = (c["generation"] + c["training"]) * scale
        ev = c["eval"] * eval_prompts * eval_samples / 256.0
        per_run[name] = process_seconds + c["build"] + steps * step + evaluations(steps, every) * ev
    return {"per_run": per_run, "total": seeds * sum(per_run.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allocators", default="DS,SARA-auto45,SARA-auto45-sel")
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-samples", type=int, default=4)
    args = ap.parse_args(argv)
    configs = [c for c in args.allocators.split(",") if c]
    for cpu, m in measured().items():
        if not all(COSTED_AS[c] in m for c in configs):
            continue
        est = estimate(m, configs, args.seeds, args.steps, args.groups, args.eval_every, args.eval_prompts,
                       args.eval_samples)
        draws = m["DS"]["draws_per_step"] * args.groups / m["DS"]["groups"]
        runs = ", ".join(f"{name} {sec / 60:.1f} min" for name, sec in est["per_run"].items())
        print(f"{cpu}: {est['total'] / 60:.0f} min for {args.seeds} seeds ({runs}); DS draws {draws:.1f} prompts "
              f"a step at B = {args.groups}, {draws * args.steps:.0f} over {args.steps} steps, "
              f"{draws * args.steps / args.prompts:.1f} per prompt of {args.prompts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
