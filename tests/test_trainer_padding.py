"""Short groups (commit_min < k) and fill groups: padding rows are masked out of the loss, the token count and the
group statistics, and the advantages of the real rows equal the hand-computed GRPO / RLOO values.

Outcomes are scripted per prompt (the reward reads the prompt's script, one character per rollout in generation
order), so the groups SARA commits are known exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _helpers_trainer import POSITION, scripted_reward
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer


def grpo_advantages(rewards) -> np.ndarray:
    """GRPO (paper Eq. 1) as TRL computes it: (r - mean) / (unbiased std + 1e-4) over the group's real rows."""
    r = np.asarray(rewards, dtype=np.float64)
    return (r - r.mean()) / (r.std(ddof=1) + 1e-4)


def rloo_advantages(rewards) -> np.ndarray:
    """RLOO leave-one-out: r_i minus the mean of the other real rows of the group (beta = 0)."""
    r = np.asarray(rewards, dtype=np.float64)
    return r - (r.sum() - r) / (len(r) - 1)


SCENARIOS = {
    # Every prompt mixes in its probe ("10"); with commit_min = 3 SARA tops each committed prompt up by one rollout
    # ("1"): two groups of three real rows [1, 0, 1], each padded with one row.
    "short": {"scripts": ["1011"] * 8, "config": {"commit_min": 3}, "groups": [[1, 0, 1], [1, 0, 1]]},
    # Only prompt 0 can mix; one round only: it is committed with its two probe rollouts [1, 0] (commit_min = 2),
    # the three "00" prompts are abandoned (p_eff(2, 0) = 0.4 < 0.45), and the second group is a fill group.
    "fill": {"scripts": ["1011"] + ["0000"] * 7, "config": {"commit_min": 2, "max_rounds": 1, "shuffle_dataset": False},
             "groups": [[1, 0], []]},
}


@pytest.mark.parametrize("scenario", ["short", "fill"])
@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_padded_groups(kind, scenario, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    spec = SCENARIOS[scenario]
    data = Dataset.from_dict({
        "prompt": [f"Prompt number {i}." for i in range(len(spec["scripts"]))],
        "script": spec["scripts"],
        "pid": list(range(len(spec["scripts"]))),
    })
    kwargs = cpu_trainer_kwargs(max_steps=1, **spec["config"])
    if kind == "grpo":
        trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=scripted_reward, args=SaraConfig(**kwargs),
                                  train_dataset=data, processing_class=tokenizer)
        expected_advantage = grpo_advantages
    else:
        trainer = SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=scripted_reward,
                                  args=SaraRLOOConfig(**kwargs, beta=0.0), train_dataset=data,
                                  processing_class=tokenizer)
        expected_advantage = rloo_advantages
    captured = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: captured.append(original(inputs)) or captured[-1]
    POSITION.clear()

    trainer.train()

    k = 4
    out = {key: value.detach().clone() if isinstance(value, torch.Tensor) else value
           for key, value in captured[0].items()}
    step = trainer.sara_last_step
    assert [g.success.tolist() for g in step.groups] == spec["groups"]

    # Row layout: each group's real rows first, then padding up to k.
    real = torch.tensor([j < len(group) for group in spec["groups"] for j in range(k)])
    assert out["completion_ids"].shape[0] == 2 * k
    row_tokens = out["completion_mask"].sum(dim=1)
    assert (row_tokens[~real] == 0).all() and (row_tokens[real] > 0).all()

    # Advantages: hand-computed over the real rows of each group; exactly 0 on padding rows.
    expected = np.concatenate([
        np.concatenate([expected_advantage(group), np.zeros(k - len(group))]) if group else np.zeros(k)
        for group in spec["groups"]
    ])
    np.testing.assert_allclose(out["advantages"].numpy(), expected, rtol=1e-5, atol=1e-6)

    # Token counts: num_items_in_batch and TRL's num_tokens only count real rows.
    if kind == "grpo":
        assert int(out["num_items_in_batch"]) == int(out["completion_mask"].sum())
    else:
        assert (out["old_logps"][~real] == 0).all()
    assert trainer.state.num_input_tokens_seen == int(out["prompt_mask"][real].sum() + row_tokens[real].sum())

    log = next(entry for entry in trainer.state.log_history if "sara/rollouts_trained" in entry)
    assert log["sara/rollouts_trained"] == sum(len(group) for group in spec["groups"])
    assert log["sara/unfilled"] == sum(1 for group in spec["groups"] if not group)
    assert log["completions/mean_length"] == pytest.approx(row_tokens[real].float().mean().item())
    # A fill group carries no signal: it is counted as a zero-std group.
    assert log["frac_reward_zero_std"] == pytest.approx(log["sara/unfilled"] / 2)

    # The loss ignores padding rows: recomputed on the real rows alone it is identical for GRPO's default "dapo"
    # (normalized by num_items_in_batch), and RLOO's mean over sequences is scaled by real / total rows.
    trainer.model.train()
    with torch.no_grad():
        full = trainer._compute_loss(trainer.model, out).item()
        only_real = {key: value[real] if isinstance(value, torch.Tensor) and value.dim() > 0
                     and value.shape[0] == 2 * k else value for key, value in out.items()}
        partial = trainer._compute_loss(trainer.model, only_real).item()
    scale = 1.0 if kind == "grpo" else real.float().mean().item()
    assert full == pytest.approx(partial * scale, rel=1e-5, abs=1e-7)
