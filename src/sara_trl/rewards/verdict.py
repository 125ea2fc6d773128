"""Binary verdicts shared by every verifier, and the completion-to-text helper.

A *verdict* is the binary outcome the allocator needs (paper Sec. 2: ``r(q, o) in {0, 1}``), kept apart from any
shaped score. Every verifier in :mod:`sara_trl.rewards` returns a :class:`Verdict`; its :attr:`Verdict.reward` is the
value a TRL reward function reports: ``1.0`` (correct), ``0.0`` (wrong) or ``None`` (cannot judge: the gold answer is
unusable, the verifier timed out, or it crashed). TRL turns ``None`` into NaN, which the allocator treats as an
unscorable rollout (it costs a rollout but does not move the posterior).

The rest is the shared part of every reward class (math, numeric, Countdown, format): :class:`VerdictReward` turns a
``judge`` method into a TRL reward function (its ``__name__``, the dataset columns it reads, the checks of those
columns, the counters, ``verdicts`` and ``__call__``); :func:`check_columns` validates the dataset columns a reward
needs, :func:`all_answers_verdict` applies the one rule for completions that state several final answers, and
:func:`count_verdicts` counts the verdicts in :func:`sara_trl.rewards.stats`.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .stats import count

__all__ = [
    "Status",
    "Verdict",
    "VerdictReward",
    "completion_text",
    "check_columns",
    "all_answers_verdict",
    "count_verdicts",
]


class Status(str, enum.Enum):
    """Outcome of one verification.

    ``CORRECT`` and ``WRONG`` are judgements. ``UNPARSEABLE_GOLD`` (the reference answer cannot be parsed or is
    malformed), ``TIMEOUT`` (the hard time limit was hit) and ``ERROR`` (the verifier raised or its worker process
    died) mean "cannot judge" and map to a ``None`` reward, never to 1.0.
    """

    CORRECT = "correct"
    WRONG = "wrong"
    UNPARSEABLE_GOLD = "unparseable_gold"
    TIMEOUT = "timeout"
    ERROR = "error"


_REWARD = {Status.CORRECT: 1.0, Status.WRONG: 0.0}


@dataclass(frozen=True)
class Verdict:
    """Binary outcome of checking one completion.

    Attributes
    ----------
    status : Status
        The outcome.
    extracted : str or None
        The answer string taken from the completion (``None`` when none was found or not applicable).
    reason : str
        Short machine-readable detail, e.g. ``"no_answer"``, ``"numbers_mismatch"``, ``"division_by_zero"``,
        ``"fast_path"``; empty when there is nothing to add.
    """

    status: Status
    extracted: str | None = None
    reason: str = ""

    @property
    def reward(self) -> float | None:
        """``1.0`` if correct, ``0.0`` if wrong, ``None`` if the verdict is unusable (gold, timeout, error)."""
        return _REWARD.get(self.status)

    @property
    def success(self) -> bool | None:
        """``True``/``False`` for a judged completion, ``None`` when it cannot be judged."""
        r = self.reward
        return None if r is None else r == 1.0


def completion_text(completion: Any) -> str:
    """Return the text of one completion, in either of TRL's two formats.

    Parameters
    ----------
    completion : str or list of dict
        A plain string (standard format), or a list of chat messages ``[{"role": ..., "content": ...}, ...]``
        (conversational format, as TRL passes ``completions`` for conversational datasets). For a list, the
        ``content`` of every assistant message (every message when none has a role) is joined with newlines, so a
        final answer in the last message is found whether or not earlier turns exist. A message whose ``content`` is
        a list of parts (``[{"type": "text", "text": ...}]``) contributes its text parts. A single message dict is
        accepted as a one-message list.

    Returns
    -------
    str
        The completion text (possibly empty).

    Raises
    ------
    ValueError
        ``completion`` is neither a string nor a list of message dicts, or a message's ``content`` is neither a
        string nor a list of parts.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):  # a single message, tolerated
        completion = [completion]
    if not isinstance(completion, (list, tuple)):
        raise ValueError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")
    messages = []
    for m in completion:
        if not isinstance(m, dict):
            raise ValueError(f"a conversational completion must be a list of message dicts, got {type(m).__name__}")
        messages.append(m)
    assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
    parts = []
    for m in assistant:
        content = m.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
        else:
            raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")
    return "\n".join(parts)


