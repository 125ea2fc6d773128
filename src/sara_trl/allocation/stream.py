"""A seeded, checkpointable stream of fresh prompt indices (independent of any global or per-rank RNG)."""

from __future__ import annotations

import logging

import numpy as np

__all__ = ["PromptStream", "ShardStream"]

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
    ``logging`` warning from ``sara_trl.allocation.stream``).

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
