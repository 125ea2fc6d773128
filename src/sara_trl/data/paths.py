"""Where the shared offline data files live.

The project's offline copies of the benchmark files (``math500.jsonl``, ``countdown_tinyzero_test.jsonl``, ...; the
standard names are :data:`LOCAL_FILES`, the upstream source of each is :data:`sara_trl.data.loaders.HUB_SOURCES`) sit
in a directory ``shared/data`` next to the repository checkout::

    <somewhere>/
        <repo>/            # this repository (src/sara_trl/...)
        shared/data/       # the data files

:func:`find_shared_data_dir` looks, in order, at

1. the environment variable ``SARA_SHARED_DATA`` (a directory; used as given, it must exist);
2. ``<repo root>/../shared/data`` where ``<repo root>`` is found from this file's location
   (``src/sara_trl/data/paths.py`` -> three levels up), which works for an editable/development install;
3. ``./shared/data`` and ``../shared/data`` relative to the current working directory.

No absolute machine-specific path is ever assumed.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SHARED_DATA_ENV", "find_shared_data_dir", "shared_data_file", "LOCAL_FILES"]

SHARED_DATA_ENV = "SARA_SHARED_DATA"

#: standard file names of the shared offline copies, by dataset key (the loaders in :mod:`sara_trl.data.loaders`
#: read them; their Hub sources are :data:`sara_trl.data.loaders.HUB_SOURCES`)
LOCAL_FILES = {
    "math_train": "math_train.jsonl",
    "math_train_12k": "math_train_12k.jsonl",
    "math500": "math500.jsonl",
    "aime24": "aime24.jsonl",
    "amc23": "amc23.jsonl",
    "minerva": "minerva_math.jsonl",
    "olympiadbench": "olympiadbench.jsonl",
    "gsm8k_test": "gsm8k_test.jsonl",
    "countdown_test": "countdown_tinyzero_test.jsonl",
    "countdown_train": "countdown_3to4_train_head.jsonl",
}


def _candidates() -> list[Path]:
    here = Path(__file__).resolve()
    repo_root = here.parents[3]  # src/sara_trl/data/paths.py -> <repo>
    cwd = Path.cwd()
    return [repo_root.parent / "shared" / "data", cwd / "shared" / "data", cwd.parent / "shared" / "data"]


def find_shared_data_dir(required: bool = True) -> Path | None:
    """Locate the shared data directory.

    Parameters
    ----------
    required : bool, default True
        Raise if it cannot be found (else return None).

    Returns
    -------
    pathlib.Path or None
        The directory as an absolute path, or None (only when ``required=False``).

    Raises
    ------
    FileNotFoundError
        ``$SARA_SHARED_DATA`` names a missing directory, or (``required=True``) no candidate directory exists.
    """
    env = os.environ.get(SHARED_DATA_ENV)
    if env:
        p = Path(env).expanduser().resolve()
        if not p.is_dir():
            raise FileNotFoundError(f"${SHARED_DATA_ENV}={env!r} is not a directory")
        return p
    for c in _candidates():
        if c.is_dir():
            return c.resolve()
    if required:
        tried = ", ".join(str(c) for c in _candidates())
        raise FileNotFoundError(f"shared data directory not found (set ${SHARED_DATA_ENV}); tried {tried}")
    return None


def shared_data_file(key_or_name: str) -> Path:
    """Path of one shared data file, by dataset key (``"math500"``, see :data:`LOCAL_FILES`) or file name.

    Parameters
    ----------
    key_or_name : str
        A key of :data:`LOCAL_FILES` or a file name inside the shared data directory.

    Returns
    -------
    pathlib.Path
        Absolute path of the existing file.

    Raises
    ------
    FileNotFoundError
        The directory or the file does not exist.
    """
    name = LOCAL_FILES.get(key_or_name, key_or_name)
    p = find_shared_data_dir(required=True) / name
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    return p
