r"""Numeric-answer verifier for short arithmetic tasks (the quickstart task,
:func:`sara_trl.data.make_arithmetic_dataset`).

Which answer is read: in the answer part of the completion (the text after the last ``</think>``; the whole text
when there is none or the part states no number), the content of **every** ``\boxed{}`` if there is one, otherwise
the **last** number (so "3 + 5 = 8" and "The answer is 8." both give 8, and surrounding words do not matter).

* A box holds one answer: its number (``\boxed{8}``, ``\boxed{8 \text{ apples}}``), or for an equation the number
  right of its last ``=`` (``\boxed{x = 8}``). A box with several different numbers and no ``=``
  (``\boxed{3 \text{ or } 5}``, ``\boxed{2 \times 4}``) is a hedge, not an answer: ``WRONG``. Expressions are not
  evaluated.
* Several boxes must all hold the gold value (the rule of :func:`sara_trl.rewards.verdict.all_answers_verdict`):
  ``\boxed{3} or \boxed{5}`` is ``WRONG`` for gold 5, ``\boxed{5} ... \boxed{5.0}`` is ``CORRECT``.
* Without a box, a last number that ends an "A or B" list of two different numbers ("it is 3 or 5") is a hedge:
  ``WRONG``. Earlier numbers never count ("8, no wait, 9" answers 9).

Numbers are integers or decimals with an optional leading minus, optionally with thousands separators (``1,234``);
Unicode minus signs, full-width digits and non-breaking spaces are read as their ASCII forms. Values are compared
exactly (:class:`fractions.Fraction`). The gold answer may be a string (``"8"``, ``"-2.5"``, ``"21.0"``), an int,
a float (compared by its shortest decimal form, so ``0.1`` equals ``"0.1"``), or a numpy/Decimal number; anything
else is ``UNPARSEABLE_GOLD``. Pure string work, linear in the completion length; no worker process.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .extract import answer_part, boxed_answers
from .unicode_math import unicode_digits_and_signs
from .verdict import Status, Verdict, VerdictReward, all_answers_verdict, completion_text

__all__ = ["numeric_reward", "numeric_success", "parse_number", "NumericReward"]

_NUMBER = re.compile(r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_OR_TAIL = re.compile(
    r"(?<![\d.])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)[\s$*]*,?\s*(?:or|\\text\{\s*or\s*\})[\s$*]*$"
)
_MAX_DIGITS = 100


def parse_number(s: Any) -> Fraction | None:
    """Exact value of a number written as ``"8"``, ``"-3.5"``, ``"1,234"``, or given as an int, float, Decimal or
    numpy number.

    Parameters
    ----------
    s : str, int, float, Decimal, Fraction or numpy number
        The number. A float is read by its shortest decimal form (``0.1`` -> ``1/10``, not the binary fraction);
        strings longer than 100 characters are rejected. ``bool`` and ``None`` are not numbers.

    Returns
    -------
    Fraction or None
        The exact value; ``None`` if ``s`` is not a finite number.
    """
    if isinstance(s, bool) or s is None:
        return None
    if isinstance(s, numbers.Integral):
        return Fraction(int(s))
    if isinstance(s, Fraction):
        return s
    if isinstance(s, Decimal):
        return Fraction(s) if s.is_finite() else None
    if isinstance(s, numbers.Real):
        f = float(s)
        if not math.isfinite(f):
            return None
        text = repr(f) if isinstance(s, float) else str(s)  # numpy float32 prints its shortest form
        try:
            return Fraction(text)
        except ValueError:
            return Fraction(repr(f))
    s = unicode_digits_and_signs(str(s)).strip()
    if not s or len(s) > _MAX_DIGITS:
        return None
    s = s.replace("$", "").replace("\\!", "").strip()
    m = _NUMBER.fullmatch(s)
    if not m:
        return None
    return Fraction(s.replace(",", ""))


def _numbers(text: str) -> list[re.Match]:
    return list(_NUMBER.finditer(text))


def _box_verdict(box: str, gold: Fraction) -> Verdict:
    """Verdict for the content of one box (see the module docstring)."""
    value = parse_number(box)
    if value is None:
        rhs = box.rsplit("=", 1)[1] if "=" in box else box
        found = {parse_number(m.group(0)) for m in _numbers(rhs)}
        if len(found) > 1:
            return Verdict(Status.WRONG, box, "several_answers")
        value = found.pop() if found else None
    if value is None:
        return Verdict(Status.WRONG, box, "no_number")
    return Verdict(Status.CORRECT if value == gold else Status.WRONG, box, "" if value == gold else "wrong_value")


def _last_number_verdict(text: str, gold: Fraction) -> Verdict | None:
    found = _numbers(text)
    if not found:
        return None
    last = found[-1]
    raw = last.group(0)
    value = parse_number(raw)
    hedge = _OR_TAIL.search(text[max(0, last.start() - 200) : last.start()])
    if hedge and parse_number(hedge.group(1)) != value:
        return Verdict(Status.WRONG, raw, "several_answers")
    return Verdict(Status.CORRECT if value == gold else Status.WRONG, raw, "" if value == gold else "wrong_value")


def numeric_success(completion: Any, answer: Any) -> Verdict:
    r"""Binary verdict: is the final number of the completion equal to ``answer``? (rules: module docstring)

    Parameters
    ----------
    completion : str or list of dict
        String or list of chat messages (see :func:`~sara_trl.rewards.verdict.completion_text`).
    answer : str, int, float or numpy number
        The gold number (a string such as ``"8"`` or ``"-2.5"``, an int, a float, a numpy number).

    Returns
    -------
    Verdict
        ``CORRECT``; ``WRONG`` (reason ``no_number``, ``wrong_value`` or ``several_answers``);
        ``UNPARSEABLE_GOLD`` (reason ``bad_gold``) when ``answer`` is not a number.
    """
    text = unicode_digits_and_signs(completion_text(completion))
    gold = parse_number(answer)
    part = answer_part(text)
    verdict = None
    for source in (part, text) if part is not text else (text,):
        boxes = boxed_answers(source)
        if boxes:
            if gold is None:
                return Verdict(Status.UNPARSEABLE_GOLD, boxes[-1], "bad_gold")
            verdict = all_answers_verdict([_box_verdict(b, gold) for b in boxes])
            break
        if gold is None:
            found = _numbers(source)
            return Verdict(Status.UNPARSEABLE_GOLD, found[-1].group(0) if found else None, "bad_gold")
        verdict = _last_number_verdict(source, gold)
        if verdict is not None:
            break
    return verdict if verdict is not None else Verdict(Status.WRONG, None, "no_number")


@dataclass
class NumericReward(VerdictReward):
    """Numeric-answer reward in TRL's signature; picklable, ``__name__ == "numeric_reward"``.

    ``verdicts(completions, answer)`` gives one :func:`numeric_success` verdict per completion (counted in
    :func:`sara_trl.rewards.stats`); ``__call__(completions, answer=None, **kwargs)`` gives ``1.0`` when the final
    number equals ``answer``, ``0.0`` otherwise and ``None`` for a non-numeric gold answer. Both raise ValueError
    without an ``answer`` column or for mismatched lengths (:class:`~sara_trl.rewards.verdict.VerdictReward`).
    """

    name = "numeric_reward"
    counter = "numeric"
    columns = ("answer",)

    def judge(self, completions: Sequence[Any], answer: Sequence[Any]) -> list[Verdict]:
        """One :func:`numeric_success` verdict per completion against its gold number in ``answer``."""
        return [numeric_success(c, a) for c, a in zip(completions, answer)]


_DEFAULT = NumericReward()


def numeric_reward(
    completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """Numeric-answer reward with the default :class:`NumericReward`.

    Parameters
    ----------
    completions, answer, **kwargs
        As in :meth:`NumericReward.__call__`.

    Returns
    -------
    list of float or None, shape (N,)
        ``1.0``, ``0.0`` or ``None`` per completion.

    Raises
    ------
    ValueError
        No ``answer`` column or mismatched lengths.

    Examples
    --------
    >>> numeric_reward(["3 + 5 = 8", "It is 9."], answer=["8", "8"])
    [1.0, 0.0]
    """
    return _DEFAULT(completions, answer=answer, **kwargs)
