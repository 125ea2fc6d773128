"""Streaming collection with ``carry_over``: the prompts undecided when the batch fills keep their finished rollouts
and start the next step first. A held prompt's requests run on (what finishes is carried) until a top-up needs
the slot or the batch fills; then they are aborted (surplus). Driven through the one event
loop (:func:`sara_trl.allocation.drive_streaming_engine`) on a scripted engine, with exact counts."""

from __future__ import annotations

import numpy as np

from benchmarks.simulator import DecodeEngine, SimulatedTask
from benchmarks.simulator.simulate import run_streaming_step
from sara_trl.allocation import (
    AllocationConfig,
    Allocator,
    Finished,
    PromptStream,
    ShardStream,
    drive_streaming_engine,
    merge_step_results,
)
from sara_trl.allocation.types import Fate


class Engine:
    """Every request decodes one token per step; ``script(prompt_id, nth)`` gives the (success, length) of the nth
    request of a prompt; completion = [success] + [7] * (length - 1)."""

    def __init__(self, script):
        self.script, self.running, self.count, self.aborted = script, {}, {}, []

    @property
    def pending(self):
        return len(self.running)

    def add(self, rid, prompt_ids):
        pid = prompt_ids[0]
        nth = self.count.get(pid, 0)
        self.count[pid] = nth + 1
        success, length = self.script(pid, nth)
        self.running[rid] = [0, success, length]

    def step(self):
        done = []
        for rid in sorted(self.running):
            state = self.running[rid]
            state[0] += 1
            if state[0] == state[2]:
                done.append(Finished(rid, [state[1]] + [7] * (state[2] - 1)))
        for f in done:
            del self.running[f.rid]
        return done

    def abort(self, rids):
        tokens = [self.running.pop(rid)[0] if rid in self.running else 0 for rid in rids]
        self.aborted.extend(zip(rids, tokens))
        return tokens


class Scorer:
    def __init__(self):
        self.batches = []

    def score(self, prompt_ids, batch):
        self.batches.append(batch)
        return np.array([float(f.completion_ids[0]) for f in batch])

    def keep(self, positions):
        self.batches.pop(0)


def step(alloc, stream, engine, B=1, cap=4):
    collector = alloc.streaming(stream, B, cap)
    drive_streaming_engine(collector, engine, lambda pid: [int(pid)], Scorer())
    return collector.finish()


def test_undecided_prompt_carries_its_finished_rollouts_into_the_next_step():
    # k=4, n0=2, commit floor 4, B=1, 4 requests in flight, no shuffle: prompts 0 (rids 0, 1) and 1 (rids 2, 3).
    # Step 1 of the engine: rid 0 (prompt 0) and rid 2 (prompt 1) succeed (rollout ids 0 and 1).
    # Step 2: rid 1 fails: prompt 0 is mixed (rollout id 2) and alone completes the batch, so unmixed prompt 1 is
    # held; prompt 0 is topped up to 4 (rids 4, 5, finishing at engine steps 4 and 5: rollout ids 3, 4) and
    # committed. With carry_over the held prompt's request rid 3 runs on (2 of the 4 slots are free for the top-ups)
    # until the batch fills at engine step 5: aborted then after 5 of its 9 tokens (surplus). Prompt 1 ends the step
    # undecided with one finished rollout (1 token), which carry_over keeps.
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 3)], 1: [(1, 1), (1, 9), (0, 1), (0, 1), (1, 1)],
              2: [(0, 1), (1, 1)]}
    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True, refill_margin=0.0)
    alloc, stream = Allocator(cfg), PromptStream(50, seed=0, shuffle=False)
    engine = Engine(lambda pid, nth: script[pid][nth])
    first = step(alloc, stream, engine)
    st = first.stats
    assert [g.prompt_id for g in first.groups] == [0] and st.stop_reason == "filled"
    np.testing.assert_array_equal(first.groups[0].rollout_ids, [0, 2, 3, 4])
    assert engine.aborted == [(3, 5)]
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_active_left, st.rollouts_surplus) == (6, 4, 1, 1)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_active_left, st.tokens_surplus) == (14, 8, 1, 5)
    assert st.active_left == 1 and alloc.carried_prompts == 1 and alloc.carried_rollouts == 1
    np.testing.assert_array_equal(alloc.carried_prompt_ids, [1])
    assert first.carry_rollout_ids.tolist() == [1]

    state = alloc.state_dict()  # the carry survives a checkpoint
    again = Allocator(cfg)
    again.load_state_dict(state)
    assert again.carried_rollouts == 1 and again.carried_prompt_ids.tolist() == [1]

    # Step 2 starts with prompt 1 (its carried success is this step's rollout 0): still unmixed, so it is continued
    # before any fresh probe; it mixes and commits, and its carried rollout is trained.
    second = step(alloc, stream, engine)
    st2 = second.stats
    assert st2.carried_in == 1 and st2.rollouts_carried_in == 1 and st2.tokens_carried_in == 1
    assert engine.count[1] >= 3  # prompt 1 got requests in step 2
    assert second.groups[0].prompt_id == 1 and second.groups[0].rollout_ids[0] == 0
    assert second.prompt_table["prompt_id"][0] == 1 and second.prompt_table["fate"][0] == Fate.TRAINED
    assert st2.rollouts_generated + st2.rollouts_carried_in == (st2.rollouts_trained + st2.rollouts_abandoned
                                                                + st2.rollouts_surplus + st2.rollouts_active_left)
    st2.check()


