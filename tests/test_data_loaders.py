"""Loaders: row counts and columns on the data fixtures (tests/fixtures/data), Hub-schema mapping, filters, errors,
rewards end to end, and the one-line failure when the Hub cannot serve the data."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter

import datasets
import pytest
from _helpers_rewards import correct_completion, read_jsonl, solve_countdown

from sara_trl.data import (
    DATASET_NAMES,
    DATASET_SPLITS,
    HUB_SOURCES,
    LOCAL_FILES,
    MATH_SUBJECTS,
    MATH_TEMPLATE,
    DatasetSplit,
    DataUnavailableError,
    load_aime24,
    load_amc23,
    load_countdown,
    load_dataset_by_name,
    load_gsm8k,
    load_math,
    load_minerva,
    load_olympiadbench,
    local_data_file,
)
from sara_trl.rewards import countdown_reward, math_reward

MATH_COLS = {"prompt", "problem", "answer", "id", "source"}

# (name, file, expected rows, extra columns) -- row counts are those of the fixtures (tests/fixtures/data/README.md)
CASES = [
    ("math", "math_train.jsonl", 20, {"level", "type"}),
    ("math_train_12k", "math_train_12k.jsonl", 10, {"level", "type"}),
    ("math500", "math500.jsonl", 20, {"level", "type"}),
    ("gsm8k", "gsm8k_test.jsonl", 20, set()),
    ("aime24", "aime24.jsonl", 6, set()),
    ("amc23", "amc23.jsonl", 12, set()),
    ("minerva", "minerva_math.jsonl", 12, set()),
    ("olympiadbench", "olympiadbench.jsonl", 10, {"is_multiple_answer", "unit"}),
]


@pytest.fixture(scope="module")
def data_dir(fixture_data_dir):
    return fixture_data_dir


def test_fixtures_cover_every_local_file(data_dir):
    assert sorted(p.name for p in data_dir.glob("*.jsonl")) == sorted(LOCAL_FILES.values())
    assert {c[1] for c in CASES} | {"countdown_3to4_train_head.jsonl", "countdown_tinyzero_test.jsonl"} == set(
        LOCAL_FILES.values())


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
        ("countdown", "countdown_3to4_train_head.jsonl", 32),
        ("countdown_test", "countdown_tinyzero_test.jsonl", 64),
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
    assert 0 < len(ds) == sum(r["level"] in (4, 5) for r in raw) < len(raw)
    assert set(ds["level"]) == {4, 5}
    ds = load_math("train", subjects=["number_theory", "Counting & Probability"], data_dir=data_dir)
    want = Counter(r["type"] for r in raw if r["type"] in ("Number Theory", "Counting & Probability"))
    assert Counter(ds["type"]) == want and set(want) == {"Number Theory", "Counting & Probability"}
    ds = load_math("math500", levels=[3], subjects=["algebra"], data_dir=data_dir)
    assert 0 < len(ds) == sum(r["level"] == 3 and r["type"] == "Algebra" for r in read_jsonl("math500.jsonl"))
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


def test_every_split_row_is_complete_and_the_old_lookups_derive_from_it(data_dir):
    """One row per dataset split holds every fact about it; HUB_SOURCES, LOCAL_FILES and DATASET_NAMES are views."""
    for key, row in DATASET_SPLITS.items():
        assert isinstance(row, DatasetSplit) and key == (row.dataset, row.split) == row.key
        assert row.dataset and row.split and row.source and row.hub.repo_id and row.hub.split, key
        assert (row.local_key is None) == (row.local_file is None), key
        if row.local_file is not None:
            assert (data_dir / row.local_file).is_file(), key  # the fixtures hold every standard file
        with pytest.raises(AttributeError):  # frozen
            row.source = "x"
    assert HUB_SOURCES == {key: row.hub for key, row in DATASET_SPLITS.items()}
    assert LOCAL_FILES == {row.local_key: row.local_file for row in DATASET_SPLITS.values() if row.local_key}
    assert DATASET_NAMES == tuple(row.short_name for row in DATASET_SPLITS.values() if row.short_name)
    assert DATASET_NAMES == ("math", "math500", "math_train_12k", "gsm8k", "aime24", "amc23", "minerva",
                             "olympiadbench", "countdown", "countdown_test")
    assert len(set(LOCAL_FILES.values())) == len(LOCAL_FILES)
    # every dataset is also a short name (its loader's default split), so each row is reachable by name and split
    assert {row.dataset for row in DATASET_SPLITS.values()} <= set(DATASET_NAMES)


@pytest.mark.parametrize("key", list(DATASET_SPLITS), ids="/".join)
def test_each_split_row_is_what_its_loader_reads(tmp_path, monkeypatch, key):
    """The row's source column, Hub source, file name and message name are the ones the loader uses."""
    row = DATASET_SPLITS[key]
    line = {"target": 9, "nums": [1, 2, 3]} if row.dataset == "countdown" else {"problem": "P", "answer": "1"}
    path = _write_jsonl(tmp_path / "one.jsonl", [line])
    assert load_dataset_by_name(row.dataset, split=row.split, path=path)["source"] == [row.source]
    fake = _FakeHub(ConnectionError("offline"))
    monkeypatch.setattr(datasets, "load_dataset", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataUnavailableError) as info:
        load_dataset_by_name(row.dataset, split=row.split)
    err = info.value
    assert fake.hub_calls == [row.hub.repo_id]
    assert (err.dataset, err.split, err.repo_id, err.local_file) == (row.dataset, row.split, row.hub.repo_id,
                                                                     row.local_file)
    assert err.name == (row.display_name or f"{row.dataset} ({row.split})")
    if row.local_file is None:
        with pytest.raises(ValueError, match="no offline file"):
            load_dataset_by_name(row.dataset, split=row.split, data_dir=tmp_path)


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

    src = datasets.load_dataset("json", data_files=str(local_data_file(data_dir, "amc23")), split="train")
    pq = tmp_path / "amc23.parquet"
    src.to_parquet(str(pq))
    ds = load_amc23(path=pq)
    assert len(ds) == 12 and ds["answer"] == src["answer"]


