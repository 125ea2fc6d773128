"""Generators: deterministic per seed, solvable Countdown tasks, correct arithmetic answers."""

from __future__ import annotations

import pytest
from _helpers_rewards import solve_countdown

from sara_trl.data import ARITHMETIC_INSTRUCTION, make_arithmetic_dataset, make_countdown_dataset, make_countdown_tasks
from sara_trl.rewards import countdown_reward, evaluate_expression, numeric_reward


def test_countdown_deterministic_per_seed():
    a = make_countdown_dataset(50, seed=3)
    b = make_countdown_dataset(50, seed=3)
    c = make_countdown_dataset(50, seed=4)
    assert a.to_dict() == b.to_dict()
    assert a["nums"] != c["nums"]
    assert set(a.column_names) == {"prompt", "target", "nums", "solution_expr", "id", "source"}


def test_every_generated_countdown_task_is_solvable():
    ds = make_countdown_dataset(300, seed=0)
    # the construction expression uses each number once and hits the target exactly
    comps = [f"<answer>{e}</answer>" for e in ds["solution_expr"]]
    assert countdown_reward(comps, target=ds["target"], nums=ds["nums"]) == [1.0] * len(ds)
    for e, t, n in zip(ds["solution_expr"], ds["target"], ds["nums"]):
        value, literals = evaluate_expression(e)
        assert value == t and sorted(literals) == sorted(n)
    # and an independent brute-force search finds a solution for every task
    sols = [solve_countdown(n, t) for n, t in zip(ds["nums"], ds["target"])]
    assert all(s is not None for s in sols)
    assert countdown_reward([f"<answer>{s}</answer>" for s in sols], target=ds["target"], nums=ds["nums"]) == [
        1.0
    ] * len(ds)


def test_countdown_knobs_are_respected():
    tasks = make_countdown_tasks(200, seed=1, num_count=4, min_number=2, max_number=20, min_target=10, max_target=50)
    assert all(len(t["nums"]) == 4 for t in tasks)
    assert all(2 <= x <= 20 for t in tasks for x in t["nums"])
    assert all(10 <= t["target"] <= 50 for t in tasks)
    mixed = make_countdown_tasks(200, seed=2, num_count=(3, 4))
    assert {len(t["nums"]) for t in mixed} == {3, 4}
    plus_only = make_countdown_tasks(50, seed=5, ops="+")
    assert all(t["target"] == sum(t["nums"]) for t in plus_only)


def test_countdown_invalid_arguments():
    with pytest.raises(ValueError):
        make_countdown_tasks(1, num_count=1)
    with pytest.raises(ValueError):
        make_countdown_tasks(1, ops=("**",))
    with pytest.raises(ValueError):
        make_countdown_tasks(1, min_number=5, max_number=2)
    with pytest.raises(ValueError):
        make_countdown_tasks(-1)
    with pytest.raises(RuntimeError):  # 1 and 1 can never reach 1000
        make_countdown_tasks(1, num_count=2, min_number=1, max_number=1, min_target=1000, max_target=2000, max_tries=50)


def test_arithmetic_dataset():
    ds = make_arithmetic_dataset(100, seed=0)
    assert ds.to_dict() == make_arithmetic_dataset(100, seed=0).to_dict()
    assert ds["expression"] != make_arithmetic_dataset(100, seed=1)["expression"]
    assert set(ds.column_names) == {"prompt", "answer", "expression", "id", "source"}
    for row in ds:
        a, op, b = row["expression"].split()
        assert op == "+" and 0 <= int(a) <= 9 and 0 <= int(b) <= 9
        assert row["answer"] == str(int(a) + int(b))
        assert row["prompt"] == [
            {"role": "user", "content": ARITHMETIC_INSTRUCTION.replace("{expression}", row["expression"])}
        ]
    assert numeric_reward([f"The sum is {x}." for x in ds["answer"]], answer=ds["answer"]) == [1.0] * 100


def test_arithmetic_precedence_and_options():
    ds = make_arithmetic_dataset(
        200,
        seed=7,
        ops=("+", "-", "*"),
        num_operands=3,
        max_operand=12,
        instruction="Compute {expression}.",
        system_prompt="You are a calculator.",
    )
    for row in ds:
        value, _ = evaluate_expression(row["expression"])  # independent evaluator (exact, precedence-aware)
        assert row["answer"] == str(int(value))
    assert ds[0]["prompt"][0] == {"role": "system", "content": "You are a calculator."}
    assert ds[0]["prompt"][1]["content"] == f"Compute {ds[0]['expression']}."
    assert any(int(a) < 0 for a in ds["answer"])  # subtraction can go negative; numeric_reward reads "-3"


def test_arithmetic_invalid_arguments():
    with pytest.raises(ValueError):
        make_arithmetic_dataset(5, ops=("/",))
    with pytest.raises(ValueError):
        make_arithmetic_dataset(5, num_operands=1)
    with pytest.raises(ValueError, match="expression"):
        make_arithmetic_dataset(5, instruction="What is it?")
    with pytest.raises(ValueError):
        make_arithmetic_dataset(5, min_operand=3, max_operand=2)
