"""Every dataset split the loaders know, one row each: :data:`DATASET_SPLITS`.

A row (:class:`DatasetSplit`) holds every fact about one split: where it lives on the Hugging Face Hub
(:class:`HubSource`), its standard file name inside a ``data_dir`` (and the key :func:`sara_trl.data.local_data_file`
takes for it), the value of its ``source`` column, the short name :func:`sara_trl.data.load_dataset_by_name` loads it
by, and how error messages name it. The other lookups are derived from this table: :data:`sara_trl.data.HUB_SOURCES`,
:data:`sara_trl.data.LOCAL_FILES`, :data:`sara_trl.data.DATASET_NAMES`. A new split is one more row here (and, for a
new dataset, a loader in :mod:`sara_trl.data.loaders`).

Only the standard library: :mod:`sara_trl.data.paths` reads this table without importing ``datasets``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HubSource", "DatasetSplit", "DATASET_SPLITS"]


@dataclass(frozen=True)
class HubSource:
    """Where a dataset split lives on the Hugging Face Hub.

    Attributes
    ----------
    repo_id : str
        Dataset repository id.
    config : str or None
        Configuration name or None.
    split : str
        Upstream split name.
    rows : (int, int) or None
        Optional ``(start, stop)`` row range of that split (TinyZero's Countdown train/test split).
    """

    repo_id: str
    config: str | None
    split: str
    rows: tuple[int, int] | None = None


@dataclass(frozen=True)
class DatasetSplit:
    """Every fact about one dataset split the loaders read.

    Attributes
    ----------
    dataset, split : str
        The loader's dataset and split (``"math"``, ``"math500"``): the ``split=`` of ``load_<dataset>``.
    hub : HubSource
        Where it lives on the Hub (``datasets.load_dataset(hub.repo_id, hub.config, split=hub.split)``).
    source : str
        The value of the ``source`` column of its rows when a row carries none (``"math500"``, ``"gsm8k/test"``).
    local_key, local_file : str or None
        Its key in :data:`sara_trl.data.LOCAL_FILES` and its standard file name inside a ``data_dir``
        (``"minerva"``, ``"minerva_math.jsonl"``); both None where it has none (then only ``path=`` reads it
        offline).
    short_name : str or None
        The name under which :func:`sara_trl.data.load_dataset_by_name` loads this split by default
        (``"math500"``), if any.
    display_name : str or None
        How error messages name it where not ``"<dataset> (<split>)"`` (``"math500"``).
    """

    dataset: str
    split: str
    hub: HubSource
    source: str
    local_key: str | None = None
    local_file: str | None = None
    short_name: str | None = None
    display_name: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """``(dataset, split)``, the key of :data:`DATASET_SPLITS`."""
        return self.dataset, self.split


_MATH = "DigitalLearningGmbH/MATH-lighteval"
_GSM8K = "openai/gsm8k"
_COUNTDOWN = "Jiayi-Pan/Countdown-Tasks-3to4"

#: (dataset, split) -> every fact about that split, in the order of :data:`sara_trl.data.DATASET_NAMES`.
DATASET_SPLITS: dict[tuple[str, str], DatasetSplit] = {
    row.key: row
    for row in (
        DatasetSplit("math", "train", HubSource(_MATH, None, "train"), "math/train",
                     "math_train", "math_train.jsonl", short_name="math"),
        DatasetSplit("math", "test", HubSource(_MATH, None, "test"), "math/test"),
        DatasetSplit("math", "math500", HubSource("HuggingFaceH4/MATH-500", None, "test"), "math500",
                     "math500", "math500.jsonl", short_name="math500", display_name="math500"),
        DatasetSplit("math", "train_12k", HubSource("hiyouga/math12k", None, "train"), "math/train_12k",
                     "math_train_12k", "math_train_12k.jsonl", short_name="math_train_12k",
                     display_name="math_train_12k"),
        DatasetSplit("gsm8k", "train", HubSource(_GSM8K, "main", "train"), "gsm8k/train"),
        DatasetSplit("gsm8k", "test", HubSource(_GSM8K, "main", "test"), "gsm8k/test",
                     "gsm8k_test", "gsm8k_test.jsonl", short_name="gsm8k"),
        DatasetSplit("aime24", "test", HubSource("HuggingFaceH4/aime_2024", None, "train"), "aime24",
                     "aime24", "aime24.jsonl", short_name="aime24"),
        DatasetSplit("amc23", "test", HubSource("math-ai/amc23", None, "test"), "amc23",
                     "amc23", "amc23.jsonl", short_name="amc23"),
        DatasetSplit("minerva", "test", HubSource("math-ai/minervamath", None, "test"), "minerva_math",
                     "minerva", "minerva_math.jsonl", short_name="minerva"),
        DatasetSplit("olympiadbench", "test", HubSource("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
                     "olympiadbench", "olympiadbench", "olympiadbench.jsonl", short_name="olympiadbench"),
        # TinyZero: train = rows[0:327680], test = rows[327680:328704] of the single upstream split
        DatasetSplit("countdown", "train", HubSource(_COUNTDOWN, None, "train", (0, 327680)), "countdown/train",
                     "countdown_train", "countdown_3to4_train_head.jsonl", short_name="countdown"),
        DatasetSplit("countdown", "test", HubSource(_COUNTDOWN, None, "train", (327680, 328704)), "countdown/test",
                     "countdown_test", "countdown_tinyzero_test.jsonl", short_name="countdown_test"),
    )
}  # fmt: skip
