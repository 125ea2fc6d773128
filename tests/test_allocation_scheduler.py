"""The round-synchronous scheduler (paper Alg. 1) and the uniform / dynamic-sampling baselines on scripted and
simulated outcomes: exact counts, closed forms, and the accounting invariant."""

import subprocess
import sys

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask, phi, u_shaped_gammas
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, RoundOutcome

ALLOCATORS = ["sara", "dynamic_sampling", "uniform"]


class Scripted:
    """Each prompt returns its fixed outcome sequence in order (tokens = 10 * (position + 1))."""

    def __init__(self, sequences):
        self.sequences = [list(s) for s in sequences]
        self.pos = [0] * len(sequences)
        self.calls = []

    def __call__(self, prompt_ids, counts):
        self.calls.append((list(prompt_ids), list(counts)))
        succ, tok = [], []
        for p, c in zip(prompt_ids, counts):
            for _ in range(c):
                i = self.pos[p]
                succ.append(self.sequences[p][i % len(self.sequences[p])])
                tok.append(10 * (i + 1))
                self.pos[p] += 1
        return RoundOutcome(np.array(succ, float), np.array(tok))


def assert_accounting(stats):
    assert stats.rollouts_generated == (
        stats.rollouts_trained + stats.rollouts_abandoned + stats.rollouts_surplus + stats.rollouts_active_left
    )
    assert stats.tokens_generated == (
        stats.tokens_trained + stats.tokens_abandoned + stats.tokens_surplus + stats.tokens_active_left
    )


