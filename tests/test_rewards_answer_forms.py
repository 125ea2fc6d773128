"""Answer forms the verifiers must judge alike or apart: prose golds, upright constants, inequalities and intervals,
Unicode math, hedged answers, whole numbers stored as floats (one section per kind; both directions and negative
cases that must stay wrong)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from _helpers_rewards import correct_completion

from sara_trl.rewards import (
    Status,
    WorkerPool,
    check_columns,
    countdown_reward,
    countdown_success,
    get_pool,
    is_prose_answer,
    math_reward,
    math_success,
    normalize_math_answer,
    numeric_reward,
    numeric_success,
    relation_to_interval,
    unicode_to_latex,
)
from sara_trl.rewards.countdown import whole_number


def score(gold, pred):
    return math_reward([correct_completion(pred)], answer=[gold])[0]


# --- 1. prose golds are unscorable --------------------------------------------------------------------------------
PROSE_GOLDS = [
    "no such integer exists",
    "There is no solution",
    r"\text{two lines}",
    r"\text{no such integer exists}",
    "f(x)=ax+b, where b is an arbitrary integer",
    "the limit does not exist",
    r"\mbox{all real numbers}",
]


@pytest.mark.parametrize("gold", PROSE_GOLDS)
def test_prose_gold_is_unscorable(gold):
    comps = [correct_completion("2"), correct_completion(gold), "no answer at all"]
    assert math_reward(comps, answer=[gold] * 3) == [None, None, None]
    v = math_success(correct_completion("2"), gold)
    assert v.status is Status.UNPARSEABLE_GOLD and v.reason == "prose_gold"


@pytest.mark.parametrize(
    "gold,pred,expected",
    [
        (r"\text{Evelyn}", r"\text{Evelyn}", 1.0),  # one-word text answers are graded as text
        (r"\text{Evelyn}", r"\text{Bob}", 0.0),
        (r"\text{odd}", r"\text{even}", 0.0),
        (r"5225 \text{ cubic inches}", "5225", 1.0),  # a unit after a value is not prose
        (r"14 \text{ right triangles}", "15", 0.0),
        ("abc", "abc", 1.0),  # a product of symbols
        (r"\sin x + \cos x", r"\cos x + \sin x", 1.0),  # function names are not words
        (r"\log 2 + \ln 3", r"\log 2 + \ln 4", 0.0),
    ],
)
def test_math_that_looks_wordy_stays_scorable(gold, pred, expected):
    assert not is_prose_answer(normalize_math_answer(gold))
    assert score(gold, pred) == expected


def test_prose_alternative_is_dropped_but_others_count():
    out = math_reward([correct_completion("7"), correct_completion("8")], answer=["7", "7"],
                      answer_alternatives=[["seven days in all"], ["seven days in all"]])  # fmt: skip
    assert out == [1.0, 0.0]


# --- 2. upright constants and operators ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "gold,pred,expected",
    [
        (r"1-\frac{1}{\mathrm{e}}", r"1-\frac{1}{e}", 1.0),
        (r"1-\frac{1}{\mathrm{e}}", r"1+\frac{1}{\mathrm{e}}", 0.0),
        (r"1-\frac{1}{e}", r"1-\frac{1}{\mathrm{e}}", 1.0),
        (r"\mathrm{e}^{2}", "e^2", 1.0),
        (r"{\rm e}^{2}", r"\mathrm{e}^{3}", 0.0),
        (r"\text{e}^{2}", r"{\rm e}^{2}", 1.0),
        (r"\operatorname{e}", r"\pi", 0.0),
        (r"\operatorname{sin}(x)", r"\sin(x)", 1.0),
        (r"\sin(x)", r"\operatorname{sin}(x)", 1.0),
        (r"\operatorname{cos}(x)", r"\mathrm{sin}(x)", 0.0),
        (r"\mathrm{lcm}(4,6)", "12", 1.0),
        ("12", r"\operatorname{lcm}(4,6)", 1.0),
        ("12", r"\text{lcm}(4,6)", 1.0),
        ("10", r"\mathrm{lcm}(4,6)", 0.0),
        (r"2\mathrm{\pi}", r"2\pi", 1.0),
        (r"3\mathrm{i}", "3i", 1.0),
        (r"\mathrm{log}_{2}(8)", "3", 1.0),
    ],
)
def test_upright_constants_and_operators(gold, pred, expected):
    assert score(gold, pred) == expected


def test_upright_units_are_left_alone():
    assert normalize_math_answer(r"5\mathrm{cm}") == r"5\mathrm{cm}"
    assert normalize_math_answer(r"40\text{ min}") == r"40\text{ min}"  # minutes, not the function min
    assert score(r"5\mathrm{~cm}", "5") == 1.0
    assert score(r"40\text{ min}", "40") == 1.0
    assert score(r"40\text{ min}", "41") == 0.0


# --- 3. inequality, interval and set forms of one set -------------------------------------------------------------
@pytest.mark.parametrize(
    "gold,pred,expected",
    [
        (r"(-\infty,3)", "x<3", 1.0),
        ("x<3", r"(-\infty,3)", 1.0),
        (r"(-\infty,3]", r"x \le 3", 1.0),
        (r"x\leq 3", r"(-\infty,3]", 1.0),
        (r"(-\infty,3)", r"x\le 3", 0.0),
        ("x<3", r"(-\infty,3]", 0.0),
        ("x>3", "3<x", 1.0),
        (r"(3,\infty)", "x>-3", 0.0),
        ("[2,5)", r"2 \le x < 5", 1.0),
        (r"2\le x<5", "[2,5)", 1.0),
        ("(2,5)", "5>x>2", 1.0),
        ("(2,5)", r"2\le x<5", 0.0),
        (r"(-\infty,1)\cup(3,\infty)", r"x<1 \text{ or } x>3", 1.0),
        (r"x < 1 \text{ or } x > 3", r"(-\infty,1)\cup(3,\infty)", 1.0),
        (r"x<1 \text{ or } x>3", "x<1", 0.0),
        (r"(-\infty,0)\cup(0,\infty)", r"x \neq 0", 1.0),
        (r"x\ne 0", r"(-\infty,0)\cup(0,\infty)", 1.0),
        (r"\{x \mid x \ge 2\}", r"[2,\infty)", 1.0),
        (r"[2,\infty)", r"\{x : x > 2\}", 0.0),
        (r"x > 1 \text{ and } x < 3", "(1,3)", 1.0),
        (r"x\in(-\infty,3)", "x<3", 1.0),
        (r"-\frac{1}{2}<t\le 4", r"\left(-\frac{1}{2},4\right]", 1.0),
        (r"(-\infty,\infty)", r"\mathbb{R}", 1.0),
    ],
)
def test_inequality_interval_and_set_forms(gold, pred, expected):
    assert score(gold, pred) == expected


@pytest.mark.parametrize("s", ["a<b", "x<a", "(1,2)", "x=3", "x<1 or y>3", "x<1, x>3", "x_1<3"])
def test_relations_left_alone(s):
    assert relation_to_interval(s) == s


# --- 4. Unicode math ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "gold,pred,expected",
    [
        ("31", "31°", 1.0),
        ("31°", "31", 1.0),
        ("31°", "32", 0.0),
        (r"30^\circ", "30º", 1.0),
        ("25", "25 °C", 1.0),
        (r"2\sqrt{3}", "2√3", 1.0),
        ("2√3", r"2\sqrt{3}", 1.0),
        ("√2", r"\sqrt{3}", 0.0),
        (r"\sqrt{x+1}", "√(x+1)", 1.0),
        ("3", "∛27", 1.0),
        (r"\frac{1}{2}", "½", 1.0),
        ("½", "0.5", 1.0),
        ("1½", r"\frac{3}{2}", 1.0),
        ("2.75", "2 ¾", 1.0),
        ("½", r"\frac{1}{3}", 0.0),
        ("x^{2}+1", "x²+1", 1.0),
        ("x²", "x^3", 0.0),
        ("10^{-3}", "10⁻³", 1.0),
        ("0.001", "10⁻³", 1.0),
        ("x_{1}+x_{2}", "x₁+x₂", 1.0),
        ("12", "3×4", 1.0),
        ("3", "12÷4", 1.0),
        ("6", "2·3", 1.0),
        ("-5", "−5", 1.0),
        ("−5", "5", 0.0),
        (r"2\pi", "2π", 1.0),
        ("π/2", r"\frac{\pi}{2}", 1.0),
        ("πr²", r"\pi r^2", 1.0),
        (r"(-\infty,3)", "(−∞, 3)", 1.0),
        ("x ≥ 2", r"[2,\infty)", 1.0),
        (r"x\le 2", "x ≤ 3", 0.0),
        (r"\alpha+\beta", "α+β", 1.0),
        ("25", "２５", 1.0),
        ("1/2", "1⁄2", 1.0),
    ],
)
def test_unicode_math(gold, pred, expected):
    assert score(gold, pred) == expected


@pytest.mark.parametrize(
    "text,latex",
    [("31°", "31^\\circ"), ("1½", "\\frac{3}{2}"), ("-2 ¾", "-\\frac{11}{4}"), ("x⁻¹²", "x^{-12}"),
     ("√2x", "\\sqrt{2}x"), ("πr", "\\pi r"), ("31°C", "31"), ("ascii only", "ascii only")],
)  # fmt: skip
def test_unicode_to_latex(text, latex):
    assert unicode_to_latex(text) == latex


@pytest.mark.parametrize(
    "completion,answer,expected",
    [("−3", "-3", 1.0), ("The answer is −3.", "3", 0.0), ("x = ３", "3", 1.0), ("1\u00a0000", "0", 1.0),
     ("8", "８", 1.0), ("It is -3", "−3", 1.0)],
)  # fmt: skip
def test_numeric_reads_unicode_signs_and_digits(completion, answer, expected):
    assert numeric_reward([completion], answer=[answer]) == [expected]


def test_countdown_reads_unicode_operators():
    assert countdown_reward(["<answer>(50 − 25 − 7) · 3 ÷ 1</answer>"], target=[54], nums=[[50, 25, 7, 3, 1]]) == [1.0]


# --- 5. hedged answers: every stated final answer must be correct ---------------------------------------------------
@pytest.mark.parametrize(
    "completion,gold,expected",
    [
        (r"so it is \boxed{3} or \boxed{5}", "5", 0.0),
        (r"\boxed{5} or \boxed{3}", "5", 0.0),
        (r"\boxed{5}. To confirm: \boxed{5}", "5", 1.0),
        (r"\boxed{\frac{1}{2}}, that is \boxed{0.5}", "0.5", 1.0),
        (r"\boxed{\frac{1}{2}} or \boxed{\frac{1}{3}}", r"\frac12", 0.0),
        (r"\boxed{\text{(A)}} or \boxed{\text{(B)}}", r"\text{(B)}", 0.0),
        (r"<think>maybe \boxed{3}</think> The answer is \boxed{5}.", "5", 1.0),
        (r"<think>\boxed{5}</think> so \boxed{3}", "5", 0.0),
        (r"<think>it is \boxed{5}</think> (the answer part was cut off)", "5", 1.0),
        (r"\boxed{3 \text{ or } 5}", "5", 0.0),
        (r"\boxed{3 \text{ or } 5}", "3, 5", 1.0),
        (r"\boxed{} then \boxed{5}", "5", 1.0),
        (r"\boxed{\boxed{5}}", "5", 1.0),
    ],
)
def test_math_hedged_answers(completion, gold, expected):
    assert math_reward([completion], answer=[gold]) == [expected]


def test_math_hedge_reason():
    assert math_success(r"\boxed{3} or \boxed{5}", "5").reason == "several_answers"


@pytest.mark.parametrize(
    "completion,gold,expected",
    [
        (r"\boxed{3} or \boxed{5}", "5", 0.0),
        (r"\boxed{5} and again \boxed{5.0}", "5", 1.0),
        ("it is 3 or 5", "5", 0.0),
        ("it is 3 or 5.", "3", 0.0),
        ("it is 5 or 5", "5", 1.0),
        (r"\boxed{3 \text{ or } 5}", "5", 0.0),
        (r"\boxed{2 \times 4}", "4", 0.0),
        ("Is it 3 or 5? Computing: 2 + 3 = 5", "5", 1.0),  # an earlier question is not the answer
        (r"\boxed{x = 8}", "8", 1.0),
        (r"\boxed{3 + 5 = 8}", "8", 1.0),
        ("8, no wait, 9", "9", 1.0),
        ("<think>3</think> so 5", "5", 1.0),
    ],
)
def test_numeric_hedged_answers(completion, gold, expected):
    assert numeric_reward([completion], answer=[gold]) == [expected]


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("<answer>1 + 2</answer><answer>2 - 1</answer>", 0.0),
        ("<answer>2 - 1</answer> no: <answer>1 + 2</answer>", 0.0),
        ("<answer>1 + 2</answer> <answer>1 + 2</answer>", 1.0),
        ("<answer>1 + 2</answer> <answer>2 + 1</answer>", 1.0),  # two correct expressions: both right
        ("<think><answer>2 - 1</answer></think><answer>1 + 2</answer>", 1.0),
        ("<answer></answer><answer>1 + 2</answer>", 1.0),
    ],
)
def test_countdown_several_answers(completion, expected):
    assert countdown_reward([completion], target=[3], nums=[[1, 2]]) == [expected]


def test_countdown_too_many_answers():
    text = "<answer>1 + 2</answer><answer>2 + 1</answer>" * 9  # 18 blocks, each correct
    assert countdown_success(text, 3, [1, 2]).reason == "too_many_answers"
    assert countdown_success("<answer>1 + 2</answer>" * 16, 3, [1, 2]).status is Status.CORRECT


# --- 6. whole numbers stored as floats ------------------------------------------------------------------------------
CD = "<answer>50-25-7+3</answer>"
CD_NUMS = [3, 7, 25, 50]


@pytest.mark.parametrize(
    "target",
    [21, 21.0, "21", "21.0", " 21 ", np.float64(21.0), np.float32(21), np.int64(21), Fraction(21), Decimal("21.0")],
    ids=repr,
)
def test_countdown_whole_number_targets(target):
    assert countdown_reward([CD, "<answer>50-25-7-3</answer>"], target=[target] * 2, nums=[CD_NUMS] * 2) == [1.0, 0.0]


@pytest.mark.parametrize(
    "nums", [[3.0, 7.0, 25.0, 50.0], np.array([3, 7, 25, 50], dtype=float), ["3", "7", "25", "50.0"]], ids=repr
)
def test_countdown_whole_number_nums(nums):
    assert countdown_reward([CD], target=[21.0], nums=[nums]) == [1.0]


@pytest.mark.parametrize(
    "target",
    [21.5, "21.5", np.float64(21.5), float("nan"), float("inf"), "21.0.0", "2e1", True, Fraction(43, 2), None],
    ids=repr,
)
def test_countdown_non_whole_targets_are_unscorable(target):
    assert countdown_reward([CD], target=[target], nums=[CD_NUMS]) == [None]


def test_whole_number():
    assert [whole_number(x) for x in (7, 7.0, "7", "-7.00", np.float32(7.0), Decimal("7"))] == [7, 7, 7, -7, 7, 7]
    assert whole_number("12345678901234567890.0") == 12345678901234567890  # exact, not through a float
    assert [whole_number(x) for x in (7.5, "7.5", float("nan"), False, [7], "seven")] == [None] * 6


@pytest.mark.parametrize(
    "gold", [8, 8.0, "8.0", np.float64(8.0), np.float32(8.0), np.int64(8), Decimal("8"), Fraction(8)], ids=repr
)
def test_numeric_gold_types(gold):
    assert numeric_reward(["8", "9"], answer=[gold, gold]) == [1.0, 0.0]


def test_numeric_float_gold_is_read_by_its_decimal_form():
    assert numeric_reward(["0.1", "0.3", "2.5"], answer=[0.1, np.float32(0.3), 2.5]) == [1.0, 1.0, 1.0]
    assert numeric_reward(["0.1", "8"], answer=[float("nan"), float("inf")]) == [None, None]


@pytest.mark.parametrize("gold", [21.0, np.float64(21.0), np.int64(21), 21], ids=repr)
def test_math_numeric_golds(gold):
    assert math_reward([correct_completion("21"), correct_completion("22")], answer=[gold, gold]) == [1.0, 0.0]


def test_math_float_and_nan_golds():
    assert math_reward([correct_completion("0.1")], answer=[0.1]) == [1.0]
    assert math_reward([correct_completion("1")], answer=[float("nan")]) == [None]


# --- shared base and public pool ----------------------------------------------------------------------------------
def test_check_columns_messages():
    with pytest.raises(ValueError, match="needs the dataset columns 'target' and 'nums'"):
        check_columns("countdown_reward", ["a"], target=None, nums=None)
    with pytest.raises(ValueError, match="got 2 completions but 1 answers"):
        check_columns("math_reward", ["a", "b"], answer=["1"])
    check_columns("math_reward", ["a"], optional=("answer_alternatives",), answer=["1"], answer_alternatives=None)
    with pytest.raises(ValueError, match="numeric_reward needs the dataset column 'answer'"):
        numeric_reward(["8"])
    assert numeric_success("8", "8").status is Status.CORRECT


def test_public_pool_is_shared_per_configuration():
    pool = get_pool(num_workers=0, timeout_s=1.5)
    assert isinstance(pool, WorkerPool)
    assert get_pool(0, 1.5) is pool
    assert get_pool(0, 2.5) is not pool
    assert pool.run(abs, [(-3,), (4,)]) == [("ok", 3), ("ok", 4)]
