"""The port to TRL (``sara_trl.trainer.trl``): the version it is picked by, and the replay guard that stops a run
whose TRL routes generation or scoring around the hooks SARA answers (which would otherwise train, silently, on rows
TRL generated or scored itself)."""

from __future__ import annotations

import types

import pytest
import torch
import trl
from datasets import Dataset
from trl import GRPOTrainer, RLOOTrainer

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.trainer.replay import Replay
from sara_trl.trainer.trl import SUPPORTED_RANGE, _line_module, port

HOOKS = port.REPLAY_HOOKS


def test_port_is_picked_by_the_installed_trl_line():
    assert port.__name__ == "sara_trl.trainer.trl.v1_16" and port.TRL_VERSION == trl.__version__
    assert _line_module("1.16.0") == _line_module("1.16.7") == "v1_16"
    for other in ("1.15.2", "1.17.0", "2.0.0"):
        with pytest.raises(ImportError, match=rf"supports TRL {SUPPORTED_RANGE} .*TRL {other} is installed"):
            _line_module(other)


def _replay(**fields) -> Replay:
    return Replay(completion_ids=[[1, 2], [3]], logprobs=None, rewards=torch.zeros(2, 1), **fields)


def test_guard_passes_when_every_answer_was_served_once():
    replay = _replay()
    assert replay.completions([[7], [8]], with_logprobs=False) == [[1, 2], [3]]
    assert replay.reward_rows(2).shape == (2, 1)
    replay.check_served("1.16.0", HOOKS)  # no error
    assert replay.served == {"completions": 1, "rewards": 1}


@pytest.mark.parametrize(("serve", "message"), [
    ([], r"_generate_single_turn was not called; _calculate_rewards was not called"),
    (["completions"], r"_calculate_rewards was not called"),
    (["rewards"], r"_generate_single_turn was not called"),
    (["completions", "rewards", "rewards"], r"_calculate_rewards was called 2 times"),
])
def test_guard_names_the_hook_trl_skipped_and_the_trl_version(serve, message):
    replay = _replay()
    for answer in serve:
        replay.completions([[7], [8]], False) if answer == "completions" else replay.reward_rows(2)
    with pytest.raises(RuntimeError, match=rf"bypassed: TRL 9\.9\.9 .*{message}"):
        replay.check_served("9.9.9", HOOKS)


def test_guard_covers_rollout_func_tool_loop_and_environments():
    custom = _replay(prompt_ids=[[5], [6]], trl_calls_rollout_func=True)  # GRPO asks a rollout_func for its output
    assert custom.expected_answers() == ("rollout_output", "rewards")
    # RLOO has no rollout_func: TRL tokenizes (answered with the rollout_func's prompt ids) and generates
    assert _replay(prompt_ids=[[5], [6]]).expected_answers() == ("prompt_tokens", "completions", "rewards")
    custom.reward_rows(2)
    with pytest.raises(RuntimeError, match="rollout_func was not called"):
        custom.check_served("1.16.0", HOOKS)
    tools = _replay(tool_trajectories=[None, None])
    assert tools.expected_answers() == ("completions", "tool_loop", "rewards")
    tools.completions([[7], [8]], False)
    tools.reward_rows(2)
    with pytest.raises(RuntimeError, match="_tool_call_loop was not called"):
        tools.check_served("1.16.0", HOOKS)
    tools.tool_loop([["a"], ["b"]])
    tools.check_served("1.16.0", HOOKS)
    with pytest.raises(RuntimeError, match=r"reset.* 1 rows not reset exactly once"):
        tools.check_served("1.16.0", HOOKS, environment_resets=[1, 0])


def _dataset() -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Question {i}: say something."}]
                                         for i in range(8)]})


def coin_reward(completion_ids, **kwargs):
    return [float(ids[0] % 2 == 0) for ids in completion_ids]


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
@pytest.mark.parametrize("hook", ["_generate_single_turn", "_calculate_rewards"])
def test_train_stops_when_trl_bypasses_an_answered_hook(kind, hook, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """A TRL release that generates or scores around SARA's hooks (simulated by binding one trainer instance's hook
    back to TRL's own method) makes ``train()`` stop at the first replay with the guard's error, instead of training
    on rows TRL regenerated (or rescored) itself."""
    trainer_class, config_class, base = {"grpo": (SaraGRPOTrainer, SaraConfig, GRPOTrainer),
                                         "rloo": (SaraRLOOTrainer, SaraRLOOConfig, RLOOTrainer)}[kind]
    args = config_class(**cpu_trainer_kwargs(allocator="uniform", max_steps=1))
    trainer = trainer_class(model=tiny_model_dir, reward_funcs=coin_reward, args=args, train_dataset=_dataset(),
                            processing_class=tokenizer)
    setattr(trainer, hook, types.MethodType(getattr(base, hook), trainer))
    with pytest.raises(RuntimeError, match=rf"replay was bypassed: TRL {trl.__version__} .*{hook} was not called"):
        trainer.train()
    assert trainer.state.global_step == 0  # no optimizer step was taken on the bypassed batch
    assert trainer.sara.replay is None  # the guard left the run state clean


def test_heldout_suite_runs_trl_style_tests_on_the_sara_trainers(tmp_path):
    """``scripts/trl_heldout.py`` (TRL's own trainer tests against SARA's trainers): a TRL-style test file, importing
    the trainer and config names from ``trl`` as TRL's tests do, gets SARA's trainers with uniform allocation."""
    import subprocess
    import sys
    from pathlib import Path

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "test_grpo_trainer.py").write_text(
        "from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer\n"
        "def test_names_are_sara_with_uniform_allocation():\n"
        "    assert GRPOTrainer.__name__ == 'SaraGRPOTrainer' and RLOOTrainer.__name__ == 'SaraRLOOTrainer'\n"
        "    assert GRPOConfig(output_dir='o', use_cpu=True).allocator == 'uniform'\n"
        "    assert RLOOConfig(output_dir='o', use_cpu=True).allocator == 'uniform'\n"
        "def test_a_failing_one_is_reported():\n"
        "    assert GRPOConfig(output_dir='o', use_cpu=True).allocator == 'sara'\n")
    script = Path(__file__).resolve().parents[1] / "scripts" / "trl_heldout.py"
    run = subprocess.run([sys.executable, str(script), str(tmp_path), "--files", "tests/test_grpo_trainer.py", "-q",
                          "-p", "no:cacheprovider"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed" in run.stdout
    missing = subprocess.run([sys.executable, str(script), str(tmp_path / "nowhere")], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "not found" in missing.stderr
