r"""Numeric-answer verifier for short arithmetic tasks (the quickstart task,
:func:`sara_trl.data.make_arithmetic_dataset`).

The prediction is the content of the last ``\boxed{}`` if the completion has one, otherwise the **last** number in
the completion (so "3 + 5 = 8" and "The answer is 8." both give 8, and surrounding words do not matter). Numbers are
integers or decimals with an optional leading minus, optionally with thousands separators (``1,234``); they are
compared exactly (:class:`fractions.Fraction`). Pure string work, linear in the completion length; no worker process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from .extract import last_boxed
from .stats import count
from .verdict import Status, Verdict, completion_text

__all__ = ["numeric_reward", "numeric_success", "parse_number", "NumericReward"]

_NUMBER = re.compile(r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_MAX_DIGITS = 100


def parse_number(s: Any) -> Fraction | None:
    """Exact value of a number written as ``"8"``, ``"-3.5"``, ``"1,234"`` (or an int); None if not a number.

    Strings longer than 100 characters are rejected (None).
    """
    if isinstance(s, bool) or s is None:
        return None
    if isinstance(s, int):
        return Fraction(s)
    if isinstance(s, float):
        return Fraction(s) if s == s and abs(s) != float("inf") else None
    s = str(s).strip()
    if not s or len(s) > _MAX_DIGITS:
        return None
    s = s.replace("$", "").replace("\\!", "").strip()
    m = _NUMBER.fullmatch(s)
    if not m:
        return None
    return Fraction(s.replace(",", ""))


def _last_number(text: str) -> str | None:
    last = None
    for m in _NUMBER.finditer(text):
        last = m
    return last.group(0) if last else None


def numeric_success(completion: Any, answer: Any) -> Verdict:
    r"""Binary verdict: is the final number of the completion equal to ``answer``?

    Args:
        completion: string or list of chat messages.
        answer: the gold number (string such as ``"8"`` or ``"-2.5"``, or an int).

    Returns:
        :class:`Verdict`: ``CORRECT``; ``WRONG`` (reason ``no_number`` or ``wrong_value``); ``UNPARSEABLE_GOLD`` when
        ``answer`` is not a number.
    """
    text = completion_text(completion)
    gold = parse_number(answer)
    boxed = last_boxed(text)
    raw = boxed if boxed is not None else _last_number(text)
    if gold is None:
        return Verdict(Status.UNPARSEABLE_GOLD, raw, "bad_gold")
    if raw is None:
        return Verdict(Status.WRONG, None, "no_number")
    pred = parse_number(raw)
    if pred is None and boxed is not None:  # e.g. \boxed{x = 8}: take the last number inside the box
        inner = _last_number(boxed)
        pred = parse_number(inner) if inner is not None else None
    if pred is None:
        return Verdict(Status.WRONG, raw, "no_number")
    return Verdict(Status.CORRECT if pred == gold else Status.WRONG, raw, "" if pred == gold else "wrong_value")


class NumericReward:
    """Numeric-answer reward in TRL's signature; picklable, ``__name__ == "numeric_reward"``."""

    def __init__(self):
        self.__name__ = "numeric_reward"

    def __repr__(self) -> str:
        return "NumericReward()"

    def verdicts(self, completions: Sequence[Any], answer: Sequence[Any]) -> list[Verdict]:
        """``(N,)`` verdicts. Raises ValueError on mismatched lengths."""
        if len(completions) != len(answer):
            raise ValueError(f"got {len(completions)} completions but {len(answer)} answers")
        out = [numeric_success(c, a) for c, a in zip(completions, answer)]
        for v in out:
            count(f"numeric/{v.status.value}")
        return out

    def __call__(
        self, completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        """TRL reward function: ``1.0`` if the final number equals ``answer``, ``0.0`` otherwise, ``None`` for a
        non-numeric gold answer.

        Raises:
            ValueError: no ``answer`` column or mismatched lengths.
        """
        if answer is None:
            raise ValueError("numeric_reward needs the dataset column 'answer'")
        return [v.reward for v in self.verdicts(completions, answer)]


_DEFAULT = NumericReward()


def numeric_reward(
    completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """Numeric-answer reward; see :meth:`NumericReward.__call__`.

    Example:
        >>> numeric_reward(["3 + 5 = 8", "It is 9."], answer=["8", "8"])
        [1.0, 0.0]
    """
    return _DEFAULT(completions, answer=answer, **kwargs)