def test_carry_over_accounting_over_many_steps_matches_the_requests():
    """Simulated task, 8 steps: every step's carried-in rollouts are the previous step's active_left ones, every
    rollout is generated once (the sum of generated equals the requests the engine ran), and the invariant holds
    with carried rollouts and aborts."""
    cfg = AllocationConfig(k=8, collection="streaming", carry_over=True)
    alloc = Allocator(cfg)
    task = SimulatedTask(np.random.default_rng(3).beta(0.3, 0.3, size=3000), seed=3)
    stream = PromptStream(3000, seed=3)
    previous_left = 0
    generated = 0
    for _ in range(8):
        result = run_streaming_step(alloc.streaming(stream, 16, 64), task, DecodeEngine(64))
        st = result.stats
        st.check()
        assert st.rollouts_carried_in == previous_left
        assert len(result.carry_rollout_ids) == st.rollouts_active_left == alloc.carried_rollouts
        previous_left = st.rollouts_active_left
        generated += st.rollouts_generated
        assert st.unfilled == 0 and len(result.groups) == 16
    assert generated == sum(len(c[0]) for c in task.calls) == alloc.total_rollouts


class RecordingScorer(Scorer):
    """:class:`Scorer` that keeps each recorded completion with its prompt id, in the order the collector numbers
    them (after the rollouts carried in): a stand-in for one process's rollout cache."""

    def __init__(self, rollouts):
        super().__init__()
        self.rollouts, self.pending = rollouts, []

    def score(self, prompt_ids, batch):
        self.pending.append(list(zip(np.asarray(prompt_ids).tolist(), batch)))
        return super().score(prompt_ids, batch)

    def keep(self, positions):
        super().keep(positions)
        done = self.pending.pop(0)
        self.rollouts.extend(done[i] for i in positions)


