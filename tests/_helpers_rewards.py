"""Test helpers for the reward and data tests: data location, wrong-answer construction, a Countdown solver."""

from __future__ import annotations

import itertools
import json
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path

from sara_trl.data.paths import find_shared_data_dir


def shared_data_dir() -> Path | None:
    """The shared data directory, or None when it is not available (tests then skip)."""
    return find_shared_data_dir(required=False)


def read_jsonl(name: str) -> list[dict]:
    d = shared_data_dir()
    assert d is not None
    with open(d / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def correct_completion(gold: str) -> str:
    return f"Let me work through it step by step. The final answer is $\\boxed{{{gold}}}$."


_DIGIT = re.compile(r"\d")
_PLAIN_NUMBER = re.compile(r"^\s*-?\d+(\.\d+)?\s*$")


def wrong_answer(gold: str) -> str:
    r"""A clearly wrong answer built from the gold string.

    Plain numbers get +1; otherwise the last digit is replaced by the next digit (``\frac{\pi}{2}`` ->
    ``\frac{\pi}{3}``, a tuple changes one component); digit-free answers: a choice letter moves to the next letter,
    ``\text{name}`` gets a different name, anything else gets ``+1`` appended.
    """
    g = gold.strip()
    if _PLAIN_NUMBER.match(g):
        try:
            return str(Decimal(g) + 1)
        except InvalidOperation:  # pragma: no cover
            pass
    unit = re.search(r"\s*\\(?:mbox|text)\{[^{}]*\}(\^\d)?$", g)
    if unit and unit.start() > 0 and _DIGIT.search(g[: unit.start()]):
        return wrong_answer(g[: unit.start()]) + g[unit.start():]  # change the value, keep the unit
    digits = list(_DIGIT.finditer(g))
    if digits:
        m = digits[-1]
        d = int(m.group(0))
        return g[: m.start()] + str((d + 1) % 10 if d != 0 else 7) + g[m.end():]
    letter = re.fullmatch(r"\\text\{\s*\(?([A-E])\)?\s*\}|\(?([A-E])\)?", g)
    if letter:
        c = letter.group(1) or letter.group(2)
        return "ABCDE"[("ABCDE".index(c) + 1) % 5]
    text = re.fullmatch(r"\\text\{([^{}]*)\}", g)
    if text:
        return r"\text{Zebulon}"
    return f"{g}+1"


# --- Countdown --------------------------------------------------------------------------------------------------

_OPS = (
    ("+", lambda a, b: a + b),
    ("-", lambda a, b: a - b),
    ("*", lambda a, b: a * b),
    ("/", lambda a, b: a / b if b != 0 else None),
)


def _solve(items, target):
    """items: list of (Fraction value, expression string). Depth-first pair merging."""
    if len(items) == 1:
        return items[0][1] if items[0][0] == target else None
    for i, j in itertools.combinations(range(len(items)), 2):
        rest = [items[k] for k in range(len(items)) if k not in (i, j)]
        (a, ea), (b, eb) = items[i], items[j]
        for x, ex, y, ey in ((a, ea, b, eb), (b, eb, a, ea)):
            for sym, fn in _OPS:
                if sym in "+*" and ex > ey:  # commutative: one order is enough
                    continue
                v = fn(x, y)
                if v is None:
                    continue
                found = _solve(rest + [(v, f"({ex} {sym} {ey})")], target)
                if found is not None:
                    return found
    return None


def solve_countdown(nums, target) -> str | None:
    """Brute force: an expression using every number of ``nums`` exactly once that equals ``target``, or None."""
    items = [(Fraction(n), str(n)) for n in nums]
    return _solve(items, Fraction(target))
