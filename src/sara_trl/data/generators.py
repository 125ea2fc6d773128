r"""Seeded task generators for offline runs: Countdown tasks (solvable by construction) and tiny arithmetic prompts.

Both are deterministic per ``seed`` (``numpy.random.default_rng``; the PCG64 stream is stable across numpy
versions), need no download, and return conversational :class:`datasets.Dataset` objects with the columns the
matching reward reads (:func:`sara_trl.rewards.countdown_reward`: ``target``, ``nums``;
:func:`sara_trl.rewards.numeric_reward`: ``answer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import datasets
import numpy as np

from .templates import ARITHMETIC_INSTRUCTION, COUNTDOWN_TEMPLATE, chat_prompt, fill_template

__all__ = ["make_countdown_tasks", "make_countdown_dataset", "make_arithmetic_dataset"]

_CD_OPS = ("+", "-", "*", "/")


def _combine(a: Fraction, b: Fraction, op: str) -> Fraction | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None
    return a / b


def _random_expression(
    rng: np.random.Generator, nums: list[int], ops: Sequence[str], integer_steps: bool
) -> tuple[Fraction, str] | None:
    """Combine all numbers in a random order and tree shape; None if a step is invalid."""
    items: list[tuple[Fraction, str]] = [(Fraction(n), str(n)) for n in nums]
    while len(items) > 1:
        i, j = rng.choice(len(items), size=2, replace=False)
        (a, ea), (b, eb) = items[int(i)], items[int(j)]
        op = ops[int(rng.integers(len(ops)))]
        v = _combine(a, b, op)
        if v is None or (integer_steps and v.denominator != 1) or v < 0:
            return None
        rest = [items[k] for k in range(len(items)) if k not in (int(i), int(j))]
        items = rest + [(v, f"({ea} {op} {eb})")]
    value, expr = items[0]
    return value, expr[1:-1] if expr.startswith("(") and expr.endswith(")") else expr


def make_countdown_tasks(
    num_tasks: int,
    seed: int = 0,
    num_count: int | Sequence[int] = (3, 4),
    min_number: int = 1,
    max_number: int = 99,
    min_target: int = 1,
    max_target: int = 999,
    ops: Sequence[str] = _CD_OPS,
    integer_steps: bool = True,
    max_tries: int = 10_000,
) -> list[dict]:
    """Generate Countdown tasks that are solvable by construction.

    For each task: draw the number count from ``num_count``, draw that many integers uniformly from
    ``[min_number, max_number]``, then build a random expression tree over all of them (random pair, random operator,
    repeated) and use its value as the target. A draw is rejected and redrawn when a step divides by zero, goes
    negative, leaves the integers (``integer_steps``), or the target falls outside ``[min_target, max_target]``.

    Parameters
    ----------
    num_tasks : int
        Number of tasks (>= 0).
    seed : int, default 0
        Random seed; the same arguments give the same tasks.
    num_count : int or sequence of int, default (3, 4)
        How many numbers per task (an int, or a sequence to draw from uniformly), each >= 2.
    min_number, max_number : int, default 1, 99
        Range of the numbers (inclusive, >= 0).
    min_target, max_target : int, default 1, 999
        Accepted range of the target (inclusive).
    ops : sequence of str, default ("+", "-", "*", "/")
        Operators to build with, a subset of ``+ - * /``.
    integer_steps : bool, default True
        Require every intermediate value to be a non-negative integer (as in the human game).
    max_tries : int, default 10000
        Attempts per task before giving up.

    Returns
    -------
    list of dict, length num_tasks
        Dicts ``{"target": int, "nums": list[int], "solution_expr": str}``; ``solution_expr`` uses every number
        exactly once and evaluates to ``target``.

    Raises
    ------
    ValueError
        Invalid ranges, number counts or operators.
    RuntimeError
        No valid task found within ``max_tries`` (ranges too tight).
    """
    counts = [int(num_count)] if np.isscalar(num_count) else [int(c) for c in num_count]
    if num_tasks < 0:
        raise ValueError(f"num_tasks must be >= 0, got {num_tasks}")
    if not counts or min(counts) < 2:
        raise ValueError(f"num_count values must be >= 2, got {counts}")
    if not 0 <= min_number <= max_number:
        raise ValueError(f"need 0 <= min_number <= max_number, got {min_number}, {max_number}")
    if min_target > max_target:
        raise ValueError(f"need min_target <= max_target, got {min_target}, {max_target}")
    ops = tuple(ops)
    if not ops or not set(ops) <= set(_CD_OPS):
        raise ValueError(f"ops must be a non-empty subset of {_CD_OPS}, got {ops}")
    rng = np.random.default_rng(seed)
    tasks = []
    for _ in range(num_tasks):
        for _attempt in range(max_tries):
            n = counts[int(rng.integers(len(counts)))]
            nums = [int(x) for x in rng.integers(min_number, max_number + 1, size=n)]
            built = _random_expression(rng, nums, ops, integer_steps)
            if built is None:
                continue
            value, expr = built
            if value.denominator != 1 or not min_target <= value <= max_target:
                continue
            tasks.append({"target": int(value), "nums": nums, "solution_expr": expr})
            break
        else:
            raise RuntimeError(f"no valid Countdown task in {max_tries} tries; widen the number or target ranges")
    return tasks


def make_countdown_dataset(
    num_tasks: int,
    seed: int = 0,
    num_count: int | Sequence[int] = (3, 4),
    min_number: int = 1,
    max_number: int = 99,
    min_target: int = 1,
    max_target: int = 999,
    ops: Sequence[str] = _CD_OPS,
    integer_steps: bool = True,
    template: str | None = None,
    system_prompt: str | None = None,
) -> datasets.Dataset:
    """Seeded, solvable Countdown tasks as a conversational dataset.

    Parameters
    ----------
    num_tasks, seed, num_count, min_number, max_number, min_target, max_target, ops, integer_steps
        As in :func:`make_countdown_tasks` (``max_tries`` keeps its default there).
    template : str, optional
        User-message template with placeholders ``{numbers}`` and ``{target}`` (default
        :data:`~sara_trl.data.templates.COUNTDOWN_TEMPLATE`).
    system_prompt : str, optional
        System message; none when None or empty.

    Returns
    -------
    datasets.Dataset
        ``num_tasks`` rows with columns ``prompt, target, nums, solution_expr, id, source``
        (``source="countdown/generated"``, ``id="countdown-gen-<seed>-<i>"``).

    Raises
    ------
    ValueError
        As :func:`make_countdown_tasks`, or a template without ``{numbers}``/``{target}``.
    RuntimeError
        As :func:`make_countdown_tasks`.
    """
    template = COUNTDOWN_TEMPLATE if template is None else template
    tasks = make_countdown_tasks(
        num_tasks, seed, num_count, min_number, max_number, min_target, max_target, ops, integer_steps
    )
    rows = {
        "prompt": [
            chat_prompt(fill_template(template, numbers=t["nums"], target=t["target"]), system_prompt) for t in tasks
        ],
        "target": [t["target"] for t in tasks],
        "nums": [t["nums"] for t in tasks],
        "solution_expr": [t["solution_expr"] for t in tasks],
        "id": [f"countdown-gen-{seed}-{i}" for i in range(len(tasks))],
        "source": ["countdown/generated"] * len(tasks),
    }
    return datasets.Dataset.from_dict(rows, features=_countdown_features())


def _countdown_features() -> datasets.Features:
    msg = {"role": datasets.Value("string"), "content": datasets.Value("string")}
    return datasets.Features(
        {
            "prompt": [msg],
            "target": datasets.Value("int64"),
            "nums": datasets.Sequence(datasets.Value("int64")),
            "solution_expr": datasets.Value("string"),
            "id": datasets.Value("string"),
            "source": datasets.Value("string"),
        }
    )


_ARITH_OPS = ("+", "-", "*")


def _eval_flat(operands: Sequence[int], ops: Sequence[str]) -> int:
    """Value of ``operands[0] ops[0] operands[1] ...`` with ``*`` binding tighter than ``+``/``-``."""
    total, sign, prod = 0, 1, operands[0]
    for op, x in zip(ops, operands[1:]):
        if op == "*":
            prod *= x
        else:
            total += sign * prod
            sign, prod = (1 if op == "+" else -1), x
    return total + sign * prod


def make_arithmetic_dataset(
    num_prompts: int,
    seed: int = 0,
    max_operand: int = 9,
    num_operands: int = 2,
    ops: Sequence[str] = ("+",),
    instruction: str = ARITHMETIC_INSTRUCTION,
    system_prompt: str | None = None,
    min_operand: int = 0,
) -> datasets.Dataset:
    """Tiny arithmetic prompts ("What is 3 + 5? Answer with only the number.") for the quickstart with a ~135M model.

    Operands are drawn uniformly from ``[min_operand, max_operand]`` and operators from ``ops``; the answer follows
    the usual precedence (``*`` before ``+``/``-``) and is computed exactly (no ``eval``). Use with
    :func:`sara_trl.rewards.numeric_reward`.

    Parameters
    ----------
    num_prompts : int
        Number of prompts (>= 0).
    seed : int, default 0
        Random seed (same arguments -> same dataset).
    max_operand : int, default 9
        Largest operand (inclusive, >= ``min_operand``).
    num_operands : int, default 2
        Operands per expression (>= 2).
    ops : sequence of str, default ("+",)
        Operators, a subset of ``("+", "-", "*")``.
    instruction : str, default :data:`~sara_trl.data.templates.ARITHMETIC_INSTRUCTION`
        User-message template with an ``{expression}`` placeholder.
    system_prompt : str, optional
        System message; none when None or empty.
    min_operand : int, default 0
        Smallest operand (inclusive, >= 0).

    Returns
    -------
    datasets.Dataset
        ``num_prompts`` rows with columns ``prompt``, ``answer`` (string, e.g. ``"8"``), ``expression``, ``id``,
        ``source``.

    Raises
    ------
    ValueError
        Bad ranges, operand count or operators, or an instruction without ``{expression}``.
    """
    if num_prompts < 0:
        raise ValueError(f"num_prompts must be >= 0, got {num_prompts}")
    if num_operands < 2:
        raise ValueError(f"num_operands must be >= 2, got {num_operands}")
    if not 0 <= min_operand <= max_operand:
        raise ValueError(f"need 0 <= min_operand <= max_operand, got {min_operand}, {max_operand}")
    ops = tuple(ops)
    if not ops or not set(ops) <= set(_ARITH_OPS):
        raise ValueError(f"ops must be a non-empty subset of {_ARITH_OPS}, got {ops}")
    if "{expression}" not in instruction:
        raise ValueError(f"instruction must contain an {{expression}} placeholder: {instruction!r}")
    rng = np.random.default_rng(seed)
    prompts, answers, expressions = [], [], []
    for _ in range(num_prompts):
        operands = [int(x) for x in rng.integers(min_operand, max_operand + 1, size=num_operands)]
        chosen = [ops[int(rng.integers(len(ops)))] for _ in range(num_operands - 1)]
        expr = str(operands[0])
        for op, x in zip(chosen, operands[1:]):
            expr += f" {op} {x}"
        expressions.append(expr)
        answers.append(str(_eval_flat(operands, chosen)))
        prompts.append(chat_prompt(fill_template(instruction, expression=expr), system_prompt))
    msg = {"role": datasets.Value("string"), "content": datasets.Value("string")}
    features = datasets.Features(
        {
            "prompt": [msg],
            "answer": datasets.Value("string"),
            "expression": datasets.Value("string"),
            "id": datasets.Value("string"),
            "source": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "prompt": prompts,
            "answer": answers,
            "expression": expressions,
            "id": [f"arith-{seed}-{i}" for i in range(num_prompts)],
            "source": ["arithmetic/generated"] * num_prompts,
        },
        features=features,
    )