def test_local_data_file_takes_a_key_or_a_name_in_the_given_folder(data_dir, tmp_path):
    assert local_data_file(data_dir, "minerva") == (data_dir / "minerva_math.jsonl").resolve()
    assert local_data_file(str(data_dir), "amc23.jsonl").is_file()
    with pytest.raises(FileNotFoundError, match=r"math500.jsonl does not exist"):
        local_data_file(tmp_path, "math500")
    with pytest.raises(FileNotFoundError, match=r"data_dir='.*nope' is not a directory"):
        local_data_file(tmp_path / "nope", "math500")


@pytest.mark.parametrize("name", ["math500", "gsm8k", "aime24", "amc23", "minerva", "olympiadbench"])
def test_rewards_read_loader_columns_as_trl_passes_them(data_dir, name):
    """TRL passes every non-prompt column as a keyword argument; the rewards must find what they need there."""
    ds = load_dataset_by_name(name, data_dir=data_dir)
    n = len(ds)
    assert n >= 6
    columns = {k: ds[k] for k in ds.column_names if k != "prompt"}
    comps = [[{"role": "assistant", "content": correct_completion(a)}] for a in ds["answer"]]
    assert math_reward(completions=comps, prompts=ds["prompt"], completion_ids=[[0]] * n, **columns) == [1.0] * n


def test_countdown_reward_reads_loader_columns(data_dir):
    ds = load_countdown("test", data_dir=data_dir, num_tasks=20)
    sols = [solve_countdown(n, t) for n, t in zip(ds["nums"], ds["target"])]
    columns = {k: ds[k] for k in ds.column_names if k != "prompt"}
    comps = [[{"role": "assistant", "content": f"<think>..</think><answer>{s}</answer>"}] for s in sols]
    assert countdown_reward(completions=comps, prompts=ds["prompt"], **columns) == [1.0] * 20


