"""Iterable training data: a ``datasets.IterableDataset`` as the row source of SARA's prompt stream.

TRL's trainers accept an ``IterableDataset`` as ``train_dataset`` (a streamed Hub dataset, a corpus too large to
index). SARA draws prompts from its own stream, so the dataset is read by
:class:`~sara_trl.allocation.IterablePromptStream` (torch- and datasets-free) through :class:`DatasetRows`, which opens
passes over it and resumes them, and TRL's dataloader, which only counts steps, iterates
:func:`step_counter_dataset` instead of the data (so the data are read once, by SARA, and a resumed run does not
re-read them to skip the dataloader's batches).

How the dataset is read, against what TRL does with an iterable train set:

- **Order.** TRL shuffles with ``dataset.shuffle(seed=args.seed)`` (a buffer of 1000 rows, reshuffled every epoch
  through ``set_epoch``) when ``shuffle_dataset`` is true, and reads in order otherwise. SARA reads the dataset in its
  own order, never calls ``set_epoch`` on it (with datasets 5, a non-zero epoch also permutes its shards) and
  shuffles in its stream with the same kind of buffer (1000 rows, ``stream_seed`` or ``seed``, reshuffled every
  epoch) when ``shuffle_dataset`` is true, and reads in order otherwise. A dataset you shuffled yourself
  (``dataset.shuffle(seed)``) is read in that fixed order every epoch.
- **End of data.** Like TRL's dataloader, a new epoch re-iterates the dataset from the start; ``max_steps`` sets the
  training length (required, as for TRL).
- **Processes.** Every process reads the whole dataset in the same order (do not ``split_dataset_by_node`` it):
  lock-step rounds make the same decisions everywhere; streaming collection keeps each process's disjoint share
  (positions ``% world == rank``).
- **Resume.** A checkpoint records the position in the pass and ``dataset.state_dict()`` there; the resumed pass
  starts with ``load_state_dict`` (datasets jumps to the shard and row) instead of reading from the start. A dataset
  with a shuffle buffer of its own (``dataset.shuffle``) loses that buffer in ``state_dict``, so it is resumed with
  ``dataset.skip(position)``, which reads and discards the rows before the position: exact, but not free.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from datasets import IterableDataset

__all__ = ["DatasetRows", "check_row", "step_counter_dataset"]


def check_row(row: Any, position: int) -> None:
    """Raise if ``row`` cannot be a SARA prompt: not a mapping, no ``prompt``, or an image column.

    Raises
    ------
    ValueError
        With the row's position in the pass.
    """
    keys = set(row.keys()) if hasattr(row, "keys") else None
    if keys is None or "prompt" not in keys:
        found = sorted(keys) if keys is not None else type(row).__name__
        raise ValueError(f"`train_dataset` must have a 'prompt' column; row {position} of the iterable dataset has "
                         f"{found}.")
    if keys & {"image", "images"}:
        raise ValueError("SARA does not support multimodal input yet: remove the 'image'/'images' columns (row "
                         f"{position} of the iterable dataset has them).")


def _has_shuffle_buffer(dataset: IterableDataset) -> bool:
    """Whether ``dataset`` shuffles through a buffer of its own (``dataset.shuffle``), whose content
    ``state_dict`` does not keep."""
    todo = [getattr(dataset, "_ex_iterable", None)]
    while todo:
        node = todo.pop()
        if node is None:
            continue
        if type(node).__name__ == "BufferShuffledExamplesIterable":
            return True
        todo.append(getattr(node, "ex_iterable", None))
        todo.extend(getattr(node, "ex_iterables", None) or [])
    return False


class DatasetRows:
    """A ``datasets.IterableDataset`` as a :class:`~sara_trl.allocation.RowSource`: passes over it, opened at a
    position, with ``state_dict()`` as the resume token.

    Each pass iterates a copy of the dataset (the caller's object is never iterated, loaded or re-epoched), and
    checks every row it yields (:func:`check_row`).

    Parameters
    ----------
    dataset : datasets.IterableDataset
        The training data, in the order every pass reads it.

    Attributes
    ----------
    last_open : tuple of (int, str) or None
        ``(start, how)`` of the latest pass: ``how`` is ``"start"`` (from row 0), ``"state_dict"`` (jumped to
        ``start`` with the saved token) or ``"skip"`` (``dataset.skip(start)``).
    """

    def __init__(self, dataset: IterableDataset):
        self.dataset = dataset
        self.resumable = not _has_shuffle_buffer(dataset)
        self.last_open: tuple[int, str] | None = None
        self._reading: IterableDataset | None = None

    def open(self, start: int, state: Any = None) -> Iterator[dict]:
        """The rows of one pass from position ``start`` on (see :class:`~sara_trl.allocation.RowSource`)."""
        dataset = copy.deepcopy(self.dataset)
        if start == 0:
            how = "start"
        elif state is not None and self.resumable:
            dataset.load_state_dict(state)
            how = "state_dict"
        else:
            dataset = dataset.skip(start)
            how = "skip"
        self.last_open = (start, how)
        self._reading = None if how == "skip" else dataset  # a skip() copy's state does not fit the dataset
        return self._rows(iter(dataset), start)

    @staticmethod
    def _rows(rows: Iterator, start: int) -> Iterator[dict]:
        for position, row in enumerate(rows, start):
            check_row(row, position)
            yield row

    def state(self) -> dict | None:
        """``state_dict()`` of the pass being read (after the rows yielded so far), or None when it cannot resume
        exactly (a dataset with its own shuffle buffer, or a pass opened with ``skip``)."""
        if self._reading is None or not self.resumable:
            return None
        return self._reading.state_dict()


def _empty_prompts() -> Iterator[dict]:
    while True:
        yield {"prompt": ""}


def step_counter_dataset() -> IterableDataset:
    """An endless ``IterableDataset`` of empty prompts: what TRL's dataloader iterates in place of an iterable train
    set (its batches only count steps; SARA's stream reads the data)."""
    return IterableDataset.from_generator(_empty_prompts)
