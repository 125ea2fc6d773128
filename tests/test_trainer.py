"""SaraGRPOTrainer / SaraRLOOTrainer on a tiny random Llama (CPU): two training steps with each allocator, the shape of
the trained batch, reward calls, the accounting in the logged metrics, and the model card."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer

# A prompt's "mode" decides its latent success rate: 1 ("always"), 0 ("never") or 1/2 ("coin": the parity of the
# first completion token of the random model). Saturated and mixed groups therefore both occur, and mixed groups are
# only possible for "coin" prompts.
MODES = ["always", "never", "coin", "coin"] * 6
REWARD_CALLS = {"rollouts": 0, "calls": 0}


def mode_reward(completions, completion_ids, mode, **kwargs):
    REWARD_CALLS["calls"] += 1
    REWARD_CALLS["rollouts"] += len(completions)
    return [
        1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
        for ids, m in zip(completion_ids, mode)
    ]


def mode_dataset() -> Dataset:
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Question {i}: say something."}] for i in range(len(MODES))],
         "mode": MODES}
    )


def spy_batches(trainer) -> list[dict]:
    """Record what TRL's pipeline returned for each generation batch (before TRL's shuffle/split)."""
    records = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        if trainer.model.training:
            n = output["prompt_ids"].shape[0]
            records.append({
                "output": {k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)},
                "step": trainer.sara_last_step,
                "rewards": list(trainer._logs["rewards"]["mode_reward"])[-n:],
                "advantages": list(trainer._logs["advantages"])[-n:],
            })
        return output

    trainer._generate_and_score_completions = spy
    return records


def sara_logs(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "sara/rollouts_generated" in entry]


TRAINERS = {"grpo": (SaraGRPOTrainer, SaraConfig), "rloo": (SaraRLOOTrainer, SaraRLOOConfig)}


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
@pytest.mark.parametrize("allocator", ["sara", "dynamic_sampling", "uniform"])
def test_two_steps(kind, allocator, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    trainer_class, config_class = TRAINERS[kind]
    # budget_cap 12: enough for B = 2 mixed groups in every step even with unlucky coin flips (half of the prompts are
    # saturated, and with k = 4 SARA also abandons a coin prompt whose two probes agree: p_eff(2, 0) = 0.4 < 0.45).
    args = config_class(**cpu_trainer_kwargs(allocator=allocator, budget_cap=12.0))
    trainer = trainer_class(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=mode_dataset(),
                            processing_class=tokenizer)
    batches = spy_batches(trainer)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    REWARD_CALLS.update(rollouts=0, calls=0)

    trainer.train()

    k, num_groups = args.num_generations, args.generation_batch_size // args.num_generations
    logs = sara_logs(trainer)
    assert len(batches) == 2 and len(logs) == 2

    # Reward functions ran exactly once per generated rollout (one call per round), never during the replay.
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert REWARD_CALLS["rollouts"] == generated == trainer.sara_allocator.total_rollouts
    assert REWARD_CALLS["calls"] == sum(entry["sara/rounds"] for entry in logs)
    assert logs[-1]["sara/cumulative_rollouts"] == generated

    for record, entry in zip(batches, logs):
        output, step = record["output"], record["step"]
        # The trained batch holds exactly generation_batch_size rows: B groups of k.
        assert output["prompt_ids"].shape[0] == output["completion_ids"].shape[0] == args.generation_batch_size
        assert output["advantages"].shape == (args.generation_batch_size,)
        assert len(step.groups) == num_groups
        # Accounting invariant in the logged metrics, for rollouts and for tokens.
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left")
            )
        assert entry["sara/rollouts_trained"] == k * (num_groups - entry["sara/unfilled"])
        rewards = np.asarray(record["rewards"]).reshape(num_groups, k)
        assert np.isfinite(rewards).all()  # commit_min = k: no padding rows
        for group, group_rewards in zip(step.groups, rewards):
            assert np.array_equal(group.success, group_rewards)  # binary rewards: labels = rewards
        if allocator == "uniform":
            assert entry["sara/rounds"] == 1 and entry["sara/rollouts_generated"] == args.generation_batch_size
            # one call: its longest completion minus the tail is the mean completion length
            assert entry["sara/round_longest_tokens"] - entry["sara/round_tail_tokens"] == pytest.approx(
                entry["sara/tokens_generated"] / entry["sara/rollouts_generated"])
        else:
            # Every trained group is mixed (the data allow it: half of the prompts are coin flips), so
            # every row has a non-zero advantage.
            assert entry["sara/unfilled"] == 0 and entry["sara/effective_fraction"] == 1.0
            assert all(MODES[group.prompt_id] == "coin" for group in step.groups)
            assert all(0.0 < row.mean() < 1.0 for row in rewards)
            assert (output["advantages"].abs() > 0.0).all()

    # The policy moved.
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())

    # Model card: the `sara` tag and both citations.
    assert "sara" in trainer.model.model_tags
    trainer.create_model_card(model_name="tiny")
    text = Path(trainer.args.output_dir, "README.md").read_text()
    assert "- sara" in text and "2607.26253" in text and "nomand2026sara" in text
    assert ("shao2024deepseekmath" if kind == "grpo" else "ahmadian2024back") in text


def test_lora_trains_only_the_adapter(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """``peft_config`` goes to TRL unchanged: the loss (with a KL term, whose reference TRL takes with the adapter
    disabled) moves only the LoRA weights, and the accounting holds."""
    from peft import LoraConfig

    args = SaraConfig(**cpu_trainer_kwargs(budget_cap=12.0, beta=0.04, learning_rate=1e-2))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=mode_dataset(),
                              processing_class=tokenizer,
                              peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainable = {name for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)

    trainer.train()

    changed = {name for name, p in trainer.model.named_parameters() if not torch.equal(before[name], p)}
    assert changed and changed <= trainable  # the base weights never move
    logs = sara_logs(trainer)
    assert len(logs) == 2 and trainer.sara_allocator.steps == 2
    for entry in logs:
        assert entry["sara/rollouts_generated"] == sum(
            entry[f"sara/rollouts_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        assert entry["sara/rollouts_trained"] == args.generation_batch_size and entry["sara/unfilled"] == 0
    kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    # LoRA's B starts at zero: step 1's policy is the reference; after one update the adapter makes them differ
    assert len(kl) == 2 and kl[0] == pytest.approx(0.0, abs=1e-7) and kl[1] > 1e-6, kl


def test_carry_over_trains_carried_rollouts_with_their_own_completions(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """carry_over: prompts undecided at a step's end continue in the next step with their cached completions. Every
    trained row's reward must be the reward of its own completion (coin prompts: parity of the first token), every
    rollout is scored exactly once, and the accounting includes what was carried in."""
    args = SaraConfig(**cpu_trainer_kwargs(max_steps=5, carry_over=True, budget_cap=12.0, refill_margin=2.0))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer)
    batches = spy_batches(trainer)
    REWARD_CALLS.update(rollouts=0, calls=0)
    trainer.train()
    logs = sara_logs(trainer)
    assert len(batches) == len(logs) == 5
    assert sum(entry["sara/carried_in"] for entry in logs) > 0  # the path was exercised
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert REWARD_CALLS["rollouts"] == generated == trainer.sara_allocator.total_rollouts
    for record, entry in zip(batches, logs):
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] + entry[f"sara/{unit}_carried_in"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        step = record["step"]
        assert entry["sara/unfilled"] == 0 and all(MODES[g.prompt_id] == "coin" for g in step.groups)
        completions = record["output"]["completion_ids"]
        for row, reward in enumerate(record["rewards"]):
            assert reward == float(int(completions[row, 0]) % 2 == 0)
        rewards = np.asarray(record["rewards"]).reshape(len(step.groups), -1)
        for group, group_rewards in zip(step.groups, rewards):
            assert np.array_equal(group.success, group_rewards)
    for prev, cur in zip(logs, logs[1:]):
        assert cur["sara/rollouts_carried_in"] == prev["sara/rollouts_surplus"] + prev["sara/rollouts_active_left"]


def test_sara_abandons_saturated_prompts_and_reports_raw_success(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Saturated prompts ("always"/"never") are abandoned after the n0 = 2 probe (p_eff(2, 0) = 2/5 < 0.45 for
    k = 4, paper Eq. 2), and sara/raw_success_rate covers all generated rollouts, not only the trained ones."""
    args = SaraConfig(**cpu_trainer_kwargs(max_steps=1))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer)
    trainer.train()
    step, entry = trainer.sara_last_step, sara_logs(trainer)[0]
    abandoned = [r for r in step.records if r.fate == "abandoned"]
    assert entry["sara/abandoned"] == len(abandoned)
    assert abandoned, "the always/never prompts should be abandoned"
    for record in abandoned:
        assert record.n == 2 and record.s in (0, 2)  # abandoned right after the probe, unmixed
        assert record.p_eff == pytest.approx((4 - 2) / (4 + 1))
    scored = [(r.s, r.n) for r in step.records]
    assert entry["sara/raw_success_rate"] == pytest.approx(sum(s for s, _ in scored) / sum(n for _, n in scored))
    assert entry["sara/expected_lost"] == pytest.approx(sum(r.p_eff for r in abandoned))


