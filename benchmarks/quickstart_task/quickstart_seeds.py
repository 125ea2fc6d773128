# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""The quickstart's default run over seeds: SARA / DS rollouts, tokens and time, with intervals over seeds.

    python -m benchmarks.quickstart_task.quickstart_seeds --run 0 1 2 3 4    # run 5 seeds, then write the report
    python -m benchmarks.quickstart_task.quickstart_seeds                    # the report from the saved runs only

Each seed is one run of README command 1's quickstart with its defaults (the vLLM engine installed by
``scripts/setup_cpu.sh``: SARA collects by streaming, dynamic sampling in rounds; each pass warms its engine with
the same untimed requests before its first timed step; SARA runs first for even seeds, DS for odd ones), that is::

    python examples/quickstart_cpu.py --seed N --output_dir TMP --summary_file \
        benchmarks/quickstart_task/quickstart_seedN.json

``--run`` runs them one after another (on an otherwise idle machine: the seconds are the point) under the memory
sampler of :mod:`benchmarks.quickstart_task.quickstart_memory`, adds each process's peak resident memory to the
seed's file, and keeps each run's console output in ``--logs`` (default: a temporary folder, printed).

The report reads every ``quickstart_seed*.json`` here: per seed the ratios SARA / DS of rollouts, tokens and seconds
generating and scoring over the timed steps, the untimed warm-up of each pass, which pass ran first, the machine
load and each pass's peak resident memory; then the mean and a 95% Student-t interval over seeds
(``benchmarks.common.mean_ci``). The time interval pools only the runs on an idle machine (the quickstart's own
rule: load at most the core count at the start, at most cores + 2 at the end and at every step's end); the others are
listed, not pooled. The runs made before the warm-up existed (``quickstart_default_vllm_seed*.json``: SARA always
first, in a cold process) are listed apart. Writes ``QUICKSTART_SEEDS.md`` (default: this folder).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import fmt_ci, md_table, mean_ci

HERE = Path(__file__).resolve().parent
COMMAND = "python -m benchmarks.quickstart_task.quickstart_seeds"
RATIOS = (("rollouts", "rollouts"), ("tokens", "tokens"), ("collect_seconds", "time"))
PATTERN = "quickstart_seed*.json"
COLD_PATTERN = "quickstart_default_vllm_seed*.json"  # before the warm-up (issue #57)


def load_runs(folder: Path = HERE, pattern: str = PATTERN) -> list[dict]:
    """The saved quickstart summaries, by seed. Raises ValueError if a summary has no dynamic-sampling pass."""
    runs = []
    for path in sorted(folder.glob(pattern)):
        doc = json.loads(path.read_text())
        if "dynamic_sampling" not in doc:
            raise ValueError(f"{path.name}: no dynamic-sampling pass (run without --compare_dynamic_sampling False)")
        doc["file"] = path.name
        runs.append(doc)
    return sorted(runs, key=lambda d: d["settings"]["seed"])


def ratios(run: dict) -> dict:
    """SARA / DS of rollouts, tokens and collection seconds (timed steps) for one run."""
    ds = run["dynamic_sampling"]
    return {label: run[key] / ds[key] for key, label in RATIOS}


def idle(run: dict) -> bool:
    """Whether the run's machine was otherwise idle, by the rule the quickstart prints its load warning with: load at
    most the core count at the start, at most cores + 2 at the end and at every step's end (the command itself keeps
    about two cores busy). The runs before ``cpus`` was recorded were on the 2-core machine."""
    load = run.get("load_average")
    if not load:
        return False
    cores = run.get("cpus", 2)
    return load[0] <= cores and max(load[1], run.get("peak_load_average") or 0.0) <= cores + 2


def _first(run: dict) -> str:
    # the runs before the warm-up always ran the allocator (SARA) first
    return "DS" if run.get("first_pass") == "dynamic_sampling" else "SARA"


def _memory(run: dict) -> str:
    peaks = [run.get("peak_rss_gib"), run["dynamic_sampling"].get("peak_rss_gib")]
    return "-" if None in peaks else f"{peaks[0]:.2f} / {peaks[1]:.2f}"


def _table(runs: list[dict], warm: bool) -> str:
    rows = []
    for run in runs:
        r, ds = ratios(run), run["dynamic_sampling"]
        load = run.get("load_average")
        load_text = "-" if not load else " -> ".join(f"{float(x):.1f}" for x in load)
        if run.get("peak_load_average") is not None:
            load_text += f" (peak {run['peak_load_average']:.1f})"
        row = [run["settings"]["seed"], _first(run), run["rollouts"], ds["rollouts"], f"{run['collect_seconds']:.1f}",
               f"{ds['collect_seconds']:.1f}"]
        if warm:
            row += [f"{run['warmup']['seconds']:.1f} / {ds['warmup']['seconds']:.1f}" if run.get("warmup") else "-"]
        row += [f"{r['rollouts']:.3f}", f"{r['tokens']:.3f}", f"{r['time']:.3f}", load_text,
                "yes" if idle(run) else "no"]
        if warm:
            row += [_memory(run)]
        rows.append(row + [run["file"]])
    header = ["seed", "first", "SARA rollouts", "DS rollouts", "SARA s", "DS s"]
    if warm:
        header += ["warm-up s (SARA / DS)"]
    header += ["rollouts ratio", "tokens ratio", "time ratio", "load start -> end", "idle"]
    if warm:
        header += ["peak RSS GiB (SARA / DS)"]
    return md_table(header + ["file"], rows)


def _pooled(runs: list[dict]) -> str:
    calm = [run for run in runs if idle(run)]
    rows = [[label, fmt_ci(mean_ci([ratios(run)[label] for run in runs]), digits=2), len(runs)]
            for label in ("rollouts", "tokens")]
    time_text = (fmt_ci(mean_ci([ratios(run)["time"] for run in calm]), digits=2) if calm
                 else "no run on an idle machine yet")
    rows.append(["time (runs on an idle machine only)", time_text, len(calm)])
    return md_table(["SARA / DS", "mean [95% interval over seeds]", "runs"], rows)


def render(runs: list[dict], cold: list[dict]) -> str:
    """The Markdown report."""
    if runs:
        body = f"""{_table(runs, warm=True)}

{_pooled(runs)}"""
    else:
        body = f"No run saved yet: `{COMMAND} --run 0 1 2 3 4`."
    return f"""# The quickstart's default run over seeds

SARA / dynamic sampling in README command 1's quickstart with its defaults (SmolLM2-135M-Instruct, B = 4 groups of
k = 8, 4 steps, answers of at most 16 tokens, TRL's colocated vLLM engine on the CPU: SARA streaming, DS in rounds),
one run per seed. Time is seconds generating and scoring over the timed steps: before them each pass warmed its
engine with the same untimed requests (their seconds are listed apart), and SARA ran first for even seeds, DS for odd
ones. Rollout and token counts do not depend on the machine; seconds do, so the time interval pools only the runs
made on an otherwise idle machine (column "idle"). Peak RSS: each pass's process (trainer and colocated engine),
the kernel's high-water mark.

{body}

Regenerate: `{COMMAND} --run 0 1 2 3 4` (one full quickstart a seed, one after the other; on an otherwise idle
machine, since the seconds are the point), or `{COMMAND}` for the report from the saved runs.

## Before the warm-up (issue #57)

The same command before each pass warmed its engine: SARA always ran first, in a cold process, and its first timed
step included the engine's first-use costs (vLLM's sampler compiling), which DS, second, no longer paid. Kept for
the record; the time ratios below are biased against SARA by that order.

{_table(cold, warm=False) if cold else "(none)"}
"""


def settle(target: float = 1.0, limit_s: float = 300.0) -> float:
    """Wait until the 1-minute load average is at most ``target`` (or ``limit_s`` seconds have passed) and return
    it: a run started right after the previous one would inherit its load (about 2 on 2 cores, decaying over a
    minute or so) and be flagged as not idle by the quickstart's own rule."""
    deadline = time.monotonic() + limit_s
    while (load := os.getloadavg()[0]) > target and time.monotonic() < deadline:
        time.sleep(5)
    return load


def run_seeds(seeds: list[int], logs: Path) -> None:
    """Run the quickstart once per seed (under the memory sampler) and save each summary here as
    ``quickstart_seed<N>.json`` with the per-process peaks added. Raises SystemExit if a run fails."""
    from benchmarks.quickstart_task.quickstart_memory import run_quickstart

    logs.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        target = HERE / f"quickstart_seed{seed}.json"
        settle()
        started, load = time.perf_counter(), os.getloadavg()[0]
        print(f"seed {seed}: running (log {logs / f'seed{seed}.log'}, load {load:.1f})...", flush=True)
        with tempfile.TemporaryDirectory() as folder, open(logs / f"seed{seed}.log", "w") as log:
            status, processes, total = run_quickstart(["--seed", str(seed), "--output_dir", folder], str(target),
                                                      log=log)
        if status != 0:
            raise SystemExit(f"seed {seed}: the quickstart failed (exit status {status}); see {log.name}")
        doc = json.loads(target.read_text())
        doc["processes"], doc["peak_total_rss_gib"] = processes, total
        target.with_suffix(".png").unlink(missing_ok=True)  # the run's plot: not kept here
        target.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"seed {seed}: done in {time.perf_counter() - started:.0f} s, time ratio "
              f"{ratios(doc)['time']:.3f}, load {os.getloadavg()[0]:.1f}", flush=True)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=int, nargs="+", metavar="SEED", help="run the quickstart for these seeds first")
    parser.add_argument("--logs", type=Path, default=None, help="folder for the runs' console output")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: this study's folder)")
    args = parser.parse_args(argv)
    if args.run:
        run_seeds(args.run, args.logs or Path(tempfile.mkdtemp(prefix="quickstart_seeds_")))
    text = render(load_runs(), load_runs(pattern=COLD_PATTERN))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "QUICKSTART_SEEDS.md").write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
