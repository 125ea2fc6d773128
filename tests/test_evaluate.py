"""Evaluation (`sara_trl.evaluate`): pass@1 arithmetic, scoring through the real verifiers on real benchmark rows (the
data fixtures in tests/fixtures/data), the command line (help for every flag, one-line mistakes, progress bar, the
one-line answer when offline without --data_dir) with a tiny model, and (slow) SmolLM2 on a handful of problems of
every benchmark."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sara_trl.evaluate import (
    BENCHMARKS,
    EvalArguments,
    evaluate,
    format_table,
    load_benchmark,
    main,
    pass_at_1,
)


def test_pass_at_1_is_the_mean_share_of_successes():
    assert pass_at_1([[1.0, 0.0, None, 1.0], [0.0, 0.0, 0.0, 0.0]]) == 0.25
    assert pass_at_1([[1.0], [1.0], [0.0]]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        pass_at_1([])
    with pytest.raises(ValueError):
        pass_at_1([[1.0], []])


def test_benchmarks_load_from_a_data_dir(fixture_data_dir):
    sizes = {"math500": 20, "aime24": 6, "amc23": 12, "minerva": 12, "olympiadbench": 10, "countdown": 64}  # fixtures
    assert set(BENCHMARKS) == set(sizes)
    for name, size in sizes.items():
        assert len(load_benchmark(name, data_dir=fixture_data_dir)) == size
    countdown = load_benchmark("countdown", data_dir=str(fixture_data_dir), limit=3)
    assert len(countdown) == 3 and countdown[0]["target"] == 36 and list(countdown[0]["nums"]) == [79, 17, 60]
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmark("gsm9k")


def test_scoring_with_known_completions(fixture_data_dir):
    """Problem i of MATH500 gets i + 1 correct samples out of 4 -> pass@1 = (1 + 2 + 3) / 12; Countdown task 0
    (79, 17, 60 -> 36) gets 2 correct expressions out of 4."""
    math_answers = list(load_benchmark("math500", data_dir=fixture_data_dir, limit=3)["answer"])

    def fake_generate(prompts, n):
        out = []
        for i, prompt in enumerate(prompts):
            text = prompt[-1]["content"]
            if "<answer>" in text:  # Countdown prompt
                out.append(["<answer> 79 - 60 + 17 </answer>", "<answer> 79 + 60 + 17 </answer>",
                            "<answer>(79 - 60) + 17</answer>", "no answer"])
            else:
                gold = math_answers[i]
                out.append([f"So the answer is \\boxed{{{gold}}}." if j <= i else "\\boxed{123456789}"
                            for j in range(n)])
        return out

    report = evaluate(None, ["math500", "countdown"], num_samples=4, limit=3, generate_fn=fake_generate,
                      data_dir=fixture_data_dir)
    math = report["results"]["math500"]
    assert math["successes"] == [1, 2, 3] and math["pass@1"] == pytest.approx(0.5)
    countdown = report["results"]["countdown"]
    assert countdown["problems"] == 3 and countdown["successes"][0] == 2
    assert report["settings"]["backend"] == "custom" and report["settings"]["num_samples"] == 4
    table = format_table(report)
    assert "math500" in table and "50.0" in table and "average" in table


def test_generator_shape_is_checked(fixture_data_dir):
    with pytest.raises(ValueError, match="completions"):
        evaluate(None, ["aime24"], num_samples=2, limit=2, generate_fn=lambda prompts, n: [["x"]] * len(prompts),
                 data_dir=fixture_data_dir)
    with pytest.raises(ValueError, match="unknown benchmark"):
        evaluate(None, ["nope"], generate_fn=lambda prompts, n: [])
    with pytest.raises(ValueError, match="num_samples"):
        evaluate(None, ["aime24"], num_samples=0, generate_fn=lambda prompts, n: [])


def test_generator_gets_batch_size_prompts_per_call_and_the_bar_counts_them(capsys, fixture_data_dir):
    calls = []

    def fake_generate(prompts, n):
        calls.append(len(prompts))
        return [["\\boxed{0}"] * n for _ in prompts]

    report = evaluate(None, ["aime24", "amc23"], num_samples=2, limit=5, batch_size=2, generate_fn=fake_generate,
                      progress=True, data_dir=fixture_data_dir)
    assert calls == [2, 2, 1, 2, 2, 1]  # 5 problems of each benchmark in chunks of 2
    assert [r["problems"] for r in report["results"].values()] == [5, 5]
    err = capsys.readouterr().err
    assert "10/10" in err and "amc23: scoring" in err  # the bar reached the total (problems of both benchmarks)
    evaluate(None, ["aime24"], num_samples=1, limit=1, generate_fn=fake_generate, data_dir=fixture_data_dir)
    assert capsys.readouterr().err == ""  # progress is off by default for library calls


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for f in dataclasses.fields(EvalArguments):
        text = f.metadata["help"]
        assert text, f.name
        assert f"--{f.name}" in out and " ".join(text.split()[:4]) in out, f.name


def test_command_line_mistakes_are_one_line(capsys):
    for argv, expected in [
        (["--model", "m", "--temprature", "0.5"], "unknown flag --temprature (did you mean --temperature?)"),
        (["--model", "m", "--max_new", "8"], "unknown flag --max_new (did you mean --max_new_tokens?)"),
        (["--model", "m", "--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
        (["--model", "m", "--num_samples", "0"], "invalid configuration: --num_samples must be >= 1, got 0"),
        (["--model", "m", "--top_p", "0"], "invalid configuration: need temperature >= 0 and 0 < top_p <= 1"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1
        assert err.startswith(f"python -m sara_trl.evaluate: error: {expected}"), err


def test_command_line_with_tiny_model(tmp_path, tiny_model_dir, capsys, fixture_data_dir):
    out_file = tmp_path / "eval.json"
    main(["--model", tiny_model_dir, "--benchmarks", "aime24,countdown", "--limit", "2", "--num_samples", "2",
          "--max_new_tokens", "4", "--backend", "transformers", "--output", str(out_file), "--keep_completions",
          "--data_dir", str(fixture_data_dir)])
    captured = capsys.readouterr()
    printed = captured.out
    assert "evaluating" in captured.err and "4/4" in captured.err  # the progress bar: 2 + 2 problems
    assert "aime24" in printed and "countdown" in printed and "pass@1" in printed
    report = json.loads(out_file.read_text())
    assert report["settings"]["backend"] == "transformers" and report["settings"]["temperature"] == 1.0
    for name in ("aime24", "countdown"):
        r = report["results"][name]
        assert r["problems"] == 2 and r["samples"] == 2
        assert len(r["completions"]) == 2 and all(len(c) == 2 for c in r["completions"])
        assert r["pass@1"] == pytest.approx(sum(r["successes"]) / 4)


def test_offline_without_data_dir_stops_at_once_before_the_model(tmp_path, capsys, monkeypatch):
    """In process: offline (conftest sets HF_HUB_OFFLINE=1), no --data_dir, empty HF cache, a model that does not
    exist (loading it would fail differently): one error line naming --data_dir, exit status 1, in seconds."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", str(tmp_path / "no-such-model"), "--benchmarks", "amc23,countdown", "--no_progress",
              "--output", str(tmp_path / "eval.json")])
    assert time.perf_counter() - started < 10
    message = str(exit_info.value.code)
    assert "\n" not in message and message.startswith("python -m sara_trl.evaluate: error: amc23 (test) is not "
                                                       "available: offline mode is on (HF_HUB_OFFLINE=1")
    assert message.endswith("; pass --data_dir DIR (a folder holding amc23.jsonl)")
    assert not (tmp_path / "eval.json").exists() and capsys.readouterr().out == ""


