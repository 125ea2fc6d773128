r"""One-variable inequalities and set-builder sets rewritten as intervals, so every form of one set compares equal.

math-verify accepts an interval prediction against an inequality gold (``(-\infty,3)`` for ``x<3``) but not the
reverse, and compares neither unions (``x<1 \text{ or } x>3``), chains (``2<x<5``) nor ``x \neq 3`` with their
interval forms. :func:`relation_to_interval` rewrites such an answer, gold or prediction alike, as interval notation
before math-verify sees it; math-verify then compares intervals with intervals, and a different set stays different.

Rewritten (``v`` is one letter or a Greek letter command, ``a``/``b`` are bounds that do not contain a bare letter,
so ``x < a`` and ``a < b`` are left alone):

* ``v < b``, ``v \le b``, ``b > v``, ... -> ``(-\infty,b)``, ``(-\infty,b]``, ...; ``v > a``, ``v \ge a`` ->
  ``(a,\infty)``, ``[a,\infty)``;
* a chain ``a < v < b`` (also with ``\le``, or ``b > v > a``) -> ``(a,b)``, ``[a,b]``, ...;
* ``v \neq a`` -> ``(-\infty,a)\cup(a,\infty)``;
* parts joined by ``or``, ``\text{or}``, ``\lor``, ``\vee`` or ``\cup`` -> the union of the parts' intervals;
* one lower and one upper one-sided part joined by ``and``, ``\text{and}``, ``\land`` or ``\wedge`` -> one
  two-sided interval (a comma is not read as "and": ``x<1, x>3`` lists solutions);
* a set-builder set ``\{v \mid ...\}``, ``\{v : ...\}``, ``\{v | ...\}`` (also ``\{v \in \mathbb{R} \mid ...\}``)
  -> its condition, as above.

Anything else (two variables, an unknown operator, parts in different variables) is returned unchanged.
"""

from __future__ import annotations

import re

__all__ = ["relation_to_interval"]

_OPS = {
    "<": "lt", "\\lt": "lt", ">": "gt", "\\gt": "gt", "<=": "le", "\\le": "le", "\\leq": "le", "\\leqslant": "le",
    "\\leqq": "le", ">=": "ge", "\\ge": "ge", "\\geq": "ge", "\\geqslant": "ge", "\\geqq": "ge", "\\ne": "ne",
    "\\neq": "ne", "!=": "ne",
}  # fmt: skip
_FLIP = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "ne": "ne"}
_OP_SPLIT = re.compile(r"\s*(<=|>=|!=|<|>|\\(?:leqslant|geqslant|leqq|geqq|leq|geq|le|ge|lt|gt|neq|ne)(?![A-Za-z]))\s*")
_OR = re.compile(r"\s*(?:\\text\{\s*or\s*\}|\\(?:lor|vee|cup)(?![A-Za-z])|(?<![A-Za-z\\])or(?![A-Za-z]))\s*")
_AND = re.compile(r"\s*(?:\\text\{\s*and\s*\}|\\(?:land|wedge)(?![A-Za-z])|(?<![A-Za-z\\])and(?![A-Za-z]))\s*")
_GREEK = "alpha|beta|gamma|theta|lambda|mu|phi|varphi|psi|omega|tau|sigma|rho|delta|epsilon"
_VAR = re.compile(rf"^(?:[A-Za-z]|\\(?:{_GREEK}))$")
_BUILDER = re.compile(
    rf"^\\\{{\s*([A-Za-z]|\\(?:{_GREEK}))\s*(?:\\in\s*\\mathbb\{{R\}}\s*)?(?:\\mid|\||:)\s*(.+?)\s*\\\}}$"
)
_INF = "\\infty"


def _bound_ok(b: str) -> bool:
    """A bound: non-empty, no bare letter (after removing LaTeX commands), no comma or relation."""
    if not b or any(c in b for c in ",=<>"):
        return False
    return not re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", b))


def _interval(lo: str, lo_closed: bool, hi: str, hi_closed: bool) -> str:
    return ("[" if lo_closed else "(") + lo + "," + hi + ("]" if hi_closed else ")")


def _one(part: str) -> tuple[str, list[tuple[str, bool, str, bool]]] | None:
    """``(variable, intervals)`` for one relation or chain, or None."""
    tokens = _OP_SPLIT.split(part.strip())
    if len(tokens) not in (3, 5):
        return None
    terms, ops = [t.strip() for t in tokens[0::2]], [_OPS[o] for o in tokens[1::2]]
    if len(terms) == 3:  # a op v op b
        a, v, b = terms
        if not _VAR.match(v) or not (_bound_ok(a) and _bound_ok(b)) or "ne" in ops:
            return None
        if ops[0] in ("lt", "le") and ops[1] in ("lt", "le"):
            return v, [(a, ops[0] == "le", b, ops[1] == "le")]
        if ops[0] in ("gt", "ge") and ops[1] in ("gt", "ge"):
            return v, [(b, ops[1] == "ge", a, ops[0] == "ge")]
        return None
    left, right = terms
    op = ops[0]
    if _VAR.match(left) and _bound_ok(right):
        v, b = left, right
    elif _VAR.match(right) and _bound_ok(left):
        v, b, op = right, left, _FLIP[op]
    else:
        return None
    if op == "ne":
        return v, [("-" + _INF, False, b, False), (b, False, _INF, False)]
    if op in ("lt", "le"):
        return v, [("-" + _INF, False, b, op == "le")]
    return v, [(b, op == "ge", _INF, False)]


def _conjunction(part: str) -> tuple[str, list[tuple[str, bool, str, bool]]] | None:
    """A single relation, or two one-sided relations joined by "and" (one lower, one upper bound)."""
    pieces = _AND.split(part)
    if len(pieces) == 1:
        return _one(part)
    if len(pieces) != 2:
        return None
    got = [_one(p) for p in pieces]
    if any(g is None or len(g[1]) != 1 for g in got) or got[0][0] != got[1][0]:  # type: ignore[index]
        return None
    (v, [a]), (_, [b]) = got  # type: ignore[misc]
    lower = [iv for iv in (a, b) if iv[2] == _INF]
    upper = [iv for iv in (a, b) if iv[0] == "-" + _INF]
    if len(lower) != 1 or len(upper) != 1:
        return None
    return v, [(lower[0][0], lower[0][1], upper[0][2], upper[0][3])]


def relation_to_interval(s: str) -> str:
    r"""Interval form of a one-variable inequality, union, chain or set-builder set; ``s`` unchanged otherwise.

    Parameters
    ----------
    s : str
        A normalized answer string.

    Returns
    -------
    str
        The interval form, e.g. ``"x<3"`` -> ``"(-\infty,3)"``, ``"2\le x<5"`` -> ``"[2,5)"``,
        ``"x<1\text{ or }x>3"`` -> ``"(-\infty,1)\cup(3,\infty)"``, ``"x\neq 0"`` -> ``"(-\infty,0)\cup(0,\infty)"``,
        ``"\{x\mid x\ge 2\}"`` -> ``"[2,\infty)"``; ``"a<b"`` and ``"(1,2)"`` are returned unchanged.
    """
    m = _BUILDER.match(s.strip())
    body = m.group(2) if m else s
    if not _OP_SPLIT.search(body):
        return s
    parts = _OR.split(body)
    variables, intervals = set(), []
    for part in parts:
        got = _conjunction(part)
        if got is None:
            return s
        variables.add(got[0])
        intervals.extend(got[1])
    if len(variables) != 1 or (m and variables != {m.group(1)}):
        return s
    return "\\cup".join(_interval(*iv) for iv in intervals)
