"""Streaming collection's engine loop (``sara_trl.trainer.streaming``) on a scripted engine, plus its small pieces.

The scripted engine decodes one token per running request per step; request ``rid`` runs ``length[rid]`` steps and
its first completion token says whether it succeeded. The scenarios are small enough to follow by hand (each test
says why its numbers are what they are), and one check replays random scenarios through the allocation core's own
simulated driver (``benchmarks.simulator.simulate.run_streaming_step``), which must make identical decisions.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pytest
import torch

from benchmarks.simulator.latency import DecodeEngine
from benchmarks.simulator.simulate import run_streaming_step as simulated_step
from sara_trl.allocation import (
    AllocationConfig,
    Allocator,
    PromptStream,
    ShardStream,
    StreamingCollector,
    merge_step_results,
)
from sara_trl.allocation.types import RoundOutcome
from sara_trl.trainer.config import SaraConfig
from sara_trl.trainer.rollout import RolloutCache
from sara_trl.trainer.streaming import (
    Finished,
    default_max_in_flight,
    drive_streaming_engine,
    shard_groups,
)


class ScriptedEngine:
    """Continuous batching without a cap: every added request decodes one token per step; request ``rid`` finishes
    after ``outcomes[rid][1]`` steps with completion ``[success, 7, 7, ...]``. Finished requests come out in id
    order within a step."""

    def __init__(self, outcomes):
        self.outcomes = outcomes
        self.running: dict[int, int] = {}  # rid -> tokens decoded
        self.added: list[int] = []
        self.aborted: list[tuple[int, int]] = []
        self.steps = 0

    @property
    def pending(self) -> int:
        return len(self.running)

    def add(self, rid, prompt_ids):
        assert rid not in self.running and rid not in self.added, f"request {rid} added twice"
        assert prompt_ids == [100, int(prompt_ids[1])]  # what prompt_tokens below returns
        self.added.append(rid)
        self.running[rid] = 0

    def step(self):
        self.steps += 1
        done = []
        for rid in sorted(self.running):
            self.running[rid] += 1
            success, length = self.outcomes[rid]
            if self.running[rid] == length:
                done.append(rid)
        for rid in done:
            del self.running[rid]
        return [Finished(rid, [int(self.outcomes[rid][0])] + [7] * (self.outcomes[rid][1] - 1),
                         [-0.5] * self.outcomes[rid][1]) for rid in done]

    def abort(self, rids):
        tokens = [self.running.pop(rid, 0) for rid in rids]
        self.aborted.extend(zip(rids, tokens))
        return tokens


class RecordingScorer:
    """Label = first completion token; keeps the recorded completions in order and counts every scoring."""

    def __init__(self, sleep=None):
        self.scored: list[int] = []
        self.kept: list[Finished] = []
        self._batches = deque()  # passes scored and not yet kept (the next may be scored before the last is kept)
        self._sleep = sleep

    def score(self, prompt_ids, batch):
        if self._sleep is not None:
            time.sleep(self._sleep())
        self.scored.extend(f.rid for f in batch)
        self._batches.append(batch)
        return np.array([float(f.completion_ids[0]) for f in batch])

    def keep(self, positions):
        batch = self._batches.popleft()
        self.kept.extend(batch[i] for i in positions)


def prompt_tokens(pid):
    return [100, int(pid)]


def ds_collector(B, k=2, mix=1.0, max_in_flight=4):
    """Dynamic sampling, refill sized with a fixed mix rate and no margin: fresh prompts = ceil((need - expected) /
    mix), at most max_in_flight // k at once."""
    cfg = AllocationConfig(allocator="dynamic_sampling", k=k, collection="streaming", refill_margin=0.0)
    stream = PromptStream(100, seed=0, shuffle=False)
    return StreamingCollector(cfg, B, stream.take, max_in_flight=max_in_flight,
                              mix_rate=lambda: np.full(k + 1, mix), fresh_cost=lambda: float(k))


def run(collector, outcomes, reward_lag=0, scorer=None):
    engine, scorer = ScriptedEngine(outcomes), scorer or RecordingScorer()
    stream = drive_streaming_engine(collector, engine, prompt_tokens, scorer, reward_lag=reward_lag)
    assert stream.scored == len(scorer.scored) and stream.reward_passes >= 1
    if reward_lag == 0:  # blocking: the engine waits for every pass
        assert stream.reward_wait_seconds == stream.reward_seconds
    return collector.finish(), engine, scorer, stream.engine_steps