def test_offline_command_line_fails_in_seconds_with_one_line(tmp_path):
    """``python -m sara_trl.evaluate`` in a fresh process with HF_HUB_OFFLINE=1, an empty HF cache and no
    --data_dir: exit status 1, stderr ends with one error line naming --data_dir, no traceback, no Hub retries."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               PYTHONPATH=os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sara_trl.evaluate", "--model", str(tmp_path / "no-such-model"),
                           "--benchmarks", "math500"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path, check=False)
    seconds = time.perf_counter() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Retry" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith("python -m sara_trl.evaluate: error: math500 is not available: offline mode")
    assert lines[-1].endswith("; pass --data_dir DIR (a folder holding math500.jsonl)")
    assert len(lines) <= 2, proc.stderr  # at most the "evaluating ..." line before it
    assert seconds < 120, f"took {seconds:.0f} s (imports included)"


@pytest.mark.slow
@pytest.mark.long  # CI: SmolLM2 evaluates end to end in test_vllm_cpu.py::test_evaluate_with_the_vllm_backend,
# the transformers backend in test_command_line_with_tiny_model here
def test_smollm2_on_a_handful_of_problems(tmp_path, fixture_data_dir):
    """SmolLM2-135M-Instruct, transformers backend, 2 problems x 2 samples of every benchmark; the recorded pass@1
    must equal re-scoring the kept completions with the benchmark's verifier."""
    import torch

    from sara_trl.rewards import get_reward_func
    from sara_trl.utils import smollm2_checkpoint

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = evaluate(smollm2_checkpoint(), list(BENCHMARKS), num_samples=2, limit=2, max_new_tokens=24,
                          backend="transformers", keep_completions=True, data_dir=fixture_data_dir)
    finally:
        torch.set_num_threads(previous)
    for name, bench in BENCHMARKS.items():
        r = report["results"][name]
        data = load_benchmark(name, data_dir=fixture_data_dir, limit=2)
        flat = [c for row in r["completions"] for c in row]
        assert all(isinstance(c, str) for c in flat) and len(flat) == 4
        columns = {col: [v for v in data[col] for _ in range(2)] for col in bench.columns}
        rewards = get_reward_func(bench.reward)(flat, **columns)
        assert r["pass@1"] == pytest.approx(sum(1 for x in rewards if x == 1.0) / 4)
