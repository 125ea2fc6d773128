"""A one-line progress display of SARA's generation rounds within a step (main process only)."""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

__all__ = ["RoundProgress"]


class RoundProgress:
    """tqdm line counting rounds: ``SARA step 12: 3 rounds [rollouts=40, success=0.42]``.

    Disabled when ``enabled`` is False (not the main process, or ``args.disable_tqdm``). Use as a context manager
    around one step's collection; call the instance after each round (it is the ``on_round`` hook of
    :func:`sara_trl.trainer.rollout.make_rollout_fn`).

    Parameters
    ----------
    step : int
        The 1-based training step shown in the line.
    enabled : bool
        Whether to show the line.
    """

    def __init__(self, step: int, enabled: bool):
        self.enabled = enabled
        self.step = step
        self.rollouts = 0
        self.successes = 0.0
        self.scored = 0
        self._bar = None

    def __enter__(self) -> RoundProgress:
        if self.enabled:
            self._bar = tqdm(desc=f"SARA step {self.step}", unit="round", leave=False, dynamic_ncols=True)
        return self

    def __call__(self, round_number: int, rollouts: int, success: np.ndarray) -> None:
        """Count one round: ``rollouts`` generated with ``(rollouts,)`` success labels (NaN = unscorable)."""
        self.rollouts += rollouts
        scored = success[~np.isnan(success)]
        self.successes += float(scored.sum())
        self.scored += int(scored.size)
        if self._bar is not None:
            rate = self.successes / self.scored if self.scored else float("nan")
            self._bar.set_postfix(rollouts=self.rollouts, success=f"{rate:.2f}", refresh=False)
            self._bar.update(1)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