def test_two_processes_each_carry_their_own_prompts_through_the_merge():
    """Streaming on 2 processes with carry_over, B = 1 group per process, exact counts. Each process runs the
    scenario of test_undecided_prompt_carries_its_finished_rollouts_into_the_next_step on its own shard (process 0:
    prompts 0, 2, 4; process 1: prompts 1, 3, 5), except that process 1's trained prompt 1 has top-ups of 3 tokens
    each (so its group costs 1 + 2 + 3 + 3 = 9 tokens, not 8). Step 1 on each process: 6 requests, one aborted after 5
    tokens (at the fill, engine step 5), so 5 recorded rollouts (ids 0..4); its held prompt (2, resp. 3) carries
    rollout id 1 (1 token).

    Merged step 1: process 1's ids are shifted by process 0's 5 rollouts, so the carried ids are [1, 6], split [1, 1];
    the accounting is the sum (12 generated, 8 trained, 2 surplus (the aborts), 2 active left) and holds. Step 2:
    each process starts from its own slice of the merged carry (the same rollout it recorded), its prompt is decided
    again and trained first, and the merged carried-in counts are exactly step 1's carried rollouts, once each."""
    scripts = [{0: [(1, 1), (0, 2), (1, 2), (1, 3)], 2: [(1, 1), (1, 9), (0, 1), (0, 1), (1, 1)], 4: [(0, 1), (1, 1)]},
               {1: [(1, 1), (0, 2), (1, 3), (1, 3)], 3: [(1, 1), (1, 9), (0, 1), (0, 1), (1, 1)], 5: [(0, 1), (1, 1)]}]
    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True, refill_margin=0.0)
    world = 2
    allocs = [Allocator(cfg) for _ in range(world)]
    streams = [ShardStream(50, rank, world, seed=0, shuffle=False) for rank in range(world)]
    engines = [Engine(lambda pid, nth, s=s: s[pid][nth]) for s in scripts]

    def merged_step(carried):
        """One step on every process from its carried rollouts ((pid, Finished) each); the merge and the merged
        rollouts (the concatenation of the processes' rollouts, as the trainer's RolloutCache.concat)."""
        results, parts = [], []
        for rank in range(world):
            rollouts = list(carried[rank])
            assert allocs[rank].carried_rollouts == len(rollouts)
            collector = allocs[rank].streaming(streams[rank], 1, 4)
            drive_streaming_engine(collector, engines[rank], lambda pid: [int(pid)], RecordingScorer(rollouts))
            results.append(collector.finish())
            assert len(rollouts) == results[-1].stats.rollouts_carried_in + collector.recorded
            parts.append(rollouts)
        merged = merge_step_results(results, [len(p) for p in parts])
        return merged, results, [r for part in parts for r in part]

    first, locals_1, rollouts_1 = merged_step([[], []])
    st = first.stats
    st.check()
    assert [g.prompt_id for g in first.groups] == [0, 1]
    np.testing.assert_array_equal(first.groups[0].rollout_ids, [0, 2, 3, 4])
    np.testing.assert_array_equal(first.groups[1].rollout_ids, [5, 7, 8, 9])  # shifted by process 0's 5 rollouts
    assert len(rollouts_1) == 10
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_surplus, st.rollouts_active_left,
            st.rollouts_aborted, st.rollouts_carried_in) == (12, 8, 2, 2, 2, 0)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_surplus, st.tokens_active_left) == (29, 17, 10, 2)
    assert (st.active_left, st.batch_groups, st.committed) == (2, 2, 2)
    assert first.carry_rollout_ids.tolist() == [1, 6] and first.carry_split == [1, 1]
    for rank in range(world):  # each process's slice is its own carry, in the merged id space
        ids = first.carried_by(rank)
        assert ids.tolist() == (locals_1[rank].carry_rollout_ids + 5 * rank).tolist()
        assert [rollouts_1[i][0] for i in ids] == allocs[rank].carried_prompt_ids.tolist() == [2 + rank]
    assert sum(a.carried_rollouts for a in allocs) == len(first.carry_rollout_ids) == st.rollouts_active_left

    # Step 2: every process picks its own carried rollouts out of the merged ones (what the trainer's cache.carry
    # does with carried_by), and they take its ids 0 .. C-1.
    second, locals_2, rollouts_2 = merged_step([[rollouts_1[i] for i in first.carried_by(r)] for r in range(world)])
    st2 = second.stats
    st2.check()
    assert (st2.carried_in, st2.rollouts_carried_in, st2.tokens_carried_in) == (2, 2, 2)  # step 1's carry, once each
    assert [local.stats.rollouts_carried_in for local in locals_2] == [1, 1]
    offset = sum(locals_2[0].prompt_table["n"])
    assert [g.prompt_id for g in second.groups] == [2, 3]  # the carried prompts, trained first on their process
    assert second.groups[0].rollout_ids[0] == 0 and second.groups[1].rollout_ids[0] == offset
    assert rollouts_2[0] == rollouts_1[1] and rollouts_2[offset] == rollouts_1[6]  # the very rollouts carried
    assert second.prompt_table["fate"].tolist().count(Fate.TRAINED) == 2
    assert len(second.carry_rollout_ids) == sum(second.carry_split) == sum(a.carried_rollouts for a in allocs)
    assert sum(a.total_rollouts for a in allocs) == st.rollouts_generated + st2.rollouts_generated


