r"""Math answer verification (math-verify) with a hard time limit, as a binary verdict and a TRL reward.

Pipeline for one completion (paper Sec. 2: ``r(q, o) in {0, 1}`` checks correctness):

1. take the completion text (plain or conversational, :func:`~sara_trl.rewards.verdict.completion_text`);
2. extract the final answer: last ``\boxed{}``, else the last "final answer is X" / "answer: X" phrase
   (:func:`~sara_trl.rewards.extract.extract_math_answer`); no answer -> ``WRONG`` (reason ``"no_answer"``);
3. normalize prediction and gold the same way (:func:`~sara_trl.rewards.extract.normalize_math_answer`);
4. *fast path*: when the gold answers and the prediction are all plain decimal numbers, compare them exactly with
   :class:`fractions.Fraction` in the calling process;
5. otherwise compare with math-verify (``parse`` + ``verify``) in a persistent worker process under a hard wall-clock
   limit (:mod:`sara_trl.rewards._pool`), which works from threads, asyncio-driven code and any number of processes.
   Gold answers are parsed once per worker (cached per string); finished (prediction, gold) comparisons are cached
   in the calling process.

The gold answer is ``UNPARSEABLE_GOLD`` (reward ``None``) when neither it nor any of its alternatives parses to a
symbolic object; a hard-limit hit is ``TIMEOUT`` (reward ``None``), counted in :func:`sara_trl.rewards.stats`.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from ._pool import ERROR as _POOL_ERROR
from ._pool import OK as _POOL_OK
from ._pool import get_pool
from .extract import extract_math_answer, normalize_math_answer
from .stats import count
from .verdict import Status, Verdict, completion_text

__all__ = ["MathReward", "math_reward", "math_success", "math_successes", "default_num_workers"]

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_GRACE_S = 2.0
DEFAULT_MAX_ANSWER_CHARS = 1000
_CACHE_SIZE = 1 << 16
_MAX_CHUNK = 16  # comparisons per worker message; bounds what one hard kill can cost

_LITERAL = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")


def default_num_workers() -> int:
    """Verifier worker processes per process: ``$SARA_VERIFIER_WORKERS`` if set, else ``min(4, cpu_count)``."""
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
        if isinstance(a, float) and a != a:  # NaN from a dataframe
            continue
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


_BASE_NUMBER = re.compile(r"^(-?)(?:\\text\{)?\s*([0-9A-Za-z]+)\s*\}?\s*_\s*\{?\s*(\d+)\s*\}?$")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base_number(s: str) -> tuple[str, int] | None:
    """``("52", 8)`` for ``52_8`` / ``52_{8}``: digits (lower case) and base, when every digit is valid in the base."""
    m = _BASE_NUMBER.match(s)
    if not m:
        return None
    sign, digits, base = m.group(1), m.group(2).lower(), int(m.group(3))
    if not 2 <= base <= 36 or any(_DIGITS.find(c) < 0 or _DIGITS.find(c) >= base for c in digits):
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


class MathReward:
    r"""Math correctness reward (TRL reward-function signature) backed by math-verify with a hard time limit.

    Instances are picklable (only the configuration is pickled; worker processes are per process and started on
    first use) and usable directly as ``reward_funcs=`` of any TRL trainer. ``__name__`` is ``"math_reward"`` so TRL
    logs it as ``rewards/math_reward``.

    Args:
        timeout_s: soft time limit per comparison in seconds (worker-side); the hard limit is
            ``timeout_s + grace_s`` (the worker is killed and restarted). Either gives ``TIMEOUT`` -> reward None.
        grace_s: seconds between soft and hard limit.
        num_workers: verifier worker processes (default :func:`default_num_workers`); 0 runs math-verify inline in
            the calling thread (soft limit on the main thread only, no hard limit; for debugging).
        memory_limit_mb: address-space limit of each worker, MiB (``None``: no limit).
        max_answer_chars: an extracted answer longer than this is ``WRONG`` (reason ``"answer_too_long"``) without
            symbolic work.

    Raises:
        ValueError: non-positive ``timeout_s``/``max_answer_chars``, negative ``grace_s``/``num_workers``.
    """

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        grace_s: float = DEFAULT_GRACE_S,
        num_workers: int | None = None,
        memory_limit_mb: int | None = 4096,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
    ):
        if timeout_s is None or not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if grace_s is None or grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        if num_workers is not None and num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if max_answer_chars < 1:
            raise ValueError(f"max_answer_chars must be >= 1, got {max_answer_chars}")
        self.timeout_s = float(timeout_s)
        self.grace_s = float(grace_s)
        self.num_workers = num_workers
        self.memory_limit_mb = memory_limit_mb
        self.max_answer_chars = int(max_answer_chars)
        self.__name__ = "math_reward"

    def __repr__(self) -> str:
        return (
            f"MathReward(timeout_s={self.timeout_s}, grace_s={self.grace_s}, num_workers={self.num_workers}, "
            f"memory_limit_mb={self.memory_limit_mb}, max_answer_chars={self.max_answer_chars})"
        )

    def _pool(self):
        from . import _math_worker  # imports math-verify/sympy; only needed once a comparison is due

        n = default_num_workers() if self.num_workers is None else self.num_workers
        return get_pool(n, self.timeout_s, self.grace_s, _math_worker.warm_up, self.memory_limit_mb)

    def verdicts(
        self,
        completions: Sequence[Any],
        answer: Sequence[Any],
        answer_alternatives: Sequence[Any] | None = None,
    ) -> list[Verdict]:
        """Binary verdicts for a batch of completions (one pool round for everything not decided locally).

        Args:
            completions: ``(N,)`` completions, each a string or a list of chat messages.
            answer: ``(N,)`` gold answers (strings; numbers are converted with ``str``; a list means "any of these").
            answer_alternatives: optional ``(N,)`` lists of further acceptable gold answers (entries may be None).

        Returns:
            ``(N,)`` :class:`Verdict` objects.

        Raises:
            ValueError: mismatched lengths or a malformed completion.
        """
        n = len(completions)
        if len(answer) != n:
            raise ValueError(f"got {n} completions but {len(answer)} answers")
        if answer_alternatives is None:
            answer_alternatives = [None] * n
        elif len(answer_alternatives) != n:
            raise ValueError(f"got {n} completions but {len(answer_alternatives)} answer_alternatives")
        out: list[Verdict | None] = [None] * n
        todo: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        extracted: list[str | None] = [None] * n
        for i, (c, a, alts) in enumerate(zip(completions, answer, answer_alternatives)):
            golds = _gold_tuple(a, alts)
            raw = extract_math_answer(completion_text(c))
            extracted[i] = raw
            if not golds:
                out[i] = Verdict(Status.UNPARSEABLE_GOLD, raw, "empty_gold")
                continue
            if raw is not None and len(raw) > self.max_answer_chars:
                out[i] = Verdict(Status.WRONG, raw[:100], "answer_too_long")
                continue
            pred = normalize_math_answer(raw) if raw is not None else ""
            if pred:
                fast = _fast_path(pred, golds)
                if fast is not None:
                    out[i] = Verdict(fast, raw, "fast_path")
                    count("math/fast_path")
                    continue
                based = _base_rule(pred, golds)
                if based is not None:
                    out[i] = Verdict(based, raw, "base_notation")
                    continue
            key = (pred, golds)
            cached = _RESULTS.get(key)
            if cached is not None:
                out[i] = Verdict(cached, raw, "no_answer" if not pred and cached is Status.WRONG else "")
                count("math/cache_hit")
                continue
            todo.setdefault(key, []).append(i)
        if todo:
            from . import _math_worker

            # Sorted by gold answer and sent in chunks: completions that share a gold answer mostly land on one
            # worker (which parses that gold once), and one message carries several comparisons (each message
            # costs a round trip). Chunks are small enough to keep every worker busy.
            keys = sorted(todo, key=lambda k: k[1])
            pool = self._pool()
            chunk = max(1, min(_MAX_CHUNK, -(-len(keys) // (4 * max(1, pool.num_workers)))))
            groups = [list(range(i, min(i + chunk, len(keys)))) for i in range(0, len(keys), chunk)]
            results = pool.run(_math_worker.check_answer, keys, groups=groups)
            for key, (status, value) in zip(keys, results):
                if status == _POOL_OK:
                    st = Status(value)
                    _RESULTS.put(key, st)
                    reason = "no_answer" if not key[0] and st is Status.WRONG else ""
                elif status == _POOL_ERROR:
                    st, reason = Status.ERROR, str(value)[:200]
                else:
                    st, reason = Status.TIMEOUT, "timeout"
                for i in todo[key]:
                    out[i] = Verdict(st, extracted[i], reason)
        for v in out:
            count(f"math/{v.status.value}")
        return out  # type: ignore[return-value]

    def __call__(
        self,
        completions: Sequence[Any],
        answer: Sequence[Any] | None = None,
        answer_alternatives: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """TRL reward function: ``1.0`` correct, ``0.0`` wrong or no answer, ``None`` unscorable.

        Args:
            completions: ``(N,)`` completions (strings or lists of chat messages).
            answer: ``(N,)`` gold answers: the dataset column ``answer`` (TRL passes dataset columns as keyword
                arguments).
            answer_alternatives: optional column ``(N,)`` of lists of other acceptable answers.
            **kwargs: other columns and trainer arguments (``prompts``, ``completion_ids``, ``trainer_state``, ...),
                ignored.

        Returns:
            ``(N,)`` list of ``1.0`` / ``0.0`` / ``None`` (unparseable gold, timeout or verifier error).

        Raises:
            ValueError: no ``answer`` column, or mismatched lengths.
        """
        if answer is None:
            raise ValueError(
                "math_reward needs the gold answers: give the dataset an 'answer' column (TRL passes it as answer=...)"
            )
        return [v.reward for v in self.verdicts(completions, answer, answer_alternatives)]


_DEFAULT = MathReward()


def math_reward(
    completions: Sequence[Any],
    answer: Sequence[Any] | None = None,
    answer_alternatives: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    r"""Math correctness reward with default settings (5 s soft / 7 s hard limit per comparison).

    TRL reward-function signature ``(completions, **kwargs) -> list[float | None]``; see :meth:`MathReward.__call__`.
    Use :class:`MathReward` for other limits or worker counts.

    Example:
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
    """Binary verdicts for a batch (see :meth:`MathReward.verdicts`); ``verifier`` defaults to the shared default."""
    return (verifier or _DEFAULT).verdicts(completions, answer, answer_alternatives)


def math_success(
    completion: Any,
    answer: Any,
    answer_alternatives: Sequence[Any] | None = None,
    *,
    verifier: MathReward | None = None,
) -> Verdict:
    r"""Binary verdict for one completion.

    Args:
        completion: string or list of chat messages.
        answer: gold answer (string, number, or list of acceptable answers).
        answer_alternatives: further acceptable gold answers, or None.
        verifier: a configured :class:`MathReward` (default settings if None).

    Returns:
        :class:`Verdict` with status ``CORRECT``, ``WRONG``, ``UNPARSEABLE_GOLD``, ``TIMEOUT`` or ``ERROR``.

    Example:
        >>> math_success(r"The final answer is $\boxed{10,\!080}$", "10080").status
        <Status.CORRECT: 'correct'>
    """
    return math_successes([completion], [answer], [answer_alternatives], verifier=verifier)[0]
