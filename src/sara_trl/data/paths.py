"""Standard file names of a local data folder (the ``data_dir=`` of the loaders, ``--data_dir`` of the scripts).

The loaders read the Hugging Face Hub unless told otherwise. To work offline, or on a copy of your own, put JSON
Lines (or Parquet, via ``path=``) files in a folder of your choice and pass it as ``data_dir=``; inside it each
dataset split is looked up under its standard name in :data:`LOCAL_FILES` (``math500.jsonl``,
``countdown_tinyzero_test.jsonl``, ...). Rows may use our column names (``problem``, ``answer``, ``target``,
``nums``) or the upstream ones of the Hub sources in :data:`sara_trl.data.splits.DATASET_SPLITS` (``question``,
GSM8K's ``#### 72`` answers, ...): the loaders map both. Nothing is looked up anywhere else: no environment
variable, no folder next to the checkout or the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from .splits import DATASET_SPLITS

__all__ = ["LOCAL_FILES", "local_data_file"]

#: standard file names inside a ``data_dir``, by dataset key (the loaders in :mod:`sara_trl.data.loaders` read them;
#: derived from :data:`sara_trl.data.splits.DATASET_SPLITS`, which also holds their Hub sources)
LOCAL_FILES: dict[str, str] = {r.local_key: r.local_file for r in DATASET_SPLITS.values() if r.local_key}


def local_data_file(data_dir: str | os.PathLike, key_or_name: str) -> Path:
    """Path of one file in a data folder, by dataset key (``"math500"``, see :data:`LOCAL_FILES`) or file name.

    Parameters
    ----------
    data_dir : str or os.PathLike
        The folder (given by the user; nothing is searched for).
    key_or_name : str
        A key of :data:`LOCAL_FILES` or a file name inside ``data_dir``.

    Returns
    -------
    pathlib.Path
        Absolute path of the existing file.

    Raises
    ------
    FileNotFoundError
        ``data_dir`` is not a directory, or the file is not in it.
    """
    folder = Path(data_dir).expanduser()
    name = LOCAL_FILES.get(key_or_name, key_or_name)
    if not folder.is_dir():
        raise FileNotFoundError(f"data_dir={str(data_dir)!r} is not a directory (it should hold e.g. {name})")
    p = (folder / name).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    return p
