r"""Gold self-check: every gold answer must grade correct against itself, also as a model would re-write it.

A gold answer the math verifier cannot grade against its own boxed copy makes every rollout of its prompt
unscorable or wrong, and such a prompt can never train. Fault classes of the verifier show up here first: run
:func:`gold_self_check` over a dataset's gold answers and every failure is a gold (and a re-writing of it) the
verifier gets wrong.

The re-writings (:func:`gold_rewrites`; each one is made only when it differs from the gold, and each keeps the
value):

=================  ===================================================================================================
kind               re-writing
=================  ===================================================================================================
``self``           the gold as it is
``text``           without ``\text{}``: an answer that is one ``\text{X}`` becomes ``X``, and every ``\text{X}``
                   of a longer answer becomes ``X`` (``118 \text{ dollars}`` -> ``118  dollars``); with
                   ``\text{}``: a bare word or letter list (``Evelyn``, ``B, E``) becomes ``\text{...}``
``left_right``     ``\left(``/``\right)`` removed where the gold has them, added to every ``(``/``)`` where it has none
``dfrac``          ``\dfrac`` -> ``\frac``, or ``\frac`` -> ``\dfrac``
``period``         a trailing period
``percent``        where the gold ends in ``\%``: the percent sign dropped, and written ``%`` without the backslash
=================  ===================================================================================================

Each is written as a correct completion (``... The final answer is $\boxed{<re-writing>}$.``) and graded with
:class:`~sara_trl.rewards.math_verifier.MathReward` against the gold; anything but ``CORRECT`` is a failure.

:func:`math_verify_agreement` compares the same pairs with the installed math-verify used as its README shows
(``verify(parse(gold), parse(completion))``), so a change in either grader shows up as a change in the
disagreements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["REWRITE_KINDS", "gold_rewrites", "self_check_completion", "SelfCheckFailure", "gold_self_check",
           "math_verify_agreement"]

REWRITE_KINDS = ("self", "text", "left_right", "dfrac", "period", "percent")

_TEXT_GROUP = re.compile(r"\\(?:text|textbf|mbox|mathrm)\s*\{([^{}]*)\}")
_WHOLE_TEXT = re.compile(r"^\\(?:text|textbf|mbox|mathrm)\s*\{([^{}]*)\}$")
# a bare word of two or more letters, or capital letters separated by commas (a choice or a letter list)
_BARE_WORDS = re.compile(r"^(?:[A-Za-z]{2,}|[A-Z](?:\s*,\s*[A-Z])*)$")


def _add_left_right(s: str) -> str | None:
    r"""Every ``(``/``)`` as ``\left(``/``\right)``, when the parentheses balance; None otherwise."""
    depth = 0
    for c in s:
        depth += c == "("
        depth -= c == ")"
        if depth < 0:
            return None
    if depth:
        return None
    out = re.sub(r"(?<!\\left)\(", r"\\left(", s)
    return re.sub(r"(?<!\\right)\)", r"\\right)", out)


def gold_rewrites(gold: str) -> list[tuple[str, str]]:
    r"""The gold itself and the common re-writings of it a model produces, as ``(kind, text)`` pairs.

    Parameters
    ----------
    gold : str
        A gold answer as the dataset writes it.

    Returns
    -------
    list of (str, str)
        ``("self", gold)`` first, then one pair per re-writing that differs from the gold (kinds: see the module
        docstring), without duplicates.
    """
    g = str(gold).strip()
    out: list[tuple[str, str]] = [("self", g)]

    def add(kind: str, text: str | None) -> None:
        if text is not None and text.strip() and all(text != t for _, t in out):
            out.append((kind, text))

    m = _WHOLE_TEXT.match(g)
    if m:
        add("text", m.group(1).strip())
    elif _BARE_WORDS.match(g):
        add("text", "\\text{" + g + "}")
    elif _TEXT_GROUP.search(g):
        add("text", _TEXT_GROUP.sub(lambda t: t.group(1), g))
    if re.search(r"\\left\s*\(|\\right\s*\)", g):
        add("left_right", re.sub(r"\\left\s*\(", "(", re.sub(r"\\right\s*\)", ")", g)))
    elif "(" in g and "\\left" not in g and "\\right" not in g:
        add("left_right", _add_left_right(g))
    if "\\dfrac" in g:
        add("dfrac", g.replace("\\dfrac", "\\frac"))
    elif re.search(r"\\frac(?![A-Za-z])", g):
        add("dfrac", re.sub(r"\\frac(?![A-Za-z])", r"\\dfrac", g))
    if not g.endswith("."):
        add("period", g + ".")
    if re.search(r"\\%\s*$", g):
        add("percent", re.sub(r"\s*\\%\s*$", "", g))
        add("percent", re.sub(r"\\%\s*$", "%", g))
    return out


def self_check_completion(answer: str) -> str:
    """A correct completion stating ``answer`` in a box, as the self-check writes it."""
    return f"Step by step reasoning. The final answer is $\\boxed{{{answer}}}$."


@dataclass(frozen=True)
class SelfCheckFailure:
    """One re-writing of a gold answer that did not grade ``CORRECT``.

    Attributes
    ----------
    index : int
        Position of the gold in the input.
    gold : str
        The gold answer.
    kind : str
        The re-writing's kind (:data:`REWRITE_KINDS`).
    prediction : str
        The re-written answer that was boxed.
    status : str
        The verdict's status (``wrong``, ``unparseable_gold``, ``timeout``, ``error``).
    reason : str
        The verdict's reason.
    """

    index: int
    gold: str
    kind: str
    prediction: str
    status: str
    reason: str


def _pairs(golds: Sequence[str]) -> list[tuple[int, str, str, str]]:
    return [(i, str(g), kind, text) for i, g in enumerate(golds) for kind, text in gold_rewrites(str(g))]


def gold_self_check(golds: Sequence[str], verifier=None) -> tuple[int, list[SelfCheckFailure]]:
    r"""Grade every gold against itself and its re-writings (:func:`gold_rewrites`); one batch.

    Parameters
    ----------
    golds : sequence of str
        Gold answers.
    verifier : MathReward, optional
        The verifier to use (default: a :class:`~sara_trl.rewards.math_verifier.MathReward` with default settings).

    Returns
    -------
    (int, list of SelfCheckFailure)
        The number of (gold, re-writing) pairs graded, and every pair that did not grade ``CORRECT``.
    """
    from .math_verifier import MathReward
    from .verdict import Status

    verifier = verifier if verifier is not None else MathReward()
    pairs = _pairs(golds)
    verdicts = verifier.verdicts([self_check_completion(t) for _, _, _, t in pairs], [g for _, g, _, _ in pairs])
    failures = [
        SelfCheckFailure(i, g, kind, text, v.status.value, v.reason)
        for (i, g, kind, text), v in zip(pairs, verdicts)
        if v.status is not Status.CORRECT
    ]
    return len(pairs), failures


def math_verify_agreement(
    pairs: Iterable[tuple[str, str]], verifier=None, timeout_s: int = 5
) -> dict:
    r"""How often ``math_reward`` and the installed math-verify, used on its own, disagree on (gold, answer) pairs.

    math-verify on its own: ``verify(parse("$\boxed{gold}$"), parse(completion))`` with its default extraction
    configuration and time limits (its limits use ``signal``: call this from the main thread). A pair counts where
    both can grade it: ``math_reward`` gives ``CORRECT`` or ``WRONG`` and math-verify parses the gold.

    Parameters
    ----------
    pairs : iterable of (str, str)
        ``(gold, answer)`` pairs; the answer is boxed in a correct-looking completion
        (:func:`self_check_completion`).
    verifier : MathReward, optional
        The verifier (default settings when None).
    timeout_s : int, default 5
        math-verify's own parse and verify limits, seconds.

    Returns
    -------
    dict
        ``pairs`` (all), ``both_grade`` (pairs both can grade), ``disagree`` (count), ``rate`` (disagree /
        both_grade), ``kinds`` (``{"ours correct, math-verify wrong": n, "ours wrong, math-verify correct": n}``),
        ``unparsed_by_math_verify`` (pairs whose gold math-verify cannot parse), ``examples``: every
        disagreement as ``(index of the pair, gold, answer, ours, math_verify)``, and ``graded``: for each pair,
        whether both graded it.
    """
    from math_verify import parse, verify

    from .math_verifier import MathReward
    from .verdict import Status

    pairs = list(pairs)
    verifier = verifier if verifier is not None else MathReward()
    ours = verifier.verdicts([self_check_completion(a) for _, a in pairs], [g for g, _ in pairs])
    gold_cache: dict[str, list] = {}
    both = 0
    unparsed = 0
    kinds = {"ours correct, math-verify wrong": 0, "ours wrong, math-verify correct": 0}
    examples = []
    graded = [False] * len(pairs)
    for j, ((g, a), v) in enumerate(zip(pairs, ours)):
        if v.status not in (Status.CORRECT, Status.WRONG):
            continue
        if g not in gold_cache:
            try:
                gold_cache[g] = parse("$\\boxed{" + g + "}$", parsing_timeout=timeout_s)
            except Exception:  # pragma: no cover - math-verify raises only on internal errors
                gold_cache[g] = []
        pg = gold_cache[g]
        if not pg:
            unparsed += 1
            continue
        try:
            mv = bool(verify(pg, parse(self_check_completion(a), parsing_timeout=timeout_s), timeout_seconds=timeout_s))
        except Exception:  # pragma: no cover
            mv = False
        both += 1
        graded[j] = True
        mine = v.status is Status.CORRECT
        if mine != mv:
            kinds["ours correct, math-verify wrong" if mine else "ours wrong, math-verify correct"] += 1
            examples.append((j, g, a, "correct" if mine else "wrong", "correct" if mv else "wrong"))
    n_dis = len(examples)
    return {
        "pairs": len(pairs),
        "both_grade": both,
        "disagree": n_dis,
        "rate": n_dis / both if both else 0.0,
        "kinds": kinds,
        "unparsed_by_math_verify": unparsed,
        "examples": examples,
        "graded": graded,
    }