# ------------------------------------------------------------------------------------------------ scripted scenarios
def test_abandon_then_commit_without_aborts():
    # B=1, k=2, mix rate 1: one prompt at a time. Prompt 0 (rids 0, 1) succeeds twice: abandoned when rid 1 finishes
    # at step 5; prompt 1 (rids 2, 3) is submitted then, rid 2 fails at step 5+2, rid 3 succeeds at 5+4: committed.
    outcomes = {0: (1, 3), 1: (1, 5), 2: (0, 2), 3: (1, 4)}
    result, engine, scorer, steps = run(ds_collector(B=1), outcomes)
    assert steps == engine.steps == 9
    assert engine.added == [0, 1, 2, 3] and engine.aborted == []
    assert scorer.scored == [0, 1, 2, 3] and [f.rid for f in scorer.kept] == [0, 1, 2, 3]
    assert [g.prompt_id for g in result.groups] == [1]
    np.testing.assert_array_equal(result.groups[0].rollout_ids, [2, 3])  # ids in recording order
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_abandoned, st.rollouts_surplus) == (4, 2, 2, 0)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_abandoned) == (14, 6, 8)
    assert st.rounds == 0 and st.stop_reason == "filled"


def test_commit_aborts_the_other_prompt_with_its_decoded_tokens():
    # Mix rate 0.5: two prompts at start (rids 0,1 -> prompt 0; 2,3 -> prompt 1). Prompt 0 mixes at step 2 (rid 1
    # fails): B=1 is filled, rids 2 and 3 are aborted after 2 decoded tokens each.
    outcomes = {0: (1, 1), 1: (0, 2), 2: (1, 6), 3: (0, 5)}
    result, engine, scorer, steps = run(ds_collector(B=1, mix=0.5), outcomes)
    assert steps == 2
    assert engine.aborted == [(2, 2), (3, 2)] and engine.pending == 0
    assert scorer.scored == [0, 1]
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_surplus) == (4, 2, 2)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_surplus) == (7, 3, 4)


def test_request_finishing_in_the_step_of_its_abort_is_scored_once_and_surplus():
    # As above, but rid 2 also finishes at step 2, after rid 1 in the engine's order: rid 1's commit asks to abort
    # rids 2 and 3; rid 2 is already done (not aborted in the engine, counted surplus with its 2 tokens, scored once
    # in the step's reward pass but not kept), rid 3 is aborted with 2 tokens.
    outcomes = {0: (1, 1), 1: (0, 2), 2: (1, 2), 3: (0, 5)}
    result, engine, scorer, steps = run(ds_collector(B=1, mix=0.5), outcomes)
    assert engine.aborted == [(3, 2)]
    assert scorer.scored == [0, 1, 2] and [f.rid for f in scorer.kept] == [0, 1]
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_surplus, st.tokens_surplus) == (4, 2, 4)


def test_requests_asked_for_and_aborted_in_one_step_never_reach_the_engine():
    # B=2, mix 0.5, cap 4: prompts 0 (rids 0,1) and 1 (rids 2,3), all finish at step 1 in id order. rid 1 commits
    # prompt 0; the refill then asks for a fresh prompt 2 (rids 4, 5: expected commits 0.5 < need 1). rid 3 commits
    # prompt 1: the batch is full, rids 4 and 5 are given up before they were sent: withdrawn, they are no rollouts
    # (nothing was generated) and the budget gets them back. Prompt 2 was drawn and ends the step with no rollout.
    outcomes = {0: (1, 1), 1: (0, 1), 2: (1, 1), 3: (0, 1)}
    collector = ds_collector(B=2, mix=0.5)
    result, engine, scorer, steps = run(collector, outcomes)
    assert steps == 1 and engine.added == [0, 1, 2, 3] and engine.aborted == []
    assert collector.submitted == 4 and collector.aborted_rollouts == 0
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_surplus, st.tokens_surplus) == (4, 4, 0, 0)
    assert st.prompts_drawn == 3 and result.prompt_table["n"].tolist() == [2, 2, 0]