def test_a_top_up_takes_the_slot_of_the_newest_held_request():
    # k=5 (commit floor 5), n0=2, B=1, 6 requests in flight, refill margin 1: prompts 0 (rids 0, 1), 1 (rids 2, 3)
    # and 2 (rids 4, 5). Engine step 1: rid 0 succeeds. Step 2: rid 1 fails, so prompt 0 is mixed (n=2) and alone
    # completes the batch: prompts 1 and 2 are held with 4 requests in flight, and prompt 0 wants 3 top-ups with 2
    # slots free. One top-up would wait, so the newest held request, rid 5, is aborted after 2 tokens. Rid 2 runs on
    # and finishes at step 3 (a success, 3 tokens: rollout id 2, carried). Top-ups rids 6, 7, 8 (2, 2, 3 tokens)
    # finish at steps 4, 4, 5: prompt 0 commits with rollout ids 0, 1, 3, 4, 5 and the fill aborts rids 3 and 4
    # after 5 tokens each.
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 2), (1, 3)], 1: [(1, 3), (1, 9)], 2: [(0, 9), (1, 9)]}
    cfg = AllocationConfig(k=5, n0=2, collection="streaming", carry_over=True, refill_margin=1.0)
    alloc, stream = Allocator(cfg), PromptStream(50, seed=0, shuffle=False)
    engine = Engine(lambda pid, nth: script[pid][nth])
    result = step(alloc, stream, engine, cap=6)
    st = result.stats
    assert [g.prompt_id for g in result.groups] == [0] and st.stop_reason == "filled"
    np.testing.assert_array_equal(result.groups[0].rollout_ids, [0, 1, 3, 4, 5])
    assert engine.aborted == [(5, 2), (3, 5), (4, 5)]
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_active_left, st.rollouts_surplus) == (9, 5, 1, 3)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_active_left, st.tokens_surplus) == (25, 10, 3, 12)
    assert st.active_left == 2 and result.carry_rollout_ids.tolist() == [2]
    assert alloc.carried_prompt_ids.tolist() == [1, 2]


def test_without_carry_over_the_held_requests_are_aborted_at_once():
    """The same start as test_undecided_prompt_carries_its_finished_rollouts_into_the_next_step without carry_over:
    the held prompt's outcomes would be dropped, so its request rid 3 is aborted when the hold begins (engine step 2,
    after 2 tokens), not at the fill."""
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 3)], 1: [(1, 1), (1, 9)]}
    cfg = AllocationConfig(k=4, collection="streaming", refill_margin=0.0)
    engine = Engine(lambda pid, nth: script[pid][nth])
    result = step(Allocator(cfg), PromptStream(50, seed=0, shuffle=False), engine)
    assert engine.aborted == [(3, 2)]
    assert (result.stats.tokens_generated, result.stats.tokens_surplus) == (11, 2)


def test_a_held_prompt_that_mixes_is_carried_not_topped_up():
    """k=4, B=1, 4 in flight: prompt 0 mixes at engine step 2 and alone completes the batch, so prompt 1 is held with
    rid 3 running on (carry_over). Rid 3 fails at step 3: prompt 1 is mixed too, but the batch needs one group and
    prompt 0 is already being topped up, so prompt 1 gets no top-up (as rounds top up at most the groups still
    needed): it is carried with its 2 rollouts (ids 1 and 3), and nothing is aborted."""
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 3)], 1: [(1, 1), (0, 3)]}
    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True, refill_margin=0.0)
    alloc = Allocator(cfg)
    engine = Engine(lambda pid, nth: script[pid][nth])
    result = step(alloc, PromptStream(50, seed=0, shuffle=False), engine)
    assert engine.count == {0: 4, 1: 2} and engine.aborted == []
    np.testing.assert_array_equal(result.groups[0].rollout_ids, [0, 2, 4, 5])
    assert result.carry_rollout_ids.tolist() == [1, 3] and alloc.carried_prompt_ids.tolist() == [1]
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_surplus, st.rollouts_active_left) == (6, 0, 2)


