"""Test helpers for the reward and data tests: the data fixtures, wrong-answer construction, a Countdown solver."""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

# Only the standard library at import time: verifier worker processes import this module to run the pool probes
# below, and a heavy import would count against their time limits.


#: The test data: a few real rows of each benchmark file under its standard name (``sara_trl.data.LOCAL_FILES``),
#: inside the repository (provenance and licences: ``tests/fixtures/data/README.md``).
FIXTURE_DATA_DIR = Path(__file__).resolve().parent / "fixtures" / "data"


def read_jsonl(name: str) -> list[dict]:
    """The rows of one fixture file, e.g. ``read_jsonl("math500.jsonl")``."""
    with open(FIXTURE_DATA_DIR / name, encoding="utf-8") as f:
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
        return wrong_answer(g[: unit.start()]) + g[unit.start() :]  # change the value, keep the unit
    digits = list(_DIGIT.finditer(g))
    if digits:
        m = digits[-1]
        d = int(m.group(0))
        return g[: m.start()] + str((d + 1) % 10 if d != 0 else 7) + g[m.end() :]
    letter = re.fullmatch(r"\\text\{\s*\(?([A-E])\)?\s*\}|\(?([A-E])\)?", g)
    if letter:
        c = letter.group(1) or letter.group(2)
        return "ABCDE"[("ABCDE".index(c) + 1) % 5]
    text = re.fullmatch(r"\\text\{([^{}]*)\}", g)
    if text:
        return r"\text{Zebulon}"
    return f"{g}+1"


# --- Countdown --------------------------------------------------------------------------------------------------


def _solve(items, target):
    """items: list of (value, expression string). Depth-first search over pair merges, floats for speed."""
    if len(items) == 1:
        return items[0][1] if abs(items[0][0] - target) < 1e-9 else None
    n = len(items)
    for i in range(n):
        for j in range(i + 1, n):
            rest = [items[k] for k in range(n) if k != i and k != j]
            (a, ea), (b, eb) = items[i], items[j]
            cands = [
                (a + b, f"({ea} + {eb})"),
                (a * b, f"({ea} * {eb})"),
                (a - b, f"({ea} - {eb})"),
                (b - a, f"({eb} - {ea})"),
            ]
            if b != 0:
                cands.append((a / b, f"({ea} / {eb})"))
            if a != 0:
                cands.append((b / a, f"({eb} / {ea})"))
            for v, e in cands:
                found = _solve(rest + [(v, e)], target)
                if found is not None:
                    return found
    return None


def solve_countdown(nums, target) -> str | None:
    """Brute force: an expression using every number of ``nums`` exactly once that equals ``target``, or None.

    The search runs on floats (fast); callers check the expression exactly with the verifier under test, which
    would expose a floating-point false positive as a failing test.
    """
    return _solve([(float(n), str(n)) for n in nums], float(target))


# --- worker-pool probes (module-level so worker processes can import them) ---------------------------------------


def pool_echo(x):
    return x


def pool_sleep_uninterruptible(seconds: float) -> str:
    """Block SIGALRM (so the worker's soft limit cannot fire) and sleep: only the parent's hard kill ends it."""
    import signal
    import time

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(seconds)
    return "finished"


def pool_sleep(seconds: float) -> str:
    import time

    time.sleep(seconds)
    return "finished"


def pool_crash() -> None:
    import os

    os._exit(3)


def pool_raise() -> None:
    raise KeyError("boom")
