"""Labelling rules (success labels, the one mixed-group test, dynamic sampling's filter), the fate enum, the ledger's
one way to mark a prompt, and the strategy registry."""

import numpy as np
import pytest

from sara_trl.allocation import (
    ALLOCATORS,
    STRATEGIES,
    AllocationConfig,
    Allocator,
    Fate,
    PromptStream,
    RoundOutcome,
    StrategyResult,
    allocator_labels,
    is_mixed,
    score_spread_labels,
    success_labels,
)
from sara_trl.allocation.labels import score_tolerance
from sara_trl.allocation.ledger import Ledger
from sara_trl.allocation.rounds import run_rounds

NAN = float("nan")
EPS32 = 2.0**-23  # float32 machine epsilon


def test_is_mixed_counts():
    s = np.array([0, 1, 2, 3, 0, 1])
    n_scored = np.array([3, 3, 3, 3, 0, 1])
    assert is_mixed(s, n_scored).tolist() == [False, True, True, False, False, False]


def test_success_labels_strict_threshold_and_unscorable():
    np.testing.assert_array_equal(success_labels([0.5, 0.51, -1.0, NAN, 1.0], 0.5), [0.0, 1.0, 0.0, NAN, 1.0])


@pytest.mark.parametrize("scores", [[0.0, 0.1, 0.1, 0.0], [-0.1, -0.2, -0.05, -0.3]])
def test_shaped_rewards_of_wrong_answers_are_not_mixed_by_default(scores):
    # All four answers are wrong (below the 0.5 success threshold) and carry only a format / length score: the
    # success labels are all 0, so dynamic sampling (like SARA) sees an unmixed group. DAPO's filter on the score
    # (ds_filter="score") keeps it, as documented.
    labels = allocator_labels(np.array(scores), np.array([4]), 0.5)
    np.testing.assert_array_equal(labels, [0.0, 0.0, 0.0, 0.0])
    by_score = allocator_labels(np.array(scores), np.array([4]), 0.5, ds_filter="score")
    assert is_mixed(int(np.sum(by_score == 1)), 4)


def test_score_tolerance_is_float32_resolution_scaled_by_the_rewards():
    assert score_tolerance([0.0, 0.5]) == 4 * EPS32  # 4.77e-7 for rewards of magnitude <= 1
    assert score_tolerance([-100.0, 3.0]) == 4 * EPS32 * 100
    assert score_tolerance([]) == 4 * EPS32


