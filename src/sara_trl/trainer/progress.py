"""What a SARA run shows on the console: a one-line progress display of the generation rounds within a step (main
process only), each logging step's metrics printed as numbers (:func:`use_numeric_logs`), and no FutureWarning the
user cannot act on (:func:`hide_renamed_checkpointing_warnings`)."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import warnings

import numpy as np
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from sara_trl.utils.quiet import on_terminal

__all__ = ["RoundProgress", "console_logs", "hide_renamed_checkpointing_warnings", "quiet_progress_logs",
           "use_numeric_logs"]


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


ALLOCATOR_LABELS = {"sara": "SARA", "dynamic_sampling": "DS", "uniform": "uniform"}
"""The short name of each allocator in progress lines (an allocator registered beyond these shows its own name)."""


class RoundProgress:
    """tqdm line counting rounds: ``SARA step 12: 3 rounds [rollouts=40, success=0.42]``.

    Disabled when ``enabled`` is False (not the main process, or ``args.disable_tqdm``) and when the output is not a
    terminal (:func:`sara_trl.utils.quiet.on_terminal`: in a file or a pipe the bar's redraws would split the lines
    printed beside it). Use as a context manager
    around one step's collection; call the instance after each round (the scorer's ``on_pass`` on the batch engine,
    :func:`sara_trl.trainer.collect.collect_on_engine`). While the bar is shown, warnings and log records are printed
    above it (``tqdm.write``) rather than into it.

    Parameters
    ----------
    step : int
        The 1-based training step shown in the line.
    enabled : bool
        Whether to show the line.
    label : str
        Who collects, at the start of the line (``"SARA"``, ``"DS"``, ...; see :data:`ALLOCATOR_LABELS`).
    """

    def __init__(self, step: int, enabled: bool, label: str = "SARA"):
        self.enabled = enabled and on_terminal()
        self.step = step
        self.label = label
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
            self._bar = tqdm(desc=f"{self.label} step {self.step}", unit="round", leave=False, dynamic_ncols=True)
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


# ---------------------------------------------------------------------------------------------------------------
# The console log of each logging step: numbers printed as numbers.
# ---------------------------------------------------------------------------------------------------------------


def _number(value):
    """A logged value for the console: floats rounded to 4 significant digits and kept as numbers (transformers
    prints them as strings, ``'sara/rollouts_generated': '26.5'``); integral floats as ints; anything else as is."""
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
        return value
    rounded = float(f"{value:.4g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) < 1e15 else rounded


def console_logs(logs: dict) -> dict:
    """``logs`` as printed on the console: numbers as numbers (see :func:`_number`), ``total_flos`` left out."""
    return {key: _number(value) for key, value in logs.items() if key != "total_flos"}


def _numeric_callbacks():
    """The two console callbacks, built on transformers' (imported here: it loads torch)."""
    from transformers import PrinterCallback, ProgressCallback

    class NumericProgressCallback(ProgressCallback):
        """transformers' progress bar over the optimizer steps (with the time left), printing each log as a dict
        of numbers above the bar; ``write_logs = False`` keeps the bar and drops the dicts. The bar is drawn on a
        terminal only (:func:`sara_trl.utils.quiet.on_terminal`); elsewhere only the dicts are printed, one a line."""

        write_logs = True

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.training_bar = tqdm(total=state.max_steps, desc="optimizer steps", unit="step",
                                         dynamic_ncols=True, disable=not on_terminal())
            self.current_step = 0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.write_logs and state.is_world_process_zero and self.training_bar is not None and logs:
                self.training_bar.write(str(console_logs(logs)))

    class NumericPrinterCallback(PrinterCallback):
        """transformers' log printer (``disable_tqdm=True``), printing numbers as numbers."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_local_process_zero and logs is not None:
                print(console_logs(logs))

    return ProgressCallback, PrinterCallback, NumericProgressCallback, NumericPrinterCallback


def use_numeric_logs(trainer) -> None:
    """Swap transformers' console callbacks of ``trainer`` for ones that print numbers as numbers.

    Only transformers' own ``ProgressCallback`` / ``PrinterCallback`` are replaced (same place in the list); a
    notebook's progress callback or a user's subclass is left alone. What is logged (``trainer.state.log_history``,
    TensorBoard, W&B...) does not change: it already holds numbers.
    """
    progress, printer, numeric_progress, numeric_printer = _numeric_callbacks()
    callbacks = trainer.callback_handler.callbacks
    for index, callback in enumerate(callbacks):
        if type(callback) is progress:
            replacement = numeric_progress()
            replacement.max_str_len = callback.max_str_len
            callbacks[index] = replacement
        elif type(callback) is printer:
            callbacks[index] = numeric_printer()


def quiet_progress_logs(trainer) -> None:
    """Keep ``trainer``'s step bar but stop it printing each log dict (a script that prints its own lines)."""
    from transformers import PrinterCallback

    callbacks = trainer.callback_handler.callbacks
    for callback in list(callbacks):
        if hasattr(callback, "write_logs"):
            callback.write_logs = False
        elif isinstance(callback, PrinterCallback):
            callbacks.remove(callback)


def hide_renamed_checkpointing_warnings() -> None:
    """Hide the FutureWarnings recent transformers raise when TRL calls their renamed checkpointing methods.

    TRL calls ``is_gradient_checkpointing`` and ``gradient_checkpointing_enable``/``_disable`` (renamed
    ``*activation_checkpointing*`` in recent transformers releases, e.g. 5.24) around every generation and loss pass;
    the user can neither act on the warning nor avoid it by a setting. Only those three messages are filtered (by
    exact message and category); every other warning still shows. Called when a SARA trainer is constructed
    (:func:`sara_trl.trainer.prepare.prepare_arguments`), not when :mod:`sara_trl.trainer` is imported. Installing it
    again changes nothing (``warnings.filterwarnings`` replaces the identical filter).
    """
    warnings.filterwarnings(
        "ignore",
        message=r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)` is "
        r"deprecated",
        category=FutureWarning,
    )
