"""Rewards that are not 0/1 success labels (issue 28 §1), and the step warnings and metrics around them (§4).

A continuous reward (a length, a reward model's score) used to get every rollout labelled a success at the default
``success_threshold=0.5``: every group saturated, nothing trained, and a warning that blamed the data. Now the first
step with scores checks their scale (:class:`sara_trl.allocation.labels.SuccessRule`): the default threshold stops
with an error naming the reward functions and the fixes; an explicit threshold binarizes them (paper App. F) with a
warning. Unit tests on scripted scores first, then both trainers on the tiny random Llama.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.allocation import StepStats
from sara_trl.allocation.labels import SuccessRule, score_scale
from sara_trl.allocation.types import Group
from sara_trl.trainer import collect as sara_collect
from sara_trl.trainer.metric_repair import numeric_logs
from sara_trl.trainer.metrics import collection_warning, log_step_metrics, masked_group_counts

NAN = float("nan")
SOURCE = "the reward function 'length_reward'"


# ------------------------------------------------------------------------------------------ the scale check
@pytest.mark.parametrize("scores", [[0.0, 1.0, 1.0, 0.0], [1.0] * 6, [0.0] * 6, [0.0, NAN, 1.0], [NAN, 1.0]])
def test_binary_scores_fit_whatever_the_outcomes(scores):
    scale = score_scale(scores, 0.5)
    assert scale.fits and not scale.outside and not scale.unanimous
    rule = SuccessRule(0.5, explicit=False, source=SOURCE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either
        np.testing.assert_array_equal(rule.labels(scores), [NAN if math.isnan(v) else v for v in scores])
        rule.end_step(scores)
    assert rule.checking is False  # checked once, on the first step with scores


def test_score_scale_values():
    scale = score_scale([3.0, 7.0, NAN, 12.0, 7.0, 21.0, 3.0, 30.0], 0.5, examples=4)
    assert (scale.count, scale.low, scale.high, scale.median, scale.successes) == (7, 3.0, 30.0, 7.0, 7)
    assert scale.examples == (3.0, 7.0, 12.0, 21.0)  # distinct, in the order seen
    assert scale.outside and scale.unanimous and not scale.fits
    in_range = score_scale([0.1, 0.2, 0.3, 0.2], 0.5)
    assert not in_range.outside and in_range.unanimous and in_range.successes == 0
    assert score_scale([NAN, NAN], 0.5) is None
    # float32 noise around 0/1 is not "outside", and a spread of noise is not "varying"
    assert score_scale([1.0 + 2e-7, 0.0, -1e-7], 0.5).fits
    assert score_scale([0.99999994, 1.0, 1.0], 0.5).fits
    mixed_outside = score_scale([-2.0, 0.3, 2.5], 0.5)  # a reward model's logits: mixed, but not labels
    assert mixed_outside.outside and not mixed_outside.unanimous and mixed_outside.successes == 1


def test_default_threshold_raises_at_once_on_scores_outside_unit_interval():
    rule = SuccessRule(0.5, explicit=False, source=SOURCE)
    with pytest.raises(ValueError) as err:
        rule.labels([3.0, 7.0, 12.0, 21.0])
    text = str(err.value)
    for part in ("'length_reward'", "from 3 to 21 over 4 scored rollout(s)", "e.g. 3, 7, 12, 21", "outside [0, 1]",
                 "success_threshold=0.5 (the default) labels every one of them a success",
                 "every group would be saturated", "success_reward_func", "set success_threshold explicitly",
                 "success_threshold=9.5, the median score seen", "docs/rewards.md"):
        assert part in text, part


def test_default_threshold_raises_at_step_end_on_unanimous_labels_in_range():
    rule = SuccessRule(0.5, explicit=False, source=SOURCE)
    labels = rule.labels([0.1, 0.2, 0.3, 0.2])  # in [0, 1]: no verdict from one batch
    np.testing.assert_array_equal(labels, [0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"from 0.1 to 0.3 .*labels every one of them a failure although they "
                                         r"differ.*success_threshold=0.2, the median"):
        rule.end_step([0.1, 0.2, 0.3, 0.2])


def test_reward_model_logits_with_the_default_threshold_raise():
    rule = SuccessRule(0.5, explicit=False, source=SOURCE)
    with pytest.raises(ValueError, match=r"outside \[0, 1\]; success_threshold=0.5, the default meant for 0/1 "
                                         r"labels, labels 1 of 3 of them successes.*has to be chosen for this scale"):
        rule.labels([-2.0, 0.3, 2.5])


def test_explicit_threshold_warns_once_and_labels_at_it():
    rule = SuccessRule(10.0, explicit=True, source=SOURCE)
    scores = [3.0, 7.0, 12.0, 21.0]
    np.testing.assert_array_equal(rule.labels(scores), [0.0, 0.0, 1.0, 1.0])  # no error mid-step
    with pytest.warns(UserWarning, match=r"success_threshold=10 \(set explicitly\) binarizes scores that are not "
                                         r"0/1 success labels: .* 2 of 4 are successes"):
        rule.end_step(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rule.end_step(scores)  # once only
        np.testing.assert_array_equal(rule.labels(scores), [0.0, 0.0, 1.0, 1.0])
    everything = SuccessRule(1.0, explicit=True, source=SOURCE)
    with pytest.warns(UserWarning, match=r"But success_threshold=1 labels every one of them a success .*between 3 "
                                         r"and 21"):
        everything.end_step(scores)


def test_unscorable_steps_keep_the_check_for_the_next_step():
    rule = SuccessRule(0.5, explicit=False, source=SOURCE)
    rule.end_step([NAN, NAN, NAN])
    assert rule.checking
    with pytest.raises(ValueError, match="outside"):
        rule.end_step([NAN, 4.0, 5.0])


@pytest.mark.parametrize("allocator, ds_filter", [("uniform", "success"), ("dynamic_sampling", "score")])
def test_allocations_that_ignore_labels_only_warn(allocator, ds_filter):
    rule = SuccessRule(0.5, explicit=False, source=SOURCE, allocator=allocator, ds_filter=ds_filter)
    rule.labels([3.0, 7.0])  # no error
    with pytest.warns(UserWarning, match="training proceeds; only the sara/\\* success metrics"):
        rule.end_step([3.0, 7.0])
    quiet = SuccessRule(5.0, explicit=True, source=SOURCE, allocator=allocator, ds_filter=ds_filter)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.end_step([3.0, 7.0])  # the user's threshold, and the allocation does not depend on it


def test_dynamic_sampling_on_success_labels_is_checked_like_sara():
    rule = SuccessRule(0.5, explicit=False, source=SOURCE, allocator="dynamic_sampling")
    with pytest.raises(ValueError, match="allocator='dynamic_sampling' trains only groups that mix"):
        rule.labels([3.0, 7.0])


# ------------------------------------------------------------------------------------------ config
BASE = dict(output_dir="unused", use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
            num_generations=4, per_device_train_batch_size=8)


@pytest.mark.parametrize("config_class", [SaraConfig, SaraRLOOConfig])
def test_success_threshold_default_is_a_checked_float(config_class):
    args = config_class(**BASE)
    assert args.success_threshold == 0.5 and isinstance(args.success_threshold, float)
    assert args.success_threshold_explicit is False
    assert config_class(**BASE, success_threshold=0.5).success_threshold_explicit is True
    assert config_class(**BASE, success_threshold=3).success_threshold == 3.0
    args.success_threshold = 0.7  # changed after construction: the user's value
    assert args.success_threshold_explicit is True
    from transformers import HfArgumentParser

    (parsed,) = HfArgumentParser(config_class).parse_args_into_dataclasses(
        ["--output_dir", "o", "--report_to", "none", "--use_cpu", "--num_generations", "4",
         "--per_device_train_batch_size", "8", "--success_threshold", "0.0"])
    assert parsed.success_threshold == 0.0 and parsed.success_threshold_explicit
    help_text = HfArgumentParser(config_class).format_help()
    assert "App. F" in "".join(help_text.split()).replace("App.F", "App. F")


# ------------------------------------------------------------------------------------------ trainers
def length_reward(completions, **kwargs):
    return [float(len(c)) for c in completions]


def token_reward(completions, completion_ids, **kwargs):
    """0 .. 6 from the first completion token: continuous-looking, and about half above 2.5."""
    return [float(ids[0] % 7) if ids else 0.0 for ids in completion_ids]


def small_reward(completions, completion_ids, **kwargs):
    """0.1, 0.2 or 0.3: inside [0, 1], varying, and all below the default threshold."""
    return [0.1 + 0.1 * (ids[0] % 3 if ids else 0) for ids in completion_ids]


def none_reward(completions, **kwargs):
    return [None] * len(completions)


def binary_reward(completions, completion_ids, **kwargs):
    return [float(ids[0] % 2 == 0) if ids else 0.0 for ids in completion_ids]


def text_data(n: int = 12) -> Dataset:
    return Dataset.from_dict({"prompt": [f"Write something about number {i}." for i in range(n)]})


TRAINERS = {"grpo": (SaraGRPOTrainer, SaraConfig), "rloo": (SaraRLOOTrainer, SaraRLOOConfig)}


def make(kind, reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs, **overrides):
    trainer_class, config_class = TRAINERS[kind]
    args = config_class(**cpu_trainer_kwargs(**overrides))
    return trainer_class(model=tiny_model_dir, reward_funcs=reward, args=args, train_dataset=text_data(),
                         processing_class=tokenizer)


def params(trainer) -> dict:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_continuous_reward_stops_on_the_first_round(kind, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    trainer = make(kind, length_reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs)
    before = params(trainer)
    with pytest.raises(ValueError) as err:
        trainer.train()
    text = str(err.value)
    assert "the reward function 'length_reward'" in text and "outside [0, 1]" in text
    assert "success_reward_func" in text and "set success_threshold explicitly" in text
    assert trainer.state.global_step == 0
    assert all(torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
    # the values named are the lengths of real completions: at least 1 character, and more than 1
    scale_part = text.split("ranged from ")[1]
    low, high = (float(v) for v in scale_part.split(" over ")[0].split(" to "))
    assert 1.0 <= low <= high and high > 1.0


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_explicit_threshold_with_a_continuous_reward_trains(kind, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    trainer = make(kind, token_reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs, success_threshold=2.5,
                   budget_cap=12.0, max_steps=2)
    assert trainer.args.success_threshold_explicit
    before = params(trainer)
    with pytest.warns(UserWarning, match=r"success_threshold=2.5 \(set explicitly\) binarizes scores.*"
                                         r"the reward function 'token_reward'") as caught:
        trainer.train()
    assert sum("set explicitly" in str(w.message) for w in caught) == 1  # the first step only
    logs = [entry for entry in trainer.state.log_history if "sara/committed" in entry]
    assert len(logs) == 2 and sum(entry["sara/committed"] for entry in logs) > 0
    assert 0.0 < logs[0]["sara/raw_success_rate"] < 1.0  # binarized at 2.5: both labels occur
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
    step = trainer.sara_last_step
    for group in step.groups:  # the labels are the threshold labels, and a committed group mixes them
        if not group.is_fill:
            assert set(np.unique(group.success)) == {0.0, 1.0}


def test_rewards_in_unit_interval_labelled_alike_stop_after_the_first_step(tiny_model_dir, tokenizer,
                                                                           cpu_trainer_kwargs):
    trainer = make("grpo", small_reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=2)
    before = params(trainer)
    with pytest.raises(ValueError, match=r"the reward function 'small_reward' ranged from 0.1 to 0.3 over \d+ scored"
                                         r".*labels every one of them a failure although they differ"):
        trainer.train()
    assert trainer.state.global_step == 0 and trainer.sara_allocator.steps == 1  # one whole step was collected
    assert all(torch.equal(before[name], p) for name, p in trainer.model.named_parameters())


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_binary_rewards_are_unaffected(kind, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    trainer = make(kind, binary_reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=1, budget_cap=12.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if "0/1 success labels" in str(w.message) or "success_threshold" in str(w.message)]
    assert trainer.sara.success_rule.checking is False  # checked on step 1, and passed
    assert trainer.state.global_step == 1


# ------------------------------------------------------------------------------------------ reward models
@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_a_reward_model_with_the_default_threshold_is_refused_before_anything_loads(kind, tiny_model_dir, tokenizer,
                                                                                    cpu_trainer_kwargs):
    trainer_class, config_class = TRAINERS[kind]
    args = config_class(**cpu_trainer_kwargs())
    # the id names nothing on this offline machine: loading it would raise OSError, so the ValueError comes first
    with pytest.raises(ValueError, match=r"reward function 1 \('my-org/no-such-reward-model'\) is a reward model.*"
                                         r"the default 0.5, meant for 0/1 labels.*success_reward_func.*"
                                         r"set success_threshold explicitly"):
        trainer_class(model=tiny_model_dir, reward_funcs=[binary_reward, "my-org/no-such-reward-model"], args=args,
                      train_dataset=text_data(), processing_class=tokenizer)


def test_a_reward_model_is_accepted_with_a_threshold_or_a_verifier(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    from transformers import AutoModelForSequenceClassification

    reward_model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    reward_model.config.pad_token_id = tokenizer.pad_token_id
    for overrides in ({"success_threshold": 0.0}, {"success_threshold": 0.5}, {"success_reward_func": "binary_reward"},
                      {"reward_weights": [1.0, 0.0]}, {"allocator": "uniform"}):
        trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=[binary_reward, reward_model],
                                  args=SaraConfig(**cpu_trainer_kwargs(**overrides)), train_dataset=text_data(),
                                  processing_class=tokenizer, reward_processing_classes=[None, tokenizer])
        assert trainer.reward_funcs[1] is reward_model
    with pytest.raises(ValueError, match=r"reward function 0 \(LlamaForSequenceClassification\) is a reward model "
                                         r"and it weighs in the success score"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=reward_model, args=SaraConfig(**cpu_trainer_kwargs()),
                        train_dataset=text_data(), processing_class=tokenizer)
    # named as the success score itself (TRL names it after its model id's last part: the checkpoint folder)
    name = Path(tiny_model_dir).name
    with pytest.raises(ValueError, match=rf"reward function 1 \(LlamaForSequenceClassification\) is a reward model "
                                         rf"and success_reward_func='{name}' names it"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=[binary_reward, reward_model],
                        args=SaraConfig(**cpu_trainer_kwargs(success_reward_func=name)), train_dataset=text_data(),
                        processing_class=tokenizer, reward_processing_classes=[None, tokenizer])


def test_only_zero3_over_several_processes_shards_a_reward_model():
    """TRL shards a reward model (a model id or a PreTrainedModel) under DeepSpeed ZeRO-3 only, and only over several
    processes: other stages and FSDP run it whole on every process; Python reward functions are never sharded."""
    from types import SimpleNamespace

    from sara_trl.trainer.prepare import shards_reward_model

    def args(world=2, stage=None, fsdp=None):
        return SimpleNamespace(world_size=world, fsdp_plugin_args=fsdp,
                               deepspeed_plugin=None if stage is None else SimpleNamespace(zero_stage=stage))

    model = "my-org/reward-model"
    assert shards_reward_model([binary_reward, model], args(stage=3)) and shards_reward_model(model, args(stage=3))
    for funcs, config in (([binary_reward, model], args(stage=2)), ([binary_reward, model], args(world=1, stage=3)),
                          (binary_reward, args(stage=3)), (None, args(stage=3)), ([model], args()),
                          ([model], args(fsdp={"fsdp_version": 2}))):
        assert not shards_reward_model(funcs, config)


def test_a_zero3_reward_model_keeps_collection_in_rounds(tiny_model_dir, tokenizer, cpu_trainer_kwargs, monkeypatch):
    """With a reward model under ZeRO-3 on 2 processes, collection='auto' collects in rounds and says why, and an
    explicit collection='streaming' is refused before anything loads (the model id names nothing here)."""
    from types import SimpleNamespace

    from sara_trl.trainer.prepare import prepare_arguments

    kwargs = cpu_trainer_kwargs(use_vllm=True, vllm_mode="colocate", success_threshold=0.0)
    auto, explicit = SaraConfig(**kwargs), SaraConfig(**kwargs, collection="streaming")
    monkeypatch.setattr(SaraConfig, "world_size", property(lambda self: 2))
    for config in (auto, explicit):
        config.deepspeed_plugin = SimpleNamespace(zero_stage=3)
    funcs = [binary_reward, "my-org/no-such-reward-model"]
    assert auto.schedule == "streaming" and auto.collection == "auto"
    prepared, plan = prepare_arguments(SaraGRPOTrainer, tiny_model_dir, auto, SaraConfig, text_data(), tokenizer, {},
                                       reward_funcs=funcs)
    assert prepared is auto and auto.collection == "auto" and (plan.schedule, plan.processes) == ("rounds", 2)
    assert plan.schedule_reason == ("collection='auto': a reward model under DeepSpeed ZeRO-3 on several processes "
                                    "scores in lock-step rounds only")
    with pytest.raises(ValueError, match=r"^SaraGRPOTrainer does not support a reward model under DeepSpeed ZeRO-3 on "
                                         r"several processes with collection='streaming': each scoring pass of a "
                                         r"ZeRO-3 reward model gathers its parameters from every process.*Use "
                                         r"collection='rounds'"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=funcs, args=explicit, train_dataset=text_data(),
                        processing_class=tokenizer)


def test_all_unscorable_step_names_the_reward_functions(tiny_model_dir, tokenizer, cpu_trainer_kwargs, monkeypatch):
    messages = []
    monkeypatch.setattr(sara_collect.logger, "warning", lambda message, *a, **k: messages.append(str(message)))
    trainer = make("grpo", none_reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=1, max_rounds=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]  # no "Mean of empty slice"
    ours = [m for m in messages if m.startswith("Step 1")]
    assert len(ours) == 1
    generated = trainer.sara_last_step.stats.rollouts_generated
    assert (f"none of the {generated} completions could be scored: every reward function (['none_reward']) "
            "returned None for every one of them") in ours[0]
    assert "nan" not in ours[0] and "too hard" not in ours[0]
    assert trainer.sara.success_rule.checking  # nothing scored yet: the next step is checked


def test_masked_groups_are_not_effective(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """mask_truncated_completions with 6-token completions of a random model (no EOS): TRL zeroes every row's mask,
    so no group carries a gradient. sara/masked_fraction counts them; sara/effective_fraction does not."""
    trainer = make("grpo", binary_reward, tiny_model_dir, tokenizer, cpu_trainer_kwargs, max_steps=1,
                   allocator="uniform", mask_truncated_completions=True)
    seen = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        metrics = trainer._metrics["train"]
        k = trainer.num_generations
        rows_live = out["completion_mask"].sum(dim=1).reshape(-1, k) > 0  # (B, k): a row left in the loss
        groups = trainer.sara_last_step.groups
        masked = [not bool(live.any()) for live in rows_live]
        effective = [g.effective and not m for g, m in zip(groups, masked)]
        seen.append((metrics["sara/masked_fraction"][-1], np.mean(masked),
                     metrics["sara/effective_fraction"][-1], np.mean(effective),
                     trainer.sara_last_step.stats.effective_fraction))
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    (logged_masked, masked, logged_effective, effective, unmasked_effective), = seen
    assert logged_masked == masked and logged_effective == effective
    assert masked > 0  # the case was exercised
    assert logged_effective <= unmasked_effective


# ------------------------------------------------------------------------------------------ pure helpers
def test_masked_group_counts_and_the_logged_fractions():
    groups = [Group(0, np.array([0, 1]), np.array([1.0, 0.0])), Group(1, np.array([2, 3]), np.array([1.0, 0.0])),
              Group(2, np.array([4, 5]), np.array([1.0, 1.0])),
              Group(-1, np.zeros(0, np.int64), np.zeros(0), is_fill=True)]
    masked = np.array([True, True, True, False, True, True])
    assert masked_group_counts(groups, masked) == (2, 1)  # group 0 (mixed) and group 2 (saturated); not the fill
    metrics = defaultdict(list)
    stats = StepStats(batch_groups=4, effective_in_batch=2, unfilled=1)
    log_step_metrics(metrics, stats, np.array([1.0, 0.0]), 0, 0, masked=(2, 1))
    assert metrics["sara/masked_fraction"] == [0.5] and metrics["sara/effective_fraction"] == [0.25]
    log_step_metrics(metrics, stats, np.array([1.0, 0.0]), 0, 0)
    assert metrics["sara/masked_fraction"][-1] == 0.0 and metrics["sara/effective_fraction"][-1] == 0.5


def test_collection_warning_messages():
    stats = StepStats(rollouts_generated=8, unfilled=2, stop_reason="budget", batch_groups=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on an all-NaN step
        text = collection_warning(3, "sara", stats, np.full(8, NAN), 2, "every reward function (['acc'])", True)
    assert text == ("Step 3 (allocator 'sara'): none of the 8 completions could be scored: every reward function "
                    "(['acc']) returned None for every one of them, so no group can mix (the 2 missing groups are "
                    "masked out of the loss). This is not the task's difficulty: check what makes the reward "
                    "functions give up (the dataset columns they read, the answer format they parse, a time limit).")
    text = collection_warning(3, "sara", stats, np.array([1, 1, 0, NAN, 1, 1, 1, 1.0]), 2, "x", True)
    assert "only 0 of 2 groups were filled (stopped by: budget)" in text
    assert "8 rollouts, success rate 0.857, 1 unscorable" in text and "lower tau_low" in text
    assert collection_warning(3, "sara", StepStats(rollouts_generated=4), np.ones(4), 2, "x", True) is None


def test_numeric_logs_turn_empty_windows_into_nan():
    metrics = {"reward": [NAN, NAN], "kl": [0.5, NAN], "sara/raw_success_rate": [NAN], "empty": []}
    logs = {"loss": 0.0}
    numeric_logs(metrics, logs, prefix="eval_")
    assert set(metrics) == {"kl"} and metrics["kl"] == [0.5, NAN]  # TRL averages what is left: 0.5
    assert logs["loss"] == 0.0 and all(math.isnan(logs[f"eval_{name}"])
                                       for name in ("reward", "sara/raw_success_rate", "empty"))
