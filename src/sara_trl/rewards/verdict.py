"""Binary verdicts shared by every verifier, and the completion-to-text helper.

A *verdict* is the binary outcome the allocator needs (paper Sec. 2: ``r(q, o) in {0, 1}``), kept apart from any
shaped score. Every verifier in :mod:`sara_trl.rewards` returns a :class:`Verdict`; its :attr:`Verdict.reward` is the
value a TRL reward function reports: ``1.0`` (correct), ``0.0`` (wrong) or ``None`` (cannot judge: the gold answer is
unusable, the verifier timed out, or it crashed). TRL turns ``None`` into NaN, which the allocator treats as an
unscorable rollout (it costs a rollout but does not move the posterior).

The helpers below are the shared part of every verdict reward (math, numeric, Countdown): :func:`check_columns`
validates the dataset columns a reward needs, :func:`all_answers_verdict` applies the one rule for completions that
state several final answers, and :func:`count_verdicts` counts the verdicts in :func:`sara_trl.rewards.stats`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .stats import count

__all__ = ["Status", "Verdict", "completion_text", "check_columns", "all_answers_verdict", "count_verdicts"]


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
