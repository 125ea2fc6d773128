"""carry_over: undecided prompts and surplus groups move into the next step with their rollouts; nothing is
generated twice, nothing is lost, and the allocator state (checkpoint) carries them too."""

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask, u_shaped_gammas
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream


class Recording(SimulatedTask):
    """A simulated task that also records every outcome it returned, per call, in order."""

    def __init__(self, gammas, seed):
        super().__init__(gammas, seed=seed)
        self.outcomes = []

    def __call__(self, prompt_ids, counts):
        out = super().__call__(prompt_ids, counts)
        self.outcomes.append(out)
        return out


def run_steps(cfg, steps=12, B=16, seed=0):
    g = u_shaped_gammas(4000, seed=seed)
    task = Recording(g, seed=seed)
    alloc, stream = Allocator(cfg), PromptStream(4000, seed=seed)
    results = []
    for _ in range(steps):
        n_calls = len(task.outcomes)
        res = alloc.collect(task, stream, B)
        new = task.outcomes[n_calls:]
        results.append((res, np.concatenate([o.success for o in new]) if new else np.zeros(0),
                        np.concatenate([o.tokens for o in new]) if new else np.zeros(0, np.int64)))
    return alloc, results


def test_every_rollout_is_trained_abandoned_or_still_carried_at_the_end():
    _, results = run_steps(AllocationConfig(carry_over=True))
    generated = sum(r.stats.rollouts_generated for r, _, _ in results)
    tokens = sum(r.stats.tokens_generated for r, _, _ in results)
    final = results[-1][0].stats
    settled = sum(r.stats.rollouts_trained + r.stats.rollouts_abandoned for r, _, _ in results)
    settled_tok = sum(r.stats.tokens_trained + r.stats.tokens_abandoned for r, _, _ in results)
    assert generated == settled + final.rollouts_surplus + final.rollouts_active_left
    assert tokens == settled_tok + final.tokens_surplus + final.tokens_active_left
    assert sum(r.stats.carried_in for r, _, _ in results) > 0  # the path was exercised
    for (prev, _, _), (cur, _, _) in zip(results, results[1:]):
        # What one step carries out is exactly what the next carries in.
        assert cur.stats.rollouts_carried_in == len(prev.carry_rollout_ids)
        assert cur.stats.rollouts_carried_in == prev.stats.rollouts_surplus + prev.stats.rollouts_active_left
        assert cur.stats.carried_in == prev.stats.surplus + prev.stats.active_left
    for res, _, _ in results:
        assert res.stats.unfilled == 0 and res.stats.effective_fraction == 1.0


def test_rollout_fates_give_each_rollout_its_prompts_fate():
    """StepResult.rollout_fates: one final fate per rollout id (carried ones first), trained exactly on the groups'
    rollouts, its counts and tokens StepStats' (and the carried-out rollouts are the surplus and active ones)."""
    from sara_trl.allocation import Fate

    _, results = run_steps(AllocationConfig(carry_over=True), steps=6)
    carried_tokens = np.zeros(0, np.int64)
    for res, _, tokens in results:
        fates, stats = res.rollout_fates, res.stats
        assert fates.dtype == np.int8 and fates.shape == (stats.rollouts_carried_in + stats.rollouts_generated,)
        trained = np.concatenate([g.rollout_ids for g in res.groups if not g.is_fill])
        assert np.array_equal(np.flatnonzero(fates == Fate.TRAINED), np.sort(trained))
        step_tokens = np.concatenate([carried_tokens, tokens])
        for name, fate in (("trained", Fate.TRAINED), ("abandoned", Fate.ABANDONED), ("surplus", Fate.SURPLUS),
                           ("active_left", Fate.ACTIVE)):
            assert np.count_nonzero(fates == fate) == getattr(stats, f"rollouts_{name}")
            assert step_tokens[fates == fate].sum() == getattr(stats, f"tokens_{name}")
        assert set(fates[res.carry_rollout_ids].tolist()) <= {Fate.SURPLUS, Fate.ACTIVE}
        carried_tokens = step_tokens[res.carry_rollout_ids]


