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

__all__ = ["Interval", "mean_ci", "fmt_ci", "md_table", "environment", "environment_lines", "TextBlocks"]


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


def environment_lines(command: str, seeds: str, env: dict | None = None) -> str:
    """The stamp printed under each result table: machine, versions, seeds, and the exact command.

    ``env``: an :func:`environment` dict saved with the results (default: this machine now).
    """
    e = environment() if env is None else env
    return (f"*Machine: {e['cpu']}, {e['cores']} cores (shared), {e['platform']}. Versions: Python {e['python']}, "
            f"numpy {e['numpy']}, scipy {e['scipy']}, sara_trl {e['sara_trl']}. Seeds: {seeds}. "
            f"Command: `{command}`.*")


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
