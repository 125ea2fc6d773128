"""The rules both collection schedules share (sara_trl.allocation.refill), against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream
from sara_trl.allocation.ledger import Ledger
from sara_trl.allocation.predictor import abandon_point_uniform
from sara_trl.allocation.refill import (
    MIX_RATE_FLOOR,
    RefillModel,
    config_rule,
    continuation,
    expected_commits,
    feed_resolved,
    fresh_affordable,
    fresh_to_draw,
    judge_full_groups,
    step_budget,
    steps_to_decision,
)
from sara_trl.allocation.rounds import run_rounds
from sara_trl.allocation.types import ABANDON, COMMIT, CONTINUE, Fate, RoundOutcome


def test_step_budget_is_the_floor_of_cap_times_b_times_k():
    assert step_budget(AllocationConfig(k=8, budget_cap=2.5), 16) == 320
    assert step_budget(AllocationConfig(k=8, budget_cap=1.3), 3) == math.floor(1.3 * 3 * 8) == 31


def test_fresh_to_draw_adds_margin_standard_deviations():
    # need 4, 1.5 expected from the undecided prompts (variance 0.5), a quarter of fresh prompts mix
    sd = math.sqrt(0.5 + 4 * 0.75)
    assert fresh_to_draw(4, 1.5, 0.5, 0.25, 1.0) == math.ceil((4 - 1.5 + sd) / 0.25) == 18
    assert fresh_to_draw(4, 1.5, 0.5, 0.25, 0.0) == 10  # exactly 2.5 / 0.25: no float flicker to 11
    assert fresh_to_draw(4, 6.0, 0.0, 0.25, 0.0) == 0  # already covered


def test_expected_commits_counts_mixed_prompts_up_to_the_need():
    q = np.array([0.5, 0.25])
    assert expected_commits(3, 2, q) == (2 + 0.75, 0.25 + 0.1875)
    assert expected_commits(0, 5, np.zeros(0)) == (0.0, 0.0)


def test_fresh_affordable_reserves_what_undecided_prompts_need():
    assert fresh_affordable(20, 6, 3.5) == 4  # (20 - 6) // 3.5
    assert fresh_affordable(5, 6, 3.5) == 0  # the reserve exceeds what is left


def test_refill_model_prior_update_decay_and_state():
    cfg = AllocationConfig(k=8)  # Beta(1, 1) prior, n0 = 2, commit floor k = 8
    model = RefillModel(cfg)
    # prior predictive under the uniform prior (paper Eq. 2, App. F): a fresh group mixes with 1 - 2 / (k + 1);
    # an unmixed prefix of n >= 1 with (k - n) / (k + 1)
    expected = np.r_[7 / 9, (8 - np.arange(1, 9)) / 9]
    assert model.mix_rate() == pytest.approx(np.maximum(expected, MIX_RATE_FLOOR))
    assert model.fresh_cost() == pytest.approx(2 + (7 / 9) * (8 - 2))
    model.resolve(np.array([0, 2]), np.array([True, False]), np.array([8, 2]))
    # checkpoints 0, 2, 3, ..., 8: the first prompt was seen unmixed at 0 only, the second at 0 and 2
    assert model.mix_den[0] == 2 and model.mix_num[0] == 1 and model.mix_den[2] == 1 and model.mix_num[2] == 0
    assert model.mix_rate()[0] == pytest.approx((1 + 7 / 9) / 3)
    assert model.fresh_cost() == pytest.approx((10 + 2 + 42 / 9) / 3)
    state = model.state_dict()
    model.decay()  # yield_decay 0.9 by default
    assert model.mix_den[0] == pytest.approx(2 * cfg.yield_decay)
    fresh = RefillModel(cfg)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    with pytest.raises(ValueError, match="saved for k=8, this allocator has k=4"):
        RefillModel(AllocationConfig(k=4)).load_state_dict(state)


def test_allocator_keeps_the_refill_state_it_saved():
    alloc = Allocator(AllocationConfig(k=8))
    alloc.collect(SimulatedTask(np.full(50, 0.5), seed=0), PromptStream(50, seed=0), 4)
    state = alloc.state_dict()
    other = Allocator(AllocationConfig(k=8))
    other.load_state_dict(state)
    assert other.refill.state_dict() == alloc.refill.state_dict()
    assert other.mix_rate() == pytest.approx(alloc.mix_rate())


def test_steps_to_decision_reaches_the_uniform_prior_abandon_point():
    cfg = AllocationConfig(k=8)
    n_a = abandon_point_uniform(8, cfg.tau_low)  # 8 - floor(0.45 * 9) = 4
    assert n_a == 4
    rule = config_rule(cfg)
    n = np.array([2, 3, 2])
    s = np.array([0, 3, 0])
    steps = steps_to_decision(rule, 8, np.arange(3), n, n, s)
    assert steps.tolist() == [n_a - 2, n_a - 3, n_a - 2]
    assert continuation(AllocationConfig(k=8, continue_to_decision=True), rule, np.arange(3), n, n, s).tolist() \
        == steps.tolist()
    assert continuation(AllocationConfig(k=8, round_increment=3), rule, np.arange(2), np.array([2, 7]),
                        np.array([2, 7]), np.array([0, 0])).tolist() == [3, 1]  # capped at k - n


def test_config_rule_is_paper_eq3_and_refuses_bayes_optimal():
    rule = config_rule(AllocationConfig(k=8))
    dec, p = rule(np.arange(3), np.array([4, 2, 8]), np.array([4, 2, 8]), np.array([0, 1, 8]))
    assert dec.tolist() == [ABANDON, CONTINUE, ABANDON]  # 4/9 < 0.45; mixed below the floor; complete and unmixed
    assert p[0] == pytest.approx(4 / 9)
    dec, _ = rule(np.arange(1), np.array([8]), np.array([8]), np.array([3]))
    assert dec.tolist() == [COMMIT]
    with pytest.raises(ValueError, match="stopping_rule='bayes_optimal' decides on a boundary fitted across steps"):
        config_rule(AllocationConfig(stopping_rule="bayes_optimal"))


def test_feed_resolved_reports_mixed_and_abandoned_prompts():
    calls = []
    feed_resolved(lambda *a: calls.append([x.tolist() for x in a]), np.array([2, 3, 4]), np.array([3, 4, 4]),
                  np.array([True, False, False]), np.array([False, False, True]), commit_floor=8)
    assert calls == [[[2, 4], [True, False], [8, 4]]]  # mixed: cost up to the floor; abandoned: what it used
    calls.clear()
    feed_resolved(lambda *a: calls.append(a), np.zeros(1), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), 8)
    assert calls == []


def test_judge_full_groups_dynamic_sampling_and_uniform():
    outcomes = np.array([1, 0, 1, 1, 0, 0, 0, 0], np.float64)  # prompt 0 mixed, prompt 1 all-fail (k = 4)

    def rollout_fn(pids, counts):
        return RoundOutcome(success=outcomes[: int(counts.sum())], tokens=np.ones(int(counts.sum()), np.int64))

    for keep_all, fates in ((False, [Fate.COMMITTED, Fate.ABANDONED]), (True, [Fate.COMMITTED, Fate.COMMITTED])):
        ledger = Ledger()
        slots = ledger.add(np.array([10, 11]))
        run_rounds(ledger.round(slots, np.array([4, 4])), rollout_fn)
        fed = []
        mixed = judge_full_groups(ledger, slots, 4, lambda *a: fed.append([x.tolist() for x in a]),
                                  keep_all=keep_all)
        assert mixed.tolist() == [True, False]
        assert ledger.status[slots].tolist() == [int(f) for f in fates]
        assert ledger.p[slots].tolist() == [1.0, 0.0]
        assert fed == [[[0, 0], [True, False], [4, 4]]]
