r"""Verifiable rewards: binary success verdicts and TRL reward functions.

Every reward function has TRL's signature ``(completions, **kwargs) -> list[float | None]``: ``completions`` are
strings or lists of chat messages, dataset columns arrive as keyword arguments, and the result holds ``1.0``
(correct), ``0.0`` (wrong) or ``None`` (cannot judge; TRL stores NaN). All are picklable (module-level functions or
instances of module-level classes) and can be passed directly as ``reward_funcs=`` to TRL trainers.

===================  =========================  ====================================================================
reward               dataset columns            verdict function
===================  =========================  ====================================================================
``math_reward``      ``answer``,                :func:`math_success` (math-verify in time-limited worker processes)
                     ``answer_alternatives``?
``countdown_reward`` ``target``, ``nums``       :func:`countdown_success` (restricted AST walk, exact fractions)
``numeric_reward``   ``answer``                 :func:`numeric_success` (last number / ``\boxed{}``)
``format_reward``    (none)                     shaped score only: ``<think>``/``<answer>`` layout, never "success"
===================  =========================  ====================================================================

**Success versus reward.** SARA decides effectiveness from a binary success per rollout (paper Sec. 2,
``r(q, o) in {0, 1}``; Eq. 2-3 consume successes). Each verifier's :class:`Verdict` is that binary outcome; a
shaped score (format bonus, length penalty) must be a *separate* reward function. With several reward functions
(weights ``w_j``, outputs ``r_j``), map them to success with a threshold on the weighted sum, the rule the trainer
applies::

    combined = sum_j w_j * r_j      (None entries skipped; all None -> unscorable)
    success  = combined > success_threshold

e.g. ``reward_funcs=[math_reward, format_reward]``, ``reward_weights=[1.0, 0.1]``, ``success_threshold=0.5``: only
correct answers are successes, and the format bonus alone (0.1) never is. A continuous custom reward maps the same
way (choose the threshold that separates "solved" from "not solved"), or binarize one column only (the trainer's
``reward_index``).

**Several final answers.** Every verifier that reads "the final answer" (math, numeric, Countdown) requires every
answer a completion states to be correct (:func:`all_answers_verdict`): ``\boxed{3} or \boxed{5}`` (or two
different ``<answer>`` blocks) is a hedge and scores 0.0; the same answer stated twice scores 1.0. Only the text
after the last ``</think>`` is read when it states an answer. The modules' docstrings give each verifier's details.

**Bounded time.** Symbolic comparison runs in persistent worker processes with a soft limit (signal in the worker)
and a hard limit (the parent kills the worker): it works from threads, asyncio-driven reward loops and in every
process. Timeouts give ``None`` and are counted separately: see :func:`stats`. The pool is public
(:class:`WorkerPool`, :func:`get_pool`, :mod:`sara_trl.rewards.pool`) for new verifiers whose checks need a time
limit.

**A new verifier** is one module: a function ``<name>_success(completion, **gold) -> Verdict``, and a small
dataclass reward built on :class:`VerdictReward` that states its ``name``, its counter prefix, the dataset
``columns`` it reads and a ``judge`` method calling the success function; ``verdicts`` (columns checked, verdicts
counted) and ``__call__`` (TRL's signature) come from :class:`VerdictReward` (see :mod:`sara_trl.rewards.numeric`);
register it in :data:`REWARD_FUNCS`.
"""

from __future__ import annotations

from collections.abc import Callable

from .countdown import CountdownReward, countdown_reward, countdown_success, evaluate_expression
from .extract import (
    boxed_answers,
    extract_math_answer,
    extract_math_answers,
    is_prose_answer,
    last_boxed,
    normalize_math_answer,
)
from .format import FormatReward, format_reward, has_think_answer_format
from .math_verifier import MathReward, clear_caches, math_reward, math_success, math_successes
from .numeric import NumericReward, numeric_reward, numeric_success
from .pool import WorkerPool, get_pool, shutdown_pools
from .relations import relation_to_interval
from .stats import reset_stats, stats
from .unicode_math import unicode_to_latex
from .verdict import (
    Status,
    Verdict,
    VerdictReward,
    all_answers_verdict,
    check_columns,
    completion_text,
    count_verdicts,
)

__all__ = [
    "REWARD_FUNCS",
    "get_reward_func",
    "Status",
    "Verdict",
    "VerdictReward",
    "completion_text",
    "check_columns",
    "all_answers_verdict",
    "count_verdicts",
    "MathReward",
    "math_reward",
    "math_success",
    "math_successes",
    "CountdownReward",
    "countdown_reward",
    "countdown_success",
    "evaluate_expression",
    "NumericReward",
    "numeric_reward",
    "numeric_success",
    "FormatReward",
    "format_reward",
    "has_think_answer_format",
    "extract_math_answer",
    "extract_math_answers",
    "boxed_answers",
    "last_boxed",
    "normalize_math_answer",
    "is_prose_answer",
    "unicode_to_latex",
    "relation_to_interval",
    "stats",
    "reset_stats",
    "clear_caches",
    "WorkerPool",
    "get_pool",
    "shutdown_verifiers",
]

#: name -> reward function (TRL signature). ``"format"`` is a shaped score, not a success verdict.
REWARD_FUNCS: dict[str, Callable[..., list]] = {
    "math": math_reward,
    "countdown": countdown_reward,
    "numeric": numeric_reward,
    "format": format_reward,
}


def get_reward_func(name: str) -> Callable[..., list]:
    """Reward function registered under ``name`` (see :data:`REWARD_FUNCS`).

    Parameters
    ----------
    name : str
        Registered name, one of the keys of :data:`REWARD_FUNCS`.

    Returns
    -------
    callable
        The reward function, TRL signature ``(completions, **kwargs) -> list[float | None]``.

    Raises
    ------
    ValueError
        Unknown name (the message lists the known ones).
    """
    try:
        return REWARD_FUNCS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reward {name!r}; known: {sorted(REWARD_FUNCS)}") from None


def shutdown_verifiers() -> None:
    """Stop this process's verifier worker processes now (they restart on demand; also done at exit)."""
    shutdown_pools()
