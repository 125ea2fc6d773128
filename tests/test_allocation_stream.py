"""The prompt stream never puts a prompt twice in one batch unless the dataset is too small, says so once, and stays
deterministic and checkpointable."""

import json
import logging

import numpy as np
import pytest

import sara_trl.allocation.prompt_stream as stream_module
from benchmarks.simulator import SimulatedTask, u_shaped_gammas
from sara_trl.allocation import AllocationConfig, Allocator, IterablePromptStream, PromptStream

LOGGER = "sara_trl.allocation.prompt_stream"


@pytest.fixture
def repeats_log(caplog, monkeypatch):
    """The stream's "too small" records, with the once-per-process memory reset for this test."""
    monkeypatch.setattr(stream_module, "_WARNED_SIZES", set())
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return lambda: [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_batches_do_not_repeat_a_prompt_across_an_epoch_boundary(repeats_log):
    # 35 prompts, B = 4: every 35/4 steps a batch straddles two epochs. In plain stream order some batch then holds
    # a prompt twice (checked below for this seed); with the batch's ids avoided, none does.
    plain, avoiding = PromptStream(35, seed=9), PromptStream(35, seed=9)
    plain_batches = [plain.take(4) for _ in range(40)]
    assert any(len(set(b.tolist())) < 4 for b in plain_batches)
    batches = [avoiding.take(4, avoid=np.zeros(0, np.int64)) for _ in range(40)]
    assert all(len(set(b.tolist())) == 4 for b in batches)
    assert repeats_log() == []  # 35 prompts are enough for a batch of 4
    # Each of the first four epochs (140 draws) still visits every prompt exactly 4 times.
    assert np.bincount(np.concatenate(batches)[:140], minlength=35).tolist() == [4] * 35
    # The uniform allocator draws its B prompts exactly so.
    alloc, stream = Allocator(AllocationConfig(allocator="uniform", k=2)), PromptStream(35, seed=9)
    task = SimulatedTask(np.full(35, 0.5), seed=0)
    assert [alloc.collect(task, stream, 4).prompt_table["prompt_id"].tolist() for _ in range(40)] == \
        [b.tolist() for b in batches]


def test_skipped_prompts_are_owed_to_the_epoch_and_served_first():
    s = PromptStream(10, shuffle=False)
    assert s.take(3, avoid=[0, 1]).tolist() == [2, 3, 4]  # 0 and 1 are in the batch already: owed
    state = s.state_dict()
    assert state["owed"] == [0, 1]
    assert s.take(2, avoid=[]).tolist() == [0, 1]  # next batch: owed ids first
    assert s.take(5).tolist() == [5, 6, 7, 8, 9]  # the epoch visited every prompt once
    restored = PromptStream(10, shuffle=False)
    restored.load_state_dict(state)
    assert restored.take(2, avoid=[]).tolist() == [0, 1] and restored.epoch == 0


def test_an_epoch_with_nothing_usable_left_ends_early_instead_of_repeating(repeats_log):
    # Prompts 2-5 are in the batch (carried in), 0 and 1 are not: the rest of epoch 0 is all in the batch, so
    # epoch 1 starts and serves 0 and 1 rather than a repeat.
    s = PromptStream(6, shuffle=False)
    s.take(2)
    assert s.take(2, avoid=[2, 3, 4, 5]).tolist() == [0, 1]
    assert (s.epoch, s.cursor) == (1, 2) and repeats_log() == []


def test_a_dataset_smaller_than_the_batch_repeats_and_says_so_once(repeats_log):
    s = PromptStream(5, shuffle=False)
    first = s.take(7, avoid=[])
    second = s.take(3, avoid=[0, 1, 2, 3, 4])
    assert repeats_log() == ["the dataset has 5 prompts and one batch needs more distinct prompts than that, so some "
                             "prompts appear more than once in a batch (said once)"]
    assert first.tolist() == [0, 1, 2, 3, 4, 0, 1] and second.tolist() == [2, 3, 4]
    finite = PromptStream(5, shuffle=False, wrap=False)  # a finite stream ends instead of repeating
    assert finite.take(7, avoid=[]).tolist() == [0, 1, 2, 3, 4] and finite.exhausted


def test_repeated_ids_in_avoid_count_once(repeats_log):
    # [0, 0, 0, 0] is one prompt, not four: with 3 prompts, 1 and 2 are still free and nothing repeats.
    assert PromptStream(3, shuffle=False).take(2, avoid=[0, 0, 0, 0]).tolist() == [1, 2]
    assert repeats_log() == []
    # {0, 1} leaves only 2 free; once 2 is taken every prompt is in the batch, so the owed 0 is repeated.
    s = PromptStream(3, shuffle=False)
    assert s.take(2, avoid=[0, 0, 1, 1]).tolist() == [2, 0]
    assert len(repeats_log()) == 1
    # A take leaves no trace on the next one: the owed 1 comes first, then epoch 1 without a second 1.
    assert s.take(3, avoid=[]).tolist() == [1, 0, 2]


@pytest.mark.parametrize("bad", [[0, 5], [-1], np.array([[2, 7]])])
def test_avoided_ids_outside_the_dataset_are_an_error(bad):
    s = PromptStream(5, shuffle=False)
    with pytest.raises(ValueError, match="not an index of this stream's dataset of 5 prompts"):
        s.take(2, avoid=bad)
    assert s.take(2, avoid=[]).tolist() == [0, 1]  # the failed call moved nothing


@pytest.mark.parametrize("cfg", [AllocationConfig(), AllocationConfig(carry_over=True),
                                 AllocationConfig(allocator="dynamic_sampling"),
                                 AllocationConfig(history_decay=0.5, selection="greedy")])
def test_every_step_holds_distinct_prompts(cfg, repeats_log):
    # 60 prompts, B = 4, k = 8: a SARA or DS step draws ~15-30 prompts, so batches straddle epochs every few steps.
    g = u_shaped_gammas(60, seed=5)
    alloc, stream, task = Allocator(cfg), PromptStream(60, seed=5), SimulatedTask(g, seed=5)
    for _ in range(25):
        res = alloc.collect(task, stream, 4)
        pids = res.prompt_table["prompt_id"]
        assert len(np.unique(pids)) == len(pids)  # carried-in prompts included
    assert stream.epoch >= 1 and repeats_log() == []


def test_a_tiny_dataset_repeats_within_a_step_and_says_so_once(repeats_log):
    # Five never-solved prompts, dynamic sampling, B = 2: a step needs more than five prompts.
    alloc = Allocator(AllocationConfig(allocator="dynamic_sampling", k=4, budget_cap=4.0))
    stream, task = PromptStream(5, seed=0), SimulatedTask(np.zeros(5), seed=0)
    results = [alloc.collect(task, stream, 2) for _ in range(3)]
    assert len(repeats_log()) == 1
    assert all(r.stats.prompts_drawn == 8 for r in results)  # budget 4*2*4 = 32 rollouts = 8 groups


# ----------------------------------------------------------------------------------------------- iterable data
class CountingSource:
    """A RowSource over ``rows`` that counts the rows it yields and records every pass it opens; its resume token is
    the position (``use_state=False``: no token, so a pass opened at ``start`` reads and discards)."""

    def __init__(self, rows, use_state=True, short_second_pass=False):
        self.rows, self.use_state, self.short = rows, use_state, short_second_pass
        self.opens, self.yielded, self.position = [], 0, None

    def open(self, start, state=None):
        self.opens.append((start, state))
        if state is not None:
            assert state == start  # the token saved at `start` rows
        rows = self.rows[:-3] if self.short and len(self.opens) > 1 else self.rows
        self.position = start if state is not None else 0
        return self._pass(rows, skip=0 if state is not None else start)

    def _pass(self, rows, skip):
        for row in rows[self.position:]:
            self.position += 1
            self.yielded += 1
            if skip:
                skip -= 1
                continue
            yield row

    def state(self):
        return self.position if self.use_state else None


def reference_buffered_order(n, buffer_size, seed):
    """The documented shuffle, written out: fill a buffer of ``buffer_size`` rows in source order, then each draw
    takes ``rng.integers(len(buffer))`` (rng = default_rng(seed)), the last row of the buffer fills the hole, and
    the next row read is appended."""
    rng, buffer, nxt, out = np.random.default_rng(seed), [], 0, []
    while len(out) < n:
        while len(buffer) < buffer_size and nxt < n:
            buffer.append(nxt)
            nxt += 1
        i = int(rng.integers(len(buffer)))
        out.append(buffer[i])
        buffer[i] = buffer[-1]
        buffer.pop()
    return out


def test_iterable_stream_reads_in_order_with_no_read_ahead_and_wraps_by_re_reading():
    rows = [{"q": f"question {i}"} for i in range(10)]
    source = CountingSource(rows)
    s = IterablePromptStream(source, shuffle=False)
    assert s.take(3).tolist() == [0, 1, 2] and source.yielded == 3  # a row is read when it is drawn
    assert s.row(1) == {"q": "question 1"}
    assert s.take(4, avoid=[0, 1, 2]).tolist() == [3, 4, 5, 6] and source.yielded == 7
    # The pass ends after row 9: a new epoch opens a new pass from the start (as TRL's dataloader re-iterates).
    assert s.take(5, avoid=[]).tolist() == [7, 8, 9, 0, 1]
    assert source.opens == [(0, None), (0, None)] and (s.epoch, s.cursor, s.rows_per_pass) == (1, 2, 10)
    assert s.row(0) is rows[0]


def test_iterable_stream_shuffles_through_a_bounded_buffer():
    n, b = 50, 8
    source = CountingSource([{"i": i} for i in range(n)])
    s = IterablePromptStream(source, seed=3, shuffle=True, buffer_size=b)
    first = s.take(5)
    assert first.tolist() == [6, 0, 1, 9, 10] == reference_buffered_order(n, b, seed=3)[:5]
    assert source.yielded == 5 + b - 1  # the buffer holds b - 1 rows after each draw: read-ahead bounded by b
    drawn = first.tolist()
    for _ in range(9):
        s.release()
        drawn += s.take(5, avoid=[]).tolist()
        assert s.held_rows <= b + 5 and source.yielded - len(drawn) <= b
    assert drawn == reference_buffered_order(n, b, seed=3)  # epoch 0: seed + 0
    assert sorted(drawn) == list(range(n))  # a permutation of the pass
    assert all(j >= pid - (b - 1) for j, pid in enumerate(drawn))  # no row comes out before it is read
    assert max(pid - j for j, pid in enumerate(drawn)) == b - 1
    epoch1 = s.take(n).tolist()
    assert s.epoch == 1 and epoch1 == reference_buffered_order(n, b, seed=4)  # reshuffled: seed + epoch


def test_iterable_stream_batches_do_not_repeat_a_prompt_across_an_epoch_boundary(repeats_log):
    # As test_batches_do_not_repeat_a_prompt_across_an_epoch_boundary: 35 rows, B = 4, a buffer of 16 rows.
    rows = [{"i": i} for i in range(35)]
    plain, avoiding = IterablePromptStream(rows, seed=2, buffer_size=16), IterablePromptStream(rows, seed=2,
                                                                                             buffer_size=16)
    assert any(len(set(plain.take(4).tolist())) < 4 for _ in range(40))  # plain order repeats (this seed)
    batches = [avoiding.take(4, avoid=np.zeros(0, np.int64)) for _ in range(40)]
    assert all(len(set(b.tolist())) == 4 for b in batches) and repeats_log() == []
    assert np.bincount(np.concatenate(batches)[:140], minlength=35).tolist() == [4] * 35
    alloc = Allocator(AllocationConfig(allocator="uniform", k=2))
    stream, task = IterablePromptStream(rows, seed=2, buffer_size=16), SimulatedTask(np.full(35, 0.5), seed=0)
    assert [alloc.collect(task, stream, 4).prompt_table["prompt_id"].tolist() for _ in range(40)] == \
        [b.tolist() for b in batches]


def test_iterable_stream_owes_skipped_prompts_and_restores_them():
    s = IterablePromptStream([{"i": i} for i in range(10)], shuffle=False)
    assert s.take(10).tolist() == list(range(10))
    s.release(keep=[0, 1])
    # Epoch 1: 0 and 1 are in the batch (carried in), so they are owed and served first in the next batch.
    assert s.take(3, avoid=[0, 1]).tolist() == [2, 3, 4] and s.epoch == 1
    state = s.state_dict()
    assert state["owed"] == [0, 1] and [pid for pid, _ in state["rows"]] == list(range(5))
    assert s.take(2, avoid=[]).tolist() == [0, 1]
    restored = IterablePromptStream([{"i": i} for i in range(10)], shuffle=False)
    restored.load_state_dict(state)
    assert restored.take(2, avoid=[]).tolist() == [0, 1] and restored.row(1) == {"i": 1}
    assert restored.take(6, avoid=[0, 1]).tolist() == [5, 6, 7, 8, 9, 2]  # epoch 2 owes 0 and 1 in turn


@pytest.mark.parametrize("use_state", [True, False])
def test_iterable_stream_resumes_at_the_saved_position(use_state):
    rows = [{"i": i} for i in range(40)]

    def run(stream, batches):
        out = []
        for _ in range(batches):
            out.append(stream.take(3, avoid=[]).tolist())
            stream.release(keep=out[-1][:1])  # one prompt "carried" into the next batch
        return out

    straight = IterablePromptStream(CountingSource(rows, use_state=use_state), seed=1, shuffle=True, buffer_size=6)
    head = run(straight, 3)
    state = json.loads(json.dumps(straight.state_dict()))  # plain values, rows included
    assert (state["epoch"], state["cursor"], state["source_state"]) == (0, 14, 14 if use_state else None)
    tail = run(straight, 11)  # 42 draws: into epoch 1
    assert straight.epoch == 1 and sum(head, []) == reference_buffered_order(40, 6, seed=1)[:9]
    source = CountingSource(rows, use_state=use_state)
    resumed = IterablePromptStream(source, seed=1, shuffle=True, buffer_size=6)
    resumed.load_state_dict(state)
    assert resumed.row(head[-1][0]) == rows[head[-1][0]]  # the carried prompt's row came with the state
    assert run(resumed, 11) == tail and resumed.state_dict() == straight.state_dict()
    # The pass reopened at the saved position: with a token it read no row before it; without, it skipped them.
    assert source.opens[0] == (14, 14 if use_state else None)
    assert source.yielded == 40 - 14 + (14 if not use_state else 0) + resumed.cursor


def test_iterable_stream_state_errors():
    s = IterablePromptStream([{"i": 0}, {"i": 1}], seed=0)
    s.take(1)
    with pytest.raises(ValueError, match="saved with seed=0, this stream has seed=1"):
        IterablePromptStream([{"i": 0}], seed=1).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="saved by a PromptStream"):
        IterablePromptStream([{"i": 0}]).load_state_dict(PromptStream(2).state_dict())
    with pytest.raises(ValueError, match="saved by an IterablePromptStream"):
        PromptStream(2).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="lacks the rows of prompts"):
        IterablePromptStream([{"i": 0}], seed=0).load_state_dict({**s.state_dict(), "rows": []})


