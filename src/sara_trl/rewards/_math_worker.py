r"""Symbolic comparison with math-verify; runs inside verifier worker processes (see :mod:`._pool`).

Inputs are already extracted and normalized strings (see :mod:`.extract`), so each task is small. math-verify's own
signal-based timeouts are switched off here (``parsing_timeout=None``, ``timeout_seconds=None``): when they fire they
return "no parse"/"not equal", which would be indistinguishable from a wrong answer. The worker's soft limit and the
parent's hard kill bound the time instead, and a timeout is reported as such.
"""

from __future__ import annotations

import functools
import logging

from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import Basic, MatrixBase

__all__ = ["parse_answer", "check_answer", "warm_up"]

# the warnings "Timeout is disabled ..." are expected here: time is bounded by the worker pool
logging.getLogger("math_verify").setLevel(logging.CRITICAL)
logging.getLogger("math_verify.parser").setLevel(logging.CRITICAL)
logging.getLogger("math_verify.grader").setLevel(logging.CRITICAL)

_EXTRACTION = (
    LatexExtractionConfig(
        boxed_match_priority=0,
        try_extract_without_anchor=True,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=False
        ),
    ),
    ExprExtractionConfig(),
)


def _is_symbolic(x) -> bool:
    return isinstance(x, (Basic, MatrixBase))


@functools.lru_cache(maxsize=16384)
def parse_answer(answer: str) -> tuple:
    r"""Parse one normalized answer string (no ``\boxed``) with math-verify; cached per string.

    Returns:
        math-verify's parse list as a tuple (sympy objects and the matched string); empty tuple when nothing was
        extracted.
    """
    if not answer:
        return ()
    parsed = parse("$\\boxed{" + answer + "}$", extraction_config=list(_EXTRACTION), parsing_timeout=None)
    if not any(_is_symbolic(x) for x in parsed):
        # a plain expression such as ``np.arcsin(10/13)`` or ``3/4`` outside LaTeX
        parsed_expr = parse(answer, extraction_config=[ExprExtractionConfig()], parsing_timeout=None)
        if any(_is_symbolic(x) for x in parsed_expr):
            return tuple(parsed_expr)
    return tuple(parsed)


def gold_is_parseable(gold: str) -> bool:
    """True if math-verify turns ``gold`` into at least one symbolic object (a bare string match does not count)."""
    return any(_is_symbolic(x) for x in parse_answer(gold))


def check_answer(pred: str, golds: tuple[str, ...]) -> str:
    """Compare a normalized prediction with one or more normalized gold answers.

    Args:
        pred: normalized predicted answer.
        golds: the gold answer followed by acceptable alternatives; the prediction is correct if it matches any
            parseable one.

    Returns:
        ``"correct"``, ``"wrong"`` or ``"unparseable_gold"`` (no gold string parses to a symbolic object).
    """
    parsed_golds = [parse_answer(g) for g in golds]
    parsed_golds = [g for g in parsed_golds if any(_is_symbolic(x) for x in g)]
    if not parsed_golds:
        return "unparseable_gold"
    p = parse_answer(pred)
    if not p:
        return "wrong"
    for g in parsed_golds:
        if verify(list(g), list(p), timeout_seconds=None):
            return "correct"
    return "wrong"


def warm_up() -> None:
    """Import-time work done once per worker (parser construction, sympy caches) before tasks are timed."""
    check_answer("\\frac{1}{2}", ("0.5",))
