"""The examples run, through the same command-line flags a user would pass, so none of them can rot.

Each example is imported from its file and driven with a tiny random Llama (``tiny_model_dir`` in conftest): one
optimizer step on CPU, no vLLM. The parse-only tests check that the documented defaults (paper App. E, the quickstart
settings) are what the parser produces and that a flag overrides them. One slow test runs the quickstart on the real
SmolLM2-135M for one step.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str):
    """Import ``examples/<name>.py`` as a module (examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _compute(expression: str) -> int:
    """Value of a two-operand expression "a op b" (test oracle; no eval)."""
    a, op, b = expression.split()
    a, b = int(a), int(b)
    return {"+": a + b, "-": a - b, "*": a * b}[op]


CPU_SMOKE = ["--use_cpu", "true", "--bf16", "false", "--use_vllm", "false", "--report_to", "none",
             "--gradient_checkpointing", "false", "--save_strategy", "no", "--max_steps", "1",
             "--num_generations", "4", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
             "--max_completion_length", "4", "--disable_tqdm", "true"]


# -- quickstart --------------------------------------------------------------------------------------------------


def test_quickstart_task_mix_counts_answers_and_determinism():
    quickstart = load_example("quickstart_cpu")
    data = quickstart.make_task_mix(512, seed=0)
    shares = {name: share for name, share, _ in quickstart.TASK_MIX}
    counts = Counter(data["task"])
    assert sum(counts.values()) == 512
    for name, share in shares.items():
        assert abs(counts[name] - share * 512) <= 1
    assert all(_compute(e) == int(a) for e, a in zip(data["expression"], data["answer"]))
    # difficulty knobs as documented: easy = operands 0-2 with +, hard = two-digit multiplication
    for task, expression in zip(data["task"], data["expression"]):
        a, op, b = expression.split()
        if task == "easy_add":
            assert op == "+" and max(int(a), int(b)) <= 2
        elif task == "hard_mul":
            assert op == "*" and min(int(a), int(b)) >= 10
    assert data["prompt"][0][-1]["content"].endswith("Answer with only the number.")
    again = quickstart.make_task_mix(512, seed=0)
    assert again["expression"] == data["expression"]
    assert quickstart.make_task_mix(512, seed=1)["expression"] != data["expression"]
    with pytest.raises(ValueError, match="num_prompts"):
        quickstart.make_task_mix(2)


def test_quickstart_defaults_and_overrides():
    quickstart = load_example("quickstart_cpu")
    script_args, args = quickstart.parse_args([])
    assert (args.max_steps, args.num_generations, args.num_groups) == (4, 8, 4)
    assert (args.allocator, args.n0, args.tau_low, args.temperature) == ("sara", 2, 0.45, 0.3)
    assert args.use_cpu and not args.bf16 and args.max_completion_length == 16
    assert args.gradient_checkpointing  # recomputing activations keeps the quickstart's peak memory low
    assert script_args.dataset is None and script_args.num_prompts == 512
    script_args, args = quickstart.parse_args(["--max_steps", "1", "--allocator", "dynamic_sampling",
                                               "--dataset", "x.jsonl"])
    assert (args.max_steps, args.allocator, script_args.dataset) == (1, "dynamic_sampling", "x.jsonl")


@pytest.mark.parametrize(("seed", "first"), [(0, "sara"), (1, "dynamic_sampling")])
def test_quickstart_smoke_tiny_model(tmp_path, tiny_model_dir, capsys, seed, first):
    """One SARA step on the tiny model and the measured dynamic-sampling pass, one of them in a second process:
    SARA first for an even seed, DS first for an odd one; the summary is SARA's either way."""
    quickstart = load_example("quickstart_cpu")
    summary_file = tmp_path / "summary.json"
    summary = quickstart.main([
        "--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path / "out"), "--max_steps", "1",
        "--num_generations", "4", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
        "--max_completion_length", "4", "--num_prompts", "24", "--torch_threads", "1", "--use_vllm", "False",
        "--summary_file", str(summary_file), "--seed", str(seed),
    ])
    out = capsys.readouterr().out  # this process's lines: the second pass prints from its own process
    in_process = "SARA" if first == "sara" else "  DS"
    assert f"{in_process} step  1 |" in out and "1 step," in out and "SARA / DS" in out and "For 1 step x 2" in out
    assert summary["allocator"] == "sara" and summary["first_pass"] == first
    # each pass warmed its engine with the same untimed requests: B = 2 prompts x (k = 4, then 1)
    assert summary["warmup"]["requests"] == summary["dynamic_sampling"]["warmup"]["requests"] == 2 * (4 + 1)
    assert "the same 10 untimed warm-up requests" in " ".join(out.split())
    assert f"{'SARA' if first == 'sara' else 'DS'} ran first." in " ".join(out.split())
    assert summary["peak_rss_gib"] > 0.1 and summary["dynamic_sampling"]["peak_rss_gib"] > 0.1
    assert "peak resident memory (trainer and engine, one process per pass): SARA pass" in out
    assert summary["steps"] == 1 and len(summary["per_step"]) == 1
    step = summary["per_step"][0]
    assert summary["rollouts"] == step["rollouts_generated"] > 0 and step["collect_seconds"] > 0
    assert step["committed"] + step["unfilled"] == 2  # B = 8 / 4 groups, each committed or filled
    ds = summary["dynamic_sampling"]
    assert ds["steps"] == 1 and ds["rollouts"] % 4 == 0  # DS generates whole groups of k = 4
    assert sum(summary["rollouts_by_fate"].values()) == summary["rollouts"]
    assert json.loads(summary_file.read_text())["rollouts"] == summary["rollouts"]


def test_quickstart_comparison_lines():
    quickstart = load_example("quickstart_cpu")
    steps = [dict(rollouts_generated=90, tokens_generated=1000, rounds=5, collect_seconds=10.0, committed=4),
             dict(rollouts_generated=60, tokens_generated=500, rounds=3, collect_seconds=5.0, committed=4)]
    sara = quickstart.totals(steps)
    assert sara == {"steps": 2, "rollouts": 150, "tokens": 1500, "rounds": 8, "collect_seconds": 15.0,
                    "effective_groups": 8}
    ds = dict(sara, rollouts=200, tokens=2000, rounds=4, collect_seconds=20.0)
    lines = quickstart.comparison_lines(sara, ds, k=8, num_groups=4)
    assert lines[0].startswith("For 2 steps x 4 effective groups of 8")
    assert "  150 rollouts   1500 tokens" in lines[1] and "  200 rollouts   2000 tokens" in lines[2]
    assert lines[3].split() == ["SARA", "/", "DS", "0.75", "rollouts", "0.75", "tokens", "0.75", "of", "the", "time"]
    assert len(lines) == 4  # no load line unless the load is given
    idle = quickstart.comparison_lines(sara, ds, k=8, num_groups=4, load=(1.1, 2.2, 2))
    assert idle[4] == "  (machine load 1.1 at the start, 2.2 at the end, 2 CPUs)"
    busy = quickstart.comparison_lines(sara, ds, k=8, num_groups=4, load=(3.2, 9.4, 2))
    assert busy[4].startswith("  (machine load 3.2 at the start, 9.4 at the end, 2 CPUs; the machine was busy")
    # the load at each step's end: a pass run beside other work is flagged although start and end look idle
    calm = quickstart.comparison_lines(sara, ds, k=8, num_groups=4, load=(0.7, 2.2, 2), peak_load=3.9)
    assert calm[4] == "  (machine load 0.7 at the start, 2.2 at the end, up to 3.9 at a step's end, 2 CPUs)"
    busy = quickstart.comparison_lines(sara, ds, k=8, num_groups=4, load=(0.7, 2.2, 2), peak_load=7.1)
    assert busy[4].startswith("  (machine load 0.7 at the start, 2.2 at the end, up to 7.1 at a step's end, 2 CPUs; "
                              "the machine was busy")
    one = quickstart.comparison_lines(sara, dict(ds, rounds=1), k=8, num_groups=4)
    assert "  1 round    20.0 s" in one[2] and "  8 rounds   15.0 s" in one[1]


def test_quickstart_comparison_says_what_ran_first_the_warmup_and_when_sara_is_not_faster():
    quickstart = load_example("quickstart_cpu")
    sara = dict(steps=4, rollouts=150, tokens=1500, rounds=0, collect_seconds=15.0, collection="streaming",
                warmup={"requests": 36, "seconds": 12.5})
    ds = dict(sara, rollouts=200, tokens=2000, rounds=4, collect_seconds=20.0, collection="rounds",
              warmup={"requests": 36, "seconds": 3.25})
    lines = quickstart.comparison_lines(sara, ds, k=8, num_groups=4, first="SARA", max_completion_length=16)
    assert len(lines) == 5 and " ".join(lines[4].split()) == (
        "Seconds of the timed steps only: before them each pass sent its engine the same 36 untimed warm-up "
        "requests (SARA 12.5 s, DS 3.2 s); SARA ran first.")
    slower = quickstart.comparison_lines(sara, dict(ds, collect_seconds=15.0), k=8, num_groups=4, first="DS",
                                         max_completion_length=16)
    assert lines[3].split()[-4] == "0.75" and slower[3].split()[-4] == "1.00"
    assert slower[4].endswith("DS ran first.")
    text = " ".join(slower[5].split())
    assert text.startswith("SARA was not faster here, though it generated 0.75 of DS's tokens: answers on this task "
                           "are at most 16 tokens")
    no_warmup = quickstart.comparison_lines(dict(sara, warmup=None), ds, k=8, num_groups=4, first="SARA")
    assert no_warmup[4] == ("  SARA ran first; no warm-up (--warmup False): each pass's first step includes the "
                            "engine's first-use costs.")


def test_quickstart_order_alternates_by_seed():
    quickstart = load_example("quickstart_cpu")
    assert [quickstart.dynamic_sampling_first("auto", seed) for seed in range(4)] == [False, True, False, True]
    assert not quickstart.dynamic_sampling_first("allocator", 1) and quickstart.dynamic_sampling_first(
        "dynamic_sampling", 0)
    with pytest.raises(ValueError, match="first_pass must be 'auto', 'allocator' or 'dynamic_sampling'"):
        quickstart.dynamic_sampling_first("sara", 0)
    _, args = quickstart.parse_args([])
    assert args.vllm_max_model_length == 128  # the task mix's 44-46 prompt tokens + 16: the KV cache's length


def test_progress_bars_only_on_a_terminal(monkeypatch):
    """A file or a pipe on stdout or stderr turns the bars off (one line per step is printed either way)."""
    import io

    from sara_trl.trainer.progress import RoundProgress
    from sara_trl.utils.quiet import on_terminal

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert on_terminal() and RoundProgress(1, True).enabled and not RoundProgress(1, False).enabled
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # `> log`, `| tee`
    assert not on_terminal() and not RoundProgress(1, True).enabled


def test_quickstart_step_line_records_the_load_and_counts_rounds():
    """A step line says "1 round" / "3 rounds"; each recorded step keeps the machine's load at its end."""
    from sara_trl import quickstart

    report = quickstart.AllocationReport("DS")
    logs = {"sara/rollouts_generated": 32.0, "sara/tokens_generated": 400.0, "sara/rounds": 1.0,
            "sara/prompts_drawn": 4.0, "sara/committed": 2.0, "sara/effective_fraction": 1.0, "loss": 0.5}
    row = report.add(1, logs)
    assert " 1 round  " in report.line(row) and " 3 rounds " in report.line(dict(row, rounds=3.0))
    assert 0.0 <= row["load_average"] == report.steps[0]["load_average"]


def test_quickstart_defaults_to_the_vllm_engine_when_installed():
    """The quickstart generates on TRL's colocated vLLM engine whenever vLLM is installed (SARA then streams, the
    default collection='auto'), else with transformers generate; --use_vllm False picks transformers."""
    import importlib.util

    from sara_trl import quickstart

    installed = importlib.util.find_spec("vllm") is not None
    _, args = quickstart.parse_args([])
    assert args.use_vllm == installed and args.vllm_mode == "colocate"
    assert args.schedule == ("streaming" if installed else "rounds") and args.collection == "auto"
    _, args = quickstart.parse_args(["--use_vllm", "False"])
    assert not args.use_vllm and args.schedule == "rounds"
    _, args = quickstart.parse_args(["--allocator", "dynamic_sampling"])
    assert args.schedule == "rounds"  # the baseline stays in rounds on either engine


def test_quickstart_lines_name_streaming_collection():
    """With collection='streaming' (the default on the vLLM engine for SARA) a step has no rounds: the step line,
    the legend and the comparison say "streaming" instead of "0 rounds"."""
    from sara_trl import quickstart

    row = dict(step=1, rollouts_generated=95, tokens_generated=1166, rounds=0, collect_seconds=15.8, prompts_drawn=22,
               committed=4, surplus=0, abandoned=10, active_left=8, unfilled=0, effective_fraction=1.0,
               raw_success_rate=0.3, loss=0.09)
    assert "  95 rollouts  1166 tokens streaming   15.8 s | " in quickstart.AllocationReport(streaming=True).line(row)
    assert "  95 rollouts  1166 tokens  0 rounds   15.8 s | " in quickstart.AllocationReport().line(row)
    text = " ".join(quickstart.legend("sara", 8, 4, 2, 0.45, False, streaming=True).split())
    assert "streaming = no rounds: each completion is scored and decided as it finishes" in text
    assert "then one more once its completions are in" in text and "per round" not in text
    text = " ".join(quickstart.legend("sara", 8, 4, 2, 0.45, False, streaming=True, to_decision=True).split())
    assert ("n0 = 2 completions, then, once its completions are in and while unanimous, all the completions up to "
            "the count at which it would be abandoned if they stayed unanimous, at once; committed") in text
    assert "rounds = batched generation calls" in " ".join(quickstart.legend("sara", 8, 4, 2, 0.45, False).split())
    sara = dict(steps=2, rollouts=150, tokens=1500, rounds=0, collect_seconds=15.0, collection="streaming")
    ds = dict(sara, rollouts=200, tokens=2000, rounds=4, collect_seconds=20.0, collection="rounds")
    lines = quickstart.comparison_lines(sara, ds, k=8, num_groups=4)
    assert "1500 tokens  streaming   15.0 s" in lines[1] and "2000 tokens   4 rounds   20.0 s" in lines[2]


def test_quickstart_dataset_file_picks_the_reward(fixture_data_dir):
    from sara_trl.rewards import countdown_reward, math_reward

    quickstart = load_example("quickstart_cpu")
    data, reward = quickstart.load_task_file(str(fixture_data_dir / "countdown_tinyzero_test.jsonl"))
    assert reward is countdown_reward and len(data) == 64 and data[0]["target"] == 36
    data, reward = quickstart.load_task_file(str(fixture_data_dir / "amc23.jsonl"))
    assert reward is math_reward and len(data) == 12 and "answer" in data.column_names
    with pytest.raises(FileNotFoundError, match=r"--dataset /nonexistent/data.jsonl: no such file"):
        quickstart.load_task_file("/nonexistent/data.jsonl")


@pytest.mark.slow
def test_quickstart_one_real_step(tmp_path):
    """README command 1's quickstart as a user runs it (its own process, default engine: TRL's colocated vLLM engine
    when vLLM is installed, where SARA streams), one real SmolLM2-135M step."""
    import importlib.util

    summary_file = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(EXAMPLES / "quickstart_cpu.py"), "--output_dir", str(tmp_path / "out"),
                           "--max_steps", "1", "--per_device_train_batch_size", "16",
                           "--gradient_accumulation_steps", "1", "--num_prompts", "64",
                           "--compare_dynamic_sampling", "False", "--summary_file", str(summary_file)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # none of the third-party notices sara_trl.utils.quiet hides (tests/test_output_noise.py checks each filter)
    # (accelerate's OMP notice comes from the dynamic-sampling process only, which this run leaves out)
    for notice in ("Triton is installed, but `triton.backends` could not be imported",
                   "`torch.distributed.reduce_op` is deprecated", "NUMA binding",
                   "Ignoring clean_up_tokenization_spaces=True"):
        assert notice not in proc.stderr, proc.stderr[-3000:]
    summary = json.loads(summary_file.read_text())
    vllm = importlib.util.find_spec("vllm") is not None
    assert summary["collection"] == ("streaming" if vllm else "rounds") and "dynamic_sampling" not in summary
    assert ("streaming" if vllm else "rounds") in proc.stdout.split("SARA step  1 |")[1].split("|")[0]
    step = summary["per_step"][0]
    assert step["rollouts_generated"] >= step["prompts_drawn"] * 2  # every drawn prompt is probed with n0 = 2
    assert step["committed"] + step["unfilled"] == 2 and step["committed"] >= 1
    assert sum(summary["rollouts_by_fate"].values()) == summary["rollouts"]


# -- GPU examples (smoke mode: tiny model, CPU, one step, no vLLM) ------------------------------------------------


def test_math_1p5b_paper_defaults():
    example = load_example("math_1p5b")
    script_args, args = example.parse_args(["--bf16", "false", "--use_cpu", "true"])  # bf16 needs a GPU to parse
    assert script_args.model_name_or_path == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    assert (args.num_generations, args.num_groups, args.generation_batch_size) == (8, 64, 512)
    assert (args.n0, args.tau_low, args.commit_min, args.budget_cap) == (2, 0.45, None, 6.0)
    assert (args.learning_rate, args.beta, args.epsilon) == (1e-6, 1e-3, 0.2)
    assert (args.max_completion_length, args.temperature, args.max_steps) == (4096, 1.0, 300)
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert args.schedule == "streaming" and args.collection == "auto"  # the default 'auto' with the colocated engine
    _, args = example.parse_args(["--bf16", "false", "--use_cpu", "true", "--allocator", "uniform"])
    assert args.allocator == "uniform" and args.num_groups == 64 and args.schedule == "rounds"
    _, args = example.parse_args(["--bf16", "false", "--use_cpu", "true", "--collection", "rounds"])
    assert args.schedule == args.collection == "rounds"


def test_math_1p5b_smoke(tmp_path, tiny_model_dir, fixture_data_dir):
    example = load_example("math_1p5b")
    trainer = example.main(["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path),
                            "--data_dir", str(fixture_data_dir), "--num_train_prompts", "16", *CPU_SMOKE])
    assert trainer.state.global_step == 1
    log = next(e for e in trainer.state.log_history if "sara/rollouts_generated" in e)
    assert log["sara/rollouts_generated"] > 0
    assert (tmp_path / "config.json").is_file()  # the final model was saved


def test_countdown_3b_paper_defaults():
    example = load_example("countdown_3b")
    script_args, args = example.parse_args(["--bf16", "false", "--use_cpu", "true"])
    assert script_args.model_name_or_path == "Qwen/Qwen2.5-3B"
    assert (args.max_steps, args.num_groups, args.num_generations, args.n0, args.tau_low) == (120, 64, 8, 2, 0.45)


def test_countdown_3b_smoke(tmp_path, tiny_model_dir, fixture_data_dir):
    example = load_example("countdown_3b")
    trainer = example.main(["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path),
                            "--dataset_path", str(fixture_data_dir / "countdown_3to4_train_head.jsonl"),
                            "--num_train_prompts", "16", "--allocator", "dynamic_sampling", *CPU_SMOKE])
    assert trainer.state.global_step == 1
    log = next(e for e in trainer.state.log_history if "sara/rollouts_generated" in e)
    assert log["sara/rollouts_generated"] % 4 == 0  # dynamic sampling draws full groups of k = 4


@pytest.mark.parametrize("name,data,flags", [
    ("math_1p5b", "math (train)", ["--dataset_path FILE", "--data_dir DIR (a folder holding math_train.jsonl)"]),
    ("countdown_3b", "countdown (train)",
     ["--dataset_path FILE", "--data_dir DIR (a folder holding countdown_3to4_train_head.jsonl)"]),
])
def test_gpu_example_offline_without_data_stops_at_once_before_the_model(tmp_path, monkeypatch, name, data, flags):
    """Offline (conftest sets HF_HUB_OFFLINE=1) with neither --data_dir nor --dataset_path: one line naming both,
    before the model (which does not exist here) is loaded, in seconds."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    example = load_example(name)
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        example.main(["--model_name_or_path", str(tmp_path / "no-such-model"), "--output_dir", str(tmp_path / "out"),
                      *CPU_SMOKE])
    assert time.perf_counter() - started < 10
    message = str(exit_info.value.code)
    assert "\n" not in message and message.startswith(f"examples/{name}.py: error: {data} is not available: offline "
                                                       "mode is on (HF_HUB_OFFLINE=1")
    assert all(flag in message for flag in flags), message
    assert not (tmp_path / "out").exists()


def test_gpu_example_offline_command_line_fails_in_seconds_with_one_line(tmp_path):
    """``python examples/math_1p5b.py`` in a fresh process with HF_HUB_OFFLINE=1, an empty HF cache and no data
    flags: exit status 1 with one stderr line naming --data_dir and --dataset_path, no traceback, no Hub retries."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               PYTHONPATH=os.pathsep.join([str(EXAMPLES.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(EXAMPLES / "math_1p5b.py"), "--use_cpu", "true", "--bf16", "false",
                           "--output_dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path, check=False)
    seconds = time.perf_counter() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Retry" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("examples/math_1p5b.py: error: math (train) is not available: offline mode is on"), last
    assert last.endswith("; pass --data_dir DIR (a folder holding math_train.jsonl) or --dataset_path FILE"), last
    assert seconds < 120, f"took {seconds:.0f} s (imports included)"


def test_accelerate_configs_parse():
    import yaml

    configs = {p.stem: yaml.safe_load(p.read_text()) for p in (EXAMPLES / "accelerate_configs").glob("*.yaml")}
    assert {"single_gpu", "multi_gpu", "deepspeed_zero2", "deepspeed_zero3"} <= set(configs)
    assert configs["single_gpu"]["num_processes"] == 1 and configs["single_gpu"]["distributed_type"] == "NO"
    assert configs["multi_gpu"]["distributed_type"] == "MULTI_GPU"
    assert configs["deepspeed_zero2"]["deepspeed_config"]["zero_stage"] == 2
    assert configs["deepspeed_zero3"]["deepspeed_config"]["zero_stage"] == 3


def test_quickstart_carry_over_accounts_each_rollout_once(tmp_path, tiny_model_dir, capsys):
    quickstart = load_example("quickstart_cpu")
    summary = quickstart.main([
        "--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path / "out"), "--max_steps", "3",
        "--num_generations", "4", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
        "--max_completion_length", "4", "--num_prompts", "24", "--torch_threads", "1", "--use_vllm", "False",
        "--carry_over", "True", "--refill_margin", "2.0",
        "--compare_dynamic_sampling", "False",
    ])
    out = capsys.readouterr().out
    fate = summary["rollouts_by_fate"]
    # Every generated rollout is trained, abandoned, or still carried at the end: counted exactly once.
    assert sum(fate.values()) == summary["rollouts"] == sum(s["rollouts_generated"] for s in summary["per_step"])
    assert "still carried into a next step" in out