class _FakeHub:
    """Stands in for ``datasets.load_dataset``: local files load for real, a Hub id raises ``error`` (and is
    counted)."""

    def __init__(self, error: BaseException):
        self.error, self.hub_calls, self.real = error, [], datasets.load_dataset

    def __call__(self, name, *args, **kwargs):
        if name in ("json", "parquet"):
            return self.real(name, *args, **kwargs)
        self.hub_calls.append(name)
        raise self.error


def _refused_endpoint() -> str:
    """An http URL on this machine where nothing listens (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _online(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_offline_without_data_fails_at_once_with_one_line_naming_what_to_pass(monkeypatch):
    """Offline mode (conftest sets HF_HUB_OFFLINE=1) and no path/data_dir: the cache is tried (datasets does that
    without the network), then one line, no fallback to any other folder."""
    fake = _FakeHub(ConnectionError("Couldn't reach 'math-ai/amc23' on the Hub (OfflineModeIsEnabled)"))
    monkeypatch.setattr(datasets, "load_dataset", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataUnavailableError) as info:
        load_dataset_by_name("amc23")
    err = info.value
    assert isinstance(err, ConnectionError) and fake.hub_calls == ["math-ai/amc23"]
    msg = str(err)
    assert "\n" not in msg and msg.startswith("amc23 (test) is not available: offline mode is on (HF_HUB_OFFLINE=1")
    assert msg.endswith("pass data_dir= (a folder holding amc23.jsonl) or path= (a local JSONL/Parquet file)")
    assert (err.dataset, err.split, err.repo_id, err.local_file) == ("amc23", "test", "math-ai/amc23", "amc23.jsonl")
    assert err.hint().endswith("pass --data_dir DIR (a folder holding amc23.jsonl) or --dataset_path FILE")
    assert err.hint(path_flag=None, dir_flag="--data_dir DIR").endswith("; pass --data_dir DIR (a folder holding "
                                                                        "amc23.jsonl)")
    with pytest.raises(DataUnavailableError) as info:  # gsm8k train has no standard file name: only a path helps
        load_gsm8k("train")
    assert str(info.value).endswith("; pass path= (a local JSONL/Parquet file)")


def test_unreachable_hub_fails_in_a_moment_without_retrying(monkeypatch, data_dir):
    _online(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", _refused_endpoint())
    fake = _FakeHub(AssertionError("the Hub must not be tried when the connection probe failed"))
    monkeypatch.setattr(datasets, "load_dataset", fake)
    started = time.perf_counter()
    with pytest.raises(DataUnavailableError, match=r"^countdown \(train\) is not available: cannot connect to "
                                                   r"http://127\.0\.0\.1:\d+ \(.*\) to download "
                                                   r"Jiayi-Pan/Countdown-Tasks-3to4; pass data_dir= \(a folder "
                                                   r"holding countdown_3to4_train_head.jsonl\)"):
        load_countdown("train")
    assert time.perf_counter() - started < 5 and fake.hub_calls == []
    assert len(load_countdown("train", data_dir=data_dir)) == 32  # a data_dir needs no network


def test_failed_hub_download_becomes_one_line_but_bugs_pass_through(monkeypatch):
    _online(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")  # with a proxy, no direct-connection probe
    fake = _FakeHub(ConnectionError("Couldn't reach 'math-ai/amc23' on the Hub (LocalEntryNotFoundError)\nmore"))
    monkeypatch.setattr(datasets, "load_dataset", fake)
    with pytest.raises(DataUnavailableError, match=r"could not load math-ai/amc23 from the Hub \(ConnectionError: "
                                                   r"Couldn't reach .* more\); pass data_dir="):
        load_amc23()
    assert fake.hub_calls == ["math-ai/amc23"]
    monkeypatch.setattr(datasets, "load_dataset", _FakeHub(TypeError("a bug, not a download failure")))
    with pytest.raises(TypeError, match="a bug"):
        load_amc23()


def test_missing_local_paths_say_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data_dir='.*nowhere' is not a directory"):
        load_math(data_dir=tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"missing.jsonl does not exist \(expected a local"):
        load_math(path=tmp_path / "missing.jsonl")
