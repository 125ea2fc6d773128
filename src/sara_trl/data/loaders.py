r"""Loaders for the paper's datasets, returning TRL-ready conversational :class:`datasets.Dataset` objects.

Every loader reads, in this order of preference,

1. ``path=``: a local JSONL (``.jsonl``/``.json``) or Parquet (``.parquet``) file;
2. ``data_dir=``: a directory of your own holding the files under their standard names
   (:data:`sara_trl.data.paths.LOCAL_FILES`, e.g. ``math500.jsonl``);
3. otherwise the Hugging Face Hub (``datasets.load_dataset(<repo id>, <config>, split=...)``, see :data:`HUB_SOURCES`).

Each split's facts (Hub source, standard file name, ``source`` column, short name) are one row of
:data:`sara_trl.data.splits.DATASET_SPLITS`; :data:`HUB_SOURCES`, :data:`DATASET_NAMES` and
:data:`~sara_trl.data.paths.LOCAL_FILES` are derived from it.

Nothing else is searched. When none of them can serve the data (offline, or the Hub unreachable, and no
``path=``/``data_dir=``) the loaders raise :class:`~sara_trl.data.hub.DataUnavailableError` at once, with a one-line
message (see :mod:`sara_trl.data.hub`).

Rows from any of these are mapped to one schema, so the upstream column names (``question``/``problem``,
GSM8K's ``#### 72`` answers, OlympiadBench's ``final_answer`` lists, MATH's ``"Level 3"`` strings, answers that only
exist as the last ``\boxed{}`` of a solution) do not leak into training code.

Output columns (all loaders):

* ``prompt``: list of chat messages ``[{"role": "system", ...}?, {"role": "user", "content": ...}]``;
* ``id`` (string), ``source`` (string).

Math loaders add ``problem`` and ``answer`` (string, no ``\boxed{}``; the column :func:`sara_trl.rewards.math_reward`
reads); MATH adds ``level`` (int 1-5 or None) and ``type`` (subject); Minerva can add ``answer_alternatives`` (list
of further accepted answers, also read by ``math_reward``; opt-in, see :func:`load_minerva`); OlympiadBench adds
``is_multiple_answer`` and ``unit``.
Countdown adds ``target`` (int) and ``nums`` (list of int), read by :func:`sara_trl.rewards.countdown_reward`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import datasets

from sara_trl.rewards.extract import last_boxed

from .hub import DataUnavailableError, hub_unreachable, offline_env_vars
from .splits import DATASET_SPLITS, DatasetSplit, HubSource
from .templates import COUNTDOWN_TEMPLATE, MATH_TEMPLATE, chat_prompt, fill_template

logger = logging.getLogger(__name__)

__all__ = [
    "HubSource",
    "HUB_SOURCES",
    "DatasetSplit",
    "DATASET_SPLITS",
    "DATASET_NAMES",
    "MATH_SUBJECTS",
    "load_math",
    "load_gsm8k",
    "load_aime24",
    "load_amc23",
    "load_minerva",
    "load_olympiadbench",
    "load_countdown",
    "load_dataset_by_name",
]


#: (dataset, split) -> Hub location (derived from :data:`~sara_trl.data.splits.DATASET_SPLITS`).
HUB_SOURCES: dict[tuple[str, str], HubSource] = {key: row.hub for key, row in DATASET_SPLITS.items()}

#: The seven MATH subjects (column ``type``).
MATH_SUBJECTS = (
    "Algebra",
    "Counting & Probability",
    "Geometry",
    "Intermediate Algebra",
    "Number Theory",
    "Prealgebra",
    "Precalculus",
)


# -- raw loading --------------------------------------------------------------------------------------------------
def _load_file(path: str | os.PathLike) -> datasets.Dataset:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist (expected a local .jsonl, .json or .parquet file)")
    name = p.name.lower()
    if name.endswith(".parquet"):
        builder = "parquet"
    elif name.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
        builder = "json"
    else:
        raise ValueError(f"unsupported file type {p.suffix!r} (use .jsonl, .json or .parquet): {p}")
    return datasets.load_dataset(builder, data_files=str(p), split="train")


def _is_unavailable(err: BaseException) -> bool:
    """A download failure (network, missing repository or file, offline mode), not a bug to let through."""
    if isinstance(err, OSError):  # ConnectionError, TimeoutError, FileNotFoundError (DatasetNotFoundError), ...
        return True
    return type(err).__module__.split(".")[0] in {"httpx", "httpcore", "requests", "urllib3", "huggingface_hub"}


def _load_raw(
    dataset: str, split: str, path: str | os.PathLike | None, data_dir: str | os.PathLike | None
) -> tuple[datasets.Dataset, DatasetSplit]:
    """The raw rows of one split (from ``path``, else ``data_dir``, else the Hub) and its row of the split table."""
    row = DATASET_SPLITS.get((dataset, split))
    if row is None:
        splits = sorted(s for d, s in DATASET_SPLITS if d == dataset)
        raise ValueError(f"unknown split {split!r} for {dataset}; known: {splits}")
    if path is not None:
        return _load_file(path), row
    if data_dir is not None:
        if row.local_file is None:
            raise ValueError(f"no offline file for {dataset} split {split!r}; pass path= or load it from the Hub")
        if not Path(data_dir).is_dir():
            raise FileNotFoundError(f"data_dir={str(data_dir)!r} is not a directory (it should hold the offline files, "
                                    f"e.g. {row.local_file})")
        return _load_file(Path(data_dir) / row.local_file), row
    src = row.hub
    offline = offline_env_vars()
    if not offline:  # fail in a fraction of a second, not after datasets' ~25 s of retries
        unreachable = hub_unreachable()
        if unreachable is not None:
            raise DataUnavailableError(dataset, split, src.repo_id, f"{unreachable} to download {src.repo_id}",
                                       row.local_file, row.display_name)
    try:
        ds = datasets.load_dataset(src.repo_id, src.config, split=src.split)
    except Exception as err:
        if not _is_unavailable(err):
            raise
        if offline:
            reason = (f"offline mode is on ({', '.join(offline)}) and {src.repo_id} is not in the Hugging Face "
                      "cache")
        else:
            reason = f"could not load {src.repo_id} from the Hub ({type(err).__name__}: {err})"
        raise DataUnavailableError(dataset, split, src.repo_id, reason, row.local_file, row.display_name) from err
    if src.rows is not None:
        start, stop = src.rows
        ds = ds.select(range(start, min(stop, len(ds))))
    return ds, row


# -- row mapping --------------------------------------------------------------------------------------------------
def _first(row: dict, names: Iterable[str]) -> Any:
    for n in names:
        v = row.get(n)
        if v is not None:
            return v
    return None


def _answer_str(value: Any) -> str:
    """Upstream answers may be floats (``27.0``), ints or strings; return a clean string."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _math_answer(row: dict) -> str:
    ans = row.get("answer")
    if isinstance(ans, str) and "####" in ans:  # GSM8K upstream: "... #### 1,234"
        return ans.split("####")[-1].strip().replace(",", "")
    if ans is not None and _answer_str(ans):
        return _answer_str(ans)
    final = row.get("final_answer")  # OlympiadBench upstream: ["$69$,$84$"]
    if isinstance(final, (list, tuple)) and final:
        return str(final[0]).replace("$", "").strip()
    if isinstance(final, str) and final.strip():
        return final.replace("$", "").strip()
    solution = row.get("solution")
    if isinstance(solution, (list, tuple)):
        solution = solution[0] if solution else None
    if isinstance(solution, str):
        boxed = last_boxed(solution)
        if boxed:
            return boxed
    return ""


