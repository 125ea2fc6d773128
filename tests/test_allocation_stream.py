"""The prompt stream never puts a prompt twice in one batch unless the dataset is too small, says so once, and stays
deterministic and checkpointable."""

import logging

import numpy as np
import pytest

import sara_trl.allocation.stream as stream_module
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, SimulatedTask, u_shaped_gammas

LOGGER = "sara_trl.allocation.stream"


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
