"""The asynchronous-worker benchmark's pure parts (benchmarks/async_worker): the Prometheus parser, the server's CPU
pinning, what a trained micro-batch counts, the wall-clock window, the busy poll, the log totals, resume and the
command line, and the report's arithmetic on synthetic run files. No server, no training."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from benchmarks.async_worker import async_worker_bench as bench
from benchmarks.async_worker import async_worker_report as report
from sara_trl.trainer.async_worker.server import VllmServer, metric_total

METRICS = """# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="/ckpt/{odd}"} 1234.0
vllm:generation_tokens_total{engine="1",model_name="x"} 6.5e+01 1700000000000
vllm:generation_tokens_created{engine="0",model_name="x"} 1.7e+09
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="x"} 3.0
vllm:num_requests_running_extra 9
"""


def test_metric_total_sums_label_sets_and_skips_other_names():
    assert metric_total(METRICS, "vllm:generation_tokens_total") == 1299.0  # 1234 + 65, timestamp ignored
    assert metric_total(METRICS, "vllm:num_requests_running") == 3.0  # not the _extra line
    assert metric_total(METRICS, "vllm:generation_tokens_created") == 1.7e9
    assert metric_total(METRICS, "vllm:prompt_tokens_total") is None


def test_the_server_is_pinned_by_taskset_and_omp_binding():
    srv = VllmServer(model="m", port=8000, cpu_affinity="0", omp_threads_bind="0")
    cmd = srv.command()
    assert cmd[:4] == ["taskset", "-c", "0", sys.executable]
    assert cmd[4:6] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert srv.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert VllmServer(model="m", port=8000).command()[0] == sys.executable


def packed_batch():
    """One packed row: sample 0 (3 tokens, advantage 0), sample 1 (2 tokens, +1.2), sample 2 (4 tokens, -0.8), then
    2 padding positions (token_index -1)."""
    seg = [0, 0, 0, 1, 1, 2, 2, 2, 2, 0, 0]
    adv = [0.0, 0.0, 0.0, 1.2, 1.2, -0.8, -0.8, -0.8, -0.8, 0.0, 0.0]
    idx = list(range(9)) + [-1, -1]
    return {"segment_id": torch.tensor([seg]), "advantages": torch.tensor([adv]), "token_index": torch.tensor([idx])}


def test_count_trained_counts_rows_and_tokens_with_a_nonzero_advantage():
    assert bench.count_trained(packed_batch()) == {"rows": 3.0, "rows_nonzero": 2.0, "tokens": 9.0,
                                                   "tokens_nonzero": 6.0}


def test_the_counting_mixin_accumulates_and_returns_the_parents_loss():
    class Base:
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return ("loss", model, num_items_in_batch)

    trainer = type("T", (bench.TrainedCounter, Base), {})()
    assert trainer.compute_loss("m", packed_batch(), num_items_in_batch=7) == ("loss", "m", 7)
    trainer.compute_loss("m", packed_batch())
    assert trainer.trained == {"rows": 6.0, "rows_nonzero": 4.0, "tokens": 18.0, "tokens_nonzero": 12.0}


def test_the_wall_clock_stops_at_the_first_step_past_the_window():
    now, calls = [0.0], []
    clock = bench.WallClock(240, on_start=lambda: calls.append("start"), on_stop=lambda: calls.append("stop"),
                            clock=lambda: now[0])
    control, state = SimpleNamespace(should_training_stop=False), SimpleNamespace(global_step=0)
    now[0] = 10.0
    clock.on_train_begin(None, state, control)
    for t, step in ((100.0, 1), (249.0, 2), (250.0, 3)):  # 90, 239 and 240 s after train begin
        now[0], state.global_step = t, step
        clock.on_step_end(None, state, control)
        assert control.should_training_stop is (step == 3)
    assert clock.elapsed == 240.0 and clock.steps == 3 and calls == ["start", "stop"]
    now[0], state.global_step = 300.0, 4
    clock.on_step_end(None, state, control)
    clock.on_train_end(None, state, control)
    assert clock.elapsed == 240.0 and clock.steps == 3 and calls == ["start", "stop"]  # closed once


def test_the_wall_clock_closes_at_train_end_when_max_steps_came_first():
    now = [5.0]
    clock = bench.WallClock(240, clock=lambda: now[0])
    state, control = SimpleNamespace(global_step=3), SimpleNamespace(should_training_stop=False)
    clock.on_train_begin(None, state, control)
    assert clock.elapsed is None
    now[0] = 65.0
    clock.on_train_end(None, state, control)
    assert clock.elapsed == 60.0 and clock.steps == 3 and not control.should_training_stop


def test_the_busy_poll_counts_busy_answers_and_errors():
    answers = [0.0, 3.0, OSError("down"), 1.0, 0.0, RuntimeError("no metric"), 2.0]
    poller = bench.BusyPoller(None, 0.0)

    def probe():
        value = answers.pop(0)
        if not answers:
            poller._halt.set()
        if isinstance(value, Exception):
            raise value
        return value

    poller.probe = probe
    poller.run()  # in this thread: stops after the last answer
    assert (poller.polls, poller.busy, poller.errors) == (5, 3, 2) and poller.share == 0.6
    assert np.isnan(bench.BusyPoller(None, 1.0).share)


def test_summarize_logs_totals():
    logs = [{"step": 1, "perf/rollout_wait_s": 4.0, "sample/staleness_mean": 1.0, "sample/staleness_max": 2.0,
             "sara/group_staleness_mean": 0.5, "sara/groups_committed_total": 3.0, "sara/tokens_generated_total": 900},
            {"step": 2, "perf/rollout_wait_s": 1.5, "sample/staleness_mean": 2.0, "sample/staleness_max": 4.0,
             "sample/dropped_stale_total": 5.0, "sara/group_staleness_mean": 2.0, "sara/groups_committed_total": 1.0},
            {"step": 2, "train_runtime": 300.0}]
    out = bench.summarize_logs(logs)
    assert out == {"rollout_wait_seconds": 5.5, "dropped_stale": 5.0, "staleness_mean": 1.5, "staleness_max": 4.0,
                   "sara_group_staleness_mean": (0.5 * 3 + 2.0 * 1) / 4, "sara_tokens_generated": 900.0}
    trl = bench.summarize_logs([{"perf/rollout_wait_s": 2.0, "sample/staleness_mean": 0.0}])
    assert trl["sara_group_staleness_mean"] is None and trl["sara_tokens_generated"] is None
    assert trl["dropped_stale"] == 0.0 and trl["rollout_wait_seconds"] == 2.0


def test_pending_runs_skip_finished_files_in_seed_major_order(tmp_path):
    bench.run_path(tmp_path, "TRL", 0).write_text("{}")
    bench.run_path(tmp_path, "SARA", 1).write_text("{}")
    assert bench.pending_runs(tmp_path, ["TRL", "DS", "SARA"], [0, 1]) == [
        ("DS", 0), ("SARA", 0), ("TRL", 1), ("DS", 1)]


def test_the_command_line_defaults_and_quick_sizes(tmp_path):
    a = bench.parse_args([])
    assert (a.train_seconds, a.k, a.groups, a.lr, a.lora_r, a.max_inflight, a.max_staleness, a.max_steps) == (
        240.0, 8, 2, 1e-4, 8, 16, 4, 1000)
    assert a.arms == "TRL,DS,SARA" and a.seeds == "0,1,2" and a.out_dir == bench.OUT_DIR
    q = bench.parse_args(["--quick"])
    assert (q.train_seconds, q.seeds, q.arms, q.prompts, q.eval_prompts, q.eval_samples) == (
        60.0, "0", "TRL,DS,SARA", 256, 8, 2)
    assert q.out_dir != bench.OUT_DIR and q.out_dir.name.startswith("async_worker_quick_")
    q.out_dir.rmdir()
    given = bench.parse_args(["--quick", "--train-seconds=30", "--seeds", "4", "--out-dir", str(tmp_path)])
    assert (given.train_seconds, given.seeds, given.out_dir, given.eval_prompts) == (30.0, "4", tmp_path, 8)


def test_the_worker_command_is_pinned_and_forwards_the_settings(tmp_path):
    a = bench.parse_args(["--train-seconds", "90", "--out-dir", str(tmp_path)])
    cmd = bench.worker_command(a, "SARA", 2)
    assert cmd[:4] == ["taskset", "-c", "1", sys.executable]
    assert cmd[4:9] == ["-m", bench.MODULE, "--worker", "SARA", "2"]
    assert "--train-seconds=90.0" in cmd and "--max-staleness=4" in cmd and f"--out-dir={tmp_path}" in cmd
    assert len(cmd) == 9 + len(bench.SETTINGS) + 1
    again = bench.parse_args(cmd[9:])  # the subprocess parses back the same settings
    assert all(getattr(again, key) == getattr(a, key) for key in bench.SETTINGS)


# ------------------------------------------------------------------------------------------------ the report
def run_file(arm, seed, *, tokens, rows_nonzero, busy=0.5, idle=0.2, acc=0.3, k=8, seconds=240.0):
    trained = {"rows": 2 * rows_nonzero if arm == "TRL" else rows_nonzero, "rows_nonzero": rows_nonzero,
               "tokens": 100.0 * rows_nonzero * (2 if arm == "TRL" else 1), "tokens_nonzero": 100.0 * rows_nonzero}
    return {"arm": arm, "seed": seed, "trained": trained, "effective_groups": rows_nonzero / k,
            "generated_tokens": tokens, "busy_share": busy, "generation_seconds": seconds * busy, "idle_share": idle,
            "staleness_mean": 1.0, "sara_group_staleness_mean": None if arm == "TRL" else 0.5, "dropped_stale": 2.0,
            "pass_at_1": acc, "train_seconds": seconds, "steps": 10, "load_average_start": 1.0,
            "load_average_end": 2.0}


@pytest.fixture
def runs_dir(tmp_path):
    # seed -> (DS tokens, DS effective rows, SARA tokens, SARA effective rows): SARA/DS tokens per group 0.5, 0.6, 0.7
    spec = {0: (8000, 80, 4000, 80), 1: (9000, 64, 5400, 64), 2: (6000, 96, 8400, 192)}
    for seed, (ds_tok, ds_rows, sara_tok, sara_rows) in spec.items():
        runs = [run_file("TRL", seed, tokens=10000, rows_nonzero=40 + 8 * seed),
                run_file("DS", seed, tokens=ds_tok, rows_nonzero=ds_rows, idle=0.30, acc=0.30),
                run_file("SARA", seed, tokens=sara_tok, rows_nonzero=sara_rows, idle=0.20 - 0.05 * seed,
                         acc=0.30 + 0.01 * seed)]
        for rec in runs:
            bench.run_path(tmp_path, rec["arm"], seed).write_text(json.dumps(rec))
    from benchmarks.common import environment

    (tmp_path / "settings.json").write_text(json.dumps({
        "settings": vars(bench.parse_args([])) | {"out_dir": None}, "environment": environment(),
        "command": "python -m benchmarks.async_worker.async_worker_bench"}))
    return tmp_path


def t_interval(values):
    v = np.asarray(values, float)
    half = stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return v.mean() - half, v.mean() + half


def test_the_report_ratio_of_tokens_per_effective_group_and_its_interval(runs_dir):
    meta, runs = report.load_runs(runs_dir)
    assert list(runs) == ["TRL", "DS", "SARA"] and list(runs["SARA"]) == [0, 1, 2]
    m = report.measures(runs["DS"][1])
    assert m["tokens_per_group"] == 9000 / 8 and m["gen_seconds_per_group"] == 120.0 / 8
    summary = report.summarize(meta, runs)
    tok = summary["targets"][0]
    assert tok["per_seed"] == pytest.approx({0: 0.5, 1: 0.6, 2: 0.7})
    lo, hi = t_interval([0.5, 0.6, 0.7])  # 0.6 -/+ 4.303 * 0.1 / sqrt(3)
    assert tok["interval"]["mean"] == pytest.approx(0.6)
    assert (tok["interval"]["lo"], tok["interval"]["hi"]) == pytest.approx((lo, hi)) and hi == pytest.approx(0.8484,
                                                                                                            abs=1e-4)
    assert tok["verdict"] == "met"  # mean 0.6 <= 0.75 and upper 0.848 < 0.85
    idle = summary["targets"][1]
    assert idle["per_seed"] == pytest.approx({0: -0.10, 1: -0.15, 2: -0.20})
    assert idle["interval"]["hi"] == pytest.approx(t_interval([-0.10, -0.15, -0.20])[1]) and idle["verdict"] == "met"
    acc = summary["targets"][2]
    assert acc["per_seed"] == pytest.approx({0: 0.0, 1: 0.01, 2: 0.02})
    assert acc["interval"]["lo"] < 0 < acc["interval"]["hi"] and acc["verdict"].startswith("not shown")
    # DS / TRL per seed: (8000/10) / (10000/5), (9000/8) / (10000/6), (6000/12) / (10000/7)
    assert summary["ratios"]["tokens_per_group DS/TRL"]["per_seed"] == pytest.approx(
        {0: 800 / 2000, 1: 1125 / (10000 / 6), 2: 500 / (10000 / 7)})
    assert summary["per_run"]["TRL"][2]["nonzero_token_share"] == 0.5


def test_the_report_judges_nothing_under_three_seeds_and_upper_ends_beyond_target():
    assert report.verdict({"mean": 0.5, "lo": 0.4, "hi": 0.6, "n": 2}, upper=0.85).startswith("not judged")
    assert report.verdict({"mean": 0.70, "lo": 0.55, "hi": 0.86, "n": 3}, upper=0.85, mean=0.75) == "not met"
    assert report.verdict({"mean": 0.78, "lo": 0.72, "hi": 0.84, "n": 3}, upper=0.85, mean=0.75) == "not met"
    assert report.verdict({"mean": -0.02, "lo": -0.05, "hi": -0.01, "n": 3}, lower=0.0) == "not met"


def test_the_report_files(runs_dir, tmp_path):
    out = tmp_path / "out" / "ASYNC_WORKER.md"
    out.parent.mkdir()
    text = report.main(["--runs", str(runs_dir), "--out", str(out)])
    assert out.read_text() == text and "| generated tokens per trained effective group, SARA / DS" in text
    assert "0.600 [0.352, 0.848] | met |" in text
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["targets"][0]["per_seed"] == pytest.approx({"0": 0.5, "1": 0.6, "2": 0.7})


def test_heldout_pass_at_1_payloads_and_scoring(monkeypatch):
    import datasets

    data = datasets.Dataset.from_list([
        {"prompt": [{"role": "user", "content": "What is 2+2?"}], "answer": "4", "task": "add_0_2"},
        {"prompt": [{"role": "user", "content": "What is 11*12?"}], "answer": "132", "task": "mul_10_99"},
        {"prompt": [{"role": "user", "content": "What is 3-5?"}], "answer": "-2", "task": "sub_0_20"}])
    right = {0: 2, 1: 0, 2: 1}  # samples (of 2) answering right, per prompt
    sent = []

    class Tok:
        def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict):
            assert add_generation_prompt and tokenize and not return_dict
            return [len(messages[0]["content"])]

    def post(url, payload, timeout=600.0):
        sent.append((url, payload))
        i = payload["seed"] - 10_000
        answer = data[i]["answer"]
        return json.dumps({"choices": [{"text": f"It is {answer}." if j < right[i] else "I do not know."}
                                       for j in range(payload["n"])]})

    monkeypatch.setattr(bench, "_post", post)
    out = bench.heldout_pass_at_1("http://h:1", "bench-final", Tok(), data, samples=2, concurrency=2)
    assert out["pass_at_1"] == pytest.approx((1.0 + 0.0 + 0.5) / 3)
    # REAL_TASK.weights order: mul_10_99, add_10_99 (absent), sub_0_20, add_0_2
    assert out["by_family"][0] == 0.0 and np.isnan(out["by_family"][1]) and out["by_family"][2:] == [0.5, 1.0]
    assert sorted(p["seed"] for _, p in sent) == [10_000, 10_001, 10_002]
    first = next(p for _, p in sent if p["seed"] == 10_000)
    assert sent[0][0] == "http://h:1/v1/completions" and first["prompt"] == [len("What is 2+2?")]
    assert (first["model"], first["n"], first["temperature"], first["max_tokens"]) == ("bench-final", 2, 0.6, 96)


def test_the_chatml_response_template_lets_trls_worker_parse_smollm2_completions(smollm2_tokenizer_dir):
    """TRL 1.16's default worker refuses SmolLM2's tokenizer without a response template ("Unrecognized chat
    template"); with the bench's, TRL's own parser reads a completion back as the assistant's content, and the
    template survives the pickling that carries the tokenizer into TRL's worker process."""
    import pickle

    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, parse_response

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(tokenizer)
    tokenizer.response_template = bench.CHATML_RESPONSE_TEMPLATE
    tokenizer = pickle.loads(pickle.dumps(tokenizer))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    completion = tokenizer("The answer is 5.<|im_end|>", add_special_tokens=False)["input_ids"]
    assert parse_response(tokenizer, completion, prefix=list(prompt), tools=None) == {
        "role": "assistant", "content": "The answer is 5."}