def test_group_atomic_commits_keep_rollouts_intact():
    seqs = [[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    src = Scripted(seqs)
    cfg = AllocationConfig(allocator="sara", k=4, n0=2, tau_low=0.1)
    res = Allocator(cfg).collect(src, PromptStream(4, shuffle=False, wrap=False), B=3)
    by_prompt = {g.prompt_id: g for g in res.groups}
    assert sorted(by_prompt) == [0, 1, 2]
    for pid in range(3):
        g = by_prompt[pid]
        np.testing.assert_array_equal(g.success, seqs[pid])
        assert g.size == 4 and g.effective and not g.is_fill
    # Prompt 3 (all fail) is abandoned when complete; ids are unique and cover each group's rollouts.
    ids = np.concatenate([g.rollout_ids for g in res.groups])
    assert len(set(ids.tolist())) == 12
    assert res.stats.abandoned == 1 and res.stats.rollouts_abandoned == 4
    assert_accounting(res.stats)


def test_sara_round_by_round_on_scripted_outcomes():
    # k=8, n0=2, tau=0.45 -> all-fail prefixes are abandoned at n_a = 4. Prompt 0 mixes in its probe and is
    # topped up to k in one call; prompt 1 stays all-fail; prompt 2 mixes at its 3rd rollout.
    seqs = [[1, 0, 1, 1, 1, 1, 1, 1], [0] * 8, [0, 0, 1, 0, 0, 0, 0, 0]]
    src = Scripted(seqs)
    alloc = Allocator(AllocationConfig(allocator="sara", yield_decay=1.0, refill_margin=0.0))
    alloc.refill.mix_num[0] = alloc.refill.mix_den[0] = 1e9  # fresh mix rate 1: one fresh prompt per missing commit
    res = alloc.collect(src, PromptStream(3, shuffle=False, wrap=False), B=2)
    assert src.calls[0] == ([0, 1], [2, 2])
    # Expected commits: 1 (mixed prompt 0) + p_eff(2, 0) = 6/9 (prompt 1) < 2 -> one fresh prompt is probed.
    assert src.calls[1] == ([0, 1, 2], [6, 1, 2])
    # Prompt 0 committed; expected 5/9 + 6/9 >= 1 remaining need -> no refill.
    assert src.calls[2] == ([2, 1], [1, 1])  # served in decreasing p_eff: 6/9 before 5/9
    # Prompt 1 abandoned at n = 4; prompt 2 mixed at 3 and is topped up to 8.
    assert src.calls[3] == ([2], [5])
    assert res.stats.rounds == 4 == len(src.calls)
    assert [g.prompt_id for g in res.groups] == [0, 2]
    np.testing.assert_array_equal(res.groups[1].success, seqs[2])
    assert res.stats.abandoned == 1 and res.stats.rollouts_abandoned == 4
    assert res.stats.expected_lost == pytest.approx(4 / 9)  # p_eff(4, 0) at abandonment
    assert res.stats.tokens_abandoned == 10 + 20 + 30 + 40
    assert_accounting(res.stats)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_accounting_invariant_and_one_call_per_round(allocator):
    g = u_shaped_gammas(500, seed=3)
    task = SimulatedTask(g, seed=1, p_unscorable=0.05)
    alloc = Allocator(AllocationConfig(allocator=allocator))
    stream = PromptStream(len(g), seed=0)
    for _ in range(5):
        before = len(task.calls)
        res = alloc.collect(task, stream, B=16)
        assert len(task.calls) - before == res.stats.rounds
        assert sum(res.round_sizes) == res.stats.rollouts_generated
        assert len(res.groups) == 16
        assert_accounting(res.stats)
        assert res.stats.rollouts_trained == sum(gr.size for gr in res.groups)
        assert res.stats.unscorable > 0
    assert alloc.total_rollouts > 0 and alloc.steps == 5


@pytest.mark.parametrize("allocator", ["sara", "dynamic_sampling"])
def test_effective_fraction_is_one_when_data_allow(allocator):
    g = u_shaped_gammas(2000, seed=4)
    alloc = Allocator(AllocationConfig(allocator=allocator))
    stream, task = PromptStream(len(g), seed=1), SimulatedTask(g, seed=2)
    for _ in range(5):
        res = alloc.collect(task, stream, B=32)
        assert res.stats.effective_fraction == 1.0 and res.stats.unfilled == 0
        assert all(gr.size == 8 for gr in res.groups)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_determinism(allocator):
    def run():
        g = u_shaped_gammas(300, seed=5)
        alloc, stream, task = (Allocator(AllocationConfig(allocator=allocator)), PromptStream(300, seed=7),
                               SimulatedTask(g, seed=9))
        out = []
        for _ in range(3):
            res = alloc.collect(task, stream, B=8)
            out.append(([(gr.prompt_id, gr.rollout_ids.tolist()) for gr in res.groups],
                        [(r.prompt_id, r.n, r.s, r.fate) for r in res.records], task.calls[-1][0].tolist()))
        return out

    assert run() == run()


def test_thm1_abandonment_reliability_on_matching_prior():
    """Thm 1: when gammas follow the prior, the number of abandoned groups that would have been effective matches
    the summed p_eff at abandonment (within sampling error) and stays below tau_low x abandoned."""
    rng = np.random.default_rng(0)
    for a, b in [(1.0, 1.0), (2.0, 3.0)]:
        gammas = rng.beta(a, b, size=40000)
        cfg = AllocationConfig(allocator="sara", prior_alpha=a, prior_beta=b)
        alloc, stream, task = (Allocator(cfg), PromptStream(len(gammas), seed=1, wrap=False),
                               SimulatedTask(gammas, seed=2))
        lost, expected, abandoned = 0, 0.0, 0
        for _ in range(150):
            res = alloc.collect(task, stream, B=32)
            expected += res.stats.expected_lost
            for rec in res.records:
                if rec.fate != "abandoned":
                    continue
                abandoned += 1
                rest = rng.random(cfg.k - rec.n) < gammas[rec.prompt_id]
                first = rec.s > 0  # unanimous outcome so far (True = all pass)
                lost += int(np.any(rest != first))
        assert abandoned > 500
        sd = np.sqrt(expected)  # sum of Bernoulli(p_i): variance <= sum p_i
        assert abs(lost - expected) < 4 * sd, (lost, expected)
        assert lost < cfg.tau_low * abandoned


def test_dynamic_sampling_cost_matches_bk_over_phi():
    g = u_shaped_gammas(20000, seed=11)
    k, B = 8, 16
    cfg = AllocationConfig(allocator="dynamic_sampling", max_rollouts_per_round=k, max_rounds=10_000, budget_cap=100.0)
    alloc, stream, task = Allocator(cfg), PromptStream(len(g), seed=3), SimulatedTask(g, seed=4)
    costs = [alloc.collect(task, stream, B).stats.rollouts_generated for _ in range(150)]
    want = B * k / phi(g, k)
    # prompts per step ~ NegBin(B, Phi): sd = sqrt(B (1 - Phi)) / Phi
    ph = phi(g, k)
    se = k * np.sqrt(B * (1 - ph)) / ph / np.sqrt(len(costs))
    assert abs(np.mean(costs) - want) < 4 * se


def test_uniform_yield_matches_phi_b():
    g = u_shaped_gammas(20000, seed=12)
    B = 64
    alloc, stream, task = (Allocator(AllocationConfig(allocator="uniform")), PromptStream(len(g), seed=5),
                           SimulatedTask(g, seed=6))
    eff = [alloc.collect(task, stream, B).stats.effective_in_batch for _ in range(150)]
    ph = phi(g, 8)
    se = np.sqrt(B * ph * (1 - ph) / len(eff))
    assert abs(np.mean(eff) - ph * B) < 4 * se
    assert alloc.steps == 150 and alloc.total_rollouts == 150 * B * 8


@pytest.mark.parametrize("allocator", ["sara", "dynamic_sampling"])
@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_unfillable_saturated_data_returns_flagged_fill(allocator, gamma):
    g = np.full(1000, gamma)
    cfg = AllocationConfig(allocator=allocator, budget_cap=2.0)
    res = Allocator(cfg).collect(SimulatedTask(g), PromptStream(1000, seed=0), B=4)
    assert len(res.groups) == 4 and all(gr.is_fill and gr.size == 0 for gr in res.groups)
    assert res.stats.unfilled == 4 and res.stats.committed == 0
    assert res.stats.stop_reason == "budget"
    assert res.stats.rollouts_generated <= 2 * 4 * 8
    assert res.stats.effective_fraction == 0.0
    assert_accounting(res.stats)


def test_uniform_keeps_saturated_groups():
    res = Allocator(AllocationConfig(allocator="uniform")).collect(SimulatedTask(np.ones(10)), PromptStream(10), B=4)
    assert res.stats.unfilled == 0 and res.stats.rollouts_trained == 32 and res.stats.effective_in_batch == 0


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_stream_shorter_than_batch(allocator):
    g = np.full(3, 0.5)
    res = Allocator(AllocationConfig(allocator=allocator, k=4, tau_low=0.0)).collect(
        SimulatedTask(g, seed=1), PromptStream(3, wrap=False), B=4
    )
    assert len(res.groups) == 4
    assert res.stats.stop_reason == "stream"
    assert res.stats.prompts_drawn == 3
    assert res.groups[-1].is_fill and res.stats.unfilled == 4 - sum(not gr.is_fill for gr in res.groups)
    assert_accounting(res.stats)


def test_max_rounds_stops_and_fills():
    g = u_shaped_gammas(1000, seed=2)
    res = Allocator(AllocationConfig(max_rounds=1)).collect(SimulatedTask(g, seed=1), PromptStream(1000), B=16)
    assert res.stats.rounds == 1 and res.stats.stop_reason == "max_rounds"
    # commit_min = k = 8 needs at least 2 rounds from a probe of 2: nothing can be committed in one round.
    assert res.stats.unfilled == 16
    assert res.stats.rollouts_active_left + res.stats.rollouts_abandoned == res.stats.rollouts_generated


def test_commit_min_gives_variable_group_sizes():
    g = u_shaped_gammas(3000, seed=8)
    cfg = AllocationConfig(commit_min=4)
    res = Allocator(cfg).collect(SimulatedTask(g, seed=3), PromptStream(3000), B=32)
    sizes = [gr.size for gr in res.groups]
    assert min(sizes) >= 4 and max(sizes) <= 8 and all(gr.effective for gr in res.groups)
    assert any(sz < 8 for sz in sizes)


def test_round_capacity_binds_and_orders_by_p_eff():
    g = u_shaped_gammas(3000, seed=9)
    cap = 24
    task = SimulatedTask(g, seed=3)
    res = Allocator(AllocationConfig(max_rollouts_per_round=cap)).collect(task, PromptStream(3000), B=16)
    assert all(int(c.sum()) <= cap for _, c in task.calls)
    assert res.stats.unfilled == 0 and res.stats.rounds > 3


def test_round_increment_reduces_rounds():
    g = u_shaped_gammas(5000, seed=1)

    def rounds(inc):
        alloc, stream, task = (Allocator(AllocationConfig(round_increment=inc)), PromptStream(5000, seed=1),
                               SimulatedTask(g, seed=1))
        return np.mean([alloc.collect(task, stream, 64).stats.rounds for _ in range(10)])

    assert rounds(2) < rounds(1)


def test_unscorable_rollouts_cost_but_do_not_move_the_posterior():
    # Prompt 0: [nan, nan, 0, 0, ...]: two unscorable slots; with k=4 its scorable capacity is 2.
    src = Scripted([[np.nan, np.nan, 0, 0], [1, 0, 1, 0]])
    cfg = AllocationConfig(k=4, n0=2, tau_low=0.3, yield_decay=1.0, refill_margin=0.0)
    alloc = Allocator(cfg)
    alloc.refill.mix_num[0] = alloc.refill.mix_den[0] = 1e9
    res = alloc.collect(src, PromptStream(2, shuffle=False, wrap=False), B=2)
    # After the probe prompt 0 has no scored outcome: p_eff(0, 0, k=2) = 1/3 (uniform prior) >= 0.3 -> continue.
    assert 0 in list(src.calls[1][0])
    rec = {r.prompt_id: r for r in res.records}
    # Its next two rollouts fail: complete (n = k = 4) and unmixed -> abandoned with p_eff 0; 2 unscorable counted.
    assert rec[0].fate == "abandoned" and rec[0].n == 4 and rec[0].s == 0 and res.stats.unscorable == 2
    assert res.stats.unfilled == 1


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(allocator="greedy"), "allocator must be one of"),
        (dict(k=1), "at least 2 rollouts"),
        (dict(n0=9), "n0=9 must satisfy"),
        (dict(tau_low=1.0), r"tau_low=1.0 must lie in \[0, 1\)"),
        (dict(commit_min=1), "commit_min=1"),
        (dict(commit_min=9), "commit_min=9"),
        (dict(prior_alpha=0.0), "prior_alpha=0.0"),
        (dict(budget_cap=0.5), "budget_cap=0.5"),
        (dict(max_rounds=0), "max_rounds=0"),
        (dict(max_rollouts_per_round=4), "max_rollouts_per_round=4"),
        (dict(refill_margin=-1.0), "refill_margin=-1.0"),
    ],
)
def test_invalid_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AllocationConfig(**kwargs)


