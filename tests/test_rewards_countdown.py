"""Countdown verifier: TinyZero test tasks (the fixture rows) solved by brute force, wrong answers, hostile inputs."""

from __future__ import annotations

import time

import pytest
from _helpers_rewards import read_jsonl, solve_countdown

from sara_trl.rewards import Status, countdown_reward, countdown_success, evaluate_expression
from sara_trl.rewards.countdown import ExpressionError


def wrap(expr: str) -> str:
    # chat-role markers, a think block, newlines and spaces around the answer must not matter
    return f"<|im_start|>assistant\n<think>\nLet me try.\n</think>\n<answer>\n  {expr}  \n</answer><|im_end|>\n"


@pytest.fixture(scope="module")
def test_tasks():
    tasks = read_jsonl("countdown_tinyzero_test.jsonl")
    sols = [solve_countdown(t["nums"], t["target"]) for t in tasks]
    return tasks, sols


def test_every_test_task_is_solved_and_scores_one(test_tasks):
    tasks, sols = test_tasks
    assert len(tasks) == 64  # the first 64 of the 1,024 test tasks
    unsolved = [t for t, s in zip(tasks, sols) if s is None]
    assert not unsolved, f"brute force found no solution for {len(unsolved)} tasks, e.g. {unsolved[:3]}"
    out = countdown_reward(
        [wrap(s) for s in sols], target=[t["target"] for t in tasks], nums=[t["nums"] for t in tasks]
    )
    assert out == [1.0] * len(tasks)
    # conversational format and the "= target" tail
    conv = [[{"role": "assistant", "content": wrap(f"{s} = {t['target']}")}] for s, t in zip(sols[:50], tasks[:50])]
    assert (
        countdown_reward(conv, target=[t["target"] for t in tasks[:50]], nums=[t["nums"] for t in tasks[:50]])
        == [1.0] * 50
    )


def test_wrong_answers_on_test_tasks_score_zero(test_tasks):
    tasks, sols = test_tasks
    targets = [t["target"] for t in tasks]
    nums = [t["nums"] for t in tasks]

    def score(exprs, tg=targets):
        return countdown_reward([wrap(e) for e in exprs], target=tg, nums=nums)

    # wrong target
    assert score(sols, [t + 1 for t in targets]) == [0.0] * len(tasks)

    # a number used twice in place of a different one
    def reuse_first(n):
        j = next(i for i, x in enumerate(n) if x != n[0])
        return " + ".join(str(n[0] if i == j else x) for i, x in enumerate(n))

    assert all(len(set(n)) > 1 for n in nums)
    reused = [reuse_first(n) for n in nums]
    assert score(reused) == [0.0] * len(tasks)
    # a number missing
    missing = [" + ".join(str(x) for x in n[:-1]) for n in nums]
    assert score(missing) == [0.0] * len(tasks)
    # an extra number
    extra = [f"({s}) * 1 + 0" for s in sols]
    assert score(extra) == [0.0] * len(tasks)
    reasons = {countdown_success(wrap(e), t, n).reason for e, t, n in zip(reused[:20], targets, nums)}
    assert reasons == {"numbers_mismatch"}


def test_exact_rational_arithmetic():
    # 8 / (3 - 8/3) = 24 exactly; floating point gives 23.999999999999996
    assert countdown_reward([wrap("8 / (3 - 8 / 3)")], target=[24], nums=[[3, 3, 8, 8]]) == [1.0]
    value, literals = evaluate_expression("8 / (3 - 8 / 3)")
    assert value == 24 and sorted(literals) == [3, 3, 8, 8]


def test_unary_minus_allowed_unary_plus_not():
    assert countdown_reward([wrap("-(3 - 5)")], target=[2], nums=[[3, 5]]) == [1.0]
    assert countdown_reward([wrap("+(5 - 3)")], target=[2], nums=[[3, 5]]) == [0.0]


