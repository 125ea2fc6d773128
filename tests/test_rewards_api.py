"""Reward API: numeric and format rewards, registry, pickling, and identical answers from threads, asyncio and
processes."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import pickle
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from _helpers_rewards import correct_completion, read_jsonl, solve_countdown, wrong_answer

from sara_trl.rewards import (
    REWARD_FUNCS,
    CountdownReward,
    FormatReward,
    MathReward,
    NumericReward,
    Status,
    Verdict,
    VerdictReward,
    completion_text,
    countdown_reward,
    format_reward,
    get_reward_func,
    math_reward,
    numeric_reward,
    numeric_success,
    reset_stats,
    stats,
)


# --- numeric ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "completion,answer,expected",
    [
        ("8", "8", 1.0),
        ("3 + 5 = 8", "8", 1.0),
        ("The answer is 8.", "8", 1.0),
        ("8 apples", "8", 1.0),
        ("It is 9.", "8", 0.0),
        ("8, no wait, 9", "8", 0.0),  # the last number counts
        (r"Compute 3 + 5, so \boxed{8} and 12 is unrelated", "8", 1.0),  # a box beats the last number
        (r"\boxed{x = 8}", "8", 1.0),
        ("1,000 in total", "1000", 1.0),
        ("5 - 8 = -3", "-3", 1.0),
        ("-3", "3", 0.0),
        ("2.50", "2.5", 1.0),
        ("8.0", "8", 1.0),
        ("no digits here", "8", 0.0),
        ("", "8", 0.0),
        ("8", "eight", None),
        ("8", "", None),
    ],
)
def test_numeric_reward(completion, answer, expected):
    assert numeric_reward([completion], answer=[answer]) == [expected]


def test_numeric_int_gold_and_conversational():
    assert numeric_reward([[{"role": "assistant", "content": "=> 12"}]], answer=[12]) == [1.0]
    assert numeric_success("7", 7).status is Status.CORRECT
    with pytest.raises(ValueError, match="answer"):
        numeric_reward(["8"])


# --- format -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "completion,expected",
    [
        ("<think>reasoning</think><answer>42</answer>", 1.0),
        ("reasoning</think>\n<answer> 42 </answer>\n", 1.0),  # prompt ended with <think>
        ("<think>a</think><answer>1</answer> trailing text", 0.0),
        ("<answer>42</answer>", 0.0),
        ("<think>a</think><think>b</think><answer>1</answer>", 0.0),
        ("<think>a</think><answer></answer>", 0.0),
        ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0),
    ],
)
def test_format_reward(completion, expected):
    assert format_reward([completion]) == [expected]


def test_format_reward_options():
    assert FormatReward(require_think_open=True)(["a</think><answer>1</answer>"]) == [0.0]
    assert FormatReward(value=0.1)(["<think>a</think><answer>1</answer>"]) == [0.1]


# --- completion formats -----------------------------------------------------------------------------------------
def test_completion_text_formats():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    msgs = [
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "ignored"},
        {"role": "assistant", "content": [{"type": "text", "text": "second"}]},
    ]
    assert completion_text(msgs) == "first\nsecond"
    with pytest.raises(ValueError):
        completion_text(3)
    with pytest.raises(ValueError):
        completion_text(["not a message"])


# --- registry and pickling --------------------------------------------------------------------------------------
def test_registry():
    assert set(REWARD_FUNCS) == {"math", "countdown", "numeric", "format"}
    assert get_reward_func("math") is math_reward
    assert get_reward_func("countdown") is countdown_reward
    with pytest.raises(ValueError, match="known"):
        get_reward_func("nope")


@pytest.mark.parametrize(
    "func",
    [
        math_reward,
        countdown_reward,
        numeric_reward,
        format_reward,
        MathReward(timeout_s=3.0),
        CountdownReward(),
        NumericReward(),
        FormatReward(value=0.5),
    ],
    ids=lambda f: getattr(f, "__name__", type(f).__name__) + ("" if callable(f) and hasattr(f, "__code__") else "_obj"),
)
def test_rewards_pickle_and_keep_their_name(func):
    clone = pickle.loads(pickle.dumps(func))
    assert clone.__name__ == func.__name__
    assert clone.__name__.endswith("_reward")
    if isinstance(func, MathReward):
        assert clone.timeout_s == 3.0
        assert clone([correct_completion("7")], answer=["7"]) == [1.0]


# --- the one scaffold: VerdictReward -------------------------------------------------------------------------
@dataclass
class ToyReward(VerdictReward):
    """A verifier stating only what differs (module level, so it pickles)."""

    name = "toy_reward"
    counter = "toy"
    columns = ("gold", "extra")
    optional = ("extra",)

    shout: bool = False

    def judge(self, completions, gold, extra):
        return [Verdict(Status.CORRECT if c == g else Status.WRONG if g else Status.UNPARSEABLE_GOLD, c)
                for c, g in zip(completions, gold)]


def test_verdict_reward_turns_judge_into_a_trl_reward():
    toy = ToyReward(shout=True)
    assert toy.__name__ == "toy_reward" and repr(toy) == "ToyReward(shout=True)"
    assert str(inspect.signature(toy)) == ("(completions: 'Sequence[Any]', gold: 'Sequence[Any] | None' = None, "
                                           "extra: 'Sequence[Any] | None' = None, **kwargs: 'Any') -> "
                                           "'list[float | None]'")
    assert str(inspect.signature(ToyReward.verdicts)) == ("(self, completions: 'Sequence[Any]', gold: "
                                                          "'Sequence[Any]', extra: 'Sequence[Any] | None' = None) -> "
                                                          "'list[Verdict]'")
    reset_stats()
    # TRL's call: columns by keyword, everything else ignored; positional columns work too
    assert toy(["a", "b", "c"], gold=["a", "x", ""], prompts=["p"] * 3, trainer_state=None) == [1.0, 0.0, None]
    assert toy(["a"], ["a"]) == [1.0]
    assert [v.status for v in toy.verdicts(["a"], ["b"])] == [Status.WRONG]
    s = stats()
    assert (s["toy/correct"], s["toy/wrong"], s["toy/unparseable_gold"]) == (2, 2, 1)
    with pytest.raises(ValueError, match=r"^toy_reward needs the dataset column 'gold' \(TRL passes"):
        toy(["a"], extra=[1])
    with pytest.raises(ValueError, match="got 2 completions but 1 golds"):
        toy(["a", "b"], gold=["a"])
    with pytest.raises(ValueError, match="got 1 completions but 2 extras"):
        toy(["a"], gold=["a"], extra=[1, 2])
    with pytest.raises(TypeError, match=r"^ToyReward.verdicts\(\) missing a required argument: 'gold'"):
        toy.verdicts(["a"])
    with pytest.raises(TypeError, match=r"^ToyReward.__call__\(\) too many positional arguments"):
        toy(["a"], ["a"], [1], [2])
    clone = pickle.loads(pickle.dumps(toy))
    assert clone == toy and clone.__name__ == "toy_reward" and clone(["a"], gold=["a"]) == [1.0]


@pytest.mark.parametrize("cls", [MathReward, NumericReward, CountdownReward, FormatReward])
def test_every_reward_class_is_built_on_verdict_reward(cls):
    assert issubclass(cls, VerdictReward)
    source = inspect.getsource(cls)
    assert "def __call__" not in source and "def verdicts" not in source  # the scaffold's, not a copy
    assert cls().__name__ == cls.name and cls.name.endswith("_reward")
    assert list(inspect.signature(cls()).parameters) == ["completions", *cls.columns, "kwargs"]


#: how many of each math fixture file's golds are plain numbers (numeric_reward gives None for the others)
NUMERIC_GOLDS = {"math500.jsonl": 10, "aime24.jsonl": 6, "amc23.jsonl": 12, "minerva_math.jsonl": 9,
                 "olympiadbench.jsonl": 9, "gsm8k_test.jsonl": 20, "math_train.jsonl": 15, "math_train_12k.jsonl": 6}


@pytest.mark.parametrize("fname", sorted(NUMERIC_GOLDS))
def test_reward_classes_give_the_same_rewards_on_the_fixtures(fname):
    """The rewards every class gave before it was built on VerdictReward, per kind of completion."""
    golds = [r["answer"] for r in read_jsonl(fname)]
    n, numeric = len(golds), NUMERIC_GOLDS[fname]
    kinds = {
        "boxed": ([correct_completion(g) for g in golds], {1.0: n}, {1.0: numeric}, {0.0: n}),
        "wrong": ([correct_completion(wrong_answer(g)) for g in golds], {0.0: n}, {0.0: numeric}, {0.0: n}),
        "none": (["no answer"] * n, {0.0: n}, {0.0: numeric}, {0.0: n}),
        "tags": ([f"<think>x</think><answer>{g}</answer>" for g in golds], {0.0: n}, {1.0: numeric}, {1.0: n}),
    }
    for kind, (comps, math, num, fmt) in kinds.items():
        if numeric < n:
            num = {**num, None: n - numeric}
        reset_stats()
        got_math, got_num = math_reward(comps, answer=golds), numeric_reward(comps, answer=golds, prompts=comps)
        assert (Counter(got_math), Counter(got_num), Counter(format_reward(comps, answer=golds))) == (
            math, num, fmt), kind
        counted = {k.split("/")[1]: v for k, v in stats().items() if k.startswith("numeric/")}
        statuses = Counter(v.status.value for v in NumericReward().verdicts(comps, golds))
        assert counted == statuses, kind  # each verdict of the call above counted once, by the scaffold
        assert [v.reward for v in NumericReward().verdicts(comps, golds)] == got_num
        assert [v.reward for v in MathReward().verdicts(comps, golds)] == got_math


@pytest.mark.parametrize("fname", ["countdown_3to4_train_head.jsonl", "countdown_tinyzero_test.jsonl"])
def test_countdown_reward_gives_the_same_rewards_on_the_fixtures(fname):
    rows = read_jsonl(fname)
    target, nums = [r["target"] for r in rows], [r["nums"] for r in rows]
    sols = [solve_countdown(ns, t) for ns, t in zip(nums, target)]
    right = [[{"role": "assistant", "content": f"<think>..</think><answer>{s}</answer>"}] for s in sols]
    wrong = [f"<answer>{s} + 1</answer>" for s in sols]
    reset_stats()
    assert countdown_reward(right + wrong, target=target * 2, nums=nums * 2) == [1.0] * len(rows) + [0.0] * len(rows)
    assert CountdownReward(max_answer_chars=10)(right, target, nums) == [
        1.0 if len(s) <= 10 else 0.0 for s in sols]
    s = stats()
    assert s["countdown/correct"] == len(rows) + sum(len(x) <= 10 for x in sols)


# --- concurrency: threads, asyncio, processes -------------------------------------------------------------------
GOLDS = [
    r"\frac{3}{4}",
    "(1,2)",
    r"\sqrt{2}",
    "12",
    r"10,\!080",
    r"\text{(B)}",
    "x^2+1",
    r"\begin{pmatrix}1\\2\end{pmatrix}",
]


def batch():
    comps, golds = [], []
    for g in GOLDS:
        comps += [correct_completion(g), correct_completion(wrong_answer(g)), "no answer"]
        golds += [g, g, g]
    comps.append([{"role": "assistant", "content": correct_completion("5")}])
    golds.append(r"\frac{")  # unparseable gold
    return comps, golds


def _score_math(args):
    comps, golds = args
    return math_reward(comps, answer=golds)


def _score_math_uncached(args):
    """In a child process: forget results inherited from the parent, so this process's own worker does the work."""
    import os

    from sara_trl.rewards import clear_caches

    os.environ["SARA_VERIFIER_WORKERS"] = "1"  # one verifier worker per child keeps the test light on 2 cores
    clear_caches()
    return _score_math(args)


