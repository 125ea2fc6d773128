"""A one-line progress display of SARA's generation rounds within a step (main process only)."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings

import numpy as np
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = ["RoundProgress"]


def _console_loggers() -> list[logging.Logger]:
    """Loggers whose console handlers would write across the bar: the root logger (TRL, sara_trl and most libraries
    propagate to it) and transformers' library logger, which has its own handler and does not propagate."""
    loggers = [logging.root]
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        loggers.append(hf_logging.get_logger())
    return loggers


@contextlib.contextmanager
def _warnings_above_bar():
    """Print warnings with ``tqdm.write`` (above the bar) instead of straight to stderr, where they would split it."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        text = warnings.formatwarning(message, category, filename, lineno, line)
        tqdm.write(text.rstrip("\n"), file=file or sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


class RoundProgress:
    """tqdm line counting rounds: ``SARA step 12: 3 rounds [rollouts=40, success=0.42]``.

    Disabled when ``enabled`` is False (not the main process, or ``args.disable_tqdm``). Use as a context manager
    around one step's collection; call the instance after each round (it is the ``on_round`` hook of
    :func:`sara_trl.trainer.rollout.make_rollout_fn`). While the bar is shown, warnings and log records are printed
    above it (``tqdm.write``) rather than into it.

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
        self._redirect: contextlib.ExitStack | None = None

    def __enter__(self) -> RoundProgress:
        if self.enabled:
            self._redirect = contextlib.ExitStack()
            self._redirect.enter_context(logging_redirect_tqdm(loggers=_console_loggers()))
            self._redirect.enter_context(_warnings_above_bar())
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
        if self._redirect is not None:
            self._redirect.close()
            self._redirect = None
