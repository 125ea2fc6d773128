"""Checkpoint and resume: 2 steps + save + 1 resumed step equals 3 straight steps (same seed) on the tiny model, with
and without carry_over (whose checkpoint also holds the carried prompts' completions)."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer

MODES = ["always", "never", "coin", "coin"] * 6


def mode_reward(completions, completion_ids, mode, **kwargs):
    return [
        1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
        for ids, m in zip(completion_ids, mode)
    ]


@pytest.mark.parametrize("carry_over", [False, True])
def test_resume_matches_straight_run(carry_over, tmp_path, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    data = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Question {i}?"}] for i in range(len(MODES))], "mode": MODES}
    )

    def make(output_dir):
        args = SaraConfig(**cpu_trainer_kwargs(output_dir=str(output_dir), max_steps=3, save_strategy="steps",
                                               save_steps=2, budget_cap=12.0, carry_over=carry_over,
                                               refill_margin=2.0 if carry_over else 0.5))
        return SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                               processing_class=tokenizer)

    straight = make(tmp_path / "straight")
    straight.train()
    checkpoint = tmp_path / "straight" / "checkpoint-2"
    saved = json.loads((checkpoint / "sara_state.json").read_text())
    assert saved["allocator"]["steps"] == 2 and saved["stream"]["cursor"] > 0
    # With carry_over the undecided prompts of step 2 and their completions are in the checkpoint.
    assert ("carry" in saved["allocator"]) == carry_over == (checkpoint / "sara_carry.pt").is_file()

    resumed = make(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(checkpoint))

    # Same allocator and stream state after step 3 ...
    assert resumed.sara_allocator.state_dict() == straight.sara_allocator.state_dict()
    assert resumed.sara_stream.state_dict() == straight.sara_stream.state_dict()
    assert resumed.sara_allocator.steps == 3
    # ... the same third step (prompts drawn, outcomes, accounting) ...
    def step3(trainer):
        entry = next(e for e in trainer.state.log_history if e.get("step") == 3 and "sara/rounds" in e)
        return {name: value for name, value in entry.items()  # all but the wall-clock of the collection
                if (name.startswith("sara/") and name != "sara/collect_seconds") or name == "loss"}

    last, resumed_last = step3(straight), step3(resumed)
    assert len(last) > 20 and resumed_last == last
    assert [r.__dict__ for r in resumed.sara_last_step.records] == [r.__dict__ for r in straight.sara_last_step.records]
    # ... and the same parameters.
    straight_params = dict(straight.model.named_parameters())
    for name, param in resumed.model.named_parameters():
        torch.testing.assert_close(param, straight_params[name], rtol=0, atol=1e-7)
    if carry_over:  # a checkpoint that lost the carried completions must not resume silently without them
        (checkpoint / "sara_carry.pt").unlink()
        with pytest.raises(FileNotFoundError, match=r"carries \d+ undecided prompts .*sara_carry.pt"):
            make(tmp_path / "broken").train(resume_from_checkpoint=str(checkpoint))
