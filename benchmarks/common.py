"""Shared helpers for the benchmarks: confidence intervals over seeds, Markdown tables, and the environment stamp
(machine, versions) that every result table carries."""

from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from string import Template

import numpy as np
from scipy import stats as sps

__all__ = ["Interval", "mean_ci", "fmt_ci", "md_table", "environment", "environment_lines", "current_command",
           "current_path", "git_commit", "TextBlocks"]


@dataclass(frozen=True)
class Interval:
    """Mean over seeds with a two-sided Student-t confidence interval (``lo``, ``hi``), ``n`` seeds."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2.0


def mean_ci(values, level: float = 0.95) -> Interval:
    """Mean and Student-t confidence interval of independent per-seed values.

    Args:
        values: ``(n,)`` one number per seed (each already averaged over that seed's steps). NaNs are not allowed:
            a missing value must be decided by the caller, never dropped silently here.
        level: coverage of the interval, in (0, 1).

    Returns:
        :class:`Interval`; with one value the interval collapses to the value.

    Raises:
        ValueError: empty input, NaN in the input, or ``level`` outside (0, 1).
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("mean_ci needs at least one value")
    if np.isnan(v).any():
        raise ValueError("mean_ci got NaN; decide what a missing seed means before aggregating")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    m = float(v.mean())
    if v.size == 1:
        return Interval(m, m, m, 1)
    half = float(sps.t.ppf(0.5 + level / 2.0, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return Interval(m, m - half, m + half, int(v.size))


def fmt_ci(iv: Interval, digits: int = 3, pct: bool = False) -> str:
    """``mean [lo, hi]`` with ``digits`` decimals (``pct``: as percentages)."""
    f = 100.0 if pct else 1.0
    suffix = "%" if pct else ""
    if iv.n == 1 or (iv.hi - iv.lo) * f < 10.0 ** (-digits):
        return f"{iv.mean * f:.{digits}f}{suffix}"
    return f"{iv.mean * f:.{digits}f}{suffix} [{iv.lo * f:.{digits}f}, {iv.hi * f:.{digits}f}]"


def md_table(header: list[str], rows: list[list]) -> str:
    """A GitHub Markdown table (first column left-aligned, the others right-aligned)."""
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join([":---"] + ["---:"] * (len(header) - 1)) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def git_commit() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes), or None without git (the lent GPU's copy)."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def environment() -> dict:
    """Machine and versions: CPU model and core count, Python, numpy, scipy, matplotlib, sara_trl.

    matplotlib is optional (the ``plots`` extra); without it its version reads "not installed".
    """
    import scipy

    try:
        import matplotlib

        matplotlib_version = matplotlib.__version__
    except ImportError:
        matplotlib_version = "not installed"

    try:
        import sara_trl

        sara_version = getattr(sara_trl, "__version__", None)
        if sara_version is None:
            from importlib.metadata import version

            sara_version = version("sara-trl")
    except Exception:  # noqa: BLE001 - the stamp must not break a benchmark run
        sara_version = "unknown"
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "matplotlib": matplotlib_version,
        "sara_trl": sara_version,
        "platform": platform.platform(),
    }


#: Each script's module since every study has its own folder, by the path it had before (``benchmarks/<old>.py``).
EARLIER_STREAMING = {"continue_to_decision": False, "refill_margin": 0.5}
"""AllocationConfig fields that pin a streaming configuration to the values streaming ran with before its own
defaults (2026-12-03): the rounds' one rollout per continuation and refill margin 0.5, so that the commands of
results measured then regenerate them (docs/collection-modes.md, "Streaming defaults")."""

_MODULES = {
    "run": "simulated.run", "train_runs": "train_runs.train_runs", "beyond_paper": "beyond_paper.beyond_paper",
    "quickstart_mix": "quickstart_task.quickstart_mix", "make_replay_bank": "quickstart_task.make_replay_bank",
    "real_task_report": "real_task_survey.real_task_report", "gpu/task_survey": "real_task_survey.task_survey",
    "vllm_vs_survey": "real_task_survey.vllm_vs_survey", "real_replay": "real_replay.real_replay",
    "real_training": "real_training.real_training", "real_training_report": "real_training.real_training_report",
    "headline": "headline.headline", "engine_step": "engine_step.engine_step",
    "calibrate_cpu_latency": "cpu_latency.calibrate_cpu_latency",
    "streaming_engine": "streaming_engine.streaming_engine",
    "streaming_small_batch": "streaming_small_batch.streaming_small_batch", "reward_cost": "reward_cost.reward_cost",
    "streaming_projection": "streaming_projection.streaming_projection", "data_report": "data_report.data_report",
    "gpu/h200_check": "gpu.h200_check",
}
#: The folder of each result file that sat directly in ``benchmarks/`` before, by its name (or its name's start).
_RESULT_FOLDERS = {
    "results": "simulated", "train_results": "train_runs", "beyond_paper": "beyond_paper",
    "real_task": "real_task_survey", "real_replay": "real_replay", "engine_step": "engine_step",
    "cpu_latency": "cpu_latency",
    "streaming_engine": "streaming_engine", "streaming_small_batch": "streaming_small_batch",
    "reward_cost": "reward_cost", "streaming_projection": "streaming_projection",
}
_OLD_COMMAND = re.compile(r"python3? benchmarks/([a-z0-9_/]+)\.py(?=\s|$)")
_OLD_RESULT = re.compile(r"(?<![\w/.-])benchmarks/([a-z0-9_]+)\.(json|md)\b")


#: Scripts named in saved metadata (e.g. a bank's sidecar) that moved when the studies got their own folders.
_MOVED_SCRIPTS = {"benchmarks/gpu/task_survey.py": "benchmarks/real_task_survey/task_survey.py",
                  "benchmarks/make_replay_bank.py": "benchmarks/quickstart_task/make_replay_bank.py"}


def current_path(path: str) -> str:
    """A result file's repository path today: ``benchmarks/streaming_engine_seed1.json`` (a path recorded before
    the studies had their own folders) -> ``benchmarks/streaming_engine/streaming_engine_seed1.json``, and the
    scripts of :data:`_MOVED_SCRIPTS`; any other path (or text) is returned as is."""
    for old, new in _MOVED_SCRIPTS.items():
        path = path.replace(old, new)

    def folder(m: re.Match) -> str:
        name = m.group(1)
        study = next((_RESULT_FOLDERS[key] for key in sorted(_RESULT_FOLDERS, key=len, reverse=True)
                      if name == key or name.startswith(key + "_")), None)
        return m.group(0) if study is None else f"benchmarks/{study}/{name}.{m.group(2)}"

    return _OLD_RESULT.sub(folder, path)


def current_command(command: str) -> str:
    """``command`` in the form that runs it today: ``python benchmarks/run.py --quick`` (how result files saved
    before the studies had their own folders record it) -> ``python -m benchmarks.simulated.run --quick``, with
    the result files it names at their current paths (:func:`current_path`).

    The result files keep the command as it was run; the reports rendered from them show this form. A command
    already in the ``python -m benchmarks.<study>.<script>`` form, or naming no benchmark script, is returned as is.
    """
    def module(m: re.Match) -> str:
        name = _MODULES.get(m.group(1))
        return m.group(0) if name is None else f"python -m benchmarks.{name}"

    return current_path(_OLD_COMMAND.sub(module, command))


def environment_lines(command: str, seeds: str, env: dict | None = None) -> str:
    """The stamp printed under each result table: machine, versions, seeds, and the exact command.

    ``command``: as recorded with the results; printed in its current form (:func:`current_command`).
    ``env``: an :func:`environment` dict saved with the results (default: this machine now).
    """
    e = environment() if env is None else env
    return (f"*Machine: {e['cpu']}, {e['cores']} cores (shared), {e['platform']}. Versions: Python {e['python']}, "
            f"numpy {e['numpy']}, scipy {e['scipy']}, sara_trl {e['sara_trl']}. Seeds: {seeds}. "
            f"Command: `{current_command(command)}`.*")


class TextBlocks:
    """Named blocks of report prose read from a Markdown template file, filled with :class:`string.Template`.

    A block starts at a line ``<!-- block: NAME -->`` and runs to the next such line; its trailing newlines are
    dropped. ``${name}`` placeholders take already-formatted strings; ``$$`` is a literal dollar sign.

    Raises:
        ValueError: the file defines no block, or one name twice.
        KeyError: (when filling) a placeholder of the block was not given, or the block does not exist.
    """

    _MARKER = re.compile(r"^<!-- block: ([A-Za-z0-9_]+) -->\n", re.M)

    def __init__(self, path: str | Path):
        parts = self._MARKER.split(Path(path).read_text())
        names = parts[1::2]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"{path}: expected uniquely named '<!-- block: NAME -->' sections, found {names}")
        self.path = Path(path)
        self.blocks = {name: Template(body.rstrip("\n")) for name, body in zip(names, parts[2::2])}

    def __call__(self, block: str, /, **values) -> str:
        """Block ``block`` with its placeholders replaced by ``values``."""
        return self.blocks[block].substitute(values)