def test_a_spare_mixed_prompt_stays_spare_at_its_later_completions():
    """k=5, n0=3, B=1, 6 in flight: prompt 0 (rids 0-2) mixes at engine step 2 and is topped up (rids 6, 7, 10 tokens
    each, finishing at step 12); prompt 1 (rids 3-5) is held with its 3 requests running on. Rid 4 fails at step 4:
    prompt 1 is mixed, and spare, since prompt 0's top-up completes the batch. Rid 5 finishes at step 6: prompt 1 is
    still spare (no top-up, which would race prompt 0's and end with someone's requests aborted). The batch fills at
    step 12 with nothing aborted; prompt 1 is carried with its 3 rollouts (13 tokens)."""
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 10), (1, 10)], 1: [(1, 3), (0, 4), (1, 6), (1, 1), (1, 1)]}
    cfg = AllocationConfig(k=5, n0=3, collection="streaming", carry_over=True, refill_margin=0.0)
    alloc = Allocator(cfg)
    engine = Engine(lambda pid, nth: script[pid][nth])
    result = step(alloc, PromptStream(50, seed=0, shuffle=False), engine, cap=6)
    assert engine.count == {0: 5, 1: 3} and engine.aborted == []
    np.testing.assert_array_equal(result.groups[0].rollout_ids, [0, 1, 2, 6, 7])
    assert result.carry_rollout_ids.tolist() == [3, 4, 5] and alloc.carried_prompt_ids.tolist() == [1]
    st = result.stats
    assert (st.rollouts_generated, st.tokens_generated, st.tokens_trained, st.tokens_active_left) == (8, 38, 25, 13)


def test_carried_mixed_prompts_beyond_the_need_are_spare_as_in_rounds():
    """A step starts with three carried, undecided, mixed prompts (k=4, commit floor 4) and needs B=2 groups. As a
    round serves them (at most the groups still needed, most rollouts first, then slot order), prompt 11 (3 rollouts)
    and prompt 10 (2) are topped up; prompt 12 (2) is spare: it gets no request, nothing is aborted, and it is
    carried on with its 2 rollouts (this step's ids 5 and 6). The top-ups are queued in slot order (prompt 10's rids
    0 and 1, prompt 11's rid 2) and all finish at engine step 2, so prompt 10 commits first."""
    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True, refill_margin=0.0)
    alloc = Allocator(cfg)
    carry = {"pid": [10, 11, 12], "n": [2, 3, 2], "nsc": [2, 3, 2], "s": [1, 1, 1], "p": [1.0, 1.0, 1.0],
             "committed": [False, False, False], "truncated": [False, False, False],
             "r_slot": [0, 0, 1, 1, 1, 2, 2], "r_success": [1, 0, 1, 0, 0, 0, 1], "r_tokens": [1] * 7}
    alloc.load_state_dict({**alloc.state_dict(), "carry": carry})
    engine = Engine(lambda pid, nth: (1, 2))
    result = step(alloc, PromptStream(50, seed=0, shuffle=False), engine, B=2, cap=8)
    assert engine.count == {11: 1, 10: 2} and engine.aborted == []
    assert [g.prompt_id for g in result.groups] == [10, 11]
    np.testing.assert_array_equal(result.groups[0].rollout_ids, [0, 1, 7, 8])
    np.testing.assert_array_equal(result.groups[1].rollout_ids, [2, 3, 4, 9])
    assert result.carry_rollout_ids.tolist() == [5, 6] and alloc.carried_prompt_ids.tolist() == [12]
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_surplus, st.rollouts_active_left, st.prompts_drawn) == (3, 0, 2, 0)


def test_a_truncated_prompt_stays_truncated_when_carried():
    """The first step of test_undecided_prompt_carries_its_finished_rollouts_into_the_next_step aborts held prompt
    1's request at the fill: its carried outcome is the completion that finished first, so the carry says so and
    the next step's collector reports it truncated (the Bayes-optimal prior fit leaves it out there too)."""
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 3)], 1: [(1, 1), (1, 9), (0, 1), (0, 1), (1, 1)],
              2: [(0, 1), (1, 1)]}
    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True, refill_margin=0.0)
    alloc, stream = Allocator(cfg), PromptStream(50, seed=0, shuffle=False)
    engine = Engine(lambda pid, nth: script[pid][nth])
    step(alloc, stream, engine)
    carry = alloc.state_dict()["carry"]
    assert carry["truncated"] == [True]
    collector = alloc.streaming(stream, 1, 4)
    collector.start()
    assert collector.truncated.tolist() == [True, False]  # the carried prompt, then a fresh one (prompt 2)
    old = {k: v for k, v in carry.items() if k != "truncated"}  # a carry saved before the flag existed
    again = Allocator(cfg)
    again.load_state_dict({**again.state_dict(), "carry": old})
    collector = again.streaming(PromptStream(50, seed=0, shuffle=False), 1, 4)
    collector.start()
    assert collector.truncated[0] == False  # noqa: E712 (numpy bool)