def _score_countdown(_):
    return countdown_reward(
        ["<answer>(1 + 2) * 3</answer>", "<answer>1 + 2 + 3</answer>"], target=[9, 9], nums=[[1, 2, 3]] * 2
    )


@pytest.fixture(scope="module")
def serial_result():
    comps, golds = batch()
    expected = [1.0, 0.0, 0.0] * len(GOLDS) + [None]
    out = math_reward(comps, answer=golds)
    assert out == expected
    return out


def test_same_answers_from_threads(serial_result):
    comps, golds = batch()
    chunks = [(comps[i : i + 5], golds[i : i + 5]) for i in range(0, len(comps), 5)]
    with ThreadPoolExecutor(max_workers=4) as ex:
        parts = list(ex.map(_score_math, chunks * 2))
    merged = [x for part in parts[: len(chunks)] for x in part]
    assert merged == serial_result
    assert [x for part in parts[len(chunks) :] for x in part] == serial_result


def test_same_answers_from_asyncio_loop(serial_result):
    comps, golds = batch()

    async def main():
        direct = math_reward(comps, answer=golds)  # called on the loop's (main) thread
        threaded = await asyncio.gather(*(asyncio.to_thread(math_reward, comps, answer=golds) for _ in range(3)))
        return direct, threaded

    direct, threaded = asyncio.run(main())
    assert direct == serial_result
    assert all(t == serial_result for t in threaded)


@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_same_answers_from_process_pool(serial_result, method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"{method} not available")
    comps, golds = batch()
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context(method)) as ex:
        results = list(ex.map(_score_math_uncached, [(comps, golds)] * 2))
        cd = list(ex.map(_score_countdown, range(2)))
    assert results == [serial_result, serial_result]
    assert cd == [[1.0, 0.0], [1.0, 0.0]]


def test_stats_count_outcomes():
    reset_stats()
    math_reward([correct_completion("2"), correct_completion("3"), "none"], answer=["2", "2", r"\frac{"])
    countdown_reward(["<answer>1 + 2</answer>"], target=[3], nums=[[1, 2]])
    s = stats()
    assert s["math/correct"] == 1 and s["math/wrong"] == 1 and s["math/unparseable_gold"] == 1
    assert s["countdown/correct"] == 1
    assert "pool/kills" in s
