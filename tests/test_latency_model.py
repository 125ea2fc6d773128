"""The latency model's terms (benchmarks.simulator.latency) against closed forms worked by hand: the per-step
overhead, the finish events of a round call, the reward-pass cost, blocking and overlapped scoring (free-running
scorer and the trainer's fixed-lag protocol), and TRL's colocate max_num_seqs."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks.simulator.latency import (
    CallTrace,
    DecodeCost,
    DecodeEngine,
    EngineTally,
    RewardCost,
    call_cost,
    call_trace,
    overlapped_score_times,
    trace_time,
    trl_colocate_max_num_seqs,
)

REPO = Path(__file__).resolve().parents[1]


def _uniform_stream(events: int, per_event: int = 1, running: int = 4) -> CallTrace:
    """A streaming step whose events fall on engine steps 1..events, ``per_event`` completions each."""
    steps = np.arange(1, events + 1)
    return CallTrace(EngineTally(1, events, events * running), steps, steps * running,
                     np.full(events, per_event), streaming=True)


# ------------------------------------------------------------------------------------------------ decode cost
def test_per_step_overhead_adds_to_every_decode_step():
    tally = EngineTally(calls=2, steps=100, sequence_steps=3000)
    cost = DecodeCost("t", a=0.003, b=1e-5, c=0.2)
    assert cost.o == 0.0
    assert cost.seconds(tally) == pytest.approx(2 * 0.2 + 100 * 0.003 + 3000 * 1e-5)
    slow = cost.with_overhead(0.004)
    assert (slow.a, slow.b, slow.c, slow.o) == (0.003, 1e-5, 0.2, 0.004)
    assert slow.step == pytest.approx(0.007)
    assert slow.seconds(tally) - cost.seconds(tally) == pytest.approx(100 * 0.004)
    assert DecodeCost("p", 0.01, 0.001, 0.2, "src").o == 0.0  # positional construction unchanged
    with pytest.raises(ValueError, match="DecodeCost.o"):
        DecodeCost("x", a=0.0, b=0.0, c=0.0, o=-1e-3)


# ------------------------------------------------------------------------------------------------ finish events
def test_call_trace_events_without_a_queue():
    tr = call_trace([3, 5, 2, 7, 1, 5])
    # distinct lengths 1, 2, 3, 5, 7; tokens decoded by step L: sum_i min(t_i, L)
    assert tr.steps.tolist() == [1, 2, 3, 5, 7]
    assert tr.finished.tolist() == [1, 1, 1, 2, 1]
    assert tr.sequence_steps.tolist() == [6, 11, 15, 21, 23]
    assert tr.tally == call_cost([3, 5, 2, 7, 1, 5]) and not tr.streaming
    cost = DecodeCost("t", a=0.01, b=0.001, c=0.2, o=0.005)
    assert tr.event_seconds(cost).tolist() == pytest.approx([0.2 + k * 0.015 + s * 0.001
                                                             for k, s in zip([1, 2, 3, 5, 7], [6, 11, 15, 21, 23])])


def test_call_trace_events_with_a_queue():
    # cap 2, FIFO: 0 (3) and 1 (5) start; 0 ends at 3, 2 (2) starts; 1 and 2 end at 5; 3 (7) and 4 (1) start;
    # 4 ends at 6, 3 at 12
    tr = call_trace([3, 5, 2, 7, 1], 2)
    assert tr.steps.tolist() == [3, 5, 6, 12]
    assert tr.finished.tolist() == [1, 2, 1, 1]
    assert tr.sequence_steps.tolist() == [6, 10, 12, 18]
    assert tr.tally == call_cost([3, 5, 2, 7, 1], 2)


def test_engine_records_one_event_per_finishing_step():
    eng = DecodeEngine(max_running=2)
    for rid, length in enumerate([4, 4, 6]):
        eng.submit(rid, length)
    assert eng.run_to_next_finish() == [(0, 4), (1, 4)]
    assert eng.run_to_next_finish() == [(2, 6)]
    assert eng.events == [(4, 8, 2), (10, 14, 1)]
    tr = CallTrace.from_engine(eng)
    assert tr.streaming and tr.tally == EngineTally(1, 10, 14)
    assert tr.finished.tolist() == [2, 1]



def test_stepping_one_decode_step_at_a_time_gives_the_same_events_and_tally():
    """The scenario above, stepped with step_once: nothing finishes for 3 steps, requests 0 and 1 at step 4 (request
    2 then starts), request 2 at step 10; the same events and tally as jumping from finish to finish."""
    eng = DecodeEngine(max_running=2)
    for rid, length in enumerate([4, 4, 6]):
        eng.submit(rid, length)
    done = [eng.step_once() for _ in range(11)]
    assert done[:3] == [[], [], []] and done[3] == [(0, 4), (1, 4)]
    assert done[4:9] == [[]] * 5 and done[9] == [(2, 6)] and done[10] == []  # nothing running: no step counted
    assert eng.running == 0 and eng.events == [(4, 8, 2), (10, 14, 1)]
    assert eng.tally == EngineTally(0, 10, 14)


def test_step_once_counts_the_running_requests_and_an_abort_reports_its_tokens():
    eng = DecodeEngine(max_running=1)
    eng.submit(0, 5)
    eng.submit(1, 2)  # waits for the one slot
    assert eng.step_once() == [] and eng.step_once() == []
    assert eng.running == 1 and eng.in_flight == 2
    assert eng.abort(0) == 2  # request 1 starts in the freed slot
    assert eng.step_once() == [] and eng.step_once() == [(1, 2)]
    assert eng.tally.sequence_steps == 4 and eng.events == [(4, 4, 1)]

# ------------------------------------------------------------------------------------------------ reward passes
def test_reward_cost_is_per_call_plus_per_item_and_zero_for_nothing():
    r = RewardCost("r", per_call=0.02, per_item=0.001)
    assert r.seconds(0) == 0.0
    assert r.seconds(8) == pytest.approx(0.028)
    assert r.seconds(np.array([0, 1, 64])).tolist() == pytest.approx([0.0, 0.021, 0.084])
    assert RewardCost("free", 0.0).free and not r.free
    with pytest.raises(ValueError, match="RewardCost.per_item"):
        RewardCost("x", 0.0, -0.1)


def test_free_running_scorer_closed_forms():
    r = RewardCost("r", per_call=0.01, per_item=0.002)
    # events far apart: each is scored on arrival, f = t + s(n)
    assert overlapped_score_times([0.0, 1.0, 2.0], [1, 2, 3], r).tolist() == pytest.approx([0.012, 1.014, 2.016])
    # a burst: the first call takes event 0 alone, the second drains the four that arrived meanwhile
    f = overlapped_score_times([0.0, 0.001, 0.002, 0.003, 0.004], [1] * 5, r)
    assert f.tolist() == pytest.approx([0.012] + [0.012 + 0.01 + 4 * 0.002] * 4)
    # first in, first out instead: one call per event, f_e = max(f_(e-1), t_e) + s(n_e) (Lindley)
    fifo = overlapped_score_times([0.0, 0.001, 0.002, 0.003, 0.004], [1] * 5, r, drain=False)
    assert fifo.tolist() == pytest.approx([0.012 * (i + 1) for i in range(5)])
    with pytest.raises(ValueError, match="non-decreasing"):
        overlapped_score_times([1.0, 0.0], [1, 1], r)


def test_blocking_scoring_closed_forms():
    cost = DecodeCost("t", a=0.01, b=0.0, c=0.0)
    r = RewardCost("r", per_call=0.005, per_item=0.001)
    stream = _uniform_stream(10, per_event=2)
    t = trace_time(stream, cost, r, "blocking")
    assert t.engine == pytest.approx(0.1)
    assert t.seconds == pytest.approx(0.1 + 10 * (0.005 + 2 * 0.001))  # one pass per engine step with completions
    assert (t.passes, t.completions) == (10, 20)
    assert t.mean_lag == pytest.approx(0.007)
    rounds = call_trace([3, 5, 2, 7, 1])  # one pass of the whole round after its call
    t = trace_time(rounds, cost, r, "blocking")
    assert t.seconds == pytest.approx(0.07 + 0.005 + 5 * 0.001)
    assert t.passes == 1
    # no reward cost: the engine time alone, whatever the scoring
    for scoring in ("blocking", "overlapped"):
        assert trace_time(stream, cost, None, scoring).seconds == pytest.approx(0.1)
        assert trace_time(stream, cost, RewardCost("z", 0.0), scoring, lag=2).seconds == pytest.approx(0.1)
    with pytest.raises(ValueError, match="scoring"):
        trace_time(stream, cost, r, "async")
    with pytest.raises(ValueError, match="lag"):
        trace_time(stream, cost, r, "overlapped", lag=0)


def test_overlapped_round_waits_only_for_its_last_batch():
    # lengths 10, 20, 30 (one each), 0.01 s per step, c = 0: finishes at 0.1, 0.2, 0.3; a 0.02 s pass keeps up, so the
    # round ends 0.02 s after its last completion
    cost = DecodeCost("t", a=0.01, b=0.0, c=0.0)
    t = trace_time(call_trace([10, 20, 30]), cost, RewardCost("r", 0.02), "overlapped")
    assert t.seconds == pytest.approx(0.32)
    assert t.scoring == pytest.approx(0.02)
    # a 0.15 s pass falls behind, one event at a time: 0.1 -> 0.25, 0.25 -> 0.40, 0.40 -> 0.55
    t = trace_time(call_trace([10, 20, 30]), cost, RewardCost("r", 0.15), "overlapped")
    assert t.seconds == pytest.approx(0.55)
    assert t.passes == 3
    # a 0.25 s pass: 0.1 -> 0.35, by then both others wait and go in one call, 0.35 -> 0.60
    t = trace_time(call_trace([10, 20, 30]), cost, RewardCost("r", 0.25), "overlapped")
    assert t.seconds == pytest.approx(0.60)
    assert t.passes == 2


@pytest.mark.parametrize(("r0", "lag", "seconds", "passes", "mean_lag"), [
    # 10 engine steps of 0.01 s, one completion finishing at each. A pass faster than the lag never stalls: the step
    # ends lag steps after the last window closes.
    (0.005, 1, 0.11, 10, 0.01),
    (0.005, 2, 0.12, 5, 0.025),  # completions at 2j - 1 and 2j, applied after step 2j + 2: lags 3 and 2 steps
    (0.015, 2, 0.12, 5, 0.025),  # 0.015 s < two steps: still no stall
    # a pass slower than the lag: the engine runs at the scorer's pace, first step + 10 passes of 0.015 s
    (0.015, 1, 0.16, 10, 0.0195),
    (0.05, 1, 0.51, 10, 0.086),  # 0.01 + 10 x 0.05
    (0.05, 2, 0.27, 5, 0.079),  # 0.02 + 5 x 0.05
])
def test_fixed_lag_protocol_closed_forms(r0, lag, seconds, passes, mean_lag):
    cost = DecodeCost("t", a=0.01, b=0.0, c=0.0)
    t = trace_time(_uniform_stream(10), cost, RewardCost("r", r0), "overlapped", lag=lag)
    assert t.seconds == pytest.approx(seconds)
    assert t.passes == passes
    assert t.mean_lag == pytest.approx(mean_lag, abs=1e-9)
    assert t.engine == pytest.approx(0.1)


def test_fixed_lag_protocol_uses_the_running_sequences_between_events():
    # events at steps 3 and 7 (1 completion each), 5 sequences running until step 3, then 2: T(k) is piecewise
    # linear in (steps, sequence_steps); lag 2: windows end at 4 and 8, labels at 6 and 10; past the last event the
    # clock runs at the last interval's rate (a + 2 b)
    cost = DecodeCost("t", a=0.01, b=0.001, c=0.1)
    tr = CallTrace(EngineTally(1, 7, 15 + 8), np.array([3, 7]), np.array([15, 23]), np.array([1, 1]), True)
    t = trace_time(tr, cost, RewardCost("r", 0.001), "overlapped", lag=2)
    clock10 = 0.1 + 7 * 0.01 + 23 * 0.001 + 3 * (0.01 + 2 * 0.001)
    assert t.seconds == pytest.approx(clock10)
    assert t.engine == pytest.approx(0.1 + 0.07 + 0.023)


# ------------------------------------------------------------------------------------------------ TRL concurrency
def test_trl_colocate_max_num_seqs():
    assert trl_colocate_max_num_seqs(8, gradient_accumulation_steps=64) == 512  # examples/math_1p5b.py
    assert trl_colocate_max_num_seqs(8, gradient_accumulation_steps=128) == 1024  # B = 64 at k = 16
    assert trl_colocate_max_num_seqs(8, 64, steps_per_generation=4) == 32
    assert trl_colocate_max_num_seqs(8, 64, generation_batch_size=512, num_processes=2) == 256  # 512 // 16 = 32
    assert trl_colocate_max_num_seqs(4, 2, vllm_tensor_parallel_size=2) == 16
    with pytest.raises(ValueError, match="both"):
        trl_colocate_max_num_seqs(8, 64, steps_per_generation=4, generation_batch_size=512)
    with pytest.raises(ValueError, match="divisible"):
        trl_colocate_max_num_seqs(8, 1, generation_batch_size=100)
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        trl_colocate_max_num_seqs(0)


def test_trl_formula_is_the_installed_trl_one():
    """The cited line of TRL's GRPOTrainer, read from the installed package's source (TRL is not imported)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("trl is not installed")
    src = (Path(list(spec.submodule_search_locations)[0]) / "trainer" / "grpo_trainer.py").read_text()
    flat = re.sub(r"\s+", "", src)
    assert ("max_num_seqs=args.per_device_train_batch_size*args.vllm_tensor_parallel_size*args.steps_per_generation"
            in flat)
    cfg = (Path(list(spec.submodule_search_locations)[0]) / "trainer" / "grpo_config.py").read_text()
    assert "self.steps_per_generation = self.gradient_accumulation_steps" in cfg


def test_math_example_settings_give_512():
    tree = ast.parse((REPO / "examples" / "math_1p5b.py").read_text())
    defaults = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and any(getattr(t, "id", None) == "PAPER_DEFAULTS" for t in node.targets))
    kw = {k.arg: ast.literal_eval(k.value) for k in defaults.keywords}
    assert kw["vllm_mode"] == "colocate"
    assert trl_colocate_max_num_seqs(kw["per_device_train_batch_size"], kw["gradient_accumulation_steps"]) == 512


def test_simulated_engine_refuses_a_request_id_added_twice():
    """A request id names one rollout within a step: adding it again, queued or finished, is a collector bug."""
    from benchmarks.simulator import SimulatedTask
    from benchmarks.simulator.simulate import SimulatedEngine

    sim = SimulatedEngine(SimulatedTask(np.array([0.5]), seed=0), DecodeEngine(2))
    sim.add(0, [0])
    with pytest.raises(ValueError, match="request 0 was already added"):
        sim.add(0, [0])
    finished = []
    while not finished:
        finished = sim.step()
    assert [f.rid for f in finished] == [0] and sim.pending == 0
    with pytest.raises(ValueError, match="request 0 was already added"):
        sim.add(0, [0])
