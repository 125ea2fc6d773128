"""Streaming collection with ``carry_over``: the prompts undecided when the batch fills keep their finished rollouts
and start the next step first; their requests still in flight are aborted (surplus). Driven through the one event
loop (:func:`sara_trl.allocation.drive_streaming_engine`) on a scripted engine, with exact counts."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation import (
    AllocationConfig,
    Allocator,
    DecodeEngine,
    Finished,
    PromptStream,
    SimulatedTask,
    drive_streaming_engine,
)
from sara_trl.allocation.simulate import run_streaming_step
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
    # held: its request rid 3 is aborted after 2 of its 9 tokens (surplus); prompt 0 is topped up to 4 (rids 4, 5,
    # finishing at engine steps 4 and 5: rollout ids 3, 4) and committed. Prompt 1 ends the step undecided with one
    # finished rollout (1 token), which carry_over keeps.
    script = {0: [(1, 1), (0, 2), (1, 2), (1, 3)], 1: [(1, 1), (1, 9), (0, 1), (0, 1), (1, 1)],
              2: [(0, 1), (1, 1)]}
    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True, refill_margin=0.0)
    alloc, stream = Allocator(cfg), PromptStream(50, seed=0, shuffle=False)
    engine = Engine(lambda pid, nth: script[pid][nth])
    first = step(alloc, stream, engine)
    st = first.stats
    assert [g.prompt_id for g in first.groups] == [0] and st.stop_reason == "filled"
    np.testing.assert_array_equal(first.groups[0].rollout_ids, [0, 2, 3, 4])
    assert engine.aborted == [(3, 2)]
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_active_left, st.rollouts_surplus) == (6, 4, 1, 1)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_active_left, st.tokens_surplus) == (11, 8, 1, 2)
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