def test_float_noise_is_not_a_mixed_group():
    # 0.99999994 is the float32 just below 1: the group's spread is 6e-8, float noise, not signal.
    noisy = np.array([1, 1, np.float32(0.99999994), 1], dtype=np.float64)
    assert noisy[2] == 1 - 2.0**-24
    np.testing.assert_array_equal(score_spread_labels(noisy, [4], 0.5), [1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(allocator_labels(noisy, [4], 0.5), [1.0, 1.0, 1.0, 1.0])
    # The same at a large reward scale: one float32 step below 100 is 7.6e-6, below the tolerance 4.8e-5.
    big = np.array([100.0, float(np.nextafter(np.float32(100), np.float32(0))), 100.0])
    np.testing.assert_array_equal(score_spread_labels(big, [3], 0.5), [1.0, 1.0, 1.0])
    # A real difference (1e-4) stays mixed; the boundary: a spread of exactly the tolerance is noise, twice it is not.
    np.testing.assert_array_equal(score_spread_labels([1.0, 0.9999, 1.0], [3], 0.5), [1.0, 0.0, 1.0])
    tol = 4 * EPS32
    np.testing.assert_array_equal(score_spread_labels([0.0, tol], [2], 0.5), [0.0, 0.0])
    np.testing.assert_array_equal(score_spread_labels([0.0, 2 * tol], [2], 0.5), [0.0, 1.0])


def test_allocator_labels_rejects_an_unknown_filter():
    with pytest.raises(ValueError, match="ds_filter must be one of"):
        allocator_labels([1.0], [1], 0.5, ds_filter="std")


def test_ds_filter_is_a_dynamic_sampling_option():
    assert AllocationConfig().ds_filter == "success"
    assert AllocationConfig(allocator="dynamic_sampling", ds_filter="score").ds_filter == "score"
    with pytest.raises(ValueError, match="ds_filter='score' is a dynamic-sampling option; allocator='sara'"):
        AllocationConfig(ds_filter="score")
    with pytest.raises(ValueError, match="ds_filter='std' must be one of"):
        AllocationConfig(allocator="dynamic_sampling", ds_filter="std")


class ShapedWrongAnswers:
    """Every rollout is wrong but scores 0.1 on odd positions of the group (a format reward), labelled like the
    trainer does (one allocator_labels call per round)."""

    def __init__(self, ds_filter):
        self.ds_filter = ds_filter

    def __call__(self, prompt_ids, counts):
        score = np.concatenate([0.1 * (np.arange(c) % 2) for c in counts])
        return RoundOutcome(allocator_labels(score, counts, 0.5, self.ds_filter), np.ones(len(score), np.int64))


def test_dynamic_sampling_on_shaped_wrong_answers():
    # k=4, B=2, budget 2*B*k = 16 rollouts. Dynamic sampling's first round draws ceil(2 / 0.6) = 4 prompts (the prior
    # share of fresh prompts that mix at k=4 is 1 - 2/5) and spends the whole budget on them.
    def run(ds_filter):
        cfg = AllocationConfig(allocator="dynamic_sampling", k=4, budget_cap=2.0, ds_filter=ds_filter)
        return Allocator(cfg).collect(ShapedWrongAnswers(ds_filter), PromptStream(100), B=2).stats

    default = run("success")  # no group is mixed: nothing trained, every rollout abandoned
    assert (default.committed, default.abandoned, default.unfilled, default.rollouts_abandoned) == (0, 4, 2, 16)
    assert default.stop_reason == "budget"
    by_score = run("score")  # DAPO's filter on the score keeps all four groups
    assert (by_score.committed, by_score.surplus, by_score.unfilled, by_score.stop_reason) == (4, 2, 0, "filled")


def test_fate_codes_and_labels():
    assert [int(f) for f in Fate] == [0, 1, 2, 3, 4]
    assert [f.label for f in Fate] == ["trained", "surplus", "abandoned", "active", "committed"]


def test_ledger_mark_is_the_one_way_to_decide():
    ledger = Ledger()
    slots = ledger.add(np.array([7, 8, 9, 10]))
    run_rounds(ledger.round(slots, np.full(4, 2, np.int64)),
               lambda p, c: RoundOutcome(np.zeros(int(c.sum())), np.ones(int(c.sum()), np.int64)))
    ledger.mark(slots, np.array([Fate.COMMITTED, Fate.ACTIVE, Fate.ABANDONED, Fate.COMMITTED], np.int8))
    assert ledger.kept_order == [0, 3]
    assert ledger.active().tolist() == [1]
    assert ledger.round_decided[:4].tolist() == [1, 0, 1, 1]
    result, carry = ledger.finish(B=1, stop_reason="filled", expected_lost=0.0)
    assert carry is None
    assert result.prompt_table["fate"].tolist() == [Fate.TRAINED, Fate.ACTIVE, Fate.ABANDONED, Fate.SURPLUS]
    assert [r.fate for r in result.records] == ["trained", "active", "abandoned", "surplus"]
    s = result.stats
    assert (s.rollouts_trained, s.rollouts_active_left, s.rollouts_abandoned, s.rollouts_surplus) == (2, 2, 2, 2)


def test_ledger_counts_effective_groups_of_the_batch_from_scored_successes():
    # Per slot: [1, 0] mixed; [1, NaN] one scored rollout, saturated; [NaN, 0] saturated; [NaN, NaN] nothing
    # scored; [1, 1] saturated; [0, 1] mixed but committed beyond B (surplus, not in the batch).
    outcomes = np.array([1, 0, 1, NAN, NAN, 0, NAN, NAN, 1, 1, 0, 1])
    ledger = Ledger()
    slots = ledger.add(np.arange(6))
    run_rounds(ledger.round(slots, np.full(6, 2, np.int64)), lambda p, c: RoundOutcome(outcomes, np.ones(12, np.int64)))
    ledger.mark(slots, Fate.COMMITTED)
    result, _ = ledger.finish(B=5, stop_reason="filled", expected_lost=0.0)
    assert [g.effective for g in result.groups] == [True, False, False, False, False]
    assert result.stats.effective_in_batch == 1 and result.stats.unscorable == 4


def test_a_new_strategy_is_one_function_and_one_registry_line(monkeypatch):
    assert tuple(STRATEGIES) == ALLOCATORS == ("sara", "dynamic_sampling", "uniform")

    def collect_first_b(ctx):  # every drawn prompt gets n0 rollouts (one round) and is committed
        slots = ctx.ledger.add(ctx.draw(ctx.B))
        yield from ctx.ledger.round(slots, np.full(len(slots), ctx.config.n0, np.int64))
        ctx.ledger.mark(slots, Fate.COMMITTED)
        return StrategyResult("filled")

    monkeypatch.setitem(STRATEGIES, "first_b", collect_first_b)
    task = lambda p, c: (np.tile([1.0, 0.0], int(c.sum()) // 2), np.full(int(c.sum()), 5))  # noqa: E731
    res = Allocator(AllocationConfig(allocator="first_b", n0=2)).collect(task, PromptStream(10, shuffle=False), 3)
    assert [g.prompt_id for g in res.groups] == [0, 1, 2]
    assert (res.stats.rollouts_trained, res.stats.tokens_trained, res.stats.effective_in_batch) == (6, 30, 3)
