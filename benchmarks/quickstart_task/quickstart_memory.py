# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Peak resident memory of README command 1's quickstart, per process.
``python -m benchmarks.quickstart_task.quickstart_memory [--out FILE] [-- QUICKSTART FLAGS]``.

Runs ``python examples/quickstart_cpu.py`` (its defaults, or the flags after ``--``) and samples, every 0.2 s, the
resident set size (RSS, ``psutil``) of that process and of every process it starts: the second pass (dynamic
sampling, ``python -m sara_trl.quickstart``) and any helper (torch's compile workers). The colocated vLLM engine runs
inside each pass's process (TRL builds ``vllm.LLM`` with ``distributed_executor_backend="external_launcher"``), so
"a pass" is the trainer and its engine together. Each pass also records its kernel high-water mark
(``ru_maxrss``, which sampling cannot miss) in its summary; both figures are written to ``--out`` (default
``quickstart_memory.json`` in this folder) with the command, the machine's memory and load, and the date.
Memory does not depend on the machine's load; the seconds printed by the run do.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COMMAND = "python -m benchmarks.quickstart_task.quickstart_memory"
GIB = 1 << 30


def _role(cmdline: list[str], top: bool) -> str:
    text = " ".join(cmdline)
    if top:
        return "first pass (trainer + colocated vLLM engine)"
    if "sara_trl.quickstart" in text:
        return "second pass (trainer + colocated vLLM engine)"
    return "helper: " + " ".join(" ".join(os.path.basename(part) for part in cmdline[:3]).split())[:80]


class TreeSampler:
    """Peak RSS (bytes) of process ``pid`` and its descendants, sampled every ``interval`` seconds in a thread."""

    def __init__(self, pid: int, interval: float = 0.2):
        import psutil

        self.root = psutil.Process(pid)
        self.interval = interval
        self.peaks: dict[int, dict] = {}
        self.peak_total = 0  # bytes: the largest sum over all the processes alive at one sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        total = 0
        for process in processes:
            try:
                rss = process.memory_info().rss
                total += rss
                entry = self.peaks.get(process.pid)
                if entry is None:
                    entry = self.peaks[process.pid] = {"pid": process.pid, "peak_rss_bytes": 0,
                                                       "role": _role(process.cmdline(), process is self.root)}
                entry["peak_rss_bytes"] = max(entry["peak_rss_bytes"], rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self.peak_total = max(self.peak_total, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def table(self) -> list[dict]:
        """Processes by peak RSS, largest first, with ``peak_rss_gib``."""
        rows = sorted(self.peaks.values(), key=lambda row: -row["peak_rss_bytes"])
        return [{**row, "peak_rss_gib": round(row["peak_rss_bytes"] / GIB, 3)} for row in rows]


def run_quickstart(flags: list[str], summary_file: str, log=None) -> tuple[int, list[dict], float]:
    """Run the quickstart with ``flags`` under :class:`TreeSampler`; returns (exit status, per-process peaks, the
    peak of all its processes together in GiB)."""
    command = [sys.executable, "examples/quickstart_cpu.py", *flags, "--summary_file", summary_file]
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT if log else None)
    with TreeSampler(process.pid) as sampler:
        status = process.wait()
    return status, sampler.table(), round(sampler.peak_total / GIB, 3)


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "quickstart_memory.json", help="result file (JSON)")
    args = parser.parse_args(own)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        summary_file = os.path.join(folder, "summary.json")
        extra = [] if "--output_dir" in flags else ["--output_dir", folder]
        status, processes, total = run_quickstart([*flags, *extra], summary_file)
        if status != 0:
            raise SystemExit(f"the quickstart failed (exit status {status}); nothing written")
        summary = json.loads(Path(summary_file).read_text())
    high_water = {"first pass": summary.get("peak_rss_gib")}
    if "dynamic_sampling" in summary:
        high_water["second pass"] = summary["dynamic_sampling"].get("peak_rss_gib")
    import psutil

    result = {
        "command": " ".join([COMMAND, *(["--", *flags] if flags else [])]),
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
                    "platform": platform.platform()},
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "first_pass": summary.get("first_pass"),
        "processes": processes,
        "peak_total_rss_gib": total,
        "ru_maxrss_gib": high_water,
        "settings": summary.get("settings"),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in processes[:4]:
        print(f"{row['peak_rss_gib']:6.2f} GiB  {row['role']}")
    print(f"ru_maxrss: {high_water}; written to {args.out}")
    return result


if __name__ == "__main__":
    main()
