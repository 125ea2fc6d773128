r"""Math-verifier fault classes, one section per class. Issue 28, section 3: repeating decimals, plain-text mixed
numbers, a multiple-choice letter followed by its option text, and numbers outside float64's range. Issue 55: a
percent sign after a LaTeX fraction, a mixed number or a repeating decimal; a letter-list choice gold in
``\text{}``; a label before a choice letter; a decimal coefficient on ``i``; and the class the first gold self-check
run found, a text gold answered without ``\text{}``.

Each section checks the pure rewrite (what the normalization produces, and what it must leave alone) and end-to-end
verdicts through :func:`sara_trl.rewards.math_reward`: gold/prediction pairs that must be CORRECT and near misses
that must stay WRONG, in both directions (the class on the gold side and on the prediction side). Real gold answers
are copied literally from the shared data files (source file, line and problem id in the comment); the tests do not
read the data at run time.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from _helpers_rewards import correct_completion

from sara_trl.rewards import Status, math_reward, math_success, normalize_math_answer
from sara_trl.rewards.extract import (
    choice_letter,
    choice_letters,
    repeating_decimal_value,
    rewrite_fraction_percents,
    rewrite_mixed_numbers,
    rewrite_repeating_decimals,
    strip_answer_label,
)


def _scores(pairs):
    """Rewards of ``(gold, pred)`` pairs, one batch (one pool round)."""
    golds = [g for g, _ in pairs]
    return math_reward([correct_completion(p) for _, p in pairs], answer=golds)


def _check(cases):
    got = _scores([(g, p) for g, p, _ in cases])
    bad = [(g, p, want, r) for (g, p, want), r in zip(cases, got) if r != want]
    assert not bad, bad


# --- 1. repeating decimals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "whole,fixed,rep,value",
    [
        ("0", "", "36", Fraction(4, 11)),
        ("0", "1", "6", Fraction(1, 6)),
        ("1", "", "142857", Fraction(8, 7)),
        ("", "", "3", Fraction(1, 3)),
        ("0", "", "9", Fraction(1)),
        ("0", "42", "153", Fraction(4679, 11100)),
        ("2", "4", "9", Fraction(5, 2)),
        ("0", "0", "594", Fraction(11, 185)),
    ],
)
def test_repeating_decimal_value_is_exact(whole, fixed, rep, value):
    assert repeating_decimal_value(whole, fixed, rep) == value


@pytest.mark.parametrize(
    "answer,rewritten",
    [
        (r"0.\overline{36}", r"\frac{4}{11}"),
        (r".\overline{3}", r"\frac{1}{3}"),
        (r"0.1\overline{6}", r"\frac{1}{6}"),
        (r"1.\overline{142857}", r"\frac{8}{7}"),
        (r"-0.\overline{3}", r"-\frac{1}{3}"),
        (r"0.\overline3", r"\frac{1}{3}"),
        (r"0.\overline{ 3 6 }", r"\frac{4}{11}"),
        (r"0.\bar{3}", r"\frac{1}{3}"),
        (r"0.\bar3", r"\frac{1}{3}"),
        (r"0.\dot{3}", r"\frac{1}{3}"),
        (r"0.1\dot 6", r"\frac{1}{6}"),
        (r"0.\dot{1}4\dot{2}", r"\frac{142}{999}"),  # the dots mark the first and last repeating digit
        (r"0.\dot{1}\dot{2}", r"\frac{4}{33}"),
        (r"0.\overline{9}", "1"),
        (r"0.\overline{3}\ldots", r"\frac{1}{3}"),
        (r"13 . \overline{3}", r"\frac{40}{3}"),  # spacing of olympiadbench.jsonl line 370 (id 2667, solution)
        (r"x=0.\overline{3}", r"x=\frac{1}{3}"),
        (r"(0.\overline{3},0.\overline{6})", r"(\frac{1}{3},\frac{2}{3})"),
        (r"2^{0.\overline{3}}", r"2^{\frac{1}{3}}"),
        ("0.(3)", r"\frac{1}{3}"),  # plain text, block right after the point, whole answer
        ("-1.(142857)", r"-\frac{8}{7}"),
        # left alone: no decimal point (digit notation, conjugates), a base subscript, letters, a product
        (r"\overline{2008}", r"\overline{2008}"),
        (r"\overline{AB}", r"\overline{AB}"),
        (r"\overline{z}", r"\overline{z}"),
        (r"0.\overline{z}", r"0.\overline{z}"),
        # a repeating numeral in base n (math_train.jsonl line 4096, train/intermediate_algebra/1225.json, solution)
        (r"133.\overline{133}_n", r"133.\overline{133}_n"),
        (r"x.\overline{3}", r"x.\overline{3}"),
        ("0.1(6)", "0.1(6)"),
        # a product, 51.2 * 7 (math_train_12k.jsonl line 8863, test/counting_and_probability/788.json, solution)
        ("51.2(7)", "51.2(7)"),
        ("2.(3)+1", "2.(3)+1"),
    ],
)
def test_repeating_decimal_rewrite(answer, rewritten):
    assert rewrite_repeating_decimals(answer) == rewritten


def test_repeating_decimal_normalization_and_unicode_overline():
    assert normalize_math_answer(r"$0.\overline{36}$") == r"\frac{4}{11}"
    assert normalize_math_answer(r"-0.1\overline{6}.") == r"-\frac{1}{6}"
    assert normalize_math_answer("0.3\u0305") == r"\frac{1}{3}"  # combining overline
    assert normalize_math_answer("0.13\u03056\u0305") == r"\frac{3}{22}"
    assert normalize_math_answer("\u22120.1\u0304") == r"-\frac{1}{9}"  # Unicode minus, combining macron


def test_repeating_decimal_gold_is_scorable():
    for gold in (r"0.\overline{36}", r"0.1\overline{6}", r"1.\overline{142857}"):
        v = math_success(correct_completion("7"), gold)
        assert v.status is Status.WRONG, (gold, v)


REPEATING = [
    # (gold, prediction, expected): the decimal as gold
    (r"0.\overline{36}", r"\frac{4}{11}", 1.0),
    (r"0.\overline{36}", r"\frac{9}{25}", 0.0),  # 0.36 exactly
    (r"0.\overline{36}", "0.36", 0.0),
    (r"0.\overline{36}", r"0.\overline{3636}", 1.0),
    (r"0.\overline{36}", r"0.3\overline{63}", 1.0),
    (r"0.\overline{36}", r"0.\overline{63}", 0.0),
    (r"0.1\overline{6}", r"\frac{1}{6}", 1.0),
    (r"0.1\overline{6}", r"\frac{1}{10}", 0.0),
    (r"0.1\overline{6}", "0.16", 0.0),
    (r"0.1\overline{6}", r"0.6", 0.0),  # the old product reading 0.1 * 6
    (r"1.\overline{142857}", r"\frac{8}{7}", 1.0),
    (r"1.\overline{142857}", r"\frac{1}{7}", 0.0),
    (r"-0.\overline{3}", r"-\frac{1}{3}", 1.0),
    (r"-0.\overline{3}", r"\frac{1}{3}", 0.0),
    # the decimal as prediction
    (r"\frac{1}{3}", r"0.\overline{3}", 1.0),
    (r"\frac{1}{3}", r"0.\overline{33}", 1.0),
    (r"\frac{1}{3}", r"0.\overline{03}", 0.0),  # 1/33
    (r"\frac{1}{3}", "0.3", 0.0),
    (r"\frac{1}{3}", r"0.\dot{3}", 1.0),
    (r"\frac{1}{3}", r"0.\bar{3}", 1.0),
    (r"\frac{1}{3}", r".\overline{3}", 1.0),
    (r"\frac{1}{3}", "0.(3)", 1.0),
    (r"\frac{1}{3}", "0.3\u0305", 1.0),
    (r"\frac{142}{999}", r"0.\dot{1}4\dot{2}", 1.0),
    (r"\frac{142}{999}", r"0.\dot{1}\dot{2}", 0.0),
    ("1", r"0.\overline{9}", 1.0),
    (r"\left(\frac13,\frac23\right)", r"(0.\overline{3}, 0.\overline{6})", 1.0),
    (r"\left(\frac13,\frac23\right)", r"(0.\overline{3}, 0.\overline{7})", 0.0),
    # real golds whose problem states the repeating decimal (the model restating it in decimal form)
    (r"\frac{73}{99}", r"0.\overline{73}", 1.0),  # math_train.jsonl line 845, train/algebra/1427.json
    (r"\frac{73}{99}", "0.73", 0.0),
    (r"\frac{161}{495}", r".3\overline{25}", 1.0),  # math_train.jsonl line 5700, train/prealgebra/184.json
    (r"\frac{161}{495}", r"0.\overline{325}", 0.0),
    (r"\dfrac{14}{11}", r"1.\overline{27}", 1.0),  # math_train.jsonl line 6065, train/prealgebra/618.json
    (r"\dfrac{14}{11}", "1.27", 0.0),
    (r"\frac{101}{198}", r"0.5\overline{10}", 1.0),  # math_train.jsonl line 5367, train/number_theory/1190.json
    (r"\frac{101}{198}", r"0.5\overline{01}", 0.0),
    (r"\frac{109}{150}", r"0.72\overline{6}", 1.0),  # math_train_12k.jsonl line 7807, test/algebra/862.json
    (r"\frac{109}{150}", r"0.7\overline{26}", 0.0),
    (r"\frac{8}{45}", r"0.1\overline{7}", 1.0),  # math_train_12k.jsonl line 8540, test/algebra/2784.json
    (r"\frac{8}{45}", r"0.\overline{17}", 0.0),
    (r"\frac{137}{111}", r"1.\overline{234}", 1.0),  # math_train_12k.jsonl line 11300, test/prealgebra/1695.json
    (r"\frac{137}{111}", r"1.2\overline{34}", 0.0),
]


def test_repeating_decimals_are_graded_by_exact_value():
    _check(REPEATING)


# --- 2. plain-text mixed numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer,rewritten",
    [
        ("11 5/6", r"\frac{71}{6}"),
        ("2 2/3", r"\frac{8}{3}"),
        ("-2 1/2", r"-\frac{5}{2}"),
        ("11  5 / 6", r"\frac{71}{6}"),
        ("(1 1/2, 3)", r"(\frac{3}{2}, 3)"),
        ("1 1/2, 2 1/3", r"\frac{3}{2}, \frac{7}{3}"),
        ("x = 11 5/6", r"x = \frac{71}{6}"),
        ("3 + 1 1/2", r"3 + \frac{3}{2}"),
        (r"11 5/6 \text{ cups}", r"\frac{71}{6} \text{ cups}"),
        (r"2 1/2\%", r"\frac{5}{2}\%"),
        (r"11\ 5/6", r"\frac{71}{6}"),  # LaTeX spaces
        ("11~5/6", r"\frac{71}{6}"),
        # left alone
        (r"2 \cdot 3/4", r"2 \cdot 3/4"),  # an operator between
        ("x 1/2", "x 1/2"),  # no whole number
        ("x 2 1/2", "x 2 1/2"),  # the number follows a letter
        ("1, 2/3", "1, 2/3"),  # a list
        ("3 7/5", "3 7/5"),  # improper: not a mixed number
        ("1 0/2", "1 0/2"),
        ("16:00 2/3", "16:00 2/3"),  # a time (gsm8k_test.jsonl line 730, id 729, solution)
        ("1 1/2x", "1 1/2x"),
        ("1 1/2^2", "1 1/2^2"),
        ("1 2/3/4", "1 2/3/4"),
        ("12 34/56.7", "12 34/56.7"),
        (r"2 1/2\pi", r"2 1/2\pi"),
        (r"\text{11 5/6}", r"\text{11 5/6}"),
        (r"12\,345/678", r"12\,345/678"),  # a thin space also separates digit groups
    ],
)
def test_mixed_number_rewrite(answer, rewritten):
    assert rewrite_mixed_numbers(answer) == rewritten


def test_mixed_number_normalization():
    assert normalize_math_answer("11 5\u20446") == r"\frac{71}{6}"  # Unicode fraction slash
    assert normalize_math_answer(r"$11 5/6$.") == r"\frac{71}{6}"
    assert normalize_math_answer(r"x = 2 1/2") == r"x=\frac{5}{2}"


@pytest.mark.parametrize(
    "answer",
    [
        r"0.\overline{36}", r"-0.1\dot{6}", "0.(3)", "11 5/6", "(1 1/2, 3)", r"\text{(C) Plane}", "E: text", "2005!",
        r"33\frac{1}{3}\%", r"83.\overline{3}\%", "12.5%", r"\text{Answer: G}", "Answer: (C) Plane",
        r"\text{B, E, G}", "14.0 - 1.0i",
    ],
)
def test_new_rewrites_are_idempotent(answer):
    once = normalize_math_answer(answer)
    assert normalize_math_answer(once) == once


MIXED = [
    (r"11 5/6", r"\frac{71}{6}", 1.0),
    (r"11 5/6", r"\frac{8}{3}", 0.0),  # (11+5)/6: math-verify's reading of the gold before the fix
    (r"11 5/6", r"11\frac{5}{6}", 1.0),
    (r"11 5/6", r"11 5/6", 1.0),
    (r"\frac{71}{6}", "11 5/6", 1.0),
    (r"\frac{8}{3}", "11 5/6", 0.0),
    ("2 2/3", r"2\frac{2}{3}", 1.0),
    ("2 2/3", r"\frac{4}{3}", 0.0),
    ("2 2/3", r"\frac{8}{3}", 1.0),
    ("-2 1/2", r"-\frac{5}{2}", 1.0),
    ("-2 1/2", r"-\frac{3}{2}", 0.0),
    ("(1 1/2, 3)", r"\left(\frac{3}{2}, 3\right)", 1.0),
    ("(1 1/2, 3)", r"\left(1, 3\right)", 0.0),
    # real golds of "express your answer as a mixed number" problems, predicted in plain text
    (r"137 \frac{1}{2}", "137 1/2", 1.0),  # math500.jsonl line 473, test/algebra/2470.json
    (r"137 \frac{1}{2}", "69", 0.0),  # (137+1)/2
    (r"11 \frac{2}{3}", "11 2/3", 1.0),  # math_train_12k.jsonl line 11263, test/prealgebra/1605.json
    (r"11 \frac{2}{3}", r"\frac{13}{3}", 0.0),
    (r"11 \frac{2}{3}", "11 1/3", 0.0),
    (r"1\frac{4}{5}", "1 4/5", 1.0),  # math500.jsonl line 265, test/geometry/826.json
    (r"1\frac{4}{5}", "1 3/5", 0.0),
    (r"-15\frac{3}{5}", "-15 3/5", 1.0),  # math_train.jsonl line 6482, train/prealgebra/1406.json
    (r"-15\frac{3}{5}", "15 3/5", 0.0),
    # not mixed numbers: read as before
    (r"\frac{3}{2}", r"2 \cdot 3/4", 1.0),
    (r"\frac{5}{3}", "1, 2/3", 0.0),
]


def test_mixed_numbers_are_one_value():
    _check(MIXED)


# --- 3. a multiple-choice letter followed by its option text -------------------------------------------------------


@pytest.mark.parametrize(
    "answer,letter",
    [
        ("E: A polygenic risk score", "E"),
        ("(E) A polygenic risk score", "E"),
        ("(E): A polygenic risk score", "E"),
        ("E. A polygenic risk score", "E"),
        ("E) A polygenic risk score", "E"),
        ("E - A polygenic risk score", "E"),
        ("E \u2014 A polygenic risk score", "E"),
        (r"\text{(C) Plane}", "C"),
        (r"\textbf{(B)}\ 3(1 + r/10)^x = 7", "B"),
        (r"\text{E: text}", "E"),
        ("**(E)** text", "E"),
        ("(C) f(A)", "C"),  # a letter inside the option text is not another label
        ("E:", "E"),
        ("(E)", "E"),
        # not one choice label
        ("E-1", None),
        ("E -1", None),
        (r"C \cdot 2", None),
        ("E.5", None),
        ("E.g.", None),
        ("(E)text", None),
        ("e) text", None),  # lower case
        ("(A) or (B)", None),  # a hedge
        ("A: 1, B: 2", None),
        ("(A) 5 or B", None),
        ("(A)(B)", None),
        ("A, B", None),
        ("A polygenic risk score", None),
    ],
)
def test_choice_letter_with_option_text(answer, letter):
    assert choice_letter(answer, option_text=True) == letter


def test_choice_letter_without_option_text_is_the_bare_label():
    for s in ("E", "(E)", r"\text{E}", r"\text{(E)}", r"\textbf{(E)}", " (E) "):
        assert choice_letter(s) == "E", s
    for s in ("E: text", "(E) text", "e", "EE", "5", "E_1"):
        assert choice_letter(s) is None, s


CHOICES = [
    ("E", "E: A polygenic risk score", 1.0),
    ("E", "D: A polygenic risk score", 0.0),
    ("E", "(E) A polygenic risk score", 1.0),
    ("E", "E. A polygenic risk score", 1.0),
    ("E", "E) A polygenic risk score", 1.0),
    ("E", "E - A polygenic risk score", 1.0),
    ("E", r"\text{(E) A polygenic risk score}", 1.0),
    ("E", r"(A) \text{ or } (E)", 0.0),  # a hedge stays wrong
    ("E", r"\text{A polygenic risk score}", 0.0),  # the text alone cannot be matched to a letter
    # real golds with the option text their problem lists
    (r"\text{(C)}", r"\text{(C) Plane}", 1.0),  # math500.jsonl line 228, test/precalculus/819.json
    (r"\text{(C)}", r"\text{(D) Sphere}", 0.0),
    (r"\text{(E)}", "(E) Hyperbola", 1.0),  # math500.jsonl line 256, test/precalculus/452.json
    (r"\text{(E)}", "(C) Parabola", 0.0),
    (r"\text{(B)}", r"\textbf{(B)}\ 3(1 + r/10)^x = 7", 1.0),  # math500.jsonl line 297, test/intermediate_algebra/754
    (r"\text{(B)}", r"\textbf{(A)}\ 3(1 + r)^x = 7", 0.0),
    ("C", "C) 65.1339999", 1.0),  # math_train.jsonl line 5985, train/prealgebra/521.json
    ("C", "B) 65.138", 0.0),
    (r"\text{C}", r"C. 34 \text{ dollars}", 1.0),  # math_train_12k.jsonl line 10970, test/prealgebra/1105.json
    (r"\text{C}", r"D. 26 \text{ dollars}", 0.0),
    ("F", "F) 10^5", 1.0),  # math_train_12k.jsonl line 11464, test/prealgebra/2011.json
    ("F", "E) 10^4", 0.0),
    (r"\text{(P)}", "(P) parabola", 1.0),  # math_train_12k.jsonl line 9476, test/intermediate_algebra/68.json
    (r"\text{(P)}", "(E) ellipse", 0.0),
    # bare labels keep their verdicts
    (r"\text{(C)}", "C", 1.0),
    (r"\text{(C)}", r"\textbf{(C)}", 1.0),
    (r"\text{(C)}", "D", 0.0),
]


def test_choice_label_with_option_text_is_its_letter():
    _check(CHOICES)


def test_choice_label_in_an_answer_phrase_and_reason():
    comps = ["So the final answer is (E) A polygenic risk score", "So the final answer is (D) A linkage map"]
    assert math_reward(comps, answer=["E", "E"]) == [1.0, 0.0]
    v = math_success(r"Thus $\boxed{E: A polygenic risk score}$", "E")
    assert v.status is Status.CORRECT and v.reason == "choice_letter"


def test_choice_rule_needs_a_letter_gold():
    # a numeric gold is not a choice: "(E) 5" is not reduced to a letter, and a letter gold with a non-letter
    # alternative leaves a wrong letter to math-verify
    assert math_reward([correct_completion("E: 5")], answer=["5"]) == [0.0]
    out = math_reward(
        [correct_completion("(E) text"), correct_completion("(D) text")],
        answer=["E", "E"],
        answer_alternatives=[["17"], ["17"]],
    )
    assert out == [1.0, 0.0]


# --- 4. values beyond float64 ------------------------------------------------------------------------------------

BEYOND_FLOAT = [
    ("1/2004!", "1/2006!", 0.0),  # both about 1e-5750: 0.0 as floats
    (r"\frac{1}{2004!}", r"\frac{1}{2006!}", 0.0),  # math_train_12k.jsonl line 9645, test/intermediate_algebra/568
    (r"\frac{1}{2004!}", r"\frac{1}{2005!}", 0.0),
    (r"\frac{1}{2004!}", r"\frac{1}{2004!}", 1.0),
    (r"\frac{1}{2004!}", "1/2004!", 1.0),
    (r"\frac{1}{2004!}", r"\frac{2005}{2005!}", 1.0),
    (r"\frac{1}{2004!}", "0", 0.0),
    (r"\frac{1}{2004!}", r"-\frac{1}{2004!}", 0.0),
    (r"10^{-400}", r"2\cdot 10^{-400}", 0.0),
    (r"2\cdot 10^{-400}", r"10^{-400}", 0.0),
    (r"10^{-400}", r"10^{-401}", 0.0),
    (r"10^{-400}", r"-10^{-400}", 0.0),
    (r"10^{-400}", "0", 0.0),
    (r"10^{-400}", r"10^{-400}", 1.0),
    (r"10^{-400}", r"\frac{1}{10^{400}}", 1.0),
    (r"2\cdot 10^{-400}", r"\frac{2}{10^{400}}", 1.0),
    (r"1.5\times10^{-400}", r"1.6\times10^{-400}", 0.0),
    (r"1.5\times10^{-400}", "1.5e-400", 1.0),
    (r"1.5\times10^{-400}", r"1.50001\times10^{-400}", 1.0),  # within the 1e-4 relative tolerance
    ("1e-320", "2e-320", 0.0),  # float64 subnormals
    (r"10^{400}", r"2\cdot10^{400}", 0.0),
    (r"10^{400}", r"10^{400}+1", 0.0),
    (r"10^{400}", r"10^{401}", 0.0),
    (r"10^{400}", r"10^{400}", 1.0),
    (r"10^{400}", r"100^{200}", 1.0),
    (r"1.5\times10^{400}", r"1.6\times10^{400}", 0.0),
    ("2005!", "2006!", 0.0),
    ("2005!", "2005!+1", 0.0),
    ("2005!", "2005!", 1.0),
    ("2005!", r"2005\cdot 2004!", 1.0),
    (r"2^{4950}", r"2^{4951}", 0.0),  # math_train_12k.jsonl line 4017, train/intermediate_algebra/1088.json
    (r"2^{4950}", r"4^{2475}", 1.0),
    (r"3^{2007}", r"3^{2006}", 0.0),  # math_train_12k.jsonl line 11817, test/precalculus/818.json
    (r"3^{2007}", r"3\cdot 3^{2006}", 1.0),
    # the small-number check still accepts math-verify's percent readings
    (r"25\%", "0.25", 1.0),
    ("0.25", r"25\%", 1.0),
]


def test_numbers_beyond_float64_are_compared_exactly():
    _check(BEYOND_FLOAT)


# --- 5. a percent sign after a LaTeX fraction, a mixed number or a repeating decimal (issue 55) ----------------------


@pytest.mark.parametrize(
    "answer,rewritten",
    [
        (r"33\frac{1}{3}\%", r"\frac{100}{3}\%"),
        (r"33 \frac{1}{3}\%", r"\frac{100}{3}\%"),
        (r"\frac{1}{3}\%", r"\frac{1}{3}\%"),
        (r"\frac{2}{6}\%", r"\frac{1}{3}\%"),
        (r"12\frac{1}{2}\%", r"12.5\%"),  # an exact decimal: the number token latex2sympy reads as a percent
        (r"\frac{1}{8}\%", r"0.125\%"),
        (r"\frac{250}{3}\%", r"\frac{250}{3}\%"),
        (r"-33\frac{1}{3}\%", r"-\frac{100}{3}\%"),
        (r"(12\frac{1}{2}\%, 5)", r"(12.5\%, 5)"),
        # left alone: no percent sign, a symbol in the fraction, a power, a fraction after a letter
        (r"33\frac{1}{3}", r"33\frac{1}{3}"),
        (r"\frac{x}{3}\%", r"\frac{x}{3}\%"),
        (r"2^\frac{1}{2}\%", r"2^\frac{1}{2}\%"),
        (r"x\frac{1}{2}\%", r"x\frac{1}{2}\%"),
    ],
)
def test_fraction_percent_rewrite(answer, rewritten):
    assert rewrite_fraction_percents(answer) == rewritten


def test_fraction_percent_normalization():
    # the repeating decimal becomes a fraction first (math_train.jsonl line 361, train/algebra/607.json, solution:
    # "Her overall score is $\frac{50}{60}$ or $83.\overline{3}\%$")
    assert normalize_math_answer(r"83.\overline{3}\%") == r"\frac{250}{3}\%"
    assert normalize_math_answer(r"2 1/2\%") == r"2.5\%"  # a plain-text mixed number
    assert normalize_math_answer(r"$33\frac{1}{3}\%$.") == r"\frac{100}{3}\%"


def test_fraction_percent_gold_is_scorable():
    # before: unparseable even against itself, so every rollout of the prompt got None
    for gold in (r"33\frac{1}{3}\%", r"83.\overline{3}\%", r"\frac{1}{3}\%", r"16\frac{2}{3}\%"):
        assert math_success(correct_completion("7"), gold).status is Status.WRONG, gold
        assert math_success(correct_completion(gold), gold).status is Status.CORRECT, gold


PERCENTS = [
    # the issue's example, and the same value in every form a model writes it
    (r"33\frac{1}{3}\%", r"33\frac{1}{3}\%", 1.0),
    (r"33\frac{1}{3}\%", r"33 \dfrac{1}{3}\%", 1.0),
    (r"33\frac{1}{3}\%", r"\frac{100}{3}\%", 1.0),
    (r"33\frac{1}{3}\%", r"33.\overline{3}\%", 1.0),
    (r"33\frac{1}{3}\%", r"33\frac{1}{3}", 1.0),  # the percent sign dropped
    (r"33\frac{1}{3}\%", r"\frac{100}{3}", 1.0),
    (r"33\frac{1}{3}\%", r"\frac{1}{3}", 1.0),  # the percentage as a fraction, as math-verify reads 25\% = 0.25
    (r"33\frac{1}{3}\%", r"33\frac{1}{3}%", 1.0),
    (r"33\frac{1}{3}\%", r"33\frac{2}{3}\%", 0.0),
    (r"33\frac{1}{3}\%", r"\frac{1}{3}\%", 0.0),  # a third of one percent
    (r"33\frac{1}{3}\%", r"33\%", 0.0),
    (r"33\frac{1}{3}\%", r"33.3\%", 0.0),
    (r"33\frac{1}{3}\%", "33", 0.0),
    # held out: other golds, the class on the prediction side
    (r"83.\overline{3}\%", r"83\frac{1}{3}\%", 1.0),  # math_train.jsonl line 361 (train/algebra/607.json, solution)
    (r"83.\overline{3}\%", r"\frac{5}{6}", 1.0),
    (r"83.\overline{3}\%", r"\frac{250}{3}", 1.0),
    (r"83.\overline{3}\%", r"83\%", 0.0),  # the gold of that problem rounds to 83\%, a different answer
    (r"83.\overline{3}\%", r"83.\overline{4}\%", 0.0),
    (r"16\frac{2}{3}\%", r"16.\overline{6}\%", 1.0),
    (r"16\frac{2}{3}\%", r"\frac{1}{6}", 1.0),
    (r"16\frac{2}{3}\%", r"16\frac{1}{3}\%", 0.0),
    (r"12\frac{1}{2}\%", r"12.5\%", 1.0),
    (r"12\frac{1}{2}\%", "12.5", 1.0),
    (r"12\frac{1}{2}\%", "0.125", 1.0),
    (r"12\frac{1}{2}\%", r"1250\%", 0.0),
    (r"12\frac{1}{2}\%", r"0.125\%", 0.0),
    (r"\frac{100}{3}", r"33\frac{1}{3}\%", 0.0),  # a percentage is not its percent-free number on the gold side
    (r"\frac{1}{3}", r"33\frac{1}{3}\%", 1.0),  # but it is the fraction (math-verify's reading of 25\% = 0.25)
    # a percent gold with a decimal, answered without the sign: math-verify accepts this only for whole numbers
    (r"237.5\%", "237.5", 1.0),  # math_train.jsonl line 6054, train/prealgebra/606.json
    (r"237.5\%", "2.375", 1.0),
    (r"237.5\%", "238.5", 0.0),
    (r"7.2\%", "7.2", 1.0),  # math_train_12k.jsonl line 9386, test/geometry/1032.json
    (r"7.2\%", r"7.2%", 1.0),
    (r"7.2\%", "72", 0.0),
    (r"7.2\%", r"720\%", 0.0),  # the dropped-sign reading is offered only to predictions without a percent sign
    (r"25\%", "25", 1.0),
    (r"25\%", "0.25", 1.0),
    (r"25\%", "26", 0.0),
]


def test_percentages_after_fractions_are_graded():
    _check(PERCENTS)


# --- 6. a letter-list choice gold written in \text{} (issue 55) -----------------------------------------------------


@pytest.mark.parametrize(
    "answer,letters",
    [
        (r"\text{B, E, G}", {"B", "E", "G"}),
        ("B, E, G", {"B", "E", "G"}),
        (r"\text{B,E,G}", {"B", "E", "G"}),
        (r"\text{B}, \text{E}, \text{G}", {"B", "E", "G"}),
        ("(B), (E), (G)", {"B", "E", "G"}),
        ("B, E, and G", {"B", "E", "G"}),
        ("B and E", {"B", "E"}),
        ("G", {"G"}),
        (r"\textbf{A, C}", {"A", "C"}),
        # not a letter list
        ("(A, B)", None),  # a tuple
        ("a, b", None),
        ("AB, C", None),
        ("A, 2", None),
        (r"\text{Softball, Kickball}", None),
        ("", None),
    ],
)
def test_choice_letters(answer, letters):
    got = choice_letters(answer)
    assert (None if got is None else set(got)) == letters


LETTER_LISTS = [
    (r"\text{B, E, G}", "B, E, G", 1.0),  # the issue's example; math_train_12k.jsonl line 11548, test/precalculus/100
    (r"\text{B, E, G}", r"\text{B, E, G}", 1.0),
    (r"\text{B, E, G}", "G, B, E", 1.0),  # the order does not matter
    (r"\text{B, E, G}", r"\text{B}, \text{E}, \text{G}", 1.0),
    (r"\text{B, E, G}", "(B), (E), (G)", 1.0),
    (r"\text{B, E, G}", "B, E, and G", 1.0),
    (r"\text{B, E, G}", "B, E", 0.0),  # a missing letter
    (r"\text{B, E, G}", "B, E, G, H", 0.0),  # an extra letter
    (r"\text{B, E, G}", "B, E, F", 0.0),  # a wrong letter
    (r"\text{B, E, G}", "B", 0.0),
    # held out: other real golds, with and without \text{}
    (r"\text{H, E}", "E, H", 1.0),  # math_train.jsonl line 3522, train/intermediate_algebra/257.json
    (r"\text{H, E}", "H", 0.0),
    (r"\text{A, D, F, G, H}", "A, D, F, G, H", 1.0),  # math_train.jsonl line 4014, train/intermediate_algebra/1085
    (r"\text{A, D, F, G, H}", "A, D, F, G", 0.0),
    (r"\text{A,B,E}", r"\text{A, B, E}", 1.0),  # math_train.jsonl line 5568, train/prealgebra/22.json
    (r"\text{A,B,E}", "A,B,D", 0.0),
    ("D, E", r"\text{D, E}", 1.0),  # math_train.jsonl line 4646, train/intermediate_algebra/2184.json
    ("D, E", "D, E", 1.0),
    ("D, E", r"\text{D}", 0.0),
    ("B, C", r"\text{Answer: B, C}", 1.0),  # math_train_12k.jsonl line 9991, test/intermediate_algebra/1550.json
    ("B, C", r"\text{Answer: B}", 0.0),
]


def test_letter_list_golds_are_sets_of_letters():
    _check(LETTER_LISTS)


# --- 7. a label before a choice letter (issue 55) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer,stripped",
    [
        (r"\text{Answer: G}", r"\text{G}"),
        (r"\text{Answer:} G", "G"),
        (r"\text{Answer:}\ G", "G"),
        (r"\text{Final Answer: (G)}", r"\text{(G)}"),
        ("Answer: G", "G"),
        ("**Answer:** G", "G"),
        ("Final answer: (C) Plane", "(C) Plane"),
        ("The answer is G", "G"),
        ("Option G", "G"),
        ("Choice: (B)", "(B)"),
        (r"\text{Answer: }5", "5"),
        # not a label
        ("G", "G"),
        ("Option", "Option"),
        ("Answer:", "Answer:"),
        ("Options are limited", "Options are limited"),
        (r"\text{Optional}", r"\text{Optional}"),
        ("answer=5", "answer=5"),
    ],
)
def test_strip_answer_label(answer, stripped):
    assert strip_answer_label(answer) == stripped


LABELS = [
    ("G", r"\text{Answer: G}", 1.0),  # the issue's example
    ("G", r"\text{Answer: F}", 0.0),  # a wrong letter after a label stays wrong
    ("G", "Answer: G", 1.0),
    ("G", r"\text{Answer:} G", 1.0),
    ("G", r"\textbf{Answer:} (G)", 1.0),
    ("G", r"\text{Final Answer: (G)}", 1.0),
    ("G", "The answer is G", 1.0),
    ("G", "Option G", 1.0),
    ("G", "Option F", 0.0),
    ("G", r"\text{Answer: (A) or (G)}", 0.0),  # a hedge stays wrong
    # held out: real letter golds of the benchmark data, with option text after the label
    (r"\text{(C)}", r"\text{Answer: (C) Plane}", 1.0),  # math500.jsonl line 228, test/precalculus/819.json
    (r"\text{(C)}", r"\text{Answer: (D) Sphere}", 0.0),
    (r"\text{(F)}", "Final Answer: (F)", 1.0),  # math_train.jsonl line 6918, train/precalculus/280.json
    (r"\text{(F)}", "Final Answer: (E)", 0.0),
    (r"\text{M}", r"\text{Answer: M}", 1.0),  # math_train_12k.jsonl line 10415, test/number_theory/456.json
    (r"\text{M}", r"\text{Answer: N}", 0.0),
    # a label before a number is removed too
    ("5", r"\text{Answer: }5", 1.0),
    ("5", r"\text{Answer: }6", 0.0),
]


def test_label_before_a_choice_letter():
    _check(LABELS)


# --- 8. a decimal coefficient on i (issue 55) -------------------------------------------------------------------


COMPLEX = [
    ("14 - i", "14.0 - 1.0i", 1.0),  # the issue's example
    ("14 - i", "14.0 - 2.0i", 0.0),  # guard
    ("14 - i", "14 - 1i", 1.0),
    ("14 - i", "14.0 - i", 1.0),
    ("14 - i", "14 + i", 0.0),
    # held out: real golds; the prediction writes the coefficients as decimals (or the gold's 1 explicitly)
    ("6 - 5i", "6.0 - 5.0i", 1.0),  # math500.jsonl line 16 (tests/fixtures/data/math500.jsonl line 16)
    ("6 - 5i", "6.0 - 5.5i", 0.0),
    ("3-i", "3.0-1.0i", 1.0),  # math_train.jsonl line 222, train/algebra/368.json
    ("3-i", "3.0-1.5i", 0.0),
    ("2 + i", "2 + 1.0i", 1.0),  # math_train.jsonl line 3524, train/intermediate_algebra/263.json
    ("2 + i", "2 + 1.0 i", 1.0),
    ("2 + i", "2 - 1.0i", 0.0),
    ("-1 - i", "-1.0 - 1.0i", 1.0),  # math_train.jsonl line 4615, train/intermediate_algebra/2135.json
    ("-1 - i", "-1.0 + 1.0i", 0.0),
    ("8-i", "8-1i", 1.0),  # math_train_12k.jsonl line 7660, test/algebra/446.json
    ("8-i", "8.0-0.5i", 0.0),
    (r"1+i", r"1+\frac{2}{2}i", 1.0),
    ("-i", "-1.0i", 1.0),
    (r"14-\frac{1}{2}i", "14-0.5i", 1.0),
    (r"14-\frac{1}{2}i", "14-0.25i", 0.0),
    ("x + i", "x + 1i", 1.0),
]


def test_decimal_coefficients_on_i():
    _check(COMPLEX)


def test_repeating_decimal_guard_of_issue_55():
    assert math_reward([correct_completion(r"\frac{1}{6}")], answer=[r"0.\overline{16}"]) == [0.0]
    assert math_reward([correct_completion(r"\frac{16}{99}")], answer=[r"0.\overline{16}"]) == [1.0]


# --- 9. a text gold answered without \text{} (found by the first gold self-check run) ------------------------------

TEXT_GOLDS = [
    (r"\text{October 30}", "October 30", 1.0),  # math_train.jsonl line 4759, train/number_theory/151.json
    (r"\text{October 30}", "October 31", 0.0),
    (r"\text{June 20}", "june 20", 1.0),  # math_train_12k.jsonl line 8383, test/algebra/2359.json
    (r"\text{June 20}", "June 21", 0.0),
    (r"\text{1:03 PM}", "1:03 PM", 1.0),  # math_train_12k.jsonl line 11081, test/prealgebra/1299.json
    (r"\text{1:03 PM}", "1:03 AM", 0.0),
    (r"\text{4:30 p.m.}", "4:30 p.m.", 1.0),  # math_train_12k.jsonl line 11180, test/prealgebra/1462.json
    (r"\text{Softball, Kickball, Picnic}", "Softball, Kickball, Picnic", 1.0),  # math_train.jsonl line 5999
    (r"\text{Softball, Kickball, Picnic}", "Picnic, Kickball, Softball", 0.0),  # an ordered answer
    (r"\text{Evelyn}", "Evelyn", 1.0),  # math500.jsonl line 5 (tests/fixtures/data/math500.jsonl line 5)
    (r"\text{Evelyn}", "Navin", 0.0),
]


def test_text_golds_answered_without_text():
    _check(TEXT_GOLDS)


# --- 10. units and text written without \text{} (found by the gold self-check's "text" re-writing) ---------------


@pytest.mark.parametrize(
    "answer,normalized",
    [
        ("118 dollars", "118"),
        (r"2400 cm^2", "2400"),
        (r"0.25\, cm", "0.25"),
        (r"1.85\ USD", "1.85"),
        (r"10\;edges", "10"),
        ("34 sq. units", "34"),
        (r"8\sqrt{3}  square inches", r"8\sqrt{3}"),
        (r"\lambda_{\text {red}} / \sqrt{2}", r"\lambda_{red}/\sqrt{2}"),  # a subscript in text
        (r"x_\text{max}", "x_{max}"),
        ("6, 8, and 10", "6,8,10"),
        (r"6, 8\text{, and }10", "6,8,10"),
        (r"8\sqrt{3} \text { square inches}", r"8\sqrt{3} \text{ square inches}"),
        # left alone: two letters that may be symbols, function names, times of day, a unit without a space
        ("3 ab", "3 ab"),
        ("12 sin", "12 sin"),
        ("5 pm", "5 pm"),
        ("15cm", "15cm"),
        ("1 million", "1 million"),  # words that change the value
        ("5 squared", "5 squared"),
        ("5 factorial", "5 factorial"),
        ("x cm", "x cm"),
    ],
)
def test_bare_units_and_text_subscripts(answer, normalized):
    assert normalize_math_answer(answer) == normalized


TEXT_WITHOUT_TEXT = [
    (r"118 \text{ dollars}", "118 dollars", 1.0),  # math_train_12k.jsonl line 8176, test/algebra/1862.json
    (r"118 \text{ dollars}", "119 dollars", 0.0),
    (r"118 \text{ dollars}", "118", 1.0),
    (r"2400 \mbox{ cm}^2", "2400 cm^2", 1.0),  # math_train.jsonl line 6447, train/prealgebra/1316.json
    (r"2400 \mbox{ cm}^2", "2401 cm^2", 0.0),
    (r"1.85\ \text{USD}", r"1.85\ USD", 1.0),  # math_train.jsonl line 6595, train/prealgebra/1691.json
    (r"10\;\text{edges}", "10 edges", 1.0),  # math_train_12k.jsonl line 9098, test/geometry/217.json
    (r"10\;\text{edges}", "12 edges", 0.0),
    (r"8\sqrt{3} \text { square inches}", r"8\sqrt{3} square inches", 1.0),  # math_train_12k.jsonl line 9257
    (r"8\sqrt{3} \text { square inches}", r"8\sqrt{3}", 1.0),
    (r"8\sqrt{3} \text { square inches}", r"8\sqrt{2} square inches", 0.0),
    (r"144 \mbox{ m}^3", "144 m^3", 1.0),  # math_train_12k.jsonl line 9025, test/geometry/60.json
    (r"144 \mbox{ m}^3", "145 m^3", 0.0),
    (r"6, 8\text{, and }10", "6, 8, and 10", 1.0),  # math_train.jsonl line 971, train/algebra/1642.json
    (r"6, 8\text{, and }10", "6, 8, 10", 1.0),
    (r"6, 8\text{, and }10", "6, 8, and 12", 0.0),
    (r"4\!:\!51\!:\!06 \text{ p.m.}", "4:51:06 p.m.", 1.0),  # math_train.jsonl line 4731, train/number_theory/105
    (r"4\!:\!51\!:\!06 \text{ p.m.}", "4:51:06 a.m.", 0.0),
    (r"8\!:\!34 \text{ p.m.}", "8:34 p.m.", 1.0),  # math_train.jsonl line 5167, train/number_theory/837.json
    (r"9\text{ a.m.}", "9 a.m.", 1.0),  # math_train_12k.jsonl line 8196, test/algebra/1900.json
    (r"9\text{ a.m.}", "9 p.m.", 0.0),
    (r"\lambda_{\text {red}} / \sqrt{2}", r"\lambda_{red} / \sqrt{2}", 1.0),  # minerva_math.jsonl line 140, id 139
    (r"\lambda_{\text {red}} / \sqrt{2}", r"\lambda_{red} / \sqrt{3}", 0.0),
]


def test_units_and_text_written_without_text():
    _check(TEXT_WITHOUT_TEXT)


# --- 11. a base-notation number with a radix point (found by the data report's perturbed check) --------------------

BASE_FRACTIONS = [
    ("0.0011_{2}", "0.0011_{2}", 1.0),  # math_train_12k.jsonl line 10665, test/number_theory/1158.json
    ("0.0011_{2}", "0.0011_2", 1.0),
    ("0.0011_{2}", "0.0011_{3}", 0.0),  # math-verify drops the subscript: this was graded correct
    ("0.0011_{2}", "0.0111_{2}", 0.0),
    ("0.0011_{2}", "0.0012_{2}", 0.0),
    ("52_8", "52_9", 0.0),
    ("52_8", "52_8", 1.0),
]


def test_base_notation_with_a_radix_point():
    _check(BASE_FRACTIONS)
