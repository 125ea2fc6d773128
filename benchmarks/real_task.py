# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""The real-training task: a weighted mixture of SmolLM2-135M arithmetic families with a U-shaped start.

Defined once here for the replay (``benchmarks/real_replay/``), the task report
(``benchmarks/real_task_survey/real_task_report.py``) and the training runs. The families, prompt styles and the
survey that measured them are those of ``benchmarks/real_task_survey/task_survey.py`` (SmolLM2-135M-Instruct,
8 families x 128 prompts x 32 samples per cell).

The task (:data:`REAL_TASK`): prompt style ``"only"`` ("What is {expression}? Answer with only the number."),
temperature 0.6, top-p 1, top-k 0, 96 new tokens at most, and the family shares of :data:`REAL_TASK_WEIGHTS`: 55%
two-digit products (almost never solved: the all-fail mass), 15% two-digit sums, 15% subtractions in [0, 20]
(negative answers are mostly missed), 15% sums of 0..2 (usually solved). Why these:
``benchmarks/real_task_survey/REAL_TASK.md``.

Splits: the expressions of family number ``f`` (its position in ``task_survey.FAMILIES``) come from
``make_arithmetic_dataset(seed=SPLIT_SEEDS[split] + f)``. Split ``"bank"`` (seed offset 0) is the survey's own
prompts, i.e. the replay bank; ``"train"`` and ``"heldout"`` use other seeds. Families with few distinct expressions
(``add_0_2`` has 9) necessarily share expressions across splits; the report states the overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import lcm
from pathlib import Path

import numpy as np

from benchmarks.real_task_survey.task_survey import FAMILIES, STYLES

REPO = Path(__file__).resolve().parents[1]

__all__ = ["RealTask", "REAL_TASK", "REAL_TASK_WEIGHTS", "SPLIT_SEEDS", "SURVEY_DIR", "family_seed",
           "family_expressions", "make_real_task", "mixture_copies", "mixture_rows", "load_survey_cell"]

SURVEY_DIR = REPO / "benchmarks" / "real_task_survey" / "data" / "survey"
# Generator seed offsets per split; the survey (= the bank) used seed = family index.
SPLIT_SEEDS = {"bank": 0, "train": 100, "heldout": 200}
REAL_TASK_WEIGHTS = {"mul_10_99": 0.55, "add_10_99": 0.15, "sub_0_20": 0.15, "add_0_2": 0.15}


@dataclass(frozen=True)
class RealTask:
    """A task of the survey: one cell (prompt style x temperature) and family shares.

    Parameters
    ----------
    style : str
        Key of ``task_survey.STYLES``.
    temperature : float
        Sampling temperature (top-p 1, top-k 0).
    max_completion_length : int
        New-token cap, in tokens.
    weights : dict
        Family name -> share of the prompts; shares are positive and sum to 1.

    Raises
    ------
    ValueError
        Unknown style or family, a share <= 0, or shares that do not sum to 1.
    """

    style: str
    temperature: float
    max_completion_length: int
    weights: dict

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"style must be one of {sorted(STYLES)}, got {self.style!r}")
        unknown = set(self.weights) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown families {sorted(unknown)}; the survey has {list(FAMILIES)}")
        if any(w <= 0 for w in self.weights.values()) or abs(sum(self.weights.values()) - 1.0) > 1e-9:
            raise ValueError(f"family shares must be > 0 and sum to 1, got {self.weights}")
        if self.max_completion_length < 1:
            raise ValueError("max_completion_length must be >= 1")

    @property
    def cell(self) -> str:
        """Survey cell name, e.g. ``"only_t0.6"`` (file ``survey_<cell>.npz``)."""
        return f"{self.style}_t{self.temperature:g}"

    @property
    def instruction(self) -> str:
        return STYLES[self.style]


REAL_TASK = RealTask(style="only", temperature=0.6, max_completion_length=96, weights=REAL_TASK_WEIGHTS)


def family_seed(family: str, split: str) -> int:
    """Generator seed of ``family``'s expressions in ``split`` (raises KeyError for an unknown family or split)."""
    return SPLIT_SEEDS[split] + list(FAMILIES).index(family)


def family_expressions(family: str, count: int, split: str, instruction: str = "{expression}"):
    """``count`` prompts of one family in one split (``datasets.Dataset`` of ``make_arithmetic_dataset``)."""
    from sara_trl.data.generators import make_arithmetic_dataset

    return make_arithmetic_dataset(count, seed=family_seed(family, split), instruction=instruction,
                                   **FAMILIES[family])


def _split_counts(weights: dict, num_prompts: int) -> dict:
    """Largest-remainder rounding of ``num_prompts * share`` (sums to ``num_prompts`` exactly)."""
    raw = {f: w * num_prompts for f, w in weights.items()}
    counts = {f: int(np.floor(v)) for f, v in raw.items()}
    order = sorted(raw, key=lambda f: (counts[f] - raw[f], list(weights).index(f)))
    for f in order[: num_prompts - sum(counts.values())]:
        counts[f] += 1
    return counts


