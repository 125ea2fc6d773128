"""The GPU decode-loop timing (benchmarks/gpu/engine_trace.py): its engine is the latency model's engine one decode
step at a time, its priced replays reproduce the committed timed runs, and the committed report is what the
committed result files render to. The GPU itself is not needed: the toy decoder runs on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.gpu import engine_trace as et
from benchmarks.simulator import SimulatedTask, u_shaped_gammas
from benchmarks.simulator.latency import DecodeEngine
from benchmarks.simulator.simulate import run_streaming_step
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream
from sara_trl.allocation.event_loop import drive_streaming_engine
from sara_trl.allocation.refill import fresh_affordable
from sara_trl.allocation.strategies.sara import SaraStreaming

SIZES = et.capture_sizes(et.MAX_NUM_SEQS)


def _docs() -> dict:
    return {k: json.loads((et.HERE / f).read_text()) for k, f in et.FILES.items()}


def test_capture_sizes_and_buckets():
    assert SIZES[:5] == [1, 2, 4, 8, 16] and SIZES[-2:] == [496, 512] and len(SIZES) == 51
    steps = et.PricedSteps(SIZES)
    assert [steps.bucket(r) for r in (1, 3, 8, 9, 250, 257, 512)] == [1, 4, 8, 16, 256, 272, 512]
    with pytest.raises(ValueError, match="exceed the largest captured batch 512"):
        steps.bucket(513)


def test_price_is_bucket_time_plus_overhead_per_step_and_rounds_pay_their_reward_passes():
    bs = {"1": 0.003, "8": 0.004}
    row = {"by_bucket": {"1": 10, "8": 5}, "rounds": 2, "rollouts": 30}
    assert et.price(row, bs) == pytest.approx(10 * 0.003 + 5 * 0.004)
    assert et.price(row, bs, 0.008) == pytest.approx(10 * 0.011 + 5 * 0.012)
    assert et.price(row, bs, 0.008, reward=True) == pytest.approx(
        10 * 0.011 + 5 * 0.012 + 2 * et.REWARD_R0 + 30 * et.REWARD_R1)
    assert et.price(row | {"rounds": 0}, bs, 0.0, reward=True) == pytest.approx(0.05)  # streaming: overlapped


@pytest.mark.parametrize("overrides", [dict(allocator="dynamic_sampling"), dict(allocator="sara"),
                                       dict(allocator="sara", collection="streaming"),
                                       dict(allocator="dynamic_sampling", collection="streaming")])
def test_trace_engine_is_the_latency_models_engine_one_decode_step_at_a_time(overrides):
    """The same collector on the same outcomes: the GPU engine's decode steps and sequence-steps are the
    DecodeEngine's (which jumps from finish to finish), and every step is charged to its bucket."""
    cfg = AllocationConfig(k=8, **overrides)
    streaming = cfg.collection == "streaming"

    def collector():
        alloc = Allocator(cfg)
        stream = PromptStream(4096, seed=3)
        return alloc.streaming(stream, 16, 96) if streaming else alloc.rounds(stream, 16)

    def task():
        return SimulatedTask(u_shaped_gammas(4096, seed=3), tokens_pass=20, tokens_fail=40, seed=3)

    model = DecodeEngine(96)
    ref = run_streaming_step(collector(), task(), model, max_tokens=64).stats
    engine = et.GPUTraceEngine(task(), et.PricedSteps(SIZES), 96, 64)
    coll = collector()
    drive_streaming_engine(coll, engine, lambda pid: [pid], et.TraceScorer(engine, None))
    got = coll.finish().stats
    assert (engine.steps, engine.sequence_steps) == (model.tally.steps, model.tally.sequence_steps)
    assert (got.rollouts_generated, got.tokens_generated) == (ref.rollouts_generated, ref.tokens_generated)
    assert sum(b * c for b, c in engine.by_bucket.items()) >= engine.sequence_steps  # a bucket holds its step
    assert engine.pending == 0


def _scripted(lengths):
    lengths = iter(lengths)

    def task(pids, counts):
        from sara_trl.allocation.types import RoundOutcome
        return RoundOutcome(success=np.ones(len(pids)), tokens=np.array([next(lengths) for _ in pids]))

    return task


def test_trace_engine_cuts_at_max_tokens_queues_beyond_max_running_and_reports_aborted_tokens():
    engine = et.GPUTraceEngine(_scripted([3, 5, 2]), et.PricedSteps(SIZES), max_running=2, max_tokens=4)
    for rid in range(3):
        engine.add(rid, [rid])
    done = [[(f.rid, len(f.completion_ids)) for f in engine.step()] for _ in range(4)]
    # rid 0 finishes after its 3 steps; rid 1 is cut at 4 tokens; rid 2 waits for rid 0's slot, starts after step 3
    assert done == [[], [], [(0, 3)], [(1, 4)]]
    assert engine.abort([2]) == [1]  # it decoded step 4 only
    assert engine.pending == 0 and engine.sequence_steps == 2 + 2 + 2 + 2
    assert engine.by_bucket == {2: 4}
    with pytest.raises(ValueError, match="request 2 was already added"):
        engine.add(2, [2])


