"""Loaders: row counts and columns on the shared files, Hub-schema mapping, filters, errors, rewards end to end."""

from __future__ import annotations

import json
from collections import Counter

import datasets
import pytest
from _helpers_rewards import correct_completion, read_jsonl, shared_data_dir, solve_countdown

from sara_trl.data import (
    DATASET_NAMES,
    HUB_SOURCES,
    MATH_SUBJECTS,
    MATH_TEMPLATE,
    find_shared_data_dir,
    load_aime24,
    load_amc23,
    load_countdown,
    load_dataset_by_name,
    load_gsm8k,
    load_math,
    load_minerva,
    load_olympiadbench,
    shared_data_file,
)
from sara_trl.rewards import countdown_reward, math_reward

pytestmark = pytest.mark.skipif(shared_data_dir() is None, reason="shared data directory not found")

MATH_COLS = {"prompt", "problem", "answer", "id", "source"}

# (name, file, expected rows, extra columns) -- row counts are those of shared/data/README.md
CASES = [
    ("math", "math_train.jsonl", 7500, {"level", "type"}),
    ("math_train_12k", "math_train_12k.jsonl", 12000, {"level", "type"}),
    ("math500", "math500.jsonl", 500, {"level", "type"}),
    ("gsm8k", "gsm8k_test.jsonl", 1319, set()),
    ("aime24", "aime24.jsonl", 30, set()),
    ("amc23", "amc23.jsonl", 40, set()),
    ("minerva", "minerva_math.jsonl", 272, set()),
    ("olympiadbench", "olympiadbench.jsonl", 675, {"is_multiple_answer", "unit"}),
]


@pytest.fixture(scope="module")
def data_dir():
    return find_shared_data_dir()


@pytest.mark.parametrize("name,fname,rows,extra", CASES, ids=[c[0] for c in CASES])
def test_math_loaders_rows_columns_and_answers(data_dir, name, fname, rows, extra):
    ds = load_dataset_by_name(name, data_dir=data_dir)
    assert len(ds) == rows
    assert set(ds.column_names) == MATH_COLS | extra
    raw = read_jsonl(fname)
    assert ds["answer"] == [r["answer"] for r in raw]
    assert ds["problem"] == [r["problem"] for r in raw]
    first = ds[0]["prompt"]
    assert first == [{"role": "user", "content": MATH_TEMPLATE.replace("{problem}", raw[0]["problem"])}]
    assert "\\boxed{}" in first[0]["content"]


@pytest.mark.parametrize(
    "name,fname,rows",
    [
        ("countdown", "countdown_3to4_train_head.jsonl", 11024),
        ("countdown_test", "countdown_tinyzero_test.jsonl", 1024),
    ],
)
def test_countdown_loader(data_dir, name, fname, rows):
    ds = load_dataset_by_name(name, data_dir=data_dir)
    assert len(ds) == rows
    assert set(ds.column_names) == {"prompt", "target", "nums", "id", "source"}
    raw = read_jsonl(fname)
    assert ds["target"] == [r["target"] for r in raw]
    assert ds["nums"] == [r["nums"] for r in raw]
    content = ds[0]["prompt"][-1]["content"]
    assert str(raw[0]["nums"]) in content and str(raw[0]["target"]) in content and "<answer>" in content


def test_minerva_alternatives_opt_in(data_dir):
    assert "answer_alternatives" not in load_minerva(data_dir=data_dir).column_names
    ds = load_minerva(data_dir=data_dir, alternatives=True)
    raw = read_jsonl("minerva_math.jsonl")
    assert ds["answer_alternatives"] == [r["answer_alternatives"] for r in raw]


