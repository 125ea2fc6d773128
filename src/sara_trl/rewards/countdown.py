r"""Countdown (TinyZero) verifier: reach ``target`` using every number of ``nums`` exactly once with + - * /.

The answers are the contents of the ``<answer>...</answer>`` blocks of the answer part of the completion (the text
after the last ``</think>``; the whole completion when there is none or the part has no block). Surrounding
whitespace, newlines or chat-role markers such as ``<|im_start|>assistant`` do not matter, and empty blocks are
ignored when a non-empty one exists. **Every** stated answer must be correct (the rule of
:func:`sara_trl.rewards.verdict.all_answers_verdict`): two different expressions of which one misses the target are
a hedge, ``WRONG`` (reason ``several_answers``); the same expression twice, or two correct ones, is ``CORRECT``.
More than 16 non-empty blocks are ``WRONG`` (reason ``too_many_answers``). An optional tail ``= <target>`` is
allowed (``(1 + 2) * 3 = 9``); if present it must equal ``target``.

The expression is parsed with :func:`ast.parse` (``mode="eval"``; the text is parsed, never executed) and the tree
is walked by :func:`evaluate_expression`, which accepts only

* integer literals written with decimal digits (no signs inside the literal, no ``_`` separators, no floats);
* the binary operators ``+``, ``-``, ``*``, ``/`` (true division, exact: :class:`fractions.Fraction`);
* unary minus (``-(3 - 5)``), a design choice: it never lets a player use a number that is not in ``nums``, and
  ``-(a - b)`` is the same as ``b - a`` (unary plus is rejected);
* parentheses (they only shape the tree).

Everything else is ``WRONG``: ``**``, ``//``, ``%``, names, calls, attributes, subscripts, comparisons, more than one
``=``. Resource bounds make every input finish in microseconds to milliseconds: the answer is at most
``max_answer_chars`` (default 256) characters and may only contain digits, ``+ - * / ( ) =``, whitespace and the
symbols ``× ÷ −`` (read as ``* / -``); parentheses nest at most 16 deep and the tree is at most 64 deep; the
multiset of literals is compared with ``nums`` *before* any arithmetic, so at most ``len(nums)`` numbers (no larger
than the largest of ``nums``) are ever combined. Division by zero gives ``WRONG`` (reward 0.0). Full-width digits,
Unicode minus signs and the signs ``· ⋅ ∗ ∕`` are read as their ASCII forms as well.

Gold validation: ``target`` must be a whole number and ``nums`` a non-empty list of non-negative whole numbers (at
most 16), else the verdict is ``UNPARSEABLE_GOLD`` (reward ``None``). A whole number may be stored as an int
(numpy ints too), a float or numpy float with no fractional part (``21.0``: pandas and parquet write integer
columns with missing values as floats, JSON may write ``21.0``) or a string of one (``"21"``, ``"21.0"``);
``21.5``, ``"21.5"``, NaN, booleans and a string ``nums`` are not.
"""

from __future__ import annotations

import ast
import math
import numbers
import operator
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .extract import answer_part
from .unicode_math import unicode_digits_and_signs
from .verdict import Status, Verdict, VerdictReward, all_answers_verdict, completion_text

__all__ = [
    "CountdownReward",
    "countdown_reward",
    "countdown_success",
    "evaluate_expression",
    "extract_countdown_answers",
    "ExpressionError",
]

MAX_ANSWER_CHARS = 256
MAX_DEPTH = 64
MAX_PAREN_DEPTH = 16
MAX_NUMS = 16
MAX_ANSWERS = 16
_ALLOWED_CHARS = frozenset("0123456789+-*/()= \t\r\n")
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class ExpressionError(ValueError):
    """The answer is not an allowed Countdown expression (syntax, operator, length or depth)."""


def extract_countdown_answers(text: str) -> list[str]:
    """Contents of every ``<answer>...</answer>`` block in ``text``, stripped, in order.

    A block is a ``</answer>`` and the last ``<answer>`` between it and the previous ``</answer>``. Linear time: each
    stretch between two closing tags is searched once.

    Parameters
    ----------
    text : str
        Completion text.

    Returns
    -------
    list of str
        The stripped block contents (``[]`` when there is no block).
    """
    out = []
    pos = 0
    while True:
        end = text.find("</answer>", pos)
        if end < 0:
            return out
        start = text.rfind("<answer>", pos, end)
        if start >= 0:
            out.append(text[start + len("<answer>") : end].strip())
        pos = end + len("</answer>")