def test_iterable_stream_end_of_data():
    finite = IterablePromptStream([{"i": i} for i in range(10)], shuffle=False, wrap=False)
    assert [finite.take(4, avoid=[]).tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert finite.exhausted and finite.take(2).tolist() == []
    # A pass of another length than the first cannot keep ids stable: an error, not silently different prompts.
    changing = IterablePromptStream(CountingSource([{"i": i} for i in range(10)], short_second_pass=True),
                                    shuffle=False)
    changing.take(10)
    with pytest.raises(ValueError, match="yielded 7 rows in epoch 1 and 10 in the first"):
        changing.take(10)
    with pytest.raises(ValueError, match="one-shot iterator"):
        IterablePromptStream(iter([{"i": 0}]))
    with pytest.raises(ValueError, match="yielded no rows"):
        IterablePromptStream([]).take(1)
    with pytest.raises(ValueError, match="buffer_size must be an integer >= 1"):
        IterablePromptStream([{"i": 0}], buffer_size=0)


def test_iterable_stream_small_data_repeat_and_say_so_once(repeats_log):
    s = IterablePromptStream([{"i": i} for i in range(5)], shuffle=False)
    assert s.take(7, avoid=[]).tolist() == [0, 1, 2, 3, 4, 0, 1]
    assert s.take(3, avoid=[0, 1, 2, 3, 4]).tolist() == [2, 3, 4]
    assert repeats_log() == ["the dataset has 5 prompts and one batch needs more distinct prompts than that, so some "
                             "prompts appear more than once in a batch (said once)"]


def test_iterable_stream_shards_are_disjoint_over_the_same_source():
    rows = [{"i": i} for i in range(10)]
    shards = [IterablePromptStream(rows, seed=4, rank=r, world=3) for r in range(3)]
    drawn = [s.take(len(range(r, 10, 3)), avoid=[]).tolist() for r, s in enumerate(shards)]
    assert sorted(sum(drawn, [])) == list(range(10))
    assert all(pid % 3 == r for r, ids in enumerate(drawn) for pid in ids)
    ordered = IterablePromptStream(rows, shuffle=False, rank=1, world=3)
    assert ordered.take(2, avoid=[0, 2]).tolist() == [1, 4]  # ids of other shards in avoid are ignored
    assert ordered.take(3, avoid=[4, 0]).tolist() == [7, 1, 4] and ordered.shard_rows == 3  # 4 owed in epoch 1
    with pytest.raises(ValueError, match="leaves process 2 of 3 no prompt"):
        IterablePromptStream(rows[:2], rank=2, world=3).take(1)


@pytest.mark.parametrize("cfg", [AllocationConfig(), AllocationConfig(carry_over=True),
                                 AllocationConfig(allocator="dynamic_sampling")])
def test_iterable_stream_in_source_order_draws_what_prompt_stream_draws(cfg):
    # Without shuffle both streams serve 0, 1, 2, ... with the same owed/epoch rules: the same steps, exactly.
    g = u_shaped_gammas(60, seed=5)
    a1, a2 = Allocator(cfg), Allocator(cfg)
    map_style, iterable = PromptStream(60, shuffle=False), IterablePromptStream([{"i": i} for i in range(60)],
                                                                              shuffle=False)
    t1, t2 = SimulatedTask(g, seed=5), SimulatedTask(g, seed=5)
    for _ in range(25):
        r1, r2 = a1.collect(t1, map_style, 4), a2.collect(t2, iterable, 4)
        assert r2.prompt_table["prompt_id"].tolist() == r1.prompt_table["prompt_id"].tolist()
        assert [vars(r) for r in r2.records] == [vars(r) for r in r1.records]
        iterable.release(keep=a2.carried_prompt_ids)
        # No shuffle, no buffer: only the rows of carried prompts (and of owed ones, skipped as in the batch) stay.
        held = set(a2.carried_prompt_ids.tolist()) | set(iterable.state_dict()["owed"])
        assert iterable.held_rows == len(held)
    assert iterable.epoch == map_style.epoch >= 1


def test_iterable_stream_rows_and_sizes():
    s = IterablePromptStream([{"i": i} for i in range(4)], shuffle=False)
    s.take(2)
    s.release(keep=[1])
    assert s.row(1) == {"i": 1}
    with pytest.raises(KeyError, match="prompt 0 is not held"):
        s.row(0)
    with pytest.raises(ValueError, match=r"cannot keep prompts \[3\]"):
        s.release(keep=[3])
    with pytest.raises(ValueError, match="no dataset size: history_decay and selection"):
        Allocator(AllocationConfig(history_decay=0.5)).collect(SimulatedTask(np.full(4, 0.5)), s, 1)
    with pytest.raises(ValueError, match="prompt id -1 is not a row position"):
        s.take(1, avoid=[-1])