def make_real_task(num_prompts: int, split: str = "train", task: RealTask = REAL_TASK):
    """The task's prompts for training (``split="train"``) or evaluation (``"heldout"``).

    Parameters
    ----------
    num_prompts : int
        Rows, split over the families by share (largest remainder), >= the number of families.
    split : {"train", "heldout", "bank"}
        Which generator seeds (:data:`SPLIT_SEEDS`).
    task : RealTask
        The task definition.

    Returns
    -------
    datasets.Dataset
        Columns ``prompt`` (chat messages), ``answer``, ``expression``, ``id``, ``source``, ``task`` (family name),
        shuffled with the split's seed offset.

    Raises
    ------
    ValueError
        Unknown split or too few prompts.
    """
    from datasets import concatenate_datasets

    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be one of {sorted(SPLIT_SEEDS)}, got {split!r}")
    if num_prompts < len(task.weights):
        raise ValueError(f"num_prompts must be >= {len(task.weights)} (one per family), got {num_prompts}")
    parts = []
    for family, count in _split_counts(task.weights, num_prompts).items():
        part = family_expressions(family, count, split, instruction=task.instruction)
        parts.append(part.add_column("task", [family] * count))
    return concatenate_datasets(parts).shuffle(seed=SPLIT_SEEDS[split]).flatten_indices()


def mixture_copies(weights: dict, rows_per_family: dict) -> dict:
    """Copies of each bank row that make a family's share of the replayed pool equal its weight, exactly.

    With ``n_f`` rows of family f and ``c_f`` copies of each, family f is ``c_f n_f / sum_g c_g n_g`` of the pool;
    the smallest integers with ``c_f n_f`` proportional to ``w_f`` are used (weights are read as decimals, e.g.
    0.55 = 11/20).

    Raises
    ------
    ValueError
        A weighted family with no rows, or proportions that need more than 1,000 copies of a row.
    """
    fr = {f: Fraction(str(w)) / int(rows_per_family.get(f, 0) or 1) for f, w in weights.items()}
    missing = [f for f in weights if not rows_per_family.get(f)]
    if missing:
        raise ValueError(f"families {missing} have no rows in the bank")
    scale = lcm(*(x.denominator for x in fr.values()))
    ints = {f: int(x * scale) for f, x in fr.items()}
    g = np.gcd.reduce(list(ints.values()))
    copies = {f: v // int(g) for f, v in ints.items()}
    if max(copies.values()) > 1000:
        raise ValueError(f"weights {weights} need {max(copies.values())} copies of a row; round them")
    return copies


def mixture_rows(task_index: np.ndarray, task_names: list, weights: dict) -> np.ndarray:
    """Bank row of each prompt of the replayed pool: every row of a weighted family, repeated by
    :func:`mixture_copies` (rows of families without weight are left out).

    Parameters
    ----------
    task_index : (P,) int
        Family index of each bank row (into ``task_names``).
    task_names : list of str
    weights : dict
        Family name -> share.

    Returns
    -------
    (V,) int64
        Bank rows, family by family in ``weights`` order; ``V = sum_f copies_f n_f``.
    """
    task_index = np.asarray(task_index)
    rows = {f: np.flatnonzero(task_index == task_names.index(f)) for f in weights}
    copies = mixture_copies(weights, {f: len(r) for f, r in rows.items()})
    return np.concatenate([np.tile(rows[f], copies[f]) for f in weights]).astype(np.int64)


def load_mixture_bank(bank: Path, weights: dict) -> tuple[np.ndarray, np.ndarray, dict, np.ndarray, np.ndarray]:
    """A task bank (``.npz`` with a ``task`` column, as ``real_task_report.py`` writes it) and its replayed pool.

    Returns
    -------
    success, tokens, meta
        As :func:`benchmarks.replay.load_bank`.
    task_index : (P,) int
        Family index of each bank row (into ``meta["task_names"]``).
    rows : (V,) int64
        :func:`mixture_rows` for ``weights``.
    """
    from benchmarks import replay

    success, tokens, meta = replay.load_bank(bank)
    with np.load(bank) as z:
        task_index = z["task"]
    return success, tokens, meta, task_index, mixture_rows(task_index, meta["task_names"], weights)


def load_survey_cell(cell: str, survey_dir: Path = SURVEY_DIR) -> tuple[np.ndarray, np.ndarray, dict]:
    """``(success (F, P, k) int8, tokens (F, P, k) int16, survey.json dict)`` of one survey cell.

    Raises
    ------
    FileNotFoundError
        No such cell file.
    """
    import json

    with np.load(Path(survey_dir) / f"survey_{cell}.npz") as z:
        success, tokens = z["success"], z["tokens"]
    meta = json.loads((Path(survey_dir) / "survey.json").read_text())
    return success, tokens, meta
