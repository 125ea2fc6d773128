# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""The quickstart's default run over seeds: SARA / DS rollouts, tokens and time, with intervals over seeds.
``python -m benchmarks.quickstart_task.quickstart_seeds [--out DIR]``.

Each seed is one run of README command 1's quickstart with its defaults (the vLLM engine installed by
``scripts/setup_cpu.sh``: SARA collects by streaming, dynamic sampling in rounds), its summary saved with::

    python examples/quickstart_cpu.py --seed N --output_dir /tmp/qs --summary_file \
        benchmarks/quickstart_task/quickstart_default_vllm_seedN.json

This script reads every ``quickstart_default_vllm_seed*.json`` here and reports, per seed, the ratios SARA / DS of
rollouts, tokens and seconds generating and scoring, with the mean and a 95% Student-t interval over seeds
(``benchmarks.common.mean_ci``), and the machine load each run recorded at its start and end. Writes
``QUICKSTART_SEEDS.md`` (default: this folder).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import fmt_ci, md_table, mean_ci

HERE = Path(__file__).resolve().parent
COMMAND = "python -m benchmarks.quickstart_task.quickstart_seeds"
RATIOS = (("rollouts", "rollouts"), ("tokens", "tokens"), ("collect_seconds", "time"))


def load_runs(folder: Path = HERE) -> list[dict]:
    """The saved quickstart summaries, by seed. Raises ValueError if a summary has no dynamic-sampling pass."""
    runs = []
    for path in sorted(folder.glob("quickstart_default_vllm_seed*.json")):
        doc = json.loads(path.read_text())
        if "dynamic_sampling" not in doc:
            raise ValueError(f"{path.name}: no dynamic-sampling pass (run without --compare_dynamic_sampling False)")
        doc["file"] = path.name
        runs.append(doc)
    return sorted(runs, key=lambda d: d["settings"]["seed"])


def ratios(run: dict) -> dict:
    """SARA / DS of rollouts, tokens and collection seconds for one run."""
    ds = run["dynamic_sampling"]
    return {label: run[key] / ds[key] for key, label in RATIOS}


def render(runs: list[dict]) -> str:
    """The Markdown report."""
    rows = []
    for run in runs:
        r = ratios(run)
        load = run.get("load_average")
        load_text = "-" if not load else " -> ".join(f"{float(x):.1f}" for x in load)
        rows.append([run["settings"]["seed"], run["rollouts"], run["dynamic_sampling"]["rollouts"],
                     f"{run['collect_seconds']:.1f}", f"{run['dynamic_sampling']['collect_seconds']:.1f}",
                     f"{r['rollouts']:.3f}", f"{r['tokens']:.3f}", f"{r['time']:.3f}", load_text, run["file"]])
    table = md_table(["seed", "SARA rollouts", "DS rollouts", "SARA s", "DS s", "rollouts ratio", "tokens ratio",
                      "time ratio", "load start -> end", "file"], rows)
    summary = [[label, fmt_ci(mean_ci([ratios(run)[label] for run in runs]), digits=2)] for _, label in RATIOS]
    return f"""# The quickstart's default run over seeds

SARA / dynamic sampling in README command 1's quickstart with its defaults (SmolLM2-135M-Instruct, B = 4 groups of
k = 8, 4 steps, TRL's colocated vLLM engine on the 2-core CPU machine: SARA streaming, DS in rounds), one run per
seed. Time is seconds generating and scoring (the first step of each pass includes the engine's warm-up).

{table}

Mean [95% interval over {len(runs)} seeds]:

{md_table(["SARA / DS", "mean [95% interval]"], summary)}

Regenerate: one run per seed as in this script's docstring, then `{COMMAND}`.
"""


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: this study's folder)")
    args = parser.parse_args(argv)
    text = render(load_runs())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "QUICKSTART_SEEDS.md").write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