def test_math_level_and_subject_filters(data_dir):
    raw = read_jsonl("math_train.jsonl")
    ds = load_math("train", levels=[4, 5], data_dir=data_dir)
    assert len(ds) == sum(r["level"] in (4, 5) for r in raw)
    assert set(ds["level"]) == {4, 5}
    ds = load_math("train", subjects=["number_theory", "Counting & Probability"], data_dir=data_dir)
    want = Counter(r["type"] for r in raw if r["type"] in ("Number Theory", "Counting & Probability"))
    assert Counter(ds["type"]) == want
    ds = load_math("math500", levels=[1], subjects=["algebra"], data_dir=data_dir)
    assert len(ds) == sum(r["level"] == 1 and r["type"] == "Algebra" for r in read_jsonl("math500.jsonl"))
    assert len(MATH_SUBJECTS) == 7


def test_template_and_system_prompt_override(data_dir):
    ds = load_aime24(data_dir=data_dir, template="Q: {problem}\nA:", system_prompt="Be brief.")
    raw = read_jsonl("aime24.jsonl")
    assert ds[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"Q: {raw[0]['problem']}\nA:"},
    ]
    ds = load_countdown("test", data_dir=data_dir, num_tasks=5, template="{numbers} -> {target}")
    assert len(ds) == 5 and ds[0]["prompt"][0]["content"] == f"{ds[0]['nums']} -> {ds[0]['target']}"
    with pytest.raises(ValueError, match="placeholder"):
        load_amc23(data_dir=data_dir, template="no placeholder")