def test_malformed_rollout_outcomes_raise():
    alloc = Allocator(AllocationConfig(k=4))
    with pytest.raises(ValueError, match="returned 3 successes"):
        alloc.collect(lambda p, c: (np.zeros(3), np.zeros(3)), PromptStream(10), B=4)
    with pytest.raises(ValueError, match="success must be 0, 1 or NaN"):
        alloc.collect(lambda p, c: (np.full(c.sum(), 0.7), np.ones(c.sum())), PromptStream(10), B=4)
    with pytest.raises(ValueError, match="B must be a positive integer"):
        alloc.collect(lambda p, c: None, PromptStream(10), B=0)


def test_stream_is_seeded_wraps_and_restores():
    s = PromptStream(5, seed=3)
    first = s.take(7)
    assert sorted(first[:5].tolist()) == list(range(5)) and s.epoch == 1
    state = s.state_dict()
    nxt = s.take(4)
    s2 = PromptStream(5, seed=3)
    s2.load_state_dict(state)
    np.testing.assert_array_equal(s2.take(4), nxt)
    with pytest.raises(ValueError, match="seed"):
        PromptStream(5, seed=4).load_state_dict(state)
    with pytest.raises(ValueError, match="at least one prompt"):
        PromptStream(0)


def test_allocator_state_round_trip():
    g = u_shaped_gammas(500, seed=1)
    a1, s1, t1 = Allocator(), PromptStream(500, seed=2), SimulatedTask(g, seed=3)
    a1.collect(t1, s1, 8)
    a2, s2 = Allocator(), PromptStream(500, seed=2)
    a2.load_state_dict(a1.state_dict())
    s2.load_state_dict(s1.state_dict())
    t2 = SimulatedTask(g, seed=3)
    t2.rng = np.random.default_rng(99)
    t1.rng = np.random.default_rng(99)
    r1, r2 = a1.collect(t1, s1, 8), a2.collect(t2, s2, 8)
    assert [r.prompt_id for r in r1.records] == [r.prompt_id for r in r2.records]
    assert r1.stats.as_dict() == r2.stats.as_dict()


