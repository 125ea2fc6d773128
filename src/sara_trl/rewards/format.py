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

from .verdict import completion_text

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
class FormatReward:
    """``<think>``/``<answer>`` layout reward in TRL's signature; picklable, ``__name__ == "format_reward"``.

    Parameters
    ----------
    require_think_open : bool, default False
        Require the opening ``<think>`` tag in the completion.
    value : float, default 1.0
        Reward for a well-formed completion (a malformed one gets 0.0).
    """

    require_think_open: bool = False
    value: float = 1.0

    def __post_init__(self):
        self.require_think_open = bool(self.require_think_open)
        self.value = float(self.value)
        self.__name__ = "format_reward"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Score the layout of each completion.

        Parameters
        ----------
        completions : sequence, shape (N,)
            Strings or lists of chat messages.
        **kwargs
            Dataset columns and trainer arguments, ignored.

        Returns
        -------
        list of float, shape (N,)
            ``value`` for a well-formed completion, ``0.0`` otherwise (never None).

        Raises
        ------
        ValueError
            A completion is neither a string nor a list of chat messages.
        """
        return [
            self.value if has_think_answer_format(completion_text(c), self.require_think_open) else 0.0
            for c in completions
        ]


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
