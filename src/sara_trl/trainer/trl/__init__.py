"""The port to TRL: the only code in sara_trl that names a private TRL member or mirrors TRL code.

SARA drives TRL's ``GRPOTrainer`` / ``RLOOTrainer`` through a handful of their private methods (collect, then replay
the committed rows through TRL's unchanged ``_generate_and_score_completions``, answering its generation and reward
hooks from a cache). Everything that knows those members lives in one module per supported TRL line, picked here by
the installed TRL version; the rest of :mod:`sara_trl.trainer` calls the operations that module offers (tokenize
prompts, generate one round, decode, score a batch, run one tool turn, the colocated engine's sampling parameters,
environments, TRL's metric sink and completion log, the weight-sync step marker) and never touches TRL's insides.

Supporting a new TRL line: docs/trl-port.md (copy the module, follow TRL's diff, run the held-out suite).

Raises
------
ImportError
    On import, when the installed TRL is not a supported line; the message names the supported range.
"""

from __future__ import annotations

import importlib

import trl
from packaging.version import Version

# TRL line ("major.minor") -> the module of this package that speaks to it.
SUPPORTED_LINES = {"1.16": "v1_16"}
SUPPORTED_RANGE = ">=1.16,<1.17"  # as pinned in pyproject.toml


def _line_module(version: str) -> str:
    """The port module for TRL ``version``.

    Raises
    ------
    ImportError
        ``version`` is not in a supported line.
    """
    parsed = Version(version)
    line = f"{parsed.major}.{parsed.minor}"
    if line not in SUPPORTED_LINES:
        raise ImportError(
            f"sara_trl supports TRL {SUPPORTED_RANGE} (lines {sorted(SUPPORTED_LINES)}); TRL {version} is installed. "
            f"Install a supported TRL (`pip install 'trl{SUPPORTED_RANGE}'`), or add a port module for TRL {line} "
            "(docs/trl-port.md says how)."
        )
    return SUPPORTED_LINES[line]


TRL_VERSION = trl.__version__
port = importlib.import_module(f"{__name__}.{_line_module(TRL_VERSION)}")

__all__ = ["SUPPORTED_LINES", "SUPPORTED_RANGE", "TRL_VERSION", "port"]
