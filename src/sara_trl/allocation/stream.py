"""A seeded, checkpointable stream of fresh prompt indices (independent of any global or per-rank RNG)."""

from __future__ import annotations

import numpy as np

__all__ = ["PromptStream"]


class PromptStream:
    """Dataset indices in a seeded random order, epoch after epoch.

    Every process that builds a stream with the same ``(num_prompts, seed, shuffle)`` and takes the same counts sees
    the same indices, so ranks can run the allocator in lock-step without communicating.

    Args:
        num_prompts: dataset size (> 0).
        seed: seed of the stream's own ``numpy.random.Generator``; epoch ``e`` uses ``seed + e``.
        shuffle: draw in a random order per epoch (else 0, 1, 2, ...).
        wrap: start a new epoch when one is used up (training); if False, :meth:`take` returns fewer indices once
            the stream is exhausted (evaluation, finite data).

    Raises:
        ValueError: ``num_prompts <= 0``.
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

    def _make_order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_prompts, dtype=np.int64)
        return np.random.default_rng(self.seed + epoch).permutation(self.num_prompts).astype(np.int64)

    @property
    def exhausted(self) -> bool:
        return not self.wrap and self.cursor >= self.num_prompts

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` indices, shape ``(<= count,)`` int64 (fewer only when ``wrap=False`` and exhausted)."""
        if count < 0:
            raise ValueError(f"cannot take {count} prompts")
        out = []
        while count > 0:
            if self.cursor >= self.num_prompts:
                if not self.wrap:
                    break
                self.epoch += 1
                self.cursor = 0
                self._order = self._make_order(self.epoch)
            chunk = self._order[self.cursor : self.cursor + count]
            self.cursor += len(chunk)
            count -= len(chunk)
            out.append(chunk)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def state_dict(self) -> dict:
        return {"num_prompts": self.num_prompts, "seed": self.seed, "shuffle": self.shuffle, "wrap": self.wrap,
                "epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by :meth:`state_dict`.

        Raises:
            ValueError: the saved stream was built for another dataset size, seed or order.
        """
        for key in ("num_prompts", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(f"stream state was saved with {key}={state[key]!r}, this stream has "
                                 f"{key}={getattr(self, key)!r}")
        self.wrap = bool(state["wrap"])
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self._order = self._make_order(self.epoch)