def _literals(node: ast.AST, out: list[int], depth: int = 0) -> None:
    """Validate the tree shape and collect the integer literals (no arithmetic yet)."""
    if depth > MAX_DEPTH:
        raise ExpressionError("expression nested too deeply")
    if isinstance(node, ast.Expression):
        _literals(node.body, out, depth + 1)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
        _literals(node.left, out, depth + 1)
        _literals(node.right, out, depth + 1)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub):
            raise ExpressionError(f"unary {type(node.op).__name__} is not allowed")
        _literals(node.operand, out, depth + 1)
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise ExpressionError(f"literal {node.value!r} is not an integer")
        out.append(node.value)
    else:
        raise ExpressionError(f"{type(node).__name__} is not allowed")


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ZeroDivisionError("division by zero")
        return Fraction(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand)
    return Fraction(node.value)  # validated Constant int


def _parse(expr: str, max_chars: int = MAX_ANSWER_CHARS) -> tuple[ast.Expression, list[int]]:
    if len(expr) > max_chars:
        raise ExpressionError(f"answer longer than {max_chars} characters")
    if not expr.strip():
        raise ExpressionError("empty expression")
    if not set(expr) <= _ALLOWED_CHARS:
        bad = sorted(set(expr) - _ALLOWED_CHARS)[:5]
        raise ExpressionError(f"characters not allowed: {bad}")
    if "=" in expr:
        raise ExpressionError("'=' inside the expression")
    depth = 0
    for c in expr:
        if c == "(":
            depth += 1
            if depth > MAX_PAREN_DEPTH:
                raise ExpressionError(f"parentheses nested deeper than {MAX_PAREN_DEPTH}")
        elif c == ")":
            depth -= 1
    try:
        tree = ast.parse(" ".join(expr.split()), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ExpressionError(f"not an arithmetic expression: {type(e).__name__}") from None
    literals: list[int] = []
    _literals(tree, literals)
    return tree, literals


def evaluate_expression(expr: str, max_chars: int = MAX_ANSWER_CHARS) -> tuple[Fraction, list[int]]:
    """Exactly evaluate a Countdown expression with the restricted grammar described in the module docstring.

    Parameters
    ----------
    expr : str
        Expression text such as ``"(79 - 60) + 17"`` (no ``=``).
    max_chars : int, default 256
        Length limit, in characters.

    Returns
    -------
    value : Fraction
        The exact value.
    literals : list of int
        The integer literals in reading order.

    Raises
    ------
    ExpressionError
        Disallowed syntax, characters, length or depth.
    ZeroDivisionError
        Division by zero.
    """
    tree, literals = _parse(expr, max_chars)
    return _evaluate(tree), literals


def _split_equals(answer: str) -> tuple[str, str | None]:
    if answer.count("=") == 1:
        lhs, rhs = answer.split("=")
        return lhs, rhs.strip()
    return answer, None


_WHOLE = re.compile(r"[-+]?\d+(?:\.0*)?")


def whole_number(x: Any) -> int | None:
    """``x`` as an int when it is a whole number.

    Parameters
    ----------
    x : object
        An int, numpy int, integral float/numpy float/Fraction/Decimal, or a string such as ``"21"`` or ``"21.0"``
        (at most 40 characters).

    Returns
    -------
    int or None
        The whole number; None otherwise (fractional, NaN, infinite, bool, other types).
    """
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, str):
        x = x.strip()
        return int(x.split(".")[0]) if len(x) <= 40 and _WHOLE.fullmatch(x) else None
    if isinstance(x, (numbers.Rational, Decimal)):
        return int(x) if x == int(x) else None
    if isinstance(x, numbers.Real):
        f = float(x)
        return int(f) if math.isfinite(f) and f.is_integer() else None
    return None


def _gold(target: Any, nums: Any) -> tuple[int, list[int]] | None:
    t = whole_number(target)
    if t is None or isinstance(nums, (str, bytes)) or nums is None:
        return None
    try:
        ns = [whole_number(x) for x in nums]
    except TypeError:  # not iterable
        return None
    if not ns or len(ns) > MAX_NUMS or any(x is None or x < 0 for x in ns):
        return None
    return t, ns  # type: ignore[return-value]


def _answer_verdict(answer: str, t: int, ns: list[int], max_answer_chars: int) -> Verdict:
    """Verdict for one ``<answer>`` content against target ``t`` and numbers ``ns``."""
    if len(answer) > max_answer_chars:
        return Verdict(Status.WRONG, answer[:64], "bad_expression")
    answer = unicode_digits_and_signs(answer)
    expr, stated = _split_equals(answer)
    if stated is not None:
        try:
            stated_value = int(stated) if stated.isdigit() else None
        except ValueError:  # absurdly long digit string
            stated_value = None
        if stated_value != t:
            return Verdict(Status.WRONG, answer, "wrong_stated_result")
    try:
        tree, literals = _parse(expr, max_answer_chars)
    except ExpressionError:
        return Verdict(Status.WRONG, answer, "bad_expression")
    if Counter(literals) != Counter(ns):
        return Verdict(Status.WRONG, answer, "numbers_mismatch")
    try:
        value = _evaluate(tree)
    except ZeroDivisionError:
        return Verdict(Status.WRONG, answer, "division_by_zero")
    if value != t:
        return Verdict(Status.WRONG, answer, "wrong_value")
    return Verdict(Status.CORRECT, answer)