# ------------------------------------------------------------------------------------------------ overlapped scoring
def test_overlapped_scoring_applies_labels_a_fixed_number_of_engine_steps_later():
    # The commit-and-abort scenario above with reward_lag=1: rid 0's label (step 1) is applied after step 2, rid 1's
    # (step 2) after step 3, so the commit comes one engine step later and rids 2 and 3 are aborted after 3 decoded
    # tokens each instead of 2: the surplus grows by 2 tokens, the decisions are the same.
    outcomes = {0: (1, 1), 1: (0, 2), 2: (1, 6), 3: (0, 5)}
    result, engine, scorer, steps = run(ds_collector(B=1, mix=0.5), outcomes, reward_lag=1)
    assert steps == 3
    assert engine.aborted == [(2, 3), (3, 3)] and engine.pending == 0
    assert scorer.scored == [0, 1] and [f.rid for f in scorer.kept] == [0, 1]
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_surplus) == (4, 2, 2)
    assert (st.tokens_generated, st.tokens_trained, st.tokens_surplus) == (9, 3, 6)
    assert [g.prompt_id for g in result.groups] == [0]
    st.check()


def test_completion_finishing_while_its_abort_is_on_the_way_is_surplus_and_not_aborted():
    # reward_lag=1: rid 2 finishes at step 3, the step after which rid 1's label commits prompt 0 and asks to abort
    # rids 2 and 3. rid 2 is already done: it is not aborted in the engine, and counts as surplus with its 3 tokens
    # (whether or not its own reward pass had started); rid 3 is aborted with 3 tokens.
    outcomes = {0: (1, 1), 1: (0, 2), 2: (1, 3), 3: (0, 5)}
    result, engine, scorer, steps = run(ds_collector(B=1, mix=0.5), outcomes, reward_lag=1)
    assert engine.aborted == [(3, 3)] and engine.pending == 0
    assert scorer.scored[:2] == [0, 1] and set(scorer.scored) <= {0, 1, 2}
    assert [f.rid for f in scorer.kept] == [0, 1]
    st = result.stats
    assert (st.rollouts_generated, st.rollouts_trained, st.rollouts_surplus, st.tokens_surplus) == (4, 2, 2, 6)
    st.check()


@pytest.mark.parametrize("allocator", ["sara", "dynamic_sampling"])
@pytest.mark.parametrize("reward_lag", [1, 3])
def test_overlapped_decisions_do_not_depend_on_reward_speed(allocator, reward_lag):
    """The same scenario scored by a fast scorer and by one that sleeps a random time per pass (so passes finish
    before or after their labels are due) gives the same step, request for request; every request is added once,
    then kept, aborted or surplus, and scored at most once."""
    rng = np.random.default_rng(7)
    outcomes = {rid: (int(rng.random() < 0.4), int(rng.integers(1, 12))) for rid in range(2000)}
    cfg = AllocationConfig(allocator=allocator, k=4, collection="streaming")
    runs = []
    for sleep in (None, np.random.default_rng(3).uniform):
        collector = Allocator(cfg).streaming(PromptStream(500, seed=1), 6, 12)
        scorer = RecordingScorer(None if sleep is None else (lambda draw=sleep: draw(0.0, 0.004)))
        runs.append((run(collector, outcomes, reward_lag=reward_lag, scorer=scorer), collector))
    (result_a, engine_a, scorer_a, steps_a), collector_a = runs[0]
    (result_b, engine_b, scorer_b, steps_b), _ = runs[1]
    assert result_a.stats == result_b.stats and steps_a == steps_b
    assert engine_a.added == engine_b.added and engine_a.aborted == engine_b.aborted
    assert [f.rid for f in scorer_a.kept] == [f.rid for f in scorer_b.kept]
    for key in result_a.prompt_table:
        np.testing.assert_array_equal(result_a.prompt_table[key], result_b.prompt_table[key])
    scored, aborted = set(scorer_a.scored), {rid for rid, _ in engine_a.aborted}
    assert len(scorer_a.scored) == len(scored) and not scored & aborted
    assert len(engine_a.added) == len(set(engine_a.added)) and aborted <= set(engine_a.added)
    assert len(scorer_a.kept) == collector_a.recorded == int(result_a.prompt_table["n"].sum())
    result_a.stats.check()


def test_overlapped_scorer_error_reaches_the_caller_and_empties_the_engine():
    class Broken(RecordingScorer):
        def score(self, prompt_ids, batch):
            raise ValueError("reward exploded")

    engine = ScriptedEngine({0: (1, 1), 1: (0, 3)})
    with pytest.raises(ValueError, match="reward exploded"):
        drive_streaming_engine(ds_collector(B=1), engine, prompt_tokens, Broken(), reward_lag=2)
    assert engine.pending == 0
    with pytest.raises(ValueError, match="reward_lag must be an integer"):
        drive_streaming_engine(ds_collector(B=1), ScriptedEngine({}), prompt_tokens, RecordingScorer(), reward_lag=-1)