def test_core_imports_no_torch():
    code = ("import sys, sara_trl.allocation; "
            "bad=[m for m in ('torch','trl','transformers') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_refill_model_learns_phi_for_dynamic_sampling():
    g = u_shaped_gammas(20000, seed=21)
    alloc, stream, task = (Allocator(AllocationConfig(allocator="dynamic_sampling")), PromptStream(len(g), seed=2),
                           SimulatedTask(g, seed=3))
    for _ in range(10):
        alloc.collect(task, stream, 64)
    # decayed counts hold ~2 steps x ~240 prompts: standard error ~0.02
    assert abs(alloc.yield_estimate() - phi(g, 8)) < 0.08


def test_budget_is_not_spent_on_probes_that_cannot_be_completed():
    """k=4, tau_low=0.45: every unmixed probe is abandoned at n0 = n_a = 2, so few prompts are kept; fresh draws
    must still leave budget to top up the mixed ones (a starved step would return fill groups)."""
    g = u_shaped_gammas(50000, seed=5)
    alloc, stream, task = Allocator(AllocationConfig(k=4)), PromptStream(len(g), seed=2), SimulatedTask(g, seed=3)
    stats = [alloc.collect(task, stream, 32).stats for _ in range(15)]
    assert np.mean([s.effective_fraction for s in stats[1:]]) > 0.9
    for s in stats:
        assert_accounting(s)


@pytest.mark.parametrize("k,tau,expected", [(8, 0.45, 2), (16, 0.45, 7), (8, 0.2, 5), (4, 0.45, 0)])
def test_continue_to_decision_jumps_to_the_paper_abandon_point(k, tau, expected):
    # Paper rule along a unanimous run: abandon at n_a = k - floor(tau (k + 1)) (Prop. 1); from the probe n0 = 2 an
    # unmixed prompt needs n_a - 2 more rollouts (k=4, tau=0.45: n_a = 2, so the probe itself abandons).
    n_a = k - int(np.floor(tau * (k + 1)))
    assert n_a - 2 == expected
    seqs = [[0] * k, [1] * k]
    src = Scripted(seqs)
    cfg = AllocationConfig(k=k, n0=2, tau_low=tau, continue_to_decision=True, refill_margin=0.0)
    res = Allocator(cfg).collect(src, PromptStream(2, shuffle=False, wrap=False), B=1)
    if expected == 0:
        assert src.calls == [([0, 1], [2, 2])]
    else:
        assert src.calls == [([0, 1], [2, 2]), ([0, 1], [expected, expected])]
    assert list(res.prompt_table["n"]) == [n_a, n_a] and list(res.prompt_table["fate"]) == [2, 2]
    assert res.stats.unfilled == 1 and res.stats.stop_reason == "stream"


def test_continue_to_decision_costs_each_prompt_what_one_at_a_time_costs():
    # With commit_min = k the schedule cannot change any prompt's fate or rollout count: a prompt that mixes inside
    # the jump is topped up to k either way, one that stays unanimous is abandoned at the same n. Outcomes are fixed
    # per (prompt, position), so every prompt decided under both schedules must match exactly; rounds must drop.
    rng = np.random.default_rng(3)
    g = u_shaped_gammas(3000, seed=3)
    seqs = (rng.random((3000, 16)) < g[:, None]).astype(float)
    runs = {}
    for jump in (False, True):
        src = Scripted(seqs)
        res = Allocator(AllocationConfig(k=16, continue_to_decision=jump)).collect(
            src, PromptStream(3000, shuffle=False, wrap=False), B=64)
        t = res.prompt_table
        decided = t["fate"] != 3
        runs[jump] = (dict(zip(t["prompt_id"][decided], zip(t["n"][decided], t["fate"][decided] == 2))),
                     res.stats.rounds)
        assert_accounting(res.stats)
    (one, r1), (jump, r2) = runs[False], runs[True]
    common = set(one) & set(jump)
    assert len(common) > 100
    assert all(one[p] == jump[p] for p in common)
    assert r2 < r1 / 2


def test_round_increment_validation():
    for bad in (0, "fast", True, 1.5):
        with pytest.raises(ValueError, match="round_increment"):
            AllocationConfig(round_increment=bad)
    with pytest.raises(ValueError, match="n0=2.5 must be an integer"):
        AllocationConfig(n0=2.5)
