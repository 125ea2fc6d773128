"""``environment_factory`` with the real SmolLM2-135M-Instruct generating (transformers, CPU): two SARA steps on the
guess-a-number environment of ``benchmarks/env_task`` (1..4: a ``guess`` tool, and the final answer). TRL accepts
``environment_factory`` only with a tool-calling chat template, which SmolLM2's own is not, so the model runs with
Qwen3's ChatML template and seldom emits a well-formed tool call. What SARA's accounting says is checked against what
the environments saw: one reset per generated rollout and each instance reset before every use, the pool no larger
than the largest round (no instance leaked), the instances of abandoned prompts reset and reused for other games, and
the tool split of the ``sara/*`` metrics against the tool calls the environments received (possibly none) and the
tool loop's own records. Slow: about a minute, plus the first conversion. One torch thread (conftest's): on the shared
2-core machine two threads made the same run several times slower under load."""

from __future__ import annotations

import numpy as np
import pytest

# `long` (CI's time): environment_factory with the real model runs end to end on the vLLM engine in CI, in rounds and
# streaming (tests/test_vllm_cpu.py::test_environment_factory_on_the_engine and ..._streams_on_the_engine)
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_real_model_environment_two_sara_steps(tmp_path, monkeypatch):
    from test_trainer_tools import sara_logs, spy_replays
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    from benchmarks.env_task.env_task import GuessEnv, GuessFactory, env_task_dataset, hand_answer_to_environment
    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.allocation import Fate
    from sara_trl.trainer import collect
    from sara_trl.trainer.environment import environment_methods
    from sara_trl.utils import smollm2_checkpoint, use_tool_chat_template

    path = smollm2_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert not supports_tool_calling(tokenizer)  # SmolLM2's own template: TRL would refuse environment_factory
    tokenizer = use_tool_chat_template(tokenizer)
    assert supports_tool_calling(tokenizer)
    factory = GuessFactory()
    loops = []  # per round: the tool loop's per-rollout records (calls, failures, tool_mask)

    class RecordedRounds(collect.RoundEngine):
        def step(self):
            finished = super().step()
            loops.append([done.record.trajectory for done in finished])
            return finished

    monkeypatch.setattr(collect, "RoundEngine", RecordedRounds)
    args = SaraConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
        use_vllm=False, max_steps=2, num_generations=4, per_device_train_batch_size=8, max_completion_length=32,
        temperature=1.0, learning_rate=1e-6, logging_steps=1, save_strategy="no", seed=0,
        allocator="sara", n0=2, commit_min=2, budget_cap=2.0, max_rounds=3, success_reward_func="GuessEnv",
        max_tool_calling_iterations=2,
    )
    trainer = SaraGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), args=args,
                              reward_funcs=hand_answer_to_environment, train_dataset=env_task_dataset(32, high=4),
                              processing_class=tokenizer, environment_factory=factory)
    assert [tool.__name__ for tool in trainer.tools] == ["guess"]
    assert [tool.__name__ for tool in environment_methods(factory.instances[0])] == ["guess"]
    assert trainer.reward_func_names == ["hand_answer_to_environment", "GuessEnv"]
    records = spy_replays(trainer)

    trainer.train()

    logs = sara_logs(trainer)
    assert len(logs) == len(records) == 2
    steps = [record["step"] for record in records]
    generated = [int(entry["sara/rollouts_generated"]) for entry in logs]
    # Accounting: every rollout and token has one fate, and so has every model token, tool token and tool call; the
    # tool split is what the tool loop recorded (its tool_mask zeros, its calls), the trained part what TRL trained on.
    trajectories = [t for loop in loops for t in loop]
    assert len(loops) == sum(entry["sara/rounds"] for entry in logs) and len(trajectories) == sum(generated)
    start = 0
    for record, entry, count in zip(records, logs, generated):
        record["step"].stats.check()
        for unit in ("rollouts", "tokens", "model_tokens", "tool_tokens", "tool_calls"):
            assert entry[f"sara/{unit}_generated"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        for fate in ("generated", "trained", "abandoned", "surplus", "active_left", "carried_in"):
            split = entry[f"sara/model_tokens_{fate}"] + entry[f"sara/tool_tokens_{fate}"]
            assert split == entry[f"sara/tokens_{fate}"]
        mine = trajectories[start:start + count]
        start += count
        assert entry["sara/tool_calls_generated"] == sum(t.tool_calls for t in mine)
        assert entry["sara/tool_tokens_generated"] == sum(len(t.env_mask) - sum(t.env_mask) for t in mine)
        output = record["output"]
        mask, completion = output["tool_mask"].bool(), output["completion_mask"].bool()
        assert entry["sara/model_tokens_trained"] == int((completion & mask).sum())
        assert entry["sara/tool_tokens_trained"] == int((completion & ~mask).sum())
    # The environments received every tool call that reached the tool (guess never raises; a failure is a call of an
    # unknown tool or with bad arguments, which never reaches it): possibly none, SmolLM2 seldom emits a tool call.
    calls = sum(t.tool_calls for t in trajectories)
    assert sum(env.tool_calls for env in factory.instances) == calls - sum(t.tool_failures for t in trajectories)
    assert calls == sum(entry["sara/tool_calls_generated"] for entry in logs)
    # One reset per generated rollout (the replay resets none), each followed by exactly one answer; the success
    # labels SARA allocated on are the environments' rewards.
    envs = factory.instances
    assert sum(env.resets for env in envs) == sum(entry["sara/env_resets"] for entry in logs) == sum(generated)
    assert sum(generated) == trainer.sara_allocator.total_rollouts
    assert [env.answers for env in envs] == [env.resets for env in envs]
    assert len(factory.rewards) == sum(generated)
    start = 0
    for entry, count in zip(logs, generated):
        assert entry["sara/raw_success_rate"] == pytest.approx(float(np.mean(factory.rewards[start:start + count])))
        start += count
    # The pool: TRL's probe plus what the largest round needed; nothing else was built (no instance leaked). Round r
    # draws the pool's first r-size instances, so instance i is reset once per round larger than i.
    rounds = [size for step in steps for size in step.round_sizes]
    pool = trainer._environment_pool[None]
    assert pool == envs and len(pool) == max(rounds)
    assert [env.resets for env in pool] == [sum(size > i for size in rounds) for i in range(len(pool))]
    # Prompts SARA abandoned in step 1: the instances that played them were reset again for other games afterwards.
    abandoned = {int(pid) for pid, fate in zip(steps[0].prompt_table["prompt_id"], steps[0].prompt_table["fate"])
                 if fate == Fate.ABANDONED}
    assert abandoned and logs[0]["sara/rollouts_abandoned"] > 0
    reused = [env for env in pool if any(
        game in abandoned and any(later not in abandoned for later in env.games[j + 1:])
        for j, game in enumerate(env.games))]
    assert reused
    assert isinstance(pool[0], GuessEnv)
