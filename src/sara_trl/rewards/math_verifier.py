r"""Math answer verification (math-verify) with a hard time limit, as a binary verdict and a TRL reward.

Pipeline for one completion (paper Sec. 2: ``r(q, o) in {0, 1}`` checks correctness):

1. take the completion text (plain or conversational, :func:`~sara_trl.rewards.verdict.completion_text`);
2. extract the final answers it states (:func:`~sara_trl.rewards.extract.extract_math_answers`): every
   ``\boxed{}`` of the answer part (the text after the last ``</think>``), else the last "final answer is X" /
   "answer: X" phrase; no answer -> ``WRONG`` (reason ``"no_answer"``);
3. normalize predictions and gold the same way (:func:`~sara_trl.rewards.extract.normalize_math_answer`: Unicode
   math, upright constants, inequalities as intervals, and the dataset quirks listed there);
4. *fast path*: when the gold answers and a prediction are all plain decimal numbers, compare them exactly with
   :class:`fractions.Fraction` in the calling process;
5. otherwise compare with math-verify (``parse`` + ``verify``) in a persistent worker process under a hard wall-clock
   limit (:mod:`sara_trl.rewards.pool`), which works from threads, asyncio-driven code and any number of processes.
   Gold answers are parsed once per worker (cached per string); finished (prediction, gold) comparisons are cached
   in the calling process (:func:`clear_caches` empties both).

Judgement rules:

* **Several final answers** (hedging): every stated answer must be correct
  (:func:`~sara_trl.rewards.verdict.all_answers_verdict`): ``\boxed{3} or \boxed{5}`` is ``WRONG`` for gold 5
  (reason ``"several_answers"``), ``\boxed{5} ... \boxed{5}`` and ``\boxed{0.5} = \boxed{\frac12}`` are
  ``CORRECT``. One box listing alternatives (``\boxed{3 \text{ or } 5}``) is a set ``{3, 5}``: wrong for gold 5,
  right for gold ``3, 5``. Boxes inside the reasoning block (before ``</think>``) are not answers.
* **Prose gold**: a gold answer that is a sentence (:func:`~sara_trl.rewards.extract.is_prose_answer`, e.g.
  "no such integer exists") is ``UNPARSEABLE_GOLD`` (reward ``None``, reason ``"prose_gold"``), never a silent
  all-wrong prompt; alternatives that are prose are dropped, the others still count.
* **Numeric golds** given as numbers (``21``, ``21.0``, numpy numbers) are written as their shortest decimal form;
  NaN and infinite values are dropped.
* **Multiple-choice golds** (one capital letter: ``E``, ``\text{(E)}``): a prediction that is a choice label,
  also one followed by the option's text (``E: A polygenic risk score``, ``\text{(C) Plane}``,
  ``\textbf{(B)}\ 3(1+r/10)^x=7``), is its letter (:func:`~sara_trl.rewards.extract.choice_letter`), compared with
  the gold letter without math-verify (reason ``"choice_letter"``); a label followed by another label
  (``(A) or (B)``) is not one letter.
* **Letter lists** (``\text{B, E, G}``, ``D, E``: MATH's "enter the letters, separated by commas"): the set of
  letters decides, in any order and with or without ``\text{}`` or parentheses (``B, E, G``, ``(B), (E), (G)``,
  ``B, E, and G``); a missing, extra or wrong letter is ``WRONG`` (reason ``"choice_letter"``). A label in front
  (``\text{Answer: G}``) is removed by the normalization, so a wrong letter after it stays wrong.
* **Text in golds** (``\text{October 30}``, ``\text{1:03 PM}``, ``8\!:\!34 \text{ p.m.}``): the same text
  without ``\text{}`` (case, spaces, ``\!`` and a trailing period aside) is ``CORRECT`` (reason
  ``"text_answer"``); anything else goes to math-verify as before.
* **Percentages**: a gold ``12.5\%`` or ``33\frac{1}{3}\%`` accepts the percentage in any exact form, its
  fraction (``0.125``, ``\frac{1}{3}``: math-verify's reading) and, for a prediction without a percent sign, the
  number with the sign dropped (``12.5``; math-verify accepts that only for whole numbers). A percentage with no
  exact decimal (``\frac{100}{3}\%``) is built by the worker as the object latex2sympy makes of ``12.5\%``.
* **One name, one symbol**: math-verify parses a string with complex symbols when it has a standalone ``i`` and
  with real ones otherwise, so ``14 - i`` and ``14.0 - 1.0i`` held two different ``i`` and never matched; the
  prediction's symbols are replaced by the gold's symbols of the same name before comparing (``14.0 - 2.0i``
  stays wrong).
* **Base notation** (``52_8``, ``0.0011_{2}``): math-verify drops the subscript, so the digits and the base are
  compared here (``52_9`` and ``0.0011_{3}`` are ``WRONG``; reason ``"base_notation"``).
* **Numbers too small or too large for float64** (``1/2004!``, ``10^{-400}``, ``2006!``): math-verify's numeric check
  chops tiny differences to zero, so two different tiny numbers would match. When both numbers are below 1 in
  magnitude, or either lies outside float64's range, a math-verify match must also agree to a relative 1e-4,
  computed with unbounded exponents (:mod:`mpmath`), never through a Python float; percent readings
  (``25\%`` = ``0.25``) stay accepted.
* The gold answer is ``UNPARSEABLE_GOLD`` when neither it nor any of its alternatives parses to a symbolic object;
  a hard-limit hit is ``TIMEOUT`` (reward ``None``), counted in :func:`sara_trl.rewards.stats`.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from . import pool as _pool
from .extract import (
    choice_letter,
    choice_letters,
    extract_math_answers,
    is_prose_answer,
    normalize_math_answer,
    percent_fraction,
)
from .stats import count
from .verdict import Status, Verdict, VerdictReward, all_answers_verdict, completion_text

__all__ = ["MathReward", "math_reward", "math_success", "math_successes", "default_num_workers", "clear_caches"]

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_GRACE_S = 2.0
DEFAULT_MAX_ANSWER_CHARS = 1000
_CACHE_SIZE = 1 << 16
_MAX_CHUNK = 16  # comparisons per worker message; bounds what one hard kill can cost

_LITERAL = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")


def default_num_workers() -> int:
    """Verifier worker processes per process.

    Returns
    -------
    int
        ``$SARA_VERIFIER_WORKERS`` if set (0 runs math-verify inline), else ``min(4, cpu_count)`` (at least 1).

    Raises
    ------
    ValueError
        ``$SARA_VERIFIER_WORKERS`` is not an integer, or is negative.
    """
    env = os.environ.get("SARA_VERIFIER_WORKERS")
    if env is not None:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"SARA_VERIFIER_WORKERS must be an integer, got {env!r}") from None
        if n < 0:
            raise ValueError(f"SARA_VERIFIER_WORKERS must be >= 0, got {n}")
        return n
    return max(1, min(4, os.cpu_count() or 1))


class _LRU:
    """Small thread-safe LRU map for finished (prediction, gold) comparisons."""

    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def clear(self):
        with self._lock:
            self._d.clear()

    def put(self, key, value):
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)


_RESULTS = _LRU(_CACHE_SIZE)


def clear_caches() -> None:
    """Forget finished comparisons in this process, and math-verify parses made inline (``num_workers=0``).

    For measurements and tests that need cold caches; worker processes keep their own parse caches until they are
    stopped (:func:`sara_trl.rewards.shutdown_verifiers`).
    """
    _RESULTS.clear()
    worker = sys.modules.get(__package__ + "._math_worker")
    if worker is not None:
        worker.parse_answer.cache_clear()


def _gold_tuple(answer: Any, alternatives: Any) -> tuple[str, ...]:
    """Normalized, de-duplicated gold answers (the answer first); empty when there is none."""
    raw: list[Any] = []
    if isinstance(answer, (list, tuple)):
        raw.extend(answer)
    else:
        raw.append(answer)
    if alternatives is not None:
        if isinstance(alternatives, str):
            raw.append(alternatives)
        else:
            raw.extend(alternatives)
    out: list[str] = []
    for a in raw:
        if a is None or isinstance(a, bool):
            continue
        if isinstance(a, numbers.Real) and not isinstance(a, (numbers.Integral, Fraction)):
            f = float(a)
            if not math.isfinite(f):  # NaN from a dataframe
                continue
            a = repr(f) if isinstance(a, float) else str(a)  # shortest decimal form, e.g. 21.0 -> "21.0"
        s = normalize_math_answer(str(a))
        if s and s not in out:
            out.append(s)
    return tuple(out)


def _fast_path(pred: str, golds: tuple[str, ...]) -> Status | None:
    """Exact comparison when every string is a plain decimal literal; None when not applicable."""
    if not _LITERAL.match(pred) or not all(_LITERAL.match(g) for g in golds):
        return None
    p = Fraction(pred)
    return Status.CORRECT if any(Fraction(g) == p for g in golds) else Status.WRONG


_BASE_NUMBER = re.compile(r"^(-?)(?:\\text\{)?\s*([0-9A-Za-z]*\.?[0-9A-Za-z]+)\s*\}?\s*_\s*\{?\s*(\d+)\s*\}?$")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base_number(s: str) -> tuple[str, int] | None:
    """``("52", 8)`` for ``52_8`` / ``52_{8}``: digits (lower case) and base, when every digit is valid in the base.

    A radix point is kept with the digits (``0.0011_{2}`` -> ``("0.0011", 2)``): math-verify drops the subscript, so
    without this ``0.0011_{3}`` matched ``0.0011_{2}``.
    """
    m = _BASE_NUMBER.match(s)
    if not m:
        return None
    sign, digits, base = m.group(1), m.group(2).lower(), int(m.group(3))
    if not 2 <= base <= 36 or any(_DIGITS.find(c) < 0 or _DIGITS.find(c) >= base for c in digits.replace(".", "")):
        return None
    if not any(c.isdigit() for c in digits):
        return None
    return sign + digits, base


def _base_rule(pred: str, golds: tuple[str, ...]) -> Status | None:
    """Numbers written in a base (``52_8``): math-verify drops the subscript, so ``52_9`` would match ``52_8``.

    A prediction matches a base-notation gold when its digits agree and its base (if written) is the same. Returns
    None when no gold is in base notation or the decision needs math-verify (other golds remain).
    """
    base_golds = [b for b in map(_base_number, golds) if b is not None]
    if not base_golds:
        return None
    pb = _base_number(pred)
    for digits, base in base_golds:
        if pb is not None and pb == (digits, base):
            return Status.CORRECT
        if pb is None and pred.strip().lower() == digits:
            return Status.CORRECT
    return Status.WRONG if len(base_golds) == len(golds) else None


def _choice_rule(raw: str | None, pred: str, golds: tuple[str, ...]) -> Status | None:
    r"""Multiple-choice golds: one capital letter (``E``, ``\text{(E)}``) or a list of letters (``\text{B, E, G}``).

    Models often repeat the option's text after its letter (``\boxed{E: A polygenic risk score}``,
    ``\text{(C) Plane}``); math-verify reads that as an expression and grades it wrong. When a gold answer is a
    single choice letter and the prediction is a choice label, with or without option text
    (:func:`~sara_trl.rewards.extract.choice_letter`), the prediction is that letter: ``CORRECT`` when it equals a
    gold letter, ``WRONG`` when it does not and every gold is a letter. A gold that lists letters (MATH's "enter the
    letters, separated by commas", often written ``\text{B, E, G}``, which math-verify reads as one text and never
    matches ``B, E, G``) is the set of its letters (:func:`~sara_trl.rewards.extract.choice_letters`): a prediction
    naming the same set, in any order and with or without ``\text{}`` or parentheses, is ``CORRECT``, a missing,
    extra or wrong letter ``WRONG``. Returns None when no gold is a letter or a letter list, the prediction is not a
    label or a letter list (e.g. the option text alone, a lower-case letter, a hedge ``(A) or (B)``), or a gold of
    another kind remains to be compared by math-verify.
    """
    letters = [choice_letter(g) for g in golds]
    gold_letters = {x for x in letters if x is not None}
    lists = [
        choice_letters(g) if x is None else None for x, g in zip(letters, golds)
    ]
    gold_sets = {x for x in lists if x is not None and len(x) > 1}
    if not gold_letters and not gold_sets:
        return None
    all_choice = all(x is not None or (y is not None and len(y) > 1) for x, y in zip(letters, lists))
    if gold_sets:
        named = choice_letters(pred)
        if named is None and raw is not None:
            named = choice_letters(raw)
        if named is not None:
            if named in gold_sets or (len(named) == 1 and next(iter(named)) in gold_letters):
                return Status.CORRECT
            return Status.WRONG if all_choice else None
    if not gold_letters:
        return None
    letter = choice_letter(raw, option_text=True) if raw is not None else None
    if letter is None:
        letter = choice_letter(pred, option_text=True)
    if letter is None:
        return None
    if letter in gold_letters:
        return Status.CORRECT
    return Status.WRONG if all_choice else None


_TEXT_GROUP = re.compile(r"\\(?:text|mathrm|textrm)\s*\{([^{}]*[A-Za-z][^{}]*)\}")


def _canon_text(s: str) -> str:
    s = re.sub(r"\\(?:text|mathrm|textrm)\s*\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\ ", " ").replace("~", " ").replace("\\,", " ").replace("\\!", "").replace("\\;", " ")
    return "".join(s.lower().split()).rstrip(".")


def _text_rule(pred: str, golds: tuple[str, ...]) -> Status | None:
    r"""A gold with text in ``\text{...}`` (``\text{October 30}``, ``\text{1:03 PM}``, ``8\!:\!34 \text{ p.m.}``,
    ``144 \text{ m}^3``) equals the same text written without ``\text{}``.

    math-verify reads ``October 30`` or ``8:34 p.m.`` as a product of one-letter symbols and never matches the text.
    The prediction is ``CORRECT`` when its text, without ``\text{}`` wrappers, spaces, ``\!``, case and a trailing
    period, is the gold's; else None (math-verify decides, as before).
    """
    for g in golds:
        if _TEXT_GROUP.search(g) and _canon_text(pred) == _canon_text(g):
            return Status.CORRECT
    return None


_PERCENT_GOLD = re.compile(r"^(-?(?:\d+(?:\.\d+)?|\.\d+))\\%$")


def _percent_dropped(pred: str, golds: tuple[str, ...]) -> tuple[str, ...]:
    r"""``golds`` plus, for a prediction without a percent sign, each percentage gold without its ``\%``.

    A gold ``12.5\%`` is answered ``12.5`` as often as ``12.5\%``; math-verify accepts the dropped sign only for
    whole numbers (``25\%`` and ``25``) and rejects ``12.5``. Its reading of a percentage as a fraction (``0.125``)
    stays. The dropped form is offered only to predictions without ``%``, so ``1250\%`` does not equal ``12.5\%``.
    """
    if "%" in pred:
        return golds
    extra = []
    for g in golds:
        m = _PERCENT_GOLD.match(g)
        if m:
            extra.append(m.group(1))
        else:
            value = percent_fraction(g)
            if value is not None:
                extra.append(("-" if value < 0 else "") + f"\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}")
    extra = [x for x in extra if x not in golds]
    return golds + tuple(dict.fromkeys(extra)) if extra else golds


@dataclass
class MathReward(VerdictReward):
    r"""Math correctness reward (TRL reward-function signature) backed by math-verify with a hard time limit.

    Instances are picklable (only the configuration is pickled; worker processes are per process and started on
    first use) and usable directly as ``reward_funcs=`` of any TRL trainer. ``__name__`` is ``"math_reward"`` so TRL
    logs it as ``rewards/math_reward``. The judgement rules are listed in :mod:`sara_trl.rewards.math_verifier`.

    ``verdicts(completions, answer, answer_alternatives=None)`` gives one verdict per completion (counted in
    :func:`sara_trl.rewards.stats`); ``__call__(completions, answer=None, answer_alternatives=None, **kwargs)`` gives
    ``1.0`` correct, ``0.0`` wrong or no answer, ``None`` unscorable (unparseable or prose gold, timeout or verifier
    error). Both raise ValueError without an ``answer`` column or for mismatched lengths
    (:class:`~sara_trl.rewards.verdict.VerdictReward`).

    Parameters
    ----------
    timeout_s : float, default 5.0
        Soft time limit per comparison in seconds (worker-side); the hard limit is ``timeout_s + grace_s`` seconds
        (the worker is killed and restarted). Either gives ``TIMEOUT`` -> reward None.
    grace_s : float, default 2.0
        Seconds between soft and hard limit.
    num_workers : int or None, default None
        Verifier worker processes (``None``: :func:`default_num_workers`); 0 runs math-verify inline in the calling
        thread (soft limit on the main thread only, no hard limit; for debugging).
    memory_limit_mb : int or None, default 4096
        Address-space limit of each worker, MiB (``None``: no limit).
    max_answer_chars : int, default 1000
        An extracted answer longer than this many characters is ``WRONG`` (reason ``"answer_too_long"``) without
        symbolic work.

    Raises
    ------
    ValueError
        Non-positive ``timeout_s``/``max_answer_chars``, negative ``grace_s``/``num_workers``.
    """

    name = "math_reward"
    counter = "math"
    columns = ("answer", "answer_alternatives")
    optional = ("answer_alternatives",)

    timeout_s: float = DEFAULT_TIMEOUT_S
    grace_s: float = DEFAULT_GRACE_S
    num_workers: int | None = None
    memory_limit_mb: int | None = 4096
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS

    def __post_init__(self):
        if self.timeout_s is None or not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.grace_s is None or self.grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {self.grace_s}")
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.max_answer_chars < 1:
            raise ValueError(f"max_answer_chars must be >= 1, got {self.max_answer_chars}")
        self.timeout_s = float(self.timeout_s)
        self.grace_s = float(self.grace_s)
        self.max_answer_chars = int(self.max_answer_chars)
        super().__post_init__()

    def pool(self) -> _pool.WorkerPool:
        """The shared :class:`~sara_trl.rewards.pool.WorkerPool` this verifier's comparisons run on."""
        from . import _math_worker  # imports math-verify/sympy; only needed once a comparison is due

        n = default_num_workers() if self.num_workers is None else self.num_workers
        return _pool.get_pool(n, self.timeout_s, self.grace_s, _math_worker.warm_up, self.memory_limit_mb)

    def _local(self, raw: str | None, pred: str, golds: tuple[str, ...]) -> Verdict | None:
        """Verdict decided without math-verify (too long, fast path, base notation, cache), or None."""
        if raw is not None and len(raw) > self.max_answer_chars:
            return Verdict(Status.WRONG, raw[:100], "answer_too_long")
        if pred:
            fast = _fast_path(pred, golds)
            if fast is not None:
                count("math/fast_path")
                return Verdict(fast, raw, "fast_path")
            based = _base_rule(pred, golds)
            if based is not None:
                return Verdict(based, raw, "base_notation")
            choice = _choice_rule(raw, pred, golds)
            if choice is not None:
                return Verdict(choice, raw, "choice_letter")
            text = _text_rule(pred, golds)
            if text is not None:
                return Verdict(text, raw, "text_answer")
        cached = _RESULTS.get((pred, golds))
        if cached is not None:
            count("math/cache_hit")
            return Verdict(cached, raw, "no_answer" if not pred and cached is Status.WRONG else "")
        return None

    def _compare(self, keys: list[tuple[str, tuple[str, ...]]]) -> list[tuple[Status, str]]:
        """``(status, reason)`` for each ``(prediction, golds)`` key, compared by math-verify on the pool."""
        from . import _math_worker

        # Sorted by gold answer and sent in chunks: comparisons that share a gold answer mostly land on one worker
        # (which parses that gold once), and one message carries several comparisons (each message costs a round
        # trip). Chunks are small enough to keep every worker busy.
        order = sorted(range(len(keys)), key=lambda j: keys[j][1])
        pool = self.pool()
        chunk = max(1, min(_MAX_CHUNK, -(-len(keys) // (4 * max(1, pool.num_workers)))))
        groups = [list(range(i, min(i + chunk, len(keys)))) for i in range(0, len(keys), chunk)]
        results = pool.run(_math_worker.check_answer, [keys[j] for j in order], groups=groups)
        out: list[tuple[Status, str]] = [(Status.ERROR, "")] * len(keys)
        for j, (status, value) in zip(order, results):
            if status == _pool.OK:
                st = Status(value)
                _RESULTS.put(keys[j], st)
                out[j] = (st, "no_answer" if not keys[j][0] and st is Status.WRONG else "")
            elif status == _pool.ERROR:
                out[j] = (Status.ERROR, str(value)[:200])
            else:
                out[j] = (Status.TIMEOUT, "timeout")
        return out

    def judge(
        self, completions: Sequence[Any], answer: Sequence[Any], answer_alternatives: Sequence[Any] | None
    ) -> list[Verdict]:
        """Binary verdicts for a batch of completions (one pool round for everything not decided locally).

        Parameters
        ----------
        completions : sequence, shape (N,)
            Completions, each a string or a list of chat messages.
        answer : sequence, shape (N,)
            Gold answers (strings; numbers are written in their shortest decimal form; a list means "any of these").
        answer_alternatives : sequence of list, shape (N,), or None
            Further acceptable gold answers per completion (entries may be None).

        Returns
        -------
        list of Verdict, shape (N,)
            One verdict per completion.

        Raises
        ------
        ValueError
            A malformed completion.
        """
        n = len(completions)
        if answer_alternatives is None:
            answer_alternatives = [None] * n
        out: list[Verdict | None] = [None] * n
        answers: list[list[Verdict | None]] = [[] for _ in range(n)]  # one slot per stated answer
        todo: dict[tuple[str, tuple[str, ...]], list[tuple[int, int, str | None]]] = {}
        for i, (c, a, alts) in enumerate(zip(completions, answer, answer_alternatives)):
            all_golds = _gold_tuple(a, alts)
            golds = tuple(g for g in all_golds if not is_prose_answer(g))
            raws: list[str | None] = list(extract_math_answers(completion_text(c))) or [None]
            if not golds:
                reason = "prose_gold" if all_golds else "empty_gold"
                out[i] = Verdict(Status.UNPARSEABLE_GOLD, raws[-1], reason)
                continue
            seen: set[str] = set()
            for raw in raws:
                pred = normalize_math_answer(raw) if raw is not None else ""
                if pred in seen:  # the same answer stated twice is one answer
                    continue
                seen.add(pred)
                pred_golds = _percent_dropped(pred, golds)
                local = self._local(raw, pred, pred_golds)
                answers[i].append(local)
                if local is None:
                    todo.setdefault((pred, pred_golds), []).append((i, len(answers[i]) - 1, raw))
        if todo:
            keys = list(todo)
            for key, (status, reason) in zip(keys, self._compare(keys)):
                for i, j, raw in todo[key]:
                    answers[i][j] = Verdict(status, raw, reason)
        for i in range(n):
            if out[i] is None:
                out[i] = all_answers_verdict(answers[i])  # type: ignore[arg-type]
        return out  # type: ignore[return-value]


_DEFAULT = MathReward()


def math_reward(
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    answer_alternatives: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    r"""Math correctness reward with default settings (5 s soft / 7 s hard limit per comparison).

    TRL reward-function signature ``(completions, **kwargs) -> list[float | None]``. Use :class:`MathReward` for other
    limits or worker counts.

    Parameters
    ----------
    completions, answer, answer_alternatives, **kwargs
        As in :meth:`MathReward.__call__`.

    Returns
    -------
    list of float or None, shape (N,)
        ``1.0`` / ``0.0`` / ``None`` (unparseable or prose gold, timeout or verifier error).

    Raises
    ------
    ValueError
        No ``answer`` column, or mismatched lengths.

    Examples
    --------
    >>> math_reward([r"... so the result is $\boxed{\dfrac{1}{2}}$."], answer=["0.5"])
    [1.0]
    """
    return _DEFAULT(completions, answer=answer, answer_alternatives=answer_alternatives, **kwargs)


def math_successes(
    completions: Sequence[Any],
    answer: Sequence[Any],
    answer_alternatives: Sequence[Any] | None = None,
    *,
    verifier: MathReward | None = None,
) -> list[Verdict]:
    """Binary verdicts for a batch (one pool round for everything not decided locally).

    Parameters
    ----------
    completions, answer, answer_alternatives
        As in :meth:`MathReward.verdicts`: ``(N,)`` completions, gold answers and optional alternatives.
    verifier : MathReward, optional
        A configured :class:`MathReward`; the shared default-settings instance when None.

    Returns
    -------
    list of Verdict, shape (N,)
        One verdict per completion (counted in :func:`sara_trl.rewards.stats`).

    Raises
    ------
    ValueError
        As :meth:`MathReward.verdicts`.
    """
    return (verifier or _DEFAULT).verdicts(completions, answer, answer_alternatives)


def math_success(
    completion: Any,
    answer: Any,
    answer_alternatives: Sequence[Any] | None = None,
    *,
    verifier: MathReward | None = None,
) -> Verdict:
    r"""Binary verdict for one completion.

    Parameters
    ----------
    completion : str or list of dict
        String or list of chat messages.
    answer : str, number or list
        Gold answer (string, number, or list of acceptable answers).
    answer_alternatives : sequence, optional
        Further acceptable gold answers, or None.
    verifier : MathReward, optional
        A configured :class:`MathReward` (default settings if None).

    Returns
    -------
    Verdict
        Status ``CORRECT``, ``WRONG``, ``UNPARSEABLE_GOLD``, ``TIMEOUT`` or ``ERROR``.

    Raises
    ------
    ValueError
        A malformed completion (see :func:`~sara_trl.rewards.verdict.completion_text`).

    Examples
    --------
    >>> math_success(r"The final answer is $\boxed{10,\!080}$", "10080").status
    <Status.CORRECT: 'correct'>
    """
    return math_successes([completion], [answer], [answer_alternatives], verifier=verifier)[0]
