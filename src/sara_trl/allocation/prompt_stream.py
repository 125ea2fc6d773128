"""A seeded, checkpointable stream of fresh prompt indices (independent of any global or per-rank RNG).

:class:`PromptStream` (and :class:`ShardStream`, one process's share) draws indices of a map-style dataset of known
size. :class:`IterablePromptStream` reads an iterable data source in order (a corpus too large to index, a streamed
Hub dataset) through a bounded buffer, and hands out row positions as prompt ids.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["DEFAULT_SHUFFLE_BUFFER", "IterablePromptStream", "PromptStream", "RowSource", "ShardStream"]

logger = logging.getLogger(__name__)
_WARNED_SIZES: set[int] = set()  # dataset sizes already reported as too small for a batch (once per process)


class PromptStream:
    """Dataset indices in a seeded random order, epoch after epoch, without repeats inside a batch.

    Every process that builds a stream with the same ``(num_prompts, seed, shuffle)`` and takes the same counts with
    the same ``avoid`` sees the same indices, so ranks can run the allocator in lock-step without communicating.

    A batch (one training step) should not hold a prompt twice. When the caller passes the ids already in the
    batch (``avoid``), :meth:`take` skips them: a skipped id stays owed to the current epoch and is served first
    once it is no longer avoided (so every epoch still visits every prompt once). If the current epoch has nothing
    left that the batch can take, the next epoch starts early; ids still owed to the finished epoch are then
    counted as visited, since they are in the batch. Only when every prompt of the dataset is already in the batch
    does the stream repeat prompts (in stream order), and it says so once per process and dataset size (a
    ``logging`` warning from ``sara_trl.allocation.prompt_stream``).

    Parameters
    ----------
    num_prompts : int
        Dataset size (> 0).
    seed : int
        Seed of the stream's own ``numpy.random.Generator``; epoch ``e`` uses ``seed + e``.
    shuffle : bool
        Draw in a random order per epoch (else 0, 1, 2, ...).
    wrap : bool
        Start a new epoch when one is used up (training); if False, :meth:`take` returns fewer indices once the
        stream is exhausted (evaluation, finite data).

    Raises
    ------
    ValueError
        ``num_prompts <= 0``.
    """

    def __init__(self, num_prompts: int, seed: int = 0, shuffle: bool = True, wrap: bool = True):
        if int(num_prompts) <= 0:
            raise ValueError(f"PromptStream needs at least one prompt, got num_prompts={num_prompts}")
        self.num_prompts = int(num_prompts)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.wrap = bool(wrap)
        self.epoch = 0
        self.cursor = 0
        self._order = self._make_order(0)
        self._owed: list[int] = []  # ids of this epoch passed over because the batch held them; served first
        self._mask: np.ndarray | None = None  # scratch for take(avoid=...), see _blocked_mask

    def _make_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_prompts, dtype=np.int64)
        return np.random.default_rng(self.seed + epoch).permutation(self.num_prompts).astype(np.int64)

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.cursor = 0
        self._order = self._make_order(self.epoch)
        self._owed = []

    @property
    def exhausted(self) -> bool:
        """True when ``wrap=False`` and every index has been taken."""
        return not self.wrap and self.cursor >= self.num_prompts and not self._owed

    def take(self, count: int, avoid=None) -> np.ndarray:
        """The next ``count`` indices.

        Parameters
        ----------
        count : int
            Indices wanted (>= 0).
        avoid : array_like of int, optional
            Ids already in the batch. When given, the returned ids differ from these and from each other, unless
            every prompt of the dataset is in the batch: then ``wrap=True`` continues in stream order, repeats
            included (logged once), and ``wrap=False`` returns what it has. When omitted, plain
            stream order.

        Returns
        -------
        ndarray of int64, shape (<= count,)
            Fewer than ``count`` only when ``wrap=False`` and the stream is exhausted (or its remaining ids are
            all in ``avoid``).

        Raises
        ------
        ValueError
            ``count < 0``, or an id in ``avoid`` outside ``[0, num_prompts)``.
        """
        if count < 0:
            raise ValueError(f"cannot take {count} prompts")
        if avoid is None:
            return self._take_in_order(count)
        avoid = self._check_ids(avoid)
        # One boolean per prompt marks the batch: set from `avoid` now and cleared on the way out, so a call costs
        # O(len(avoid) + count) rather than sorting the batch's ids on every refill.
        blocked = self._blocked_mask()
        blocked[avoid] = True
        out = []
        try:
            # `bound` is an upper bound on the distinct ids in the batch; exact counting (a pass over the mask) is
            # needed only when it reaches the dataset size.
            bound = len(avoid)
            while count > 0:
                if bound >= self.num_prompts:
                    bound = int(np.count_nonzero(blocked))
                if bound >= self.num_prompts:  # every prompt is in the batch: repeats cannot be avoided
                    if not self.wrap:
                        break  # a finite stream just ends
                    if self.num_prompts not in _WARNED_SIZES:
                        _WARNED_SIZES.add(self.num_prompts)
                        logger.warning("the dataset has %d prompts and one batch needs more distinct prompts than "
                                       "that, so some prompts appear more than once in a batch (said once)",
                                       self.num_prompts)
                    out.append(self._take_in_order(count))
                    break
                got = self._take_unblocked(count, blocked)
                if len(got):
                    out.append(got)
                    blocked[got] = True  # distinct and not yet blocked, so the count grows by len(got)
                    bound += len(got)
                    count -= len(got)
                elif self.wrap:
                    self._next_epoch()  # this epoch has nothing the batch can take
                else:
                    break
        finally:
            blocked[avoid] = False
            for got in out:
                blocked[got] = False
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def _check_ids(self, ids) -> np.ndarray:
        """``ids`` as a flat int64 array, every id a valid dataset index (else ``ValueError``)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_prompts):
            bad = ids[(ids < 0) | (ids >= self.num_prompts)][0]
            raise ValueError(f"prompt id {bad} is not an index of this stream's dataset of {self.num_prompts} "
                             "prompts")
        return ids

    def _blocked_mask(self) -> np.ndarray:
        """A scratch boolean per prompt, all False between calls (built on first use; not part of the state)."""
        if self._mask is None:
            self._mask = np.zeros(self.num_prompts, dtype=bool)
        return self._mask

    def _take_in_order(self, count: int) -> np.ndarray:
        """Owed ids first, then the epoch order, wrapping into new epochs (plain stream order)."""
        out = []
        if self._owed and count > 0:
            out.append(np.asarray(self._owed[:count], np.int64))
            count -= len(out[0])
            self._owed = self._owed[len(out[0]):]
        while count > 0:
            if self.cursor >= self.num_prompts:
                if not self.wrap:
                    break
                self._next_epoch()
            chunk = self._order[self.cursor : self.cursor + count]
            self.cursor += len(chunk)
            count -= len(chunk)
            out.append(chunk)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def _take_unblocked(self, count: int, blocked: np.ndarray) -> np.ndarray:
        """Up to ``count`` ids of the current epoch whose flag in ``blocked`` (bool, ``(num_prompts,)``) is unset,
        owed ids first; never starts an epoch."""
        out = []
        if self._owed:
            owed = np.asarray(self._owed, np.int64)
            usable = np.flatnonzero(~blocked[owed])[:count]
            out.append(owed[usable])
            self._owed = np.delete(owed, usable).tolist()
            count -= len(usable)
        while count > 0 and self.cursor < self.num_prompts:
            chunk = self._order[self.cursor : self.cursor + count]
            self.cursor += len(chunk)
            skip = blocked[chunk]
            out.append(chunk[~skip])
            self._owed.extend(chunk[skip].tolist())
            count -= int((~skip).sum())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def state_dict(self) -> dict:
        """The stream's position, as plain Python values."""
        return {"num_prompts": self.num_prompts, "seed": self.seed, "shuffle": self.shuffle, "wrap": self.wrap,
                "epoch": self.epoch, "cursor": self.cursor, "owed": list(self._owed)}

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by :meth:`state_dict`.

        Raises
        ------
        ValueError
            The saved stream was built for another dataset size, seed or order.
        """
        if state.get("kind") == "iterable":
            raise ValueError("stream state was saved by an IterablePromptStream (an iterable dataset); this stream "
                             "reads a map-style dataset")
        for key in ("num_prompts", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(f"stream state was saved with {key}={state[key]!r}, this stream has "
                                 f"{key}={getattr(self, key)!r}")
        self.wrap = bool(state["wrap"])
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self._order = self._make_order(self.epoch)
        self._owed = [int(i) for i in state.get("owed", [])]  # absent in states saved before ids could be owed


class ShardStream:
    """One process's disjoint share of a dataset's prompts: indices ``i`` with ``i % world == rank``, drawn in the
    order of a :class:`PromptStream` over that share.

    Used by streaming collection with several processes (each process collects its own B / world groups with no
    communication during the step): the shards of ``rank = 0 .. world - 1`` partition the dataset, so no prompt is
    drawn by two processes in the same epoch of their streams.

    Parameters
    ----------
    num_prompts : int
        Dataset size (> ``rank``, so that the shard is not empty).
    rank, world : int
        This process's index and the number of processes (``0 <= rank < world``).
    seed, shuffle, wrap
        As for :class:`PromptStream` (over the shard's ``ceil((num_prompts - rank) / world)`` prompts).

    Raises
    ------
    ValueError
        ``world < 1``, ``rank`` outside ``[0, world)``, or an empty shard (``num_prompts <= rank``).
    """

    def __init__(self, num_prompts: int, rank: int, world: int, seed: int = 0, shuffle: bool = True,
                 wrap: bool = True):
        if int(world) < 1 or not 0 <= int(rank) < int(world):
            raise ValueError(f"invalid process layout: rank {rank} of world size {world}")
        if int(num_prompts) <= int(rank):
            raise ValueError(f"a dataset of {num_prompts} prompts leaves process {rank} of {world} no prompt")
        self.rank, self.world = int(rank), int(world)
        self.dataset_size = int(num_prompts)
        self._local = PromptStream(len(range(self.rank, self.dataset_size, self.world)), seed, shuffle, wrap)

    @property
    def num_prompts(self) -> int:
        """Prompts in this shard."""
        return self._local.num_prompts

    @property
    def exhausted(self) -> bool:
        """True when ``wrap=False`` and every prompt of the shard has been taken."""
        return self._local.exhausted

    def take(self, count: int, avoid=None) -> np.ndarray:
        """The next ``count`` dataset indices of this shard (see :meth:`PromptStream.take`).

        Parameters
        ----------
        count : int
            Indices wanted (>= 0).
        avoid : array_like of int, optional
            Dataset indices already in the batch (ids of other shards are ignored: they cannot be drawn here).

        Returns
        -------
        ndarray of int64, shape (<= count,)
            Dataset indices, each ``% world == rank``.

        Raises
        ------
        ValueError
            ``count < 0`` or an id in ``avoid`` outside ``[0, num_prompts)`` of the dataset.
        """
        local_avoid = None
        if avoid is not None:
            ids = np.asarray(avoid, dtype=np.int64).reshape(-1)
            if len(ids) and (ids.min() < 0 or ids.max() >= self.dataset_size):
                raise ValueError(f"prompt id outside the dataset of {self.dataset_size} prompts in avoid")
            ids = ids[ids % self.world == self.rank]
            local_avoid = (ids - self.rank) // self.world
        return self._local.take(count, local_avoid) * self.world + self.rank

    def state_dict(self) -> dict:
        """The shard's position, as plain Python values."""
        return {**self._local.state_dict(), "rank": self.rank, "world": self.world}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`.

        Raises
        ------
        ValueError
            The state belongs to another shard (rank or world size), dataset size, seed or order.
        """
        for key in ("rank", "world"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"stream state was saved for {key}={state.get(key)!r}, this shard has "
                                 f"{key}={getattr(self, key)!r}")
        self._local.load_state_dict({k: v for k, v in state.items() if k not in ("rank", "world")})


DEFAULT_SHUFFLE_BUFFER = 1000
"""Rows an :class:`IterablePromptStream` shuffles among by default: the default ``buffer_size`` of
``datasets.IterableDataset.shuffle``, which TRL's trainers call (with no ``buffer_size``) on an iterable train set."""


@runtime_checkable
class RowSource(Protocol):
    """What :class:`IterablePromptStream` reads: passes over the same rows, in the same order, opened at a position.

    A plain re-iterable (a list, any object whose ``iter()`` starts a new pass) is wrapped into one: it has no
    resume token, so a pass opened at ``start > 0`` reads and discards ``start`` rows.
    """

    def open(self, start: int, state: Any = None) -> Iterable:
        """The rows of one pass from position ``start`` (0-based) on.

        ``state``: what :meth:`state` returned when ``start`` rows of a pass had been read (a checkpoint's resume
        token), or None; a source that can use it jumps there instead of reading the first ``start`` rows again.
        """

    def state(self) -> Any:
        """A resume token (plain Python values) for the position of the pass last opened, after the rows read from
        it so far; None if the source has none."""


class _ReiterableSource:
    """A re-iterable as a :class:`RowSource` (no resume token: skipping reads and discards)."""

    def __init__(self, rows: Iterable):
        self.rows = rows

    def open(self, start: int, state: Any = None) -> Iterator:
        return itertools.islice(iter(self.rows), start, None)

    def state(self) -> None:
        return None


class IterablePromptStream:
    """Prompts read in order from an iterable data source, through a bounded buffer, epoch after epoch.

    The counterpart of :class:`PromptStream` (same :meth:`take` contract: no prompt twice in a batch, ids skipped
    because the batch holds them are owed and served first, a warning once when the data hold fewer prompts than a
    batch needs) for data that can only be read in order: a ``datasets.IterableDataset`` (through the trainer's
    adapter), a generator-backed corpus, a list.

    **Ids.** A prompt's id is the position of its row in a pass over the source (0, 1, 2, ...). Every pass must
    yield the same rows in the same order (a pass that yields a different number of rows than the first is an
    error), so an id names the same row in every epoch. :meth:`row` returns the row of an id handed out.

    **Order and buffer.** Without ``shuffle``, ids come in source order and a row is read only when it is drawn (no
    read-ahead). With ``shuffle``, the stream keeps a buffer of up to ``buffer_size`` rows: it fills the buffer,
    then each draw takes a uniformly random row of it (``numpy.random.default_rng(seed + epoch)``) and the next row
    read takes its place; at the end of the pass the buffer drains in random order. This is the buffered
    (approximate) shuffle of ``datasets.IterableDataset.shuffle(seed, buffer_size)``, which TRL applies to an
    iterable train set, reshuffled every epoch (not the same order: datasets' algorithm differs in detail and also
    permutes its shards). A row cannot come out more than ``buffer_size - 1`` draws before its position.

    **Memory.** The stream holds the rows of the buffer, of owed ids, and of ids handed out since the last
    :meth:`release` (the trainer releases after every step, keeping the prompts carried into the next step): at
    most ``buffer_size`` + the prompts of a step + those carried, whatever the size of the data.

    **End of data.** At the end of a pass, ``wrap=True`` starts a new epoch by opening a new pass from the start
    (as TRL's dataloader re-iterates an exhausted iterable dataset); ``wrap=False`` ends: :meth:`take` returns
    fewer ids and :attr:`exhausted` turns True.

    **Processes.** Every process that reads the same source with the same arguments sees the same ids in the same
    order. With ``world > 1`` the stream is one process's disjoint share (as :class:`ShardStream`): it reads every
    row and keeps those whose position ``% world == rank``, drawn in the order above over that share.

    **Checkpoints.** :meth:`state_dict` holds the position in the pass (``cursor``, rows read), the source's resume
    token, the buffer, the shuffle generator's state and the held rows (under ``"rows"``); :meth:`load_state_dict`
    restores it, and the next read opens the pass at ``cursor`` (with the token when there is one) instead of
    reading from the start.

    Parameters
    ----------
    source : RowSource or re-iterable
        Rows in a fixed order (any Python objects; the stream never looks inside them). A one-shot iterator (whose
        ``iter()`` is itself) cannot start a second epoch or resume and is refused.
    seed : int
        Seed of the shuffle; epoch ``e`` uses ``seed + e``.
    shuffle : bool
        Buffered shuffle (else source order).
    buffer_size : int
        Rows of the shuffle buffer (>= 1; used only with ``shuffle``).
    wrap : bool
        Start a new epoch at the end of a pass (training); else end.
    rank, world : int
        This process's index and the number of processes (``0 <= rank < world``).

    Raises
    ------
    ValueError
        A one-shot iterator, ``buffer_size < 1``, or an invalid process layout. Later, on reading: a source with no
        row (or none for this process), or a pass of another length than the first.
    """

    def __init__(self, source, seed: int = 0, shuffle: bool = True, buffer_size: int = DEFAULT_SHUFFLE_BUFFER,
                 wrap: bool = True, rank: int = 0, world: int = 1):
        if int(world) < 1 or not 0 <= int(rank) < int(world):
            raise ValueError(f"invalid process layout: rank {rank} of world size {world}")
        if isinstance(buffer_size, bool) or int(buffer_size) != buffer_size or int(buffer_size) < 1:
            raise ValueError(f"buffer_size must be an integer >= 1, got {buffer_size!r}")
        if not isinstance(source, RowSource):
            if not isinstance(source, Iterable):
                raise ValueError(f"the data source must be re-iterable or a RowSource, got {type(source).__name__}")
            if iter(source) is source:
                raise ValueError(
                    "the data source is a one-shot iterator: it cannot be read again for a new epoch or to resume "
                    "from a checkpoint. Pass a re-iterable (a list, a datasets.IterableDataset through the trainer, "
                    "an object with open(start, state) and state())."
                )
            source = _ReiterableSource(source)
        self.source = source
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.buffer_size = int(buffer_size)
        self.wrap = bool(wrap)
        self.rank, self.world = int(rank), int(world)
        self.epoch = 0
        self.cursor = 0  # rows of the current pass read so far (every process's rows counted)
        self.rows_per_pass: int | None = None  # known once a pass has ended
        self._pass_done = False
        self._it: Iterator | None = None  # the open pass; None before the first read of a pass
        self._pending_state: Any = None  # resume token to open the pass with (after load_state_dict)
        self._buffer: list[int] = []
        self._owed: list[int] = []
        self._issued: set[int] = set()
        self._rows: dict[int, Any] = {}
        self._rng = self._make_rng(0)

    # ------------------------------------------------------------------------------------------ properties
    @property
    def num_prompts(self) -> int:
        """Not available: an iterable source has no size known in advance.

        Raises
        ------
        ValueError
            Always (what needs a table per prompt, ``history_decay`` and ``selection``, needs a map-style dataset).
        """
        raise ValueError(
            "an iterable prompt stream has no dataset size: history_decay and selection keep a table indexed by "
            "prompt over the whole dataset and need a map-style dataset (PromptStream)"
        )

    @property
    def shard_rows(self) -> int | None:
        """Rows of this process's share of a pass; None until a pass has ended."""
        if self.rows_per_pass is None:
            return None
        return len(range(self.rank, self.rows_per_pass, self.world))

    @property
    def exhausted(self) -> bool:
        """True when ``wrap=False`` and every row of the pass has been taken."""
        return not self.wrap and self._pass_done and not self._buffer and not self._owed

    @property
    def held_rows(self) -> int:
        """Rows held in memory: the buffer, owed ids and ids handed out since the last :meth:`release`."""
        return len(self._rows)

    # ------------------------------------------------------------------------------------------ rows
    def row(self, prompt_id: int) -> Any:
        """The row of ``prompt_id`` (handed out by :meth:`take` and not released since).

        Raises
        ------
        KeyError
            The stream does not hold that row.
        """
        try:
            return self._rows[int(prompt_id)]
        except KeyError:
            raise KeyError(
                f"prompt {prompt_id} is not held by this stream: a row stays readable from the take() that hands it "
                "out until a release() that does not keep it"
            ) from None

    def release(self, keep=()) -> None:
        """Forget the rows handed out so far, except ``keep`` (ids still needed, e.g. prompts carried into the next
        step); buffered and owed rows stay.

        Raises
        ------
        ValueError
            An id in ``keep`` whose row the stream does not hold.
        """
        keep = {int(i) for i in np.asarray(keep, dtype=np.int64).reshape(-1)}
        missing = sorted(keep - self._rows.keys())
        if missing:
            raise ValueError(f"cannot keep prompts {missing}: this stream does not hold their rows")
        self._issued = keep
        self._drop_unheld()

    def _drop_unheld(self) -> None:
        needed = self._issued | set(self._buffer) | set(self._owed)
        for pid in [pid for pid in self._rows if pid not in needed]:
            del self._rows[pid]

    # ------------------------------------------------------------------------------------------ reading
    def _make_rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng(self.seed + epoch)

    def _read(self) -> int | None:
        """Read the source up to this process's next row; its id, or None at the end of the pass."""
        if self._pass_done:
            return None
        if self._it is None:
            self._it = iter(self.source.open(self.cursor, self._pending_state))
            self._pending_state = None
        for row in self._it:
            pid = self.cursor
            self.cursor += 1
            if pid % self.world == self.rank:
                self._rows[pid] = row
                return pid
        self._end_pass()
        return None

    def _end_pass(self) -> None:
        self._pass_done = True
        self._it = None
        if self.rows_per_pass is None:
            if self.cursor <= self.rank:
                raise ValueError("the data source yielded no rows" if self.cursor == 0 else
                                 f"the data source yielded {self.cursor} rows, which leaves process {self.rank} of "
                                 f"{self.world} no prompt")
            self.rows_per_pass = self.cursor
        elif self.cursor != self.rows_per_pass:
            raise ValueError(
                f"the data source yielded {self.cursor} rows in epoch {self.epoch} and {self.rows_per_pass} in the "
                "first: every pass must yield the same rows in the same order (a prompt's id is its position in a "
                "pass). A source that shuffles itself per epoch, or a one-shot generator, cannot be re-read."
            )

    def _next_in_order(self) -> int | None:
        """The next id of this epoch's order, or None when the epoch has none left."""
        if not self.shuffle:
            return self._read()
        while len(self._buffer) < self.buffer_size:
            pid = self._read()
            if pid is None:
                break
            self._buffer.append(pid)
        if not self._buffer:
            return None
        i = int(self._rng.integers(len(self._buffer)))
        pid = self._buffer[i]
        self._buffer[i] = self._buffer[-1]
        self._buffer.pop()
        return pid

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.cursor = 0
        self._pass_done = False
        self._it = None
        self._pending_state = None
        self._buffer = []
        self._owed = []  # ids still owed to the finished epoch are in the batch: counted as visited
        self._rng = self._make_rng(self.epoch)
        self._drop_unheld()

    # ------------------------------------------------------------------------------------------ drawing
    def take(self, count: int, avoid=None) -> np.ndarray:
        """The next ``count`` prompt ids (see :meth:`PromptStream.take` for the contract).

        Parameters
        ----------
        count : int
            Ids wanted (>= 0).
        avoid : array_like of int, optional
            Ids already in the batch (ids of other processes' shares are ignored). When given, the returned ids
            differ from these and from each other, unless every prompt of this share is in the batch (then, with
            ``wrap=True``, stream order with repeats, said once). When omitted, plain stream order.

        Returns
        -------
        ndarray of int64, shape (<= count,)
            Fewer than ``count`` only when ``wrap=False`` and the data are used up (or the rest is all in
            ``avoid``).

        Raises
        ------
        ValueError
            ``count < 0``, or an id in ``avoid`` that is negative or (once the pass length is known) beyond the data.
        """
        if count < 0:
            raise ValueError(f"cannot take {count} prompts")
        if avoid is None:
            return np.asarray(self._take_in_order(count), dtype=np.int64)
        blocked = self._blocked(avoid)
        out: list[int] = []
        while count > 0:
            size = self.shard_rows
            if size is not None and len(blocked) >= size:  # every prompt is in the batch: repeats cannot be avoided
                if not self.wrap:
                    break
                if size not in _WARNED_SIZES:
                    _WARNED_SIZES.add(size)
                    logger.warning("the dataset has %d prompts and one batch needs more distinct prompts than "
                                   "that, so some prompts appear more than once in a batch (said once)", size)
                out.extend(self._take_in_order(count))
                break
            got = self._take_unblocked(count, blocked)
            if got:
                out.extend(got)
                blocked.update(got)
                count -= len(got)
            elif self.wrap:
                self._next_epoch()  # this epoch has nothing the batch can take
            else:
                break
        return np.asarray(out, dtype=np.int64)

    def _blocked(self, avoid) -> set[int]:
        ids = np.asarray(avoid, dtype=np.int64).reshape(-1)
        if len(ids):
            bad = ids[(ids < 0) | (ids >= (self.rows_per_pass if self.rows_per_pass is not None else np.inf))]
            if len(bad):
                size = "" if self.rows_per_pass is None else f" of {self.rows_per_pass} rows"
                raise ValueError(f"prompt id {int(bad[0])} is not a row position of this stream's data{size}")
        return {int(i) for i in ids if i % self.world == self.rank}

    def _issue(self, ids: list[int]) -> list[int]:
        self._issued.update(ids)
        return ids

    def _take_in_order(self, count: int) -> list[int]:
        """Owed ids first, then the epoch order, wrapping into new epochs (plain stream order)."""
        out = self._owed[:count]
        self._owed = self._owed[len(out):]
        while len(out) < count:
            pid = self._next_in_order()
            if pid is None:
                if not self.wrap:
                    break
                self._next_epoch()
                continue
            out.append(pid)
        return self._issue(out)

    def _take_unblocked(self, count: int, blocked: set[int]) -> list[int]:
        """Up to ``count`` ids of the current epoch not in ``blocked``, owed ids first; blocked ones are owed.
        Never starts an epoch."""
        out, owed = [], []
        for pid in self._owed:
            (out if len(out) < count and pid not in blocked else owed).append(pid)
        self._owed = owed
        while len(out) < count:
            pid = self._next_in_order()
            if pid is None:
                break
            (self._owed if pid in blocked else out).append(pid)
        return self._issue(out)

    # ------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """The stream's position, as plain Python values; the held rows (as the source gave them) under
        ``"rows"``, as ``[id, row]`` pairs."""
        opened = self._it is not None
        return {
            "kind": "iterable", "seed": self.seed, "shuffle": self.shuffle, "buffer_size": self.buffer_size,
            "wrap": self.wrap, "rank": self.rank, "world": self.world, "epoch": self.epoch, "cursor": self.cursor,
            "pass_done": self._pass_done, "rows_per_pass": self.rows_per_pass,
            "source_state": self.source.state() if opened else self._pending_state,
            "rng": self._rng.bit_generator.state, "buffer": list(self._buffer), "owed": list(self._owed),
            "issued": sorted(self._issued), "rows": [[pid, self._rows[pid]] for pid in sorted(self._rows)],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (rows included); the next read opens the pass at the saved position.

        Raises
        ------
        ValueError
            The state was saved by a map-style stream, for another seed, order, buffer size or process layout, or
            lacks rows it needs.
        """
        if state.get("kind") != "iterable":
            raise ValueError("stream state was saved by a PromptStream (a map-style dataset); this stream reads an "
                             "iterable dataset")
        for key in ("seed", "shuffle", "buffer_size", "rank", "world"):
            if state[key] != getattr(self, key):
                raise ValueError(f"stream state was saved with {key}={state[key]!r}, this stream has "
                                 f"{key}={getattr(self, key)!r}")
        rows = {int(pid): row for pid, row in state.get("rows", [])}
        needed = set(state["buffer"]) | set(state["owed"]) | set(state["issued"])
        if not needed <= rows.keys():
            raise ValueError(f"stream state lacks the rows of prompts {sorted(needed - rows.keys())[:5]}: restore it "
                             "with the rows state_dict() saved")
        self.wrap = bool(state["wrap"])
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self._pass_done = bool(state["pass_done"])
        self.rows_per_pass = None if state["rows_per_pass"] is None else int(state["rows_per_pass"])
        self._it = None
        self._pending_state = state["source_state"]
        self._rng = self._make_rng(self.epoch)
        self._rng.bit_generator.state = state["rng"]
        self._buffer = [int(i) for i in state["buffer"]]
        self._owed = [int(i) for i in state["owed"]]
        self._issued = {int(i) for i in state["issued"]}
        self._rows = rows
