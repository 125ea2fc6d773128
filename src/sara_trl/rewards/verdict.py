"""Binary verdicts shared by every verifier, and the completion-to-text helper.

A *verdict* is the binary outcome the allocator needs (paper Sec. 2: ``r(q, o) in {0, 1}``), kept apart from any
shaped score. Every verifier in :mod:`sara_trl.rewards` returns a :class:`Verdict`; its :attr:`Verdict.reward` is the
value a TRL reward function reports: ``1.0`` (correct), ``0.0`` (wrong) or ``None`` (cannot judge: the gold answer is
unusable, the verifier timed out, or it crashed). TRL turns ``None`` into NaN, which the allocator treats as an
unscorable rollout (it costs a rollout but does not move the posterior).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["Status", "Verdict", "completion_text"]


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

    Attributes:
        status: the :class:`Status`.
        extracted: the answer string taken from the completion (``None`` when none was found or not applicable).
        reason: short machine-readable detail, e.g. ``"no_answer"``, ``"numbers_mismatch"``, ``"division_by_zero"``,
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

    Args:
        completion: a plain string (standard format), or a list of chat messages ``[{"role": ..., "content": ...},
            ...]`` (conversational format, as TRL passes ``completions`` for conversational datasets). For a list, the
            ``content`` of every assistant message (every message when none has a role) is joined with newlines, so
            a final answer in the last message is found whether or not earlier turns exist. A message whose
            ``content`` is a list of parts (``[{"type": "text", "text": ...}]``) contributes its text parts.

    Returns:
        The completion text (possibly empty).

    Raises:
        ValueError: ``completion`` is neither a string nor a list of message dicts.
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
