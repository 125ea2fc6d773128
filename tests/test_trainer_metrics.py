"""TRL's metrics never average over SARA's padding rows (short-group padding and fill groups).

Each value is checked against a hand computation from the per-token values (log-probs recomputed with a plain
forward pass of the policy and the reference model, masked to the real rows), or is NaN in the log (never None) when
the step had no real row at all (every group a fill group: loss 0, gradient 0, and no ``kl`` to report).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _helpers_trainer import POSITION, scripted_reward
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.trainer.hooks import HOOKS, SaraTrainerBase, check_trainer_class
from sara_trl.trainer.metric_repair import (
    ROW_METRIC_PADDING,
    correct_loss_metrics,
    global_masked_mean,
    log_sampling_difference_by_origin,
)
from sara_trl.trainer.replay import PADDING_KEY, RowLayout
from sara_trl.trainer.rollout import RolloutCache

NAN = float("nan")


class SumAccelerator:
    """A one-process accelerator: reduce and gather return their input."""

    device = torch.device("cpu")
    num_processes = 1

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def gather(self, tensor):
        return tensor


# ------------------------------------------------------------------------------------------ pure rules
def test_token_metrics_become_nan_only_without_real_tokens():
    metrics = {"kl": [0.5, 0.0], "entropy": [0.0], "policy_loss": [0.0], "clip_ratio/low_min": [NAN]}
    correct_loss_metrics(metrics, {"kl", "entropy", "policy_loss", "clip_ratio/low_min"}, real_tokens=0,
                         real_rows=0, rows=8)
    assert metrics["kl"][0] == 0.5 and math.isnan(metrics["kl"][1])  # only the value of this micro-batch
    assert math.isnan(metrics["entropy"][0])
    assert metrics["policy_loss"] == [0.0]  # the loss itself is not a per-row statistic
    metrics = {"kl": [0.25]}
    correct_loss_metrics(metrics, {"kl"}, real_tokens=3, real_rows=1, rows=8)
    assert metrics["kl"] == [0.25]  # TRL's masked token mean already excludes padding rows


def test_row_metrics_drop_padding_rows():
    # 8 rows, 6 real: 3 real rows low-clipped, 1 high-clipped; padding rows are never clipped.
    metrics = {"clip_ratio/low_mean": [3 / 8], "clip_ratio/low_min": [0.0], "clip_ratio/high_mean": [1 / 8],
               "clip_ratio/high_max": [1.0], "clip_ratio/region_mean": [4 / 8],
               "vespo/phi_seq_mean": [(0.5 * 6 + 1.0 * 2) / 8]}  # real rows' weight 0.5, padding rows' phi(1) = 1
    correct_loss_metrics(metrics, set(metrics), real_tokens=30, real_rows=6, rows=8, row_metrics=tuple(metrics))
    assert metrics["clip_ratio/low_mean"] == [pytest.approx(0.5)]
    assert metrics["clip_ratio/high_mean"] == [pytest.approx(1 / 6)]
    assert metrics["clip_ratio/region_mean"] == [pytest.approx(4 / 6)]
    assert metrics["clip_ratio/low_min"] == [0.0] and metrics["clip_ratio/high_max"] == [1.0]
    assert metrics["vespo/phi_seq_mean"] == [pytest.approx(0.5)]
    # Every real row low-clipped: TRL's min over all rows says 0 (a padding row), the real rows' min is 1.
    metrics = {"clip_ratio/low_mean": [6 / 8], "clip_ratio/low_min": [0.0]}
    correct_loss_metrics(metrics, set(metrics), real_tokens=30, real_rows=6, rows=8, row_metrics=tuple(metrics))
    assert metrics == {"clip_ratio/low_mean": [pytest.approx(1.0)], "clip_ratio/low_min": [1.0]}
    # No real row: NaN.
    metrics = {"clip_ratio/low_mean": [0.0], "clip_ratio/high_max": [0.0]}
    correct_loss_metrics(metrics, set(metrics), real_tokens=0, real_rows=0, rows=8, row_metrics=tuple(metrics))
    assert all(math.isnan(values[0]) for values in metrics.values())
    with pytest.raises(KeyError):
        correct_loss_metrics({"kl": [1.0]}, {"kl"}, 3, 1, 2, row_metrics=("kl",))
    assert set(ROW_METRIC_PADDING) >= {"clip_ratio/low_mean", "vespo/phi_seq_mean"}


def test_global_masked_mean():
    values = torch.tensor([[1.0, 3.0, float("inf")], [5.0, 7.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert global_masked_mean(SumAccelerator(), values, mask) == 2.0  # the masked inf does not leak
    assert math.isnan(global_masked_mean(SumAccelerator(), values, torch.zeros_like(mask)))


def _origin_trainer(carry_over=True):
    from collections import defaultdict
    from types import SimpleNamespace

    return SimpleNamespace(args=SimpleNamespace(carry_over=carry_over), use_vllm=True,
                           vllm_importance_sampling_correction=True, accelerator=SumAccelerator(),
                           _metrics={"train": defaultdict(list)})


def test_sampling_difference_split_by_origin():
    # 4 rows (k = 2): a group of rollouts 0 (carried in) and 2 (fresh), then rollout 3 (fresh) and a padding row.
    # Rollouts 0-1 are the carried-in ones (the cache's first `carried` ids); 1 is not trained.
    cache = RolloutCache(completion_ids=[[1]] * 4, carried=2)
    layout = RowLayout(plan_prompts=np.array([7, 7, 8, 8]), plan_rollouts=np.array([0, 2, 3, -1]),
                       is_padding=np.array([False, False, False, True]), local=slice(0, 4), rows=[], replay=None)
    old = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    sampling = torch.tensor([[-0.5, 0.25, 9.0], [1e-5, -3e-5, 9.0], [2e-5, NAN, 9.0], [NAN, NAN, NAN]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 1]])  # the third tokens are padding; NaN is skipped
    output = {"old_per_token_logps": old, "sampling_per_token_logps": sampling, "completion_mask": mask}
    trainer = _origin_trainer()
    log_sampling_difference_by_origin(trainer, output, layout, cache)
    logged = trainer._metrics["train"]
    assert logged["sara/sampling_logp_difference_carried_in/mean"] == [pytest.approx(0.375)]
    assert logged["sara/sampling_logp_difference_carried_in/max"] == [pytest.approx(0.5)]
    assert logged["sara/sampling_logp_difference_fresh/mean"] == [pytest.approx(2e-5)]  # (1e-5 + 3e-5 + 2e-5) / 3
    assert logged["sara/sampling_logp_difference_fresh/max"] == [pytest.approx(3e-5)]
    # no carried-in rollout trained: only the fresh values; without carry_over nothing at all
    trainer = _origin_trainer()
    layout.plan_rollouts = np.array([2, 3, 2, -1])
    log_sampling_difference_by_origin(trainer, output, layout, cache)
    assert set(trainer._metrics["train"]) == {"sara/sampling_logp_difference_fresh/mean",
                                              "sara/sampling_logp_difference_fresh/max"}
    trainer = _origin_trainer(carry_over=False)
    log_sampling_difference_by_origin(trainer, output, layout, cache)
    assert not trainer._metrics["train"]


def test_trainer_classes_provide_every_hook():
    check_trainer_class(SaraGRPOTrainer)
    check_trainer_class(SaraRLOOTrainer)
    assert set(HOOKS) <= set(dir(SaraTrainerBase)) | set(SaraTrainerBase.__annotations__)  # declared and documented

    class Incomplete(SaraGRPOTrainer):
        _sara_row_metrics = None

    with pytest.raises(TypeError, match=r"\['_sara_row_metrics'\]"):
        check_trainer_class(Incomplete)


# ------------------------------------------------------------------------------------------ real trainers
def hand_logps(model, out) -> torch.Tensor:
    """(N, T) log-probs of the completion tokens under `model`, real rows' attention as in the batch."""
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention = torch.cat([out["prompt_mask"], torch.ones_like(out["completion_ids"])], dim=1)
    width = out["completion_ids"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -width - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, out["completion_ids"].unsqueeze(-1)).squeeze(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    mask = mask.bool()
    return float(values[mask].double().mean())


def scripted_data(scripts):
    return Dataset.from_dict({
        "prompt": [f"Prompt number {i}." for i in range(len(scripts))],
        "script": scripts,
        "pid": list(range(len(scripts))),
    })


# Prompt 0 mixes in every probe ("10"); all others never succeed. One round per step, over five prompts in stream
# order, so each step (the stream wraps in step 2) commits prompt 0 with its two probe rollouts and ends with one
# fill group: 2 real rows and 6 padding rows.
SOME_FILL = ["10"] + ["0"] * 7
ALL_FILL = ["0"] * 8


def make_trainer(kind, scripts, tiny_model_dir, tokenizer, cpu_trainer_kwargs, **overrides):
    kwargs = cpu_trainer_kwargs(max_rounds=1, commit_min=2, shuffle_dataset=False, beta=0.1, **overrides)
    data = scripted_data(scripts)
    POSITION.clear()
    if kind == "grpo":
        return SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=scripted_reward, args=SaraConfig(**kwargs),
                               train_dataset=data, processing_class=tokenizer)
    return SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=scripted_reward, args=SaraRLOOConfig(**kwargs),
                           train_dataset=data, processing_class=tokenizer)


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_step_of_fill_groups_logs_no_kl_entropy_or_clip(kind, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    trainer = make_trainer(kind, ALL_FILL, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=1)
    trainer.train()
    log = next(entry for entry in trainer.state.log_history if "sara/unfilled" in entry)
    assert log["sara/unfilled"] == 2 and log["loss"] == 0.0 and log["grad_norm"] == 0.0
    for name in ("kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                 "clip_ratio/low_min", "clip_ratio/high_max", "completions/mean_length"):
        assert name in log and math.isnan(log[name]), name  # NaN (TRL logs None) for a window of NaN values
    assert math.isnan(log["reward"]) and math.isnan(log["reward_std"])  # no committed group: still numbers
    assert not any(value is None for value in log.values())


@pytest.mark.parametrize("width", [6, 1])
def test_grpo_kl_and_entropy_over_real_tokens(width, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Step 2 (the policy has moved away from the reference): GRPO's loss-time kl is the Schulman estimate
    exp(ref - logp) - (ref - logp) - 1 averaged over the real rows' tokens. With width 1 every real completion is
    one token, the case where a one-token padding row made TRL average over all rows."""
    trainer = make_trainer("grpo", SOME_FILL, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=2,
                           max_completion_length=width, learning_rate=0.05)
    checks = []
    original = trainer._compute_loss

    def checked(model, inputs):
        padding = inputs[PADDING_KEY]
        logp = hand_logps(model, inputs)
        ref = inputs["ref_per_token_logps"]
        real = inputs["completion_mask"].bool() & ~padding.unsqueeze(1)
        assert inputs["completion_ids"].shape[1] >= 2  # padding rows are two EOS tokens wide
        kl = torch.exp(ref - logp) - (ref - logp) - 1
        loss = original(model, inputs)
        metrics = trainer._metrics["train"]
        checks.append((metrics["kl"][-1], masked_mean(kl, real), int(padding.sum()), int((~padding).sum())))
        return loss

    trainer._compute_loss = checked
    trainer.train()
    assert [step for step in checks] and all(pad == 6 and real == 2 for _, _, pad, real in checks)
    logged, expected = checks[-1][0], checks[-1][1]
    assert expected > 1e-4  # the second step's policy differs from the reference
    assert logged == pytest.approx(expected, rel=2e-3)


def test_rloo_kl_over_real_tokens(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """RLOO logs kl at scoring time as the mean over completion tokens of old - ref log-probs; the two padding rows
    of each step's fill group (EOS tokens) must not be in it."""
    trainer = make_trainer("rloo", SOME_FILL, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=2,
                           learning_rate=0.05)
    checks = []
    original = trainer._generate_and_score_completions

    def checked(inputs):
        out = original(inputs)  # the policy is not updated before this batch's loss: same weights as the replay
        padding = out[PADDING_KEY]
        policy = hand_logps(trainer.model, out)
        ref = hand_logps(trainer.ref_model, out)
        real = out["completion_mask"].bool()
        assert not real[padding].any()
        checks.append((trainer._metrics["train"]["kl"][-1], masked_mean(policy - ref, real),
                       int(padding.sum())))
        return out

    trainer._generate_and_score_completions = checked
    trainer.train()
    assert len(checks) == 2 and all(pad == 6 for _, _, pad in checks)
    logged, expected, _ = checks[-1]
    assert abs(expected) > 1e-4
    assert logged == pytest.approx(expected, rel=2e-3, abs=1e-6)
    assert np.isfinite(logged)