def test_evaluation_passes_through_and_generation_reuse(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Evaluation is TRL's own path (no allocator, no sara/* metrics); with gradient accumulation and
    num_iterations = 2 one collection feeds 4 micro-steps (2 optimizer steps), as in TRL."""
    args = SaraConfig(**cpu_trainer_kwargs(
        per_device_train_batch_size=4, gradient_accumulation_steps=2, num_iterations=2, budget_cap=12.0,
        per_device_eval_batch_size=8, eval_strategy="no",
    ))
    data = mode_dataset()
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                              eval_dataset=data.select(range(4)), processing_class=tokenizer)
    batches = spy_batches(trainer)
    REWARD_CALLS.update(rollouts=0, calls=0)
    metrics = trainer.evaluate()
    assert REWARD_CALLS["rollouts"] == 4 * args.num_generations  # every eval prompt x k, scored once, by TRL
    assert "eval_reward" in metrics and not any(name.startswith("eval_sara/") for name in metrics)
    assert trainer.sara_allocator.steps == 0 and trainer.sara_last_step is None

    trainer.train()

    assert trainer.state.global_step == 2 and trainer.sara_allocator.steps == 1 and len(batches) == 1
    output = batches[0]["output"]
    assert output["prompt_ids"].shape[0] == args.generation_batch_size == 8
    assert "old_per_token_logps" in output  # num_iterations > 1: TRL keeps the sampling-time log-probs
    assert REWARD_CALLS["rollouts"] == 4 * args.num_generations + trainer.sara_allocator.total_rollouts