def _level(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    m = re.search(r"\d+", str(value))
    return int(m.group(0)) if m else None


def _subject_key(s: str) -> str:
    s = re.sub(r"[^a-z]", "", str(s).lower())
    return s.replace("and", "")


def _math_row(row: dict, template: str, system_prompt: str | None, source: str, extra: tuple[str, ...]) -> dict:
    problem = _first(row, ("problem", "question", "Problem", "query"))
    if problem is None:
        raise ValueError(f"row has no problem/question column: {sorted(row)}")
    problem = str(problem)
    rid = _first(row, ("id", "unique_id", "idx"))
    out = {
        "prompt": chat_prompt(fill_template(template, problem=problem), system_prompt),
        "problem": problem,
        "answer": _math_answer(row),
        "id": "" if rid is None else str(rid),
        "source": str(row.get("source") or source),
    }
    if "level" in extra:
        out["level"] = _level(row.get("level"))
    if "type" in extra:
        out["type"] = str(_first(row, ("type", "subject")) or "")
    if "answer_alternatives" in extra:
        alts = row.get("answer_alternatives")
        if alts is None:
            alts = []
        elif isinstance(alts, str):
            alts = [alts]
        out["answer_alternatives"] = [str(a).strip() for a in alts if a is not None and str(a).strip()]
    if "is_multiple_answer" in extra:
        out["is_multiple_answer"] = bool(row.get("is_multiple_answer") or False)
    if "unit" in extra:
        out["unit"] = str(row.get("unit") or "")
    return out


# a list of message structs; the ``[{...}]`` spelling means the same in datasets 3.x and 4.x+
_MESSAGES = [{"role": datasets.Value("string"), "content": datasets.Value("string")}]


def _math_features(extra: tuple[str, ...]) -> datasets.Features:
    """Output schema, given explicitly so upstream column types (e.g. float answers) never leak through."""
    f = {
        "prompt": _MESSAGES,
        "problem": datasets.Value("string"),
        "answer": datasets.Value("string"),
        "id": datasets.Value("string"),
        "source": datasets.Value("string"),
    }
    optional = {
        "level": datasets.Value("int64"),
        "type": datasets.Value("string"),
        "answer_alternatives": datasets.Sequence(datasets.Value("string")),
        "is_multiple_answer": datasets.Value("bool"),
        "unit": datasets.Value("string"),
    }
    f.update({k: optional[k] for k in extra})
    return datasets.Features(f)


_COUNTDOWN_FEATURES = datasets.Features(
    {
        "prompt": _MESSAGES,
        "target": datasets.Value("int64"),
        "nums": datasets.Sequence(datasets.Value("int64")),
        "id": datasets.Value("string"),
        "source": datasets.Value("string"),
    }
)


def _finish_math(
    ds: datasets.Dataset, template: str | None, system_prompt: str | None, source: str, extra: tuple[str, ...] = ()
) -> datasets.Dataset:
    ds = ds.map(
        _math_row,
        fn_kwargs={
            "template": MATH_TEMPLATE if template is None else template,
            "system_prompt": system_prompt,
            "source": source,
            "extra": tuple(extra),
        },
        remove_columns=ds.column_names,
        features=_math_features(tuple(extra)),
        desc=f"formatting {source}",
    )
    empty = sum(1 for a in ds["answer"] if not a)
    if empty:
        logger.warning(
            "%s: %d of %d rows have no gold answer (math_reward gives None for them)", source, empty, len(ds)
        )
    return ds


# -- public loaders -----------------------------------------------------------------------------------------------
def load_math(
    split: str = "train",
    levels: Iterable[int] | None = None,
    subjects: Iterable[str] | None = None,
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    r"""MATH (Hendrycks et al., 2021) as a conversational dataset.

    Parameters
    ----------
    split : str, default "train"
        ``"train"`` (7,500 problems), ``"train_12k"`` (PRM800K's 12,000 train problems), ``"math500"`` (500) or
        ``"test"`` (5,000; Hub only).
    levels : iterable of int, optional
        Keep only these difficulty levels (ints 1-5); None keeps all (including the 2 unlabeled problems).
    subjects : iterable of str, optional
        Keep only these subjects (names from :data:`MATH_SUBJECTS`, case and punctuation insensitive, e.g.
        ``"number_theory"``).
    path : str or os.PathLike, optional
        Local JSONL (``.jsonl``/``.json``, optionally ``.gz``) or Parquet file; read first when given.
    data_dir : str or os.PathLike, optional
        Directory with the data files under their standard names (:data:`~sara_trl.data.paths.LOCAL_FILES`).
    template : str, optional
        User-message template with a ``{problem}`` placeholder (default :data:`~sara_trl.data.templates.MATH_TEMPLATE`).
    system_prompt : str, optional
        System message; none when None or empty.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, problem, answer, id, source, level, type``.

    Raises
    ------
    ValueError
        Unknown split, level outside 1-5, unknown subject or unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("math", split, path, data_dir)
    ds = _finish_math(ds, template, system_prompt, row.source, ("level", "type"))
    if levels is not None:
        lv = {int(x) for x in levels}
        if not lv or not lv <= {1, 2, 3, 4, 5}:
            raise ValueError(f"levels must be a non-empty subset of 1..5, got {sorted(lv)}")
        ds = ds.filter(lambda lvl: lvl in lv, input_columns="level", desc="level filter")
    if subjects is not None:
        known = {_subject_key(s): s for s in MATH_SUBJECTS}
        wanted = set()
        for s in subjects:
            k = _subject_key(s)
            if k not in known:
                raise ValueError(f"unknown MATH subject {s!r}; known: {list(MATH_SUBJECTS)}")
            wanted.add(k)
        ds = ds.filter(lambda t: _subject_key(t) in wanted, input_columns="type", desc="subject filter")
    return ds


def load_gsm8k(
    split: str = "test",
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    """GSM8K as a conversational dataset; the answer is the integer after ``####`` without thousands separators.

    Parameters
    ----------
    split : str, default "test"
        ``"train"`` (7,473 problems) or ``"test"`` (1,319); the offline file holds the test split only.
    path, data_dir, template, system_prompt
        As in :func:`load_math`.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, problem, answer, id, source``.

    Raises
    ------
    ValueError
        Unknown split, no offline file for the split (with ``data_dir``) or unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("gsm8k", split, path, data_dir)
    return _finish_math(ds, template, system_prompt, row.source)


def load_aime24(
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    """AIME 2024 I+II (30 problems, integer answers) as a conversational dataset.

    Parameters
    ----------
    path, data_dir, template, system_prompt
        As in :func:`load_math`.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, problem, answer, id, source``.

    Raises
    ------
    ValueError
        Unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("aime24", "test", path, data_dir)
    return _finish_math(ds, template, system_prompt, row.source)


def load_amc23(
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    """AMC 12 2023 (40 problems, numeric answers; ``27.0`` upstream becomes ``"27"``) as a conversational dataset.

    Parameters
    ----------
    path, data_dir, template, system_prompt
        As in :func:`load_math`.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, problem, answer, id, source`` (as :func:`load_aime24`).

    Raises
    ------
    ValueError
        Unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("amc23", "test", path, data_dir)
    return _finish_math(ds, template, system_prompt, row.source)


def load_minerva(
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
    alternatives: bool = False,
) -> datasets.Dataset:
    """Minerva OCWCourses (272 problems) as a conversational dataset.

    Parameters
    ----------
    path, data_dir, template, system_prompt
        As in :func:`load_math`.
    alternatives : bool, default False
        Also add the column ``answer_alternatives`` (DeepScaleR's rewritten answers, carried in the offline file),
        which ``math_reward`` accepts as correct too. Off by default: about a fifth of them do not verify against the
        gold answer (often the answer to a different sub-question; see ``benchmarks/data_report/DATA_REPORT.md``),
        and the format variants they were meant for (``4.5e33`` vs ``4.5 \\times 10^{33}``) are already handled by the
        verifier's normalization.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, problem, answer, id, source`` (and ``answer_alternatives`` when asked for).

    Raises
    ------
    ValueError
        Unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("minerva", "test", path, data_dir)
    extra = ("answer_alternatives",) if alternatives else ()
    return _finish_math(ds, template, system_prompt, row.source, extra)


def load_olympiadbench(
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    """OlympiadBench OE_TO_maths_en_COMP (675 problems) as a conversational dataset.

    A multiple answer is one comma-separated string (``"69,84"``), compared as a set by math-verify.

    Parameters
    ----------
    path, data_dir, template, system_prompt
        As in :func:`load_math`.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, problem, answer, id, source, is_multiple_answer, unit``.

    Raises
    ------
    ValueError
        Unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("olympiadbench", "test", path, data_dir)
    return _finish_math(ds, template, system_prompt, row.source, ("is_multiple_answer", "unit"))


def _countdown_row(row: dict, idx: int, template: str, system_prompt: str | None, source: str) -> dict:
    nums = [int(x) for x in row["nums"]]
    target = int(row["target"])
    rid = row.get("id")
    return {
        "prompt": chat_prompt(fill_template(template, numbers=nums, target=target), system_prompt),
        "target": target,
        "nums": nums,
        "id": str(rid) if rid is not None else f"{source}-{idx}",
        "source": str(row.get("source") or source),
    }


def load_countdown(
    split: str = "train",
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    num_tasks: int | None = None,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    """Countdown (TinyZero's ``Jiayi-Pan/Countdown-Tasks-3to4`` split: train rows 0-327,679, test 327,680-328,703).

    Parameters
    ----------
    split : str, default "train"
        ``"train"`` or ``"test"`` (offline files: the 11,024-row train head and the 1,024-row test split).
    path, data_dir
        As in :func:`load_math`.
    num_tasks : int, optional
        Keep only the first ``num_tasks`` rows (None: all).
    template : str, optional
        User-message template with placeholders ``{numbers}`` and ``{target}`` (default
        :data:`~sara_trl.data.templates.COUNTDOWN_TEMPLATE`).
    system_prompt : str, optional
        As in :func:`load_math`.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt, target, nums, id, source``.

    Raises
    ------
    ValueError
        Unknown split, ``num_tasks < 1`` or unsupported file type.
    FileNotFoundError
        Missing local file or ``data_dir``.
    DataUnavailableError
        No ``path``/``data_dir`` given and the Hub cannot serve the data (unreachable, or offline mode and not in
        the Hugging Face cache); a :class:`ConnectionError`.
    """
    ds, row = _load_raw("countdown", split, path, data_dir)
    if num_tasks is not None:
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        ds = ds.select(range(min(num_tasks, len(ds))))
    return ds.map(
        _countdown_row,
        with_indices=True,
        fn_kwargs={
            "template": COUNTDOWN_TEMPLATE if template is None else template,
            "system_prompt": system_prompt,
            "source": row.source,
        },
        remove_columns=ds.column_names,
        features=_COUNTDOWN_FEATURES,
        desc=f"formatting {row.source}",
    )


#: dataset -> its loader (one per dataset of :data:`~sara_trl.data.splits.DATASET_SPLITS`)
_LOADERS = {
    "math": load_math,
    "gsm8k": load_gsm8k,
    "aime24": load_aime24,
    "amc23": load_amc23,
    "minerva": load_minerva,
    "olympiadbench": load_olympiadbench,
    "countdown": load_countdown,
}

# short name -> the split it loads by default
_NAMED = {row.short_name: row for row in DATASET_SPLITS.values() if row.short_name}

#: names accepted by :func:`load_dataset_by_name` (the splits' short names)
DATASET_NAMES = tuple(_NAMED)


def load_dataset_by_name(
    name: str,
    path: str | os.PathLike | None = None,
    split: str | None = None,
    **kwargs: Any,
) -> datasets.Dataset:
    """Load a dataset by short name (:data:`DATASET_NAMES`): ``"math"``, ``"math500"``, ``"math_train_12k"``,
    ``"gsm8k"``, ``"aime24"``, ``"amc23"``, ``"minerva"``, ``"olympiadbench"``, ``"countdown"``, ``"countdown_test"``.

    Parameters
    ----------
    name : str
        Dataset name, one of :data:`DATASET_NAMES`.
    path : str or os.PathLike, optional
        Local file (else ``data_dir=`` or the Hub, as in the individual loaders).
    split : str, optional
        Overrides the name's default split where the dataset has splits (math, gsm8k, countdown); a single-split
        benchmark accepts only None or ``"test"``.
    **kwargs
        Passed to the loader (``data_dir``, ``template``, ``system_prompt``, ``levels``, ...).

    Returns
    -------
    datasets.Dataset
        The loader's dataset (columns as documented by that loader).

    Raises
    ------
    ValueError
        Unknown name, or a ``split`` other than ``"test"`` for a single-split benchmark; otherwise as the loader.
    """
    if name not in _NAMED:
        raise ValueError(f"unknown dataset {name!r}; known: {list(DATASET_NAMES)}")
    row = _NAMED[name]
    fn = _LOADERS[row.dataset]
    if sum(d == row.dataset for d, _ in DATASET_SPLITS) == 1:  # a single-split benchmark: its loader takes no split
        if split not in (None, "test"):
            raise ValueError(f"{name} has a single (test) split, got split={split!r}")
        return fn(path=path, **kwargs)
    return fn(split=split or row.split, path=path, **kwargs)
