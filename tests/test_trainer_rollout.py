"""Pure helpers of the trainer seam: reward scoring, success labels (threshold and TRL's std criterion for dynamic
sampling), the row plan of a step's groups, and the sara/* metric bookkeeping. No model involved."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from sara_trl.allocation import Group, StepStats
from sara_trl.allocation.labels import score_spread_labels, success_labels
from sara_trl.trainer.metric_repair import correct_padding_metrics
from sara_trl.trainer.metrics import (
    STEP_METRICS,
    log_step_metrics,
    round_barrier_metrics,
)
from sara_trl.trainer.replay import build_row_plan
from sara_trl.trainer.rollout import RolloutCache, reward_score

NAN = float("nan")


def test_reward_score_weighted_sum_and_named_function():
    rewards = torch.tensor([[1.0, 0.5], [0.0, NAN], [NAN, NAN], [1.0, 1.0]])
    weights = torch.tensor([1.0, 0.2])
    score = reward_score(rewards, weights)
    np.testing.assert_allclose(score.numpy(), [1.1, 0.0, NAN, 1.2], rtol=1e-6)
    named = reward_score(rewards, weights, func_index=1)
    np.testing.assert_allclose(named.numpy(), [0.5, NAN, NAN, 1.0])


def test_success_labels_strict_threshold_and_unscorable():
    labels = success_labels(np.array([0.5, 0.51, 0.0, NAN, 1.0]), threshold=0.5)
    np.testing.assert_array_equal(labels, [0.0, 1.0, 0.0, NAN, 1.0])


def test_score_spread_labels_follow_trl_zero_std_criterion():
    # Three prompt blocks: shaped rewards with non-zero std but all below the threshold (mixed for DS), constant
    # rewards above the threshold (saturated), and a block with one scorable value (saturated, NaN kept).
    score = np.array([0.1, 0.3, 0.1, 0.7, 0.7, NAN, 0.2])
    labels = score_spread_labels(score, np.array([3, 2, 2]), threshold=0.5)
    np.testing.assert_array_equal(labels, [0.0, 1.0, 0.0, 1.0, 1.0, NAN, 0.0])
    # For binary rewards the labels are the threshold labels.
    binary = np.array([1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(score_spread_labels(binary, np.array([3, 2, 2]), 0.5), success_labels(binary, 0.5))


def test_build_row_plan_pads_short_and_fill_groups():
    groups = [
        Group(prompt_id=7, rollout_ids=np.array([4, 0, 2]), success=np.array([1.0, 0.0, 1.0])),
        Group(prompt_id=3, rollout_ids=np.array([1, 5, 6, 8]), success=np.array([0.0, 1.0, 0.0, 0.0])),
        Group(prompt_id=7, rollout_ids=np.zeros(0, np.int64), success=np.zeros(0), is_fill=True),
    ]
    prompts, rollouts = build_row_plan(groups, k=4)
    np.testing.assert_array_equal(prompts, [7] * 4 + [3] * 4 + [7] * 4)
    np.testing.assert_array_equal(rollouts, [4, 0, 2, -1, 1, 5, 6, 8, -1, -1, -1, -1])
    with pytest.raises(ValueError, match="more than k=2"):
        build_row_plan(groups[:1], k=2)


def test_rollout_cache_extra_logs_align_with_rollouts():
    cache = RolloutCache()
    cache.completion_ids.extend([[1], [2]])
    cache.add_extra_logs({"a": ["x", "y"]}, 2)
    cache.completion_ids.extend([[3]])
    cache.add_extra_logs({"b": [5]}, 1)
    assert cache.extra_logs == {"a": ["x", "y", None], "b": [None, None, 5]}


def test_round_barrier_metrics_sum_longest_and_tail_over_rounds():
    # round 1: lengths 2, 10, 3 (longest 10, mean 5); round 2: 4, 4 (longest 4, mean 4); round 0 = carried, left out
    out = round_barrier_metrics(np.array([0, 1, 1, 1, 2, 2]), np.array([99, 2, 10, 3, 4, 4]))
    assert out == {"round_longest_tokens": 14.0, "round_tail_tokens": 5.0}
    assert round_barrier_metrics(np.array([0]), np.array([7])) == {"round_longest_tokens": 0.0,
                                                                  "round_tail_tokens": 0.0}
    with pytest.raises(ValueError, match="round_index has shape"):
        round_barrier_metrics(np.array([1, 1]), np.array([3]))


def test_log_step_metrics_and_padding_corrections():
    stats = StepStats(rollouts_generated=10, rollouts_trained=6, rollouts_abandoned=4, tokens_generated=50,
                      tokens_trained=30, tokens_abandoned=20, rounds=3, prompts_drawn=4, committed=2, abandoned=2,
                      unfilled=0, effective_in_batch=2, batch_groups=2, expected_lost=0.8)
    metrics = defaultdict(list)
    log_step_metrics(metrics, stats, np.array([1, 0, 0, 1, NAN, 1, 1, 0, 0, 0.0]), 110, 500)
    assert {f"sara/{name}" for name in STEP_METRICS} <= set(metrics)
    assert metrics["sara/rollouts_generated"] == [10.0] and metrics["sara/effective_fraction"] == [1.0]
    assert metrics["sara/raw_success_rate"] == [pytest.approx(4 / 9)]
    assert metrics["sara/cumulative_rollouts"] == [110.0] and metrics["sara/cumulative_tokens"] == [500.0]

    # TRL's values over 8 rows, 3 of them padding (one EOS token each); one fill group of two.
    metrics.update({"completions/mean_length": [9.0, 2.0], "completions/min_length": [1.0],
                    "completions/max_length": [6.0], "completions/clipped_ratio": [0.0],
                    "frac_reward_zero_std": [0.25]})
    lengths = np.array([4, 6, 5, 1, 1, 1, 1, 3])
    truncated = np.array([False, True, False, False, False, False, False, False])
    padding = np.array([False, False, False, True, True, True, True, False])
    correct_padding_metrics(metrics, lengths, truncated, padding, unfilled=1, num_groups=2)
    assert metrics["completions/mean_length"] == [9.0, pytest.approx(18 / 4)]  # only the latest value changes
    assert metrics["completions/min_length"] == [3.0] and metrics["completions/max_length"] == [6.0]
    assert metrics["completions/clipped_ratio"] == [0.25]
    assert metrics["frac_reward_zero_std"] == [0.75]

    # An all-padding batch (two fill groups): no completion to measure -> NaN, not the EOS-token length 1.
    metrics.update({"completions/mean_length": [1.0], "completions/max_terminated_length": [1.0],
                    "frac_reward_zero_std": [0.0]})
    correct_padding_metrics(metrics, np.ones(4, int), np.zeros(4, bool), np.ones(4, bool), unfilled=2, num_groups=2)
    assert np.isnan(metrics["completions/mean_length"][-1]) and np.isnan(metrics["completions/min_length"][-1])
    assert np.isnan(metrics["completions/max_terminated_length"][-1])
    assert metrics["frac_reward_zero_std"] == [1.0]