def test_carried_rollouts_keep_their_outcomes_and_ids():
    _, results = run_steps(AllocationConfig(carry_over=True, k=8))
    prev_succ = prev_tok = prev_ids = None
    for res, succ, tok in results:
        c = res.stats.rollouts_carried_in
        # The step's id space: carried rollouts 0..c-1 (in the previous step's carry order), then new ones.
        step_succ = np.concatenate([prev_succ[prev_ids], succ]) if c else succ
        step_tok = np.concatenate([prev_tok[prev_ids], tok]) if c else tok
        assert c == (0 if prev_ids is None else len(prev_ids))
        for grp in res.groups:
            assert len(grp.rollout_ids) == 8
            np.testing.assert_array_equal(grp.success, step_succ[grp.rollout_ids])
        assert res.stats.tokens_carried_in == (int(step_tok[:c].sum()) if c else 0)
        prev_succ, prev_tok, prev_ids = step_succ, step_tok, res.carry_rollout_ids


def test_carried_prompts_continue_where_they_stopped():
    # A carried prompt's counts in the next step's table start from what it had; no prompt is drawn twice in flight.
    _, results = run_steps(AllocationConfig(carry_over=True))
    for (prev, _, _), (cur, _, _) in zip(results, results[1:]):
        t, u = prev.prompt_table, cur.prompt_table
        carried = (t["fate"] == 1) | (t["fate"] == 3)
        c = int(carried.sum())
        carried_pids = np.concatenate([t["prompt_id"][t["fate"] == 1], t["prompt_id"][t["fate"] == 3]])
        assert sorted(u["prompt_id"][:c].tolist()) == sorted(carried_pids.tolist())
        before = dict(zip(t["prompt_id"][carried], t["n"][carried]))
        for pid, n in zip(u["prompt_id"][:c], u["n"][:c]):
            assert n >= before[pid]


def test_carry_beats_dropping_at_small_batches():
    # End-of-step waste is largest for small B: carrying it over must spend fewer rollouts per effective group.
    def cost(carry):
        _, results = run_steps(AllocationConfig(carry_over=carry), steps=40, B=4, seed=1)
        return sum(r.stats.rollouts_generated for r, _, _ in results) / sum(
            r.stats.effective_in_batch for r, _, _ in results)

    assert cost(True) < 0.97 * cost(False)


def test_checkpoint_round_trip_resumes_identically():
    cfg = AllocationConfig(carry_over=True)
    g = u_shaped_gammas(4000, seed=2)
    a, stream, task = Allocator(cfg), PromptStream(4000, seed=2), SimulatedTask(g, seed=2)
    for _ in range(3):
        a.collect(task, stream, 16)
    assert a.carried_prompts > 0
    state, s_state = a.state_dict(), stream.state_dict()
    b, stream_b = Allocator(cfg), PromptStream(4000, seed=2)
    b.load_state_dict(state)
    stream_b.load_state_dict(s_state)
    assert b.carried_prompts == a.carried_prompts
    task_b = SimulatedTask(g, seed=7)
    task_a = SimulatedTask(g, seed=7)
    ra, rb = a.collect(task_a, stream, 16), b.collect(task_b, stream_b, 16)
    assert ra.stats == rb.stats
    for ga, gb in zip(ra.groups, rb.groups):
        assert ga.prompt_id == gb.prompt_id
        np.testing.assert_array_equal(ga.rollout_ids, gb.rollout_ids)


def test_history_sees_each_carried_prompt_once():
    # With history_decay=1 the history's pseudo-counts must equal the scored rollouts of every decided prompt.
    alloc, results = run_steps(AllocationConfig(carry_over=True, history_decay=1.0), steps=8)
    decided_n = sum(int(r.prompt_table["n"][np.isin(r.prompt_table["fate"], (0, 2))].sum()) for r, _, _ in results)
    hist = alloc._ext.history
    hs, hf = hist.counts(np.arange(4000))
    assert hs.sum() + hf.sum() == pytest.approx(decided_n)


def test_carry_over_is_sara_only_and_a_bool():
    with pytest.raises(ValueError, match="carry_over is a SARA option"):
        AllocationConfig(allocator="dynamic_sampling", carry_over=True)
    with pytest.raises(ValueError, match="carry_over=1 must be True or False"):
        AllocationConfig(carry_over=1)