def check_columns(reward_name: str, completions: Sequence[Any], optional: tuple[str, ...] = (), **columns: Any) -> None:
    """Check that a reward got every dataset column it needs, one entry per completion.

    Parameters
    ----------
    reward_name : str
        The reward's name, for the message (e.g. ``"countdown_reward"``).
    completions : sequence, shape (N,)
        The completions.
    optional : tuple of str, default ()
        Names among ``columns`` that may be ``None`` (column absent).
    **columns : sequence, shape (N,), or None
        The columns, by name (``answer=...``).

    Raises
    ------
    ValueError
        A required column is ``None`` (TRL passes dataset columns as keyword arguments, so the dataset lacks it), or
        a column's length is not ``N``.
    """
    missing = [k for k, v in columns.items() if v is None and k not in optional]
    if missing:
        names = " and ".join(repr(k) for k in missing)
        raise ValueError(
            f"{reward_name} needs the dataset column{'s' if len(missing) > 1 else ''} {names} (TRL passes dataset "
            f"columns to reward functions as keyword arguments, e.g. answer=...)"
        )
    for k, v in columns.items():
        if v is not None and len(v) != len(completions):
            raise ValueError(f"got {len(completions)} completions but {len(v)} {k if k.endswith('s') else k + 's'}")


def all_answers_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict for a completion that states several final answers: every one of them must be correct.

    A completion that commits to several *different* final answers (``\\boxed{3}`` ... ``\\boxed{5}``) has hedged,
    not answered: rewarding it whenever one candidate is right would teach the policy to list candidates. The same
    answer stated twice (in any equivalent form) is one answer and stays correct.

    Parameters
    ----------
    verdicts : sequence of Verdict
        The verdicts of the stated answers, in order (at least one).

    Returns
    -------
    Verdict
        The single verdict when there is one. With several: ``WRONG`` (reason ``"several_answers"``) when any answer
        is wrong; ``CORRECT`` when all are (the last answer is reported as ``extracted``); otherwise the first
        verdict that cannot be judged (timeout, error, unparseable gold).

    Raises
    ------
    ValueError
        ``verdicts`` is empty.
    """
    if not verdicts:
        raise ValueError("all_answers_verdict needs at least one verdict")
    if len(verdicts) == 1:
        return verdicts[0]
    wrong = [v for v in verdicts if v.status is Status.WRONG]
    if wrong:
        return Verdict(Status.WRONG, verdicts[-1].extracted, "several_answers")
    unjudged = [v for v in verdicts if v.status is not Status.CORRECT]
    return unjudged[0] if unjudged else Verdict(Status.CORRECT, verdicts[-1].extracted, verdicts[-1].reason)


def count_verdicts(verifier: str, verdicts: list[Verdict]) -> list[Verdict]:
    """Count each verdict in :func:`sara_trl.rewards.stats` as ``"<verifier>/<status>"``; returns ``verdicts``.

    Parameters
    ----------
    verifier : str
        Counter prefix, e.g. ``"math"``.
    verdicts : list of Verdict, shape (N,)
        The verdicts to count.

    Returns
    -------
    list of Verdict, shape (N,)
        ``verdicts`` itself, unchanged.
    """
    for v in verdicts:
        count(f"{verifier}/{v.status.value}")
    return verdicts


# -- the reward-class scaffold ------------------------------------------------------------------------------------
_POS = inspect.Parameter.POSITIONAL_OR_KEYWORD


@dataclass
class VerdictReward:
    """A reward function in TRL's signature built from a ``judge`` method: the one scaffold of every reward class.

    A verifier subclasses it (as a ``@dataclass`` of its options) and states only what differs: its name, the
    counter prefix, the dataset columns it reads and how a batch is judged::

        @dataclass
        class NumericReward(VerdictReward):
            name = "numeric_reward"
            counter = "numeric"
            columns = ("answer",)

            def judge(self, completions, answer):
                return [numeric_success(c, a) for c, a in zip(completions, answer)]

    Every subclass then has

    * ``__name__ == name`` on each instance (set in ``__post_init__``; TRL logs ``rewards/<name>``), and pickles as
      the dataclass it is (only its fields and ``__name__``);
    * ``verdicts(completions, <columns>)``: the columns checked by :func:`check_columns` (the optional ones may be
      None), ``judge`` called with them by name, the verdicts counted by :func:`count_verdicts` under ``counter``;
    * ``__call__(completions, <columns> = None, **kwargs)``: TRL's reward signature; the columns are taken from the
      arguments, everything else TRL passes (other columns, ``prompts``, ``completion_ids``, ``trainer_state``, ...)
      is ignored, and each verdict becomes :meth:`reward` (``1.0`` / ``0.0`` / ``None``).

    Both methods carry the signature that names the columns (``inspect.signature``, ``help``).

    Attributes
    ----------
    name : str
        Class attribute: the ``__name__`` of the instances and the name in error messages (``"numeric_reward"``).
    counter : str or None
        Class attribute: the prefix of the verdict counters in :func:`sara_trl.rewards.stats` (``"numeric"``);
        None: not counted.
    columns : tuple of str
        Class attribute: the dataset columns read, in the order of the positional parameters after
        ``completions``.
    optional : tuple of str
        Class attribute: those of ``columns`` that may be absent (``judge`` then gets None for them).
    """

    name: ClassVar[str] = ""
    counter: ClassVar[str | None] = None
    columns: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = ", ".join(f"``{c}``" for c in cls.columns) or "none"
        raises = "Raises ValueError for a missing required column or mismatched lengths."
        if "verdicts" not in cls.__dict__:
            judged = [_param(c, optional=c in cls.optional) for c in cls.columns]
            doc = f"One :class:`Verdict` per completion; dataset columns read: {names}.\n\n{raises}"
            cls.verdicts = _signed(cls, "verdicts", VerdictReward._verdicts, judged, "list[Verdict]", doc)
        if "__call__" not in cls.__dict__:
            given = [_param(c, optional=True) for c in cls.columns]
            given.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation="Any"))
            returns = f"list[{inspect.get_annotations(cls.reward).get('return', 'float | None')}]"
            doc = (f"TRL reward function: one reward per completion (see :meth:`reward`); dataset columns read: "
                   f"{names}; other keyword arguments are ignored.\n\n{raises}")
            cls.__call__ = _signed(cls, "__call__", VerdictReward._rewards, given, returns, doc)

    def __post_init__(self) -> None:
        self.__name__ = self.name

    def judge(self, completions: Sequence[Any], **columns: Any) -> list[Verdict]:
        """One verdict per completion, given the checked dataset columns by name (what each verifier writes)."""
        raise NotImplementedError(f"{type(self).__name__} must define judge()")

    def reward(self, verdict: Verdict) -> float | None:
        """The reward reported for one verdict: :attr:`Verdict.reward` unless a subclass says otherwise."""
        return verdict.reward

    def _verdicts(self, completions: Sequence[Any], columns: dict[str, Any]) -> list[Verdict]:
        check_columns(self.name, completions, optional=self.optional, **columns)
        out = self.judge(completions, **columns)
        return count_verdicts(self.counter, out) if self.counter else out

    def _rewards(self, completions: Sequence[Any], columns: dict[str, Any]) -> list[float | None]:
        return [self.reward(v) for v in self._verdicts(completions, columns)]


def _param(name: str, optional: bool) -> inspect.Parameter:
    """A dataset-column parameter: ``name: Sequence[Any]``, or ``name: Sequence[Any] | None = None``."""
    if optional:
        return inspect.Parameter(name, _POS, annotation="Sequence[Any] | None", default=None)
    return inspect.Parameter(name, _POS, annotation="Sequence[Any]")


def _signed(cls: type, name: str, body: Callable, columns: list[inspect.Parameter], returns: str, doc: str) -> Callable:
    """``cls.<name>`` taking ``(self, completions, *columns)``: arguments bound as Python would, then
    ``body(self, completions, {column: value})``."""
    first = [inspect.Parameter("self", _POS), inspect.Parameter("completions", _POS, annotation="Sequence[Any]")]
    signature = inspect.Signature(first + columns, return_annotation=returns)
    names = cls.columns  # type: ignore[attr-defined]

    def method(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"{cls.__qualname__}.{name}() {err}") from None
        bound.apply_defaults()
        a = bound.arguments
        return body(a["self"], a["completions"], {c: a[c] for c in names})

    method.__name__ = name
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    method.__module__ = cls.__module__
    method.__doc__ = doc
    method.__signature__ = signature  # type: ignore[attr-defined]
    return method