def test_several_answer_tags_must_all_be_correct():
    # issue 13: a completion that states two different answers has hedged; before, the last tag won (1.0)
    text = "<answer>1 + 2</answer> no wait <answer>2 * 3</answer>"
    assert countdown_success(text, 6, [2, 3]).reason == "several_answers"
    assert countdown_reward([text], target=[6], nums=[[2, 3]]) == [0.0]
    assert countdown_reward([text], target=[3], nums=[[1, 2]]) == [0.0]


@pytest.mark.parametrize(
    "tail,expected",
    [("= 9", 1.0), ("=9", 1.0), ("= 10", 0.0), ("= 9 = 9", 0.0), ("= nine", 0.0)],
)
def test_equals_target_tail(tail, expected):
    assert countdown_reward([wrap(f"(1 + 2) * 3 {tail}")], target=[9], nums=[[1, 2, 3]]) == [expected]


def test_division_by_zero_is_wrong():
    v = countdown_success(wrap("3 / (2 - 2)"), 1, [3, 2, 2])
    assert v.status is Status.WRONG and v.reason == "division_by_zero"


HOSTILE = [
    "2 ** 3",
    "9 // 2",
    "9 % 2",
    "abs(3)",
    "x + 1",
    "(1).real",
    "[1][0]",
    "1 if 1 else 2",
    "lambda: 1",
    "__import__('os')",
    "2 ** 10 ** 10 ** 10",
    "9 ** 9 ** 9",
    "1e3",
    "1.5 + 1.5",
    "0x10",
    "1_000",
    "'3'",
    "True + 2",
    "3 < 4",
    "(" * 17 + "3" + ")" * 17,
    "(" * 300 + "3" + ")" * 300,
    "-" * 250 + "3",
    "3" * 5000,
    "1 + " * 3000 + "1",
    "1 +",
    "",
    "   ",
]


@pytest.mark.parametrize("expr", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_disallowed_or_hostile_answers_score_zero_quickly(expr):
    t0 = time.monotonic()
    out = countdown_reward([f"<answer>{expr}</answer>"], target=[3], nums=[[3]])
    assert out == [0.0]
    assert time.monotonic() - t0 < 5.0, "every input must finish in bounded time"


def test_nesting_within_limit_is_fine():
    assert countdown_reward([wrap("(" * 16 + "3" + ")" * 16)], target=[3], nums=[[3]]) == [1.0]


def test_huge_completion_finishes():
    text = "<answer>" * 200_000 + "</answer>" * 1000 + "<answer>1 + 2</answer>"
    t0 = time.monotonic()
    assert countdown_reward([text], target=[3], nums=[[1, 2]]) == [1.0]
    assert countdown_reward(["<answer>" * 300_000], target=[3], nums=[[1, 2]]) == [0.0]
    assert time.monotonic() - t0 < 5.0


def test_evaluate_expression_errors():
    with pytest.raises(ExpressionError):
        evaluate_expression("2 ** 3")
    with pytest.raises(ZeroDivisionError):
        evaluate_expression("1 / 0")
    with pytest.raises(ExpressionError):
        evaluate_expression("1" * 300)


@pytest.mark.parametrize(
    "target,nums",
    [("abc", [1, 2]), (3, []), (3, None), (True, [1, 2]), (3, "12"), (3, [1, -2]), (3, [1.5, 1.5]), (3.5, [1, 2])],
)
def test_malformed_gold_gives_none(target, nums):
    assert countdown_reward(["<answer>1 + 2</answer>"], target=[target], nums=[nums]) == [None]


def test_missing_columns_and_lengths():
    with pytest.raises(ValueError, match="target"):
        countdown_reward(["<answer>1</answer>"])
    with pytest.raises(ValueError):
        countdown_reward(["a", "b"], target=[1], nums=[[1]])


def test_no_answer_tag_is_wrong():
    v = countdown_success("I think (1 + 2) works", 3, [1, 2])
    assert v.status is Status.WRONG and v.reason == "no_answer"


def test_numpy_integers_accepted():
    np = pytest.importorskip("numpy")
    assert countdown_reward([wrap("1 + 2")], target=[np.int64(3)], nums=[np.array([1, 2])]) == [1.0]
