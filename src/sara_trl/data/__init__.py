"""Datasets for SARA training and evaluation: loaders, prompt templates and seeded generators.

* Loaders (:mod:`.loaders`) return TRL-ready conversational :class:`datasets.Dataset` objects (column ``prompt`` is a
  list of chat messages) with the columns the rewards in :mod:`sara_trl.rewards` read (``answer``,
  ``answer_alternatives``, ``target``, ``nums``). They read a local JSONL/Parquet file (``path=``), a folder of
  your own holding the files under their standard names (``data_dir=``, see :data:`LOCAL_FILES`) or the Hugging
  Face Hub; nothing else. Offline (or with the Hub unreachable) and given neither, they raise
  :class:`DataUnavailableError` at once (:mod:`.hub`).
* Templates (:mod:`.templates`): the paper's math (``\\boxed{}``) and Countdown (``<answer>``) instructions.
* Generators (:mod:`.generators`): seeded, solvable Countdown tasks and tiny arithmetic prompts, no download needed.
"""

from .generators import make_arithmetic_dataset, make_countdown_dataset, make_countdown_tasks
from .hub import DataUnavailableError, hub_unreachable, offline_env_vars
from .loaders import (
    DATASET_NAMES,
    DATASET_SPLITS,
    HUB_SOURCES,
    MATH_SUBJECTS,
    DatasetSplit,
    HubSource,
    load_aime24,
    load_amc23,
    load_countdown,
    load_dataset_by_name,
    load_gsm8k,
    load_math,
    load_minerva,
    load_olympiadbench,
)
from .paths import LOCAL_FILES, local_data_file
from .templates import ARITHMETIC_INSTRUCTION, COUNTDOWN_TEMPLATE, MATH_TEMPLATE, chat_prompt, fill_template

__all__ = [
    "load_math",
    "load_gsm8k",
    "load_aime24",
    "load_amc23",
    "load_minerva",
    "load_olympiadbench",
    "load_countdown",
    "load_dataset_by_name",
    "DATASET_NAMES",
    "HUB_SOURCES",
    "HubSource",
    "DATASET_SPLITS",
    "DatasetSplit",
    "MATH_SUBJECTS",
    "make_countdown_dataset",
    "make_countdown_tasks",
    "make_arithmetic_dataset",
    "MATH_TEMPLATE",
    "COUNTDOWN_TEMPLATE",
    "ARITHMETIC_INSTRUCTION",
    "chat_prompt",
    "fill_template",
    "LOCAL_FILES",
    "local_data_file",
    "DataUnavailableError",
    "hub_unreachable",
    "offline_env_vars",
]