def test_trace_engine_aborts_a_waiting_request_with_no_tokens_and_refuses_an_unknown_one():
    engine = et.GPUTraceEngine(_scripted([5, 5]), et.PricedSteps(SIZES), max_running=1, max_tokens=8)
    engine.add(0, [0])
    engine.add(1, [1])
    assert engine.step() == [] and engine.abort([1]) == [0]  # still queued behind request 0
    with pytest.raises(KeyError, match="request 7 is not in flight"):
        engine.abort([7])
    assert engine.abort([0]) == [1] and engine.pending == 0


def test_priced_replays_reproduce_the_committed_timed_runs_step_for_step():
    timed = _docs()["timed_eighth"]
    steps = et.PricedSteps(timed["graphs"]["sizes"])
    for label, runs in timed["runs"].items():
        if et.CONFIGS[label][1]:  # scored: decisions wait on real reward passes
            continue
        for seed, rows in runs.items():
            got = et.run_config(label, int(seed), steps, 1, timed["settings"]["length_scale"])[0]
            for key in ("by_bucket", "engine_steps", "sequence_steps", "rollouts", "tokens", "rounds"):
                assert got[key] == rows[0][key], (label, seed, key)


def test_committed_engine_trace_report_is_what_the_result_files_render_to():
    assert et.render(_docs()) == (et.HERE / "ENGINE_TRACE.md").read_text()


def test_toy_decoder_and_eager_steps_on_cpu():
    torch = pytest.importorskip("torch")
    dec = et.Decoder(et.TINY, max_batch=8, context=16, device="cpu", dtype=torch.float32)
    steps = et.GraphSteps(dec, [1, 4, 8])
    assert steps.graphs == {} and steps.capture_seconds == 0.0  # no CUDA: eager
    before = dec.k_cache[:, :4, :, -1].clone()
    assert steps.run(3) == 4
    assert bool((dec.tokens[:4] >= 0).all() and (dec.tokens[:4] < et.TINY["vocab"]).all())
    assert not torch.equal(dec.k_cache[:, :4, :, -1], before)  # the new K went to the last position
    assert torch.equal(dec.k_cache[:, 4:, :, -1], torch.zeros_like(dec.k_cache[:, 4:, :, -1]))  # rows past 4 idle
    assert set(steps.time_buckets(1)) == {1, 4, 8}


def test_the_affordable_shortcut_equals_the_exact_reserve(monkeypatch):
    """SARA's streaming policy (SaraStreaming.affordable) skips the per-prompt reserve only where its upper bound
    already affords the wanted prompts; under a tight budget cap (where the reserve binds) every call equals the exact
    formula."""
    calls, reserved_calls = [], [0]
    original = SaraStreaming.affordable
    reserved = SaraStreaming.reserved

    def counted(self):
        reserved_calls[0] += 1
        return reserved(self)

    def checked(self, left, wanted):
        before = reserved_calls[0]
        got = original(self, left, wanted)
        shortcut = reserved_calls[0] == before
        exact = wanted if wanted <= 0 else min(wanted, fresh_affordable(left, reserved(self), self.c.fresh_cost()))
        calls.append((got, exact, wanted, shortcut and wanted > 0))
        return got

    monkeypatch.setattr(SaraStreaming, "reserved", counted)
    monkeypatch.setattr(SaraStreaming, "affordable", checked)
    for cap in (1.5, 6.0):
        alloc = Allocator(AllocationConfig(k=8, allocator="sara", collection="streaming", budget_cap=cap))
        task = SimulatedTask(u_shaped_gammas(4096, seed=1), tokens_pass=20, tokens_fail=40, seed=1)
        run_streaming_step(alloc.streaming(PromptStream(4096, seed=1), 32, 128), task, DecodeEngine(128))
    assert len(calls) > 20 and all(g == e for g, e, _, _ in calls)
    assert any(short for *_, short in calls)  # the bound afforded the prompts: no per-prompt reserve computed
    assert any(g < w for g, _, w, _ in calls)  # the budget bound: the exact reserve was computed and decided


def test_the_priced_replays_start_from_the_timed_full_length_run():
    """engine_trace_priced.json was priced with engine_trace_scale1.json's step times, and its seed-0 first step is
    that timed run, engine step for engine step (JSON only: nothing is rerun)."""
    docs = _docs()
    timed, priced = docs["timed_full"], docs["priced"]
    assert priced["bucket_seconds"] == timed["bucket_seconds"]
    assert priced["settings"]["length_scale"] == timed["settings"]["length_scale"] == 1.0
    for label, runs in timed["runs"].items():
        first = priced["runs"][label]["0"][0]
        for key in ("by_bucket", "engine_steps", "sequence_steps", "rollouts", "tokens", "rounds"):
            assert first[key] == runs["0"][0][key], (label, key)
