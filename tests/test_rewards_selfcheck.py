r"""The gold self-check (issue 55): every gold answer of the shipped fixtures grades correct against itself and the
common re-writings a model produces; the data report lists the failures by kind; the agreement with the installed
math-verify is measured, so that a change in either grader shows up.

The fixtures are a few real rows of each of the ten benchmark files (``tests/fixtures/data``); the full files are
not needed (``python -m benchmarks.data_report.data_report --data_dir DIR`` runs the same check over them).
"""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from _helpers_rewards import FIXTURE_DATA_DIR

from sara_trl.rewards.selfcheck import REWRITE_KINDS, gold_rewrites, gold_self_check, math_verify_agreement

FILES = sorted(p.name for p in FIXTURE_DATA_DIR.glob("*.jsonl"))


def _golds(name: str) -> list[str]:
    with open(FIXTURE_DATA_DIR / name, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [str(r["answer"]) if "answer" in r else str(r["target"]) for r in rows]


def test_the_fixtures_hold_the_ten_benchmark_files():
    assert len(FILES) == 10, FILES


@pytest.mark.parametrize(
    "gold,expected",
    [
        ("5", [("self", "5"), ("period", "5.")]),
        (r"\text{Evelyn}", [("self", r"\text{Evelyn}"), ("text", "Evelyn"), ("period", r"\text{Evelyn}.")]),
        ("B, E", [("self", "B, E"), ("text", r"\text{B, E}"), ("period", "B, E.")]),
        (
            r"\left( 3, \frac{\pi}{2} \right)",
            [
                ("self", r"\left( 3, \frac{\pi}{2} \right)"),
                ("left_right", r"( 3, \frac{\pi}{2} )"),
                ("dfrac", r"\left( 3, \dfrac{\pi}{2} \right)"),
                ("period", r"\left( 3, \frac{\pi}{2} \right)."),
            ],
        ),
        ("(1,2)", [("self", "(1,2)"), ("left_right", r"\left(1,2\right)"), ("period", "(1,2).")]),
        (r"\dfrac{1}{2}", [("self", r"\dfrac{1}{2}"), ("dfrac", r"\frac{1}{2}"), ("period", r"\dfrac{1}{2}.")]),
        (
            r"12.5\%",
            [("self", r"12.5\%"), ("period", r"12.5\%."), ("percent", "12.5"), ("percent", "12.5%")],
        ),
        ("x", [("self", "x"), ("period", "x.")]),  # a variable is not given \text{}
        ("3.", [("self", "3.")]),
    ],
)
def test_gold_rewrites(gold, expected):
    assert gold_rewrites(gold) == expected
    assert {k for k, _ in gold_rewrites(gold)} <= set(REWRITE_KINDS)


@pytest.mark.parametrize("name", FILES)
def test_every_fixture_gold_grades_correct_against_itself_and_its_rewritings(name):
    golds = _golds(name)
    pairs, failures = gold_self_check(golds)
    assert pairs >= 2 * len(golds)  # each gold, and at least its trailing-period re-writing
    assert not failures, failures


def test_self_check_reports_a_failing_gold_by_kind():
    # a prose gold cannot be graded (reward None by design), so every re-writing of it fails
    pairs, failures = gold_self_check(["5", r"\text{two lines}"])
    assert pairs == 5
    assert {(f.index, f.kind, f.status, f.reason) for f in failures} == {
        (1, "self", "unparseable_gold", "prose_gold"),
        (1, "text", "unparseable_gold", "prose_gold"),
        (1, "period", "unparseable_gold", "prose_gold"),
    }


#: math-verify's grades of the fixture pairs (every re-writing and the perturbed answer) where they differ from
#: math_reward, with the version they were measured with. math-verify cannot parse a boxed answer with a trailing
#: period (``\boxed{204.}`` extracts the string "204."), which math_reward strips, and reads a unit written as plain
#: words as a product of symbols (``4319  dollars`` against ``4319 \text{ dollars}``, math_train.jsonl fixture).
RECORDED_MATH_VERIFY = "0.9.0"
RECORDED_DISAGREEMENTS = {"period: ours correct, math-verify wrong": 182, "text: ours correct, math-verify wrong": 1}


def test_agreement_with_math_verify_on_the_fixtures(tmp_path):
    from benchmarks.data_report.data_report import check, perturb

    if version("math-verify") != RECORDED_MATH_VERIFY:
        pytest.skip(f"recorded with math-verify {RECORDED_MATH_VERIFY}, installed {version('math-verify')}")
    by_kind: dict[str, int] = {}
    both = 0
    for name in FILES:
        golds = list(dict.fromkeys(_golds(name)))
        labelled = [(k, g, t) for g in golds for k, t in gold_rewrites(g)]
        labelled += [("perturbed", g, perturb(g)) for g in golds]
        agr = math_verify_agreement([(g, t) for _, g, t in labelled])
        both += agr["both_grade"]
        for j, *_rest, ours, mv in agr["examples"]:
            key = f"{labelled[j][0]}: ours {ours}, math-verify {mv}"
            by_kind[key] = by_kind.get(key, 0) + 1
    assert both == 558  # every pair of the fixtures (all graded by both)
    assert by_kind == RECORDED_DISAGREEMENTS, (
        "math_reward and math-verify now disagree differently on the fixture pairs: "
        f"{by_kind} (recorded: {RECORDED_DISAGREEMENTS}); look at the pairs, then fix the verifier or re-record"
    )
    assert check  # the data report's check() is what builds these pairs per dataset


def test_math_verify_agreement_counts():
    agr = math_verify_agreement([("5", "5"), ("5", "6"), ("5", "5."), (r"\text{two lines}", "two lines")])
    assert agr["pairs"] == 4
    assert agr["both_grade"] == 3  # the prose gold: math_reward gives None
    assert agr["disagree"] == 1
    assert agr["kinds"] == {"ours correct, math-verify wrong": 1, "ours wrong, math-verify correct": 0}
    assert [e[:3] for e in agr["examples"]] == [(2, "5", "5.")]


def test_data_report_lists_the_self_check_by_kind(tmp_path):
    from benchmarks.data_report.data_report import main

    out, js = tmp_path / "report.md", tmp_path / "report.json"
    assert main(["--data_dir", str(FIXTURE_DATA_DIR), "--out", str(out), "--json", str(js), "--no-overhead"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "golds failing a re-writing" in text and "Agreement with math-verify on its own" in text
    summary = json.loads(js.read_text(encoding="utf-8"))
    assert len(summary["datasets"]) == 10
    assert all(d["failing_golds"] == 0 for d in summary["datasets"].values())
    # a before/after comparison from an earlier run's counts
    before = dict(summary, label="earlier")
    before["datasets"] = {k: dict(v, failing_golds=v["failing_golds"] + 1) for k, v in summary["datasets"].items()}
    (tmp_path / "before.json").write_text(json.dumps(before), encoding="utf-8")
    assert main(["--data_dir", str(FIXTURE_DATA_DIR), "--out", str(out), "--self-check-only",
                 "--before", str(tmp_path / "before.json")]) == 0
    text = out.read_text(encoding="utf-8")
    assert "Before and after this verifier version" in text and "| **all** | **10** | **0** |" in text