def test_errors(data_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown split"):
        load_math("validation", data_dir=data_dir)
    with pytest.raises(ValueError, match="levels"):
        load_math("math500", levels=[6], data_dir=data_dir)
    with pytest.raises(ValueError, match="subject"):
        load_math("math500", subjects=["astrology"], data_dir=data_dir)
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset_by_name("mmlu")
    with pytest.raises(ValueError, match="single"):
        load_dataset_by_name("aime24", split="train", data_dir=data_dir)
    with pytest.raises(ValueError, match="no offline file"):
        load_gsm8k("train", data_dir=data_dir)
    with pytest.raises(FileNotFoundError):
        load_amc23(path=tmp_path / "missing.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported"):
        load_amc23(path=tmp_path / "x.csv")
    with pytest.raises(ValueError, match="num_tasks"):
        load_countdown("test", data_dir=data_dir, num_tasks=0)


def test_hub_sources_are_declared_for_every_loader():
    for key in [
        ("math", "train"),
        ("math", "math500"),
        ("gsm8k", "test"),
        ("aime24", "test"),
        ("amc23", "test"),
        ("minerva", "test"),
        ("olympiadbench", "test"),
        ("countdown", "train"),
        ("countdown", "test"),
    ]:
        assert key in HUB_SOURCES
    assert HUB_SOURCES[("countdown", "test")].rows == (327680, 328704)
    assert HUB_SOURCES[("gsm8k", "test")].config == "main"
    assert set(DATASET_NAMES) >= {
        "math",
        "math500",
        "gsm8k",
        "aime24",
        "amc23",
        "minerva",
        "olympiadbench",
        "countdown",
    }


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_upstream_hub_schemas_are_mapped(tmp_path):
    """Rows shaped like the Hub datasets (question/answer names, GSM8K '####', float answers, OlympiadBench
    final_answer lists, MATH 'Level 3' strings with the answer only inside the solution) map to our columns."""
    gsm = _write_jsonl(tmp_path / "gsm.jsonl", [{"question": "Q1", "answer": "work <<1+1=2>>\n#### 1,234"}])
    ds = load_gsm8k(path=gsm)
    assert ds[0]["answer"] == "1234" and ds[0]["problem"] == "Q1"
    amc = _write_jsonl(tmp_path / "amc.jsonl", [{"id": 0, "question": "Q", "answer": 27.0, "url": "u"}])
    ds = load_amc23(path=amc)
    assert ds[0]["answer"] == "27" and ds[0]["id"] == "0"
    oly = _write_jsonl(
        tmp_path / "oly.jsonl",
        [{"id": 7, "question": "Q", "final_answer": ["$69$,$84$"], "is_multiple_answer": True, "unit": None}],
    )
    ds = load_olympiadbench(path=oly)
    assert ds[0]["answer"] == "69,84" and ds[0]["is_multiple_answer"] is True and ds[0]["unit"] == ""
    mth = _write_jsonl(
        tmp_path / "math.jsonl",
        [
            {"problem": "P", "level": "Level 3", "type": "Number Theory", "solution": r"so \boxed{\frac{1}{2}}."},
            {"problem": "P2", "level": "Level ?", "type": "Algebra", "solution": r"\boxed{5}"},
        ],
    )
    ds = load_math("train", path=mth)
    assert ds["answer"] == [r"\frac{1}{2}", "5"] and ds["level"] == [3, None]
    assert len(load_math("train", path=mth, levels=[3])) == 1
    cd = _write_jsonl(tmp_path / "cd.jsonl", [{"target": 9, "nums": [1, 2, 3]}])
    ds = load_countdown("train", path=cd)
    assert ds[0]["target"] == 9 and ds[0]["nums"] == [1, 2, 3] and ds[0]["id"] == "countdown/train-0"


def test_parquet_path(tmp_path, data_dir):
    import datasets

    src = datasets.load_dataset("json", data_files=str(shared_data_file("amc23")), split="train")
    pq = tmp_path / "amc23.parquet"
    src.to_parquet(str(pq))
    ds = load_amc23(path=pq)
    assert len(ds) == 40 and ds["answer"] == src["answer"]


def test_shared_data_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("SARA_SHARED_DATA", str(tmp_path))
    assert find_shared_data_dir() == tmp_path.resolve()
    with pytest.raises(FileNotFoundError):
        shared_data_file("math500")
    monkeypatch.setenv("SARA_SHARED_DATA", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="SARA_SHARED_DATA"):
        find_shared_data_dir()


@pytest.mark.parametrize("name", ["math500", "gsm8k", "aime24", "amc23", "minerva", "olympiadbench"])
def test_rewards_read_loader_columns_as_trl_passes_them(data_dir, name):
    """TRL passes every non-prompt column as a keyword argument; the rewards must find what they need there."""
    ds = load_dataset_by_name(name, data_dir=data_dir).select(range(12))
    columns = {k: ds[k] for k in ds.column_names if k != "prompt"}
    comps = [[{"role": "assistant", "content": correct_completion(a)}] for a in ds["answer"]]
    assert math_reward(completions=comps, prompts=ds["prompt"], completion_ids=[[0]] * 12, **columns) == [1.0] * 12


def test_countdown_reward_reads_loader_columns(data_dir):
    ds = load_countdown("test", data_dir=data_dir, num_tasks=20)
    sols = [solve_countdown(n, t) for n, t in zip(ds["nums"], ds["target"])]
    columns = {k: ds[k] for k in ds.column_names if k != "prompt"}
    comps = [[{"role": "assistant", "content": f"<think>..</think><answer>{s}</answer>"}] for s in sols]
    assert countdown_reward(completions=comps, prompts=ds["prompt"], **columns) == [1.0] * 20


def test_unreachable_hub_falls_back_to_the_offline_copy_or_says_what_to_pass(tmp_path, monkeypatch):
    real_load = datasets.load_dataset

    def offline(name, *args, **kwargs):
        if name in ("json", "parquet"):
            return real_load(name, *args, **kwargs)
        raise ConnectionError(f"offline: cannot reach {name}")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    shared = find_shared_data_dir(required=False)
    if shared is not None:
        monkeypatch.setenv("SARA_SHARED_DATA", str(shared))
        with pytest.warns(UserWarning, match=r"loading the offline copy .*amc23"):
            ds = load_dataset_by_name("amc23")
        assert len(ds) == 40
    monkeypatch.setenv("SARA_SHARED_DATA", str(tmp_path))  # no offline copy there
    with pytest.raises(ConnectionError, match=r"could not load amc23 \(test\) from the Hub .*pass path="):
        load_dataset_by_name("amc23")


def test_missing_local_paths_say_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data_dir='.*nowhere' is not a directory"):
        load_math(data_dir=tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"missing.jsonl does not exist \(expected a local"):
        load_math(path=tmp_path / "missing.jsonl")
