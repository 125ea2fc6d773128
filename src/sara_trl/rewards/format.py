r"""Optional format reward for the ``<think>...</think><answer>...</answer>`` layout (a shaped score, not success).

This is a separate reward function on purpose: the allocator's notion of success must stay the binary correctness
verdict (paper Sec. 2). If you add it to ``reward_funcs`` next to a correctness reward, decide success with a
threshold on the weighted sum (see :mod:`sara_trl.rewards`), e.g. weights ``[1.0, 0.1]`` and threshold ``0.5`` so
that only correct completions count as successes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .verdict import Status, Verdict, VerdictReward, completion_text

__all__ = ["format_reward", "FormatReward", "has_think_answer_format"]

# The prompt may end with "<think>" (generation prefilled), so the opening tag is optional; exactly one </think> and
# one <answer>...</answer> pair, nothing but whitespace after </answer>.
_LAYOUT = re.compile(r"^\s*(?:<think>)?(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*$", re.DOTALL)
_MAX_CHARS = 200_000


def has_think_answer_format(text: str, require_think_open: bool = False) -> bool:
    """True if ``text`` is ``[<think>] reasoning </think> <answer> answer </answer>`` with one of each tag.

    Parameters
    ----------
    text : str
        Completion text; texts over 200,000 characters are rejected.
    require_think_open : bool, default False
        Also require the opening ``<think>`` tag (leave False when the prompt ends with it).

    Returns
    -------
    bool
        Whether the layout holds, with a non-empty answer and no ``<think>`` inside the reasoning.
    """
    if len(text) > _MAX_CHARS:
        return False
    if text.count("<think>") > 1 or text.count("</think>") != 1:
        return False
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return False
    if require_think_open and not text.lstrip().startswith("<think>"):
        return False
    m = _LAYOUT.match(text)
    return bool(m and m.group("answer").strip() and "<think>" not in m.group("think"))


@dataclass
class FormatReward(VerdictReward):
    """``<think>``/``<answer>`` layout reward in TRL's signature; picklable, ``__name__ == "format_reward"``.

    ``__call__(completions, **kwargs)`` gives ``value`` for a well-formed completion and ``0.0`` otherwise (never
    None; dataset columns and trainer arguments are ignored); it raises ValueError for a completion that is neither
    a string nor a list of chat messages. ``verdicts(completions)`` gives the layout verdicts it is built from
    (``CORRECT``: well-formed); they are not counted in :func:`sara_trl.rewards.stats` and are no success verdict.

    Parameters
    ----------
    require_think_open : bool, default False
        Require the opening ``<think>`` tag in the completion.
    value : float, default 1.0
        Reward for a well-formed completion (a malformed one gets 0.0).
    """

    name = "format_reward"

    require_think_open: bool = False
    value: float = 1.0

    def __post_init__(self):
        self.require_think_open = bool(self.require_think_open)
        self.value = float(self.value)
        super().__post_init__()

    def judge(self, completions: Sequence[Any]) -> list[Verdict]:
        """``CORRECT`` for each completion in the layout of :func:`has_think_answer_format`, else ``WRONG``."""
        formatted = [has_think_answer_format(completion_text(c), self.require_think_open) for c in completions]
        return [Verdict(Status.CORRECT if ok else Status.WRONG) for ok in formatted]

    def reward(self, verdict: Verdict) -> float:
        """``value`` for a well-formed completion, ``0.0`` otherwise."""
        return self.value if verdict.status is Status.CORRECT else 0.0


_DEFAULT = FormatReward()


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for ``[<think>]...</think><answer>...</answer>`` completions, else 0.0 (default :class:`FormatReward`).

    Parameters
    ----------
    completions : sequence, shape (N,)
        Strings or lists of chat messages.
    **kwargs
        Dataset columns and trainer arguments, ignored.

    Returns
    -------
    list of float, shape (N,)
        ``1.0`` or ``0.0`` per completion.

    Raises
    ------
    ValueError
        A completion is neither a string nor a list of chat messages.
    """
    return _DEFAULT(completions, **kwargs)