def countdown_success(completion: Any, target: Any, nums: Any, *, max_answer_chars: int = MAX_ANSWER_CHARS) -> Verdict:
    """Binary verdict for one Countdown completion (rules: module docstring).

    Parameters
    ----------
    completion : str or list of dict
        String or list of chat messages.
    target : int, float, numpy number or str
        The whole number to reach (int, integral float such as ``21.0``, numpy number, or numeric string).
    nums : sequence of int
        The numbers, each to be used exactly once (a list or array of whole numbers).
    max_answer_chars : int, default 256
        Longest accepted answer (characters inside ``<answer>``).

    Returns
    -------
    Verdict
        ``CORRECT``; ``WRONG`` with reason ``no_answer``, ``bad_expression``, ``numbers_mismatch``,
        ``division_by_zero``, ``wrong_value``, ``wrong_stated_result``, ``several_answers`` or
        ``too_many_answers``; ``UNPARSEABLE_GOLD`` for a malformed ``target``/``nums``.

    Raises
    ------
    ValueError
        Malformed completion (neither string nor chat messages).
    """
    text = completion_text(completion)
    gold = _gold(target, nums)
    answers = extract_countdown_answers(answer_part(text)) or extract_countdown_answers(text)
    answers = [a for a in answers if a] or answers[-1:]
    if gold is None:
        return Verdict(Status.UNPARSEABLE_GOLD, answers[-1] if answers else None, "bad_gold")
    if not answers:
        return Verdict(Status.WRONG, None, "no_answer")
    if len(answers) > MAX_ANSWERS:
        return Verdict(Status.WRONG, answers[-1][:64], "too_many_answers")
    t, ns = gold
    return all_answers_verdict([_answer_verdict(a, t, ns, max_answer_chars) for a in dict.fromkeys(answers)])


@dataclass
class CountdownReward(VerdictReward):
    """Countdown correctness reward in TRL's signature; picklable, ``__name__ == "countdown_reward"``.

    ``verdicts(completions, target, nums)`` gives one :func:`countdown_success` verdict per completion (counted in
    :func:`sara_trl.rewards.stats`); ``__call__(completions, target=None, nums=None, **kwargs)`` gives ``1.0``
    correct, ``0.0`` wrong, ``None`` malformed gold. Both raise ValueError for missing ``target``/``nums`` columns or
    mismatched lengths (:class:`~sara_trl.rewards.verdict.VerdictReward`).

    Parameters
    ----------
    max_answer_chars : int, default 256
        Longest accepted answer, in characters; longer answers are wrong (bounded work per completion).

    Raises
    ------
    ValueError
        ``max_answer_chars < 1``.
    """

    name = "countdown_reward"
    counter = "countdown"
    columns = ("target", "nums")

    max_answer_chars: int = MAX_ANSWER_CHARS

    def __post_init__(self):
        if self.max_answer_chars < 1:
            raise ValueError(f"max_answer_chars must be >= 1, got {self.max_answer_chars}")
        self.max_answer_chars = int(self.max_answer_chars)
        super().__post_init__()

    def judge(self, completions: Sequence[Any], target: Sequence[Any], nums: Sequence[Any]) -> list[Verdict]:
        """One :func:`countdown_success` verdict per completion (``target``: whole numbers to reach; ``nums``: the
        numbers of each problem)."""
        return [
            countdown_success(c, t, ns, max_answer_chars=self.max_answer_chars)
            for c, t, ns in zip(completions, target, nums)
        ]


_DEFAULT = CountdownReward()


def countdown_reward(
    completions: Sequence[Any], target: Sequence[Any] | None = None, nums: Sequence[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """Countdown correctness reward with default limits (the default :class:`CountdownReward`).

    Parameters
    ----------
    completions, target, nums, **kwargs
        As in :meth:`CountdownReward.__call__`.

    Returns
    -------
    list of float or None, shape (N,)
        ``1.0``, ``0.0`` or ``None`` (malformed gold) per completion.

    Raises
    ------
    ValueError
        Missing ``target``/``nums`` columns or mismatched lengths.

    Examples
    --------
    >>> countdown_reward(["<think>...</think> <answer>(79 - 60) + 17</answer>"], target=[36], nums=[[79, 17, 60]])
    [1.0]
    """
    return _DEFAULT(completions, target=target, nums=nums, **kwargs)
