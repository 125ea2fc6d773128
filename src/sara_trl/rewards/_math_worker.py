r"""Symbolic comparison with math-verify; runs inside verifier worker processes (see :mod:`sara_trl.rewards.pool`).

Inputs are already extracted and normalized strings (see :mod:`.extract`), so each task is small. math-verify's own
signal-based timeouts are switched off here (``parsing_timeout=None``, ``timeout_seconds=None``): when they fire they
return "no parse"/"not equal", which would be indistinguishable from a wrong answer. The worker's soft limit and the
parent's hard kill bound the time instead, and a timeout is reported as such.
"""

from __future__ import annotations

import functools
import logging
import re
import sys

import mpmath
from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import Basic, MatrixBase, Mul, Rational, UnevaluatedExpr

from .extract import percent_fraction

__all__ = ["parse_answer", "check_answer", "warm_up"]

# the warnings "Timeout is disabled ..." are expected here: time is bounded by the worker pool
logging.getLogger("math_verify").setLevel(logging.CRITICAL)
logging.getLogger("math_verify.parser").setLevel(logging.CRITICAL)
logging.getLogger("math_verify.grader").setLevel(logging.CRITICAL)

_LATEX = LatexExtractionConfig(
    boxed_match_priority=0,
    try_extract_without_anchor=True,
    normalization_config=NormalizationConfig(
        basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=False
    ),
)
_EXPR = ExprExtractionConfig()
# a plain (non-LaTeX) expression such as "3/4" or "asin(10/13)"; only such strings go to the expression parser,
# which would otherwise pick a fragment (e.g. the "2" of a LaTeX expression it cannot read)
_PLAIN_EXPR = re.compile(r"^[\w\s+\-*/().,^]+$")


def _squash(s: str) -> str:
    return "".join(s.split())


def _is_symbolic(x) -> bool:
    return isinstance(x, (Basic, MatrixBase))


@functools.lru_cache(maxsize=16384)
def parse_answer(answer: str) -> tuple:
    r"""Parse one normalized answer string (no ``\boxed``) with math-verify; cached per string.

    Parameters
    ----------
    answer : str
        A normalized answer (see :func:`sara_trl.rewards.extract.normalize_math_answer`), without ``\boxed``.

    Returns
    -------
    tuple
        math-verify's parse list as a tuple (sympy objects and the matched string); empty tuple when nothing was
        extracted.
    """
    if not answer:
        return ()
    pct = percent_fraction(answer)
    if pct is not None:
        # "\frac{100}{3}\%" (a percentage with no exact decimal, as normalize_math_answer writes 33\frac{1}{3}\%):
        # the object latex2sympy makes of a number followed by \% (12.5\% -> 12.5 * UnevaluatedExpr(1/100)), which
        # math-verify compares as a percentage; latex2sympy reads \% only after a number token
        value = Rational(pct.numerator, pct.denominator)
        return (Mul(value, UnevaluatedExpr(Rational(1, 100)), evaluate=False), answer)
    parsed = parse("$\\boxed{" + answer + "}$", extraction_config=[_LATEX], parsing_timeout=None)
    if not any(_is_symbolic(x) for x in parsed) and _PLAIN_EXPR.match(answer):
        parsed_expr = parse(answer, extraction_config=[_EXPR], parsing_timeout=None)
        # accept only a parse of the whole string, never of a fragment
        if any(_is_symbolic(x) for x in parsed_expr) and _squash(str(parsed_expr[-1])) == _squash(answer):
            return tuple(parsed_expr)
    return tuple(parsed)