def test_engine_that_loses_requests_fails_loudly_and_is_left_empty():
    class Lossy(ScriptedEngine):
        def step(self):
            super().step()
            self.running.clear()  # drops everything without reporting it
            return []

    collector, engine = ds_collector(B=1), Lossy({0: (1, 3), 1: (0, 3)})
    with pytest.raises(RuntimeError, match="holds no request"):
        drive_streaming_engine(collector, engine, prompt_tokens, RecordingScorer())


def test_scorer_error_aborts_everything_in_the_engine():
    class Broken(RecordingScorer):
        def score(self, prompt_ids, batch):
            raise ValueError("reward exploded")

    engine = ScriptedEngine({0: (1, 1), 1: (0, 3)})
    with pytest.raises(ValueError, match="reward exploded"):
        drive_streaming_engine(ds_collector(B=1), engine, prompt_tokens, Broken())
    assert engine.pending == 0 and engine.aborted == [(0, 0), (1, 1)]


@pytest.mark.parametrize("allocator", ["sara", "dynamic_sampling"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_decisions_as_the_core_simulated_driver(allocator, seed):
    """Random successes and lengths per request id: the engine loop and the allocation core's simulated driver
    (which applies every action at once, on a DecodeEngine) give the same step, event for event."""
    rng = np.random.default_rng(seed)
    outcomes = {rid: (int(rng.random() < 0.4), int(rng.integers(1, 12))) for rid in range(2000)}
    cfg = AllocationConfig(allocator=allocator, k=4, collection="streaming")
    B, cap = 6, 12

    alloc_a, alloc_b = Allocator(cfg), Allocator(cfg)
    collector_a = alloc_a.streaming(PromptStream(500, seed=seed), B, cap)
    result_a, engine, scorer, steps = run(collector_a, outcomes)

    submitted = iter(range(2000))

    def rollout_fn(pids, counts):
        rows = [outcomes[next(submitted)] for _ in pids]
        return RoundOutcome(success=np.array([float(s) for s, _ in rows]), tokens=np.array([n for _, n in rows]))

    decode = DecodeEngine()
    result_b = simulated_step(alloc_b.streaming(PromptStream(500, seed=seed), B, cap), rollout_fn, decode)
    assert result_a.stats == result_b.stats
    for key in result_a.prompt_table:
        np.testing.assert_array_equal(result_a.prompt_table[key], result_b.prompt_table[key])
    assert [g.rollout_ids.tolist() for g in result_a.groups] == [g.rollout_ids.tolist() for g in result_b.groups]
    assert steps == decode.tally.steps  # one engine step per decode step
    # every request: added once, then finished (scored once) or aborted, never both
    scored, aborted = set(scorer.scored), {rid for rid, _ in engine.aborted}
    assert len(scorer.scored) == len(scored) and not scored & aborted
    assert scored | aborted == set(engine.added) and len(engine.added) == collector_a.submitted - 0
    assert len(scorer.kept) == collector_a.recorded == int(result_a.prompt_table["n"].sum())
    result_a.stats.check()


# ------------------------------------------------------------------------------------------------ several processes
def test_shards_partition_the_dataset_and_resume():
    shards = [ShardStream(10, rank, 3, seed=4) for rank in range(3)]
    assert [s.num_prompts for s in shards] == [4, 3, 3]
    drawn = [s.take(s.num_prompts) for s in shards]
    assert sorted(np.concatenate(drawn).tolist()) == list(range(10))
    assert all((d % 3 == r).all() for r, d in enumerate(drawn))
    # avoid: ids of the shard are skipped (and owed), ids of other shards ignored
    shard = ShardStream(10, 1, 3, seed=0, shuffle=False)
    np.testing.assert_array_equal(shard.take(2, avoid=[1, 2, 5]), [4, 7])
    state = shard.state_dict()
    again = ShardStream(10, 1, 3, seed=0, shuffle=False)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.take(2), shard.take(2))
    with pytest.raises(ValueError, match="rank"):
        ShardStream(10, 0, 3, seed=0, shuffle=False).load_state_dict(state)
    with pytest.raises(ValueError, match="leaves process 3"):
        ShardStream(3, 3, 4)


def test_two_shards_merge_into_exactly_B_groups():
    cfg = AllocationConfig(allocator="sara", k=4, collection="streaming")
    B, world = 6, 2
    results, counts, caches = [], [], []
    for rank in range(world):
        rng = np.random.default_rng(rank)
        outcomes = {rid: (int(rng.random() < 0.5), int(rng.integers(1, 9))) for rid in range(2000)}
        collector = Allocator(cfg).streaming(ShardStream(200, rank, world, seed=0), shard_groups(B, world), 8)
        result, _, scorer, _ = run(collector, outcomes)
        results.append(result)
        counts.append(collector.recorded)
        cache = RolloutCache()
        for f in scorer.kept:
            cache.completion_ids.append(f.completion_ids)
            cache.logprobs.append(f.logprobs)
        cache.rewards.append(torch.tensor([[float(f.completion_ids[0])] for f in scorer.kept]))
        cache.success.append(np.array([float(f.completion_ids[0]) for f in scorer.kept]))
        cache.tokens.append(np.array([len(f.completion_ids) for f in scorer.kept]))
        cache.round_index.extend([0] * len(scorer.kept))
        caches.append(cache)
    merged = merge_step_results(results, counts)
    cache = RolloutCache.concat(caches)
    assert len(merged.groups) == B and merged.stats.batch_groups == B
    assert merged.stats.rollouts_generated == sum(r.stats.rollouts_generated for r in results)
    merged.stats.check()
    assert np.array_equal(merged.rollout_fates, np.concatenate([r.rollout_fates for r in results]))
    assert merged.rollout_fates.shape == (sum(counts),)
    pids = [g.prompt_id for g in merged.groups]
    assert [p % 2 for p in pids] == [0, 0, 0, 1, 1, 1] and len(set(pids)) == B  # process order, disjoint shards
    assert cache.num_rollouts == sum(counts)
    for g in merged.groups:  # merged ids point at the group's own completions
        for rid, success in zip(g.rollout_ids.tolist(), g.success.tolist()):
            assert cache.completion_ids[rid][0] == success and cache.success_labels()[rid] == success
    with pytest.raises(ValueError, match="prompt table"):
        merge_step_results(results, [counts[0] + 1, counts[1]])


def test_caches_with_carried_rollouts_concatenate_and_each_process_takes_back_its_own():
    """carry_over on 2 processes: each process's cache starts with the rollouts it carried in (1, then 2); the
    concatenation knows where they lie (carried_runs), so the step's generated rollouts are the others, and each
    process's slice of the merged carry ids (StepResult.carried_by) rebuilds exactly its own next-step cache."""
    from sara_trl.allocation import StepResult, StepStats

    def cache_of(tokens, carried):
        cache = RolloutCache(carried=carried)
        cache.completion_ids.extend([[t] * t for t in tokens])
        cache.logprobs.extend([None] * len(tokens))
        cache.rewards.append(torch.tensor([[float(t)] for t in tokens]))
        cache.success.append(np.array([float(t % 2) for t in tokens]))
        cache.tokens.append(np.array(tokens, np.int64))
        cache.round_index.extend([0] * len(tokens))
        return cache

    merged_cache = RolloutCache.concat([cache_of([1, 2, 3], carried=1), cache_of([4, 5, 6, 7], carried=2)])
    assert merged_cache.carried == 3 and merged_cache.carried_runs == [(0, 1), (3, 2)]
    np.testing.assert_array_equal(merged_cache.generated_ids(), [1, 2, 5, 6])
    assert RolloutCache.concat([cache_of([1, 2], carried=0)]).generated_ids().tolist() == [0, 1]
    # process 0 carries its ids [2, 0], process 1 its id [1] (merged: 3 + 1 = 4)
    merged = StepResult(groups=[], stats=StepStats(), carry_rollout_ids=np.array([2, 0, 4]), carry_split=[2, 1])
    own = [merged_cache.carry(merged.carried_by(rank)) for rank in range(2)]
    assert [c.completion_ids for c in own] == [[[3] * 3, [1]], [[5] * 5]]
    assert [c.carried for c in own] == [2, 1] and own[1].generated_ids().tolist() == []
    assert StepResult(groups=[], stats=StepStats(), carry_rollout_ids=np.array([3, 1])).carried_by(5).tolist() == [3, 1]
    with pytest.raises(ValueError, match="rank 2 is not one of the 2 merged processes"):
        merged.carried_by(2)


def test_shard_groups_and_default_concurrency():
    assert shard_groups(8, 2) == 4
    with pytest.raises(ValueError, match="multiple of 3"):
        shard_groups(8, 3)
    assert default_max_in_flight(4, 8, None) == 32
    assert default_max_in_flight(4, 8, 16) == 16
    assert default_max_in_flight(1, 8, 4) == 8


# ------------------------------------------------------------------------------------------------ configuration
def _config(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1, num_generations=4,
                per_device_train_batch_size=8, collection="streaming")
    return SaraConfig(**{**base, **kw})


def test_streaming_needs_a_colocated_vllm_engine(tmp_path):
    with pytest.raises(ValueError, match="use_vllm=True with vllm_mode='colocate' \\(got use_vllm=False\\)"):
        _config(tmp_path)
    with pytest.raises(ValueError, match="got use_vllm=True, vllm_mode='server'"):
        _config(tmp_path, use_vllm=True, vllm_mode="server")
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size=1"):
        _config(tmp_path, use_vllm=True, vllm_mode="colocate", vllm_tensor_parallel_size=2)
    with pytest.raises(ValueError, match="streaming_max_in_flight \\(3\\) must be an integer >= num_generations"):
        _config(tmp_path, use_vllm=True, vllm_mode="colocate", streaming_max_in_flight=3)
    with pytest.raises(ValueError, match="used only with collection='streaming'"):
        _config(tmp_path, collection="rounds", streaming_max_in_flight=8)
    with pytest.raises(ValueError, match="allocator='uniform'"):
        _config(tmp_path, use_vllm=True, vllm_mode="colocate", allocator="uniform")
    args = _config(tmp_path, use_vllm=True, vllm_mode="colocate", streaming_max_in_flight=8)
    assert args.to_allocation_config().collection == "streaming"


def test_overlap_round_scoring_needs_rounds_on_a_colocated_engine(tmp_path):
    with pytest.raises(ValueError, match="overlap_round_scoring=True adds a round's rollouts .*got use_vllm=False"):
        _config(tmp_path, collection="rounds", overlap_round_scoring=True)
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size=2"):
        _config(tmp_path, collection="rounds", overlap_round_scoring=True, use_vllm=True, vllm_mode="colocate",
                vllm_tensor_parallel_size=2)
    with pytest.raises(ValueError, match="overlaps them already"):
        _config(tmp_path, use_vllm=True, vllm_mode="colocate", overlap_round_scoring=True)
    with pytest.raises(ValueError, match="must be True or False"):
        _config(tmp_path, collection="rounds", overlap_round_scoring="yes")
    # collection='auto' picks streaming for SARA on this engine: its reward passes overlap already, nothing to refuse
    assert _config(tmp_path, use_vllm=True, vllm_mode="colocate", collection="auto",
                   overlap_round_scoring=True).schedule == "streaming"
    args = _config(tmp_path, use_vllm=True, vllm_mode="colocate", collection="rounds", overlap_round_scoring=True)
    assert args.overlap_round_scoring and args.to_allocation_config().collection == "rounds"


def test_colocate_sampling_params_match_trl():
    """The streaming engine's SamplingParams equal those TRL's colocate path hands to ``LLM.generate``."""
    pytest.importorskip("vllm")
    from trl.generation.vllm_generation import VLLMGeneration

    from sara_trl.trainer.trl.v1_16 import colocate_sampling_params

    captured = []

    class FakeLLM:
        def generate(self, prompts, sampling_params, use_tqdm):
            captured.append(sampling_params)
            return []

    gen = object.__new__(VLLMGeneration)
    settings = dict(mode="colocate", tensor_parallel_size=1, enable_sleep_mode=False, model=torch.nn.Linear(1, 1),
                    temperature=0.6, top_p=0.9, top_k=20, min_p=None, repetition_penalty=1.1,
                    max_completion_length=96, logprobs=0, structured_outputs_regex=None,
                    generation_kwargs={"presence_penalty": 0.2}, llm=FakeLLM(), accelerator=None)
    gen.__dict__.update(settings)
    gen.generate(prompts=[[1, 2, 3]], images=None, num_generations=1)
    ours = colocate_sampling_params(gen)
    assert repr(ours) == repr(captured[0])
    gen.generation_kwargs = {"n": 2}
    with pytest.raises(ValueError, match="n=2"):
        colocate_sampling_params(gen)