def check_answer(pred: str, golds: tuple[str, ...]) -> str:
    """Compare a normalized prediction with one or more normalized gold answers.

    Parameters
    ----------
    pred : str
        Normalized predicted answer.
    golds : tuple of str
        The gold answer followed by acceptable alternatives; the prediction is correct if it matches any parseable
        one.

    Returns
    -------
    str
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
        q = _same_symbols(g, p)
        if verify(list(g), list(q), timeout_seconds=None) and not _small_number_mismatch(g, q):
            return "correct"
    return "wrong"


def _same_symbols(gold: tuple, pred: tuple) -> tuple:
    """``pred`` with each symbol replaced by the gold's symbol of the same name where their assumptions differ.

    math-verify parses a whole string with real symbols unless it looks complex (a standalone ``i``, ``\\mathbb{C}``,
    ...): ``14 - i`` has a complex ``i``, while in ``14.0 - 1.0i`` (no standalone ``i``) every symbol, ``i``
    included, is real. Two symbols of one name but different assumptions are different to sympy, so ``14 - i`` and
    ``14.0 - 1.0i``, or ``x + i`` and ``x + 1i``, never compared equal. A name means one symbol on both sides.
    """
    names: dict[str, Basic] = {}
    for x in gold:
        if _is_symbolic(x):
            for sym in getattr(x, "free_symbols", ()):
                names.setdefault(getattr(sym, "name", None), sym)
    if not names:
        return pred
    out = []
    for x in pred:
        if _is_symbolic(x):
            try:
                rep = {
                    sym: names[sym.name]
                    for sym in x.free_symbols
                    if getattr(sym, "name", None) in names and names[sym.name] != sym
                }
                if rep:
                    x = x.xreplace(rep)
            except (AttributeError, TypeError, ValueError):  # pragma: no cover - an object without symbols
                pass
        out.append(x)
    return tuple(out)


_SMALL = 1.0  # below this magnitude math-verify's 6-decimal rounding hides relative differences
_REL_TOL = 1e-4
# magnitudes outside float64's normal range: math-verify's numeric check (evalf(chop=True)) rounds a difference of
# two such numbers to 0, so 1/2004! "equals" 1/2006! and 10^{-400} "equals" 2*10^{-400}
_FLOAT_MAX = mpmath.mpf(sys.float_info.max)
_FLOAT_TINY = mpmath.mpf(sys.float_info.min)
_PREC = 110  # bits of the values compared (about 33 decimal digits)


def _number(parsed: tuple) -> mpmath.mpc | None:
    """Value of the first symbolic element if it is a finite constant expression, else None.

    The value is an :class:`mpmath.mpc` (30 significant digits, unbounded exponent), never a Python float, so
    ``1/2006!`` (about ``10^{-5752}``) and ``2006!`` keep their magnitudes instead of underflowing to 0 or
    overflowing to infinity.
    """
    for x in parsed:
        if _is_symbolic(x):
            try:
                if getattr(x, "is_number", False) and not getattr(x, "free_symbols", True):
                    re_, im_ = x.evalf(30).as_real_imag()
                    if re_.is_Number and im_.is_Number and re_.is_finite and im_.is_finite:
                        return mpmath.mpc(re_._to_mpmath(_PREC), im_._to_mpmath(_PREC))
            except (TypeError, ValueError, ArithmeticError, AttributeError):
                return None
            return None
    return None


def _needs_relative_check(g: mpmath.mpc, p: mpmath.mpc) -> bool:
    """Whether math-verify's absolute 6-decimal agreement is not enough for these two values (see below)."""
    big = max(abs(g), abs(p))
    if big < _SMALL or big > _FLOAT_MAX:
        return True
    return any(0 < abs(v) < _FLOAT_TINY for v in (g, p))


def _small_number_mismatch(gold: tuple, pred: tuple) -> bool:
    """True when math-verify matched two numbers that differ by more than 1e-4 relatively, where its check is blind.

    math-verify compares numbers after rounding to 6 decimals, and its exact check evaluates the difference with
    ``chop=True``; so ``1.325e-27`` equals ``1.325e-28``, ``1/2^98`` equals ``1/2^99``, ``1/2004!`` equals
    ``1/2006!`` and ``10^{-400}`` equals ``2 \\cdot 10^{-400}``. For constants below 1 in magnitude, and for any
    value outside float64's range (beyond about ``1.8e308``, or nonzero below about ``2.2e-308``), this check
    requires relative agreement, computed in arbitrary-exponent arithmetic (:mod:`mpmath`), so two different numbers
    never compare equal because both underflow or overflow; the percent readings math-verify allows (``25\\%`` vs
    ``0.25``) are kept.
    """
    g, p = _number(gold), _number(pred)
    if g is None or p is None or not _needs_relative_check(g, p):
        return False
    for q in (p, p * 100, p / 100):
        if g == q or abs(g - q) <= _REL_TOL * max(abs(g), abs(q)):
            return False
    return True


def warm_up() -> None:
    """Import-time work done once per worker (parser construction, sympy caches) before tasks are timed."""
    check_answer("\\frac{1}{2}", ("0.5",))
