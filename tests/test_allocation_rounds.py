"""Rounds as a policy of the event loop: :class:`RoundCollector` makes exactly the decisions of
:meth:`Allocator.collect` on the same outcomes, for every allocator and option, with rollout ids in finishing order."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask, u_shaped_gammas
from benchmarks.simulator.latency import DecodeEngine
from benchmarks.simulator.simulate import SimulatedEngine, run_streaming_step
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream
from sara_trl.allocation.event_loop import Finished, drive_streaming_engine
from sara_trl.allocation.labels import allocator_labels
from sara_trl.allocation.types import RoundOutcome

OPTIONS = [
    {"allocator": "sara"},
    {"allocator": "sara", "continue_to_decision": True},
    {"allocator": "sara", "commit_min": 4},
    {"allocator": "sara", "budget_cap": 1.5},
    {"allocator": "sara", "max_rollouts_per_round": 40},
    {"allocator": "sara", "carry_over": True},
    {"allocator": "sara", "stopping_rule": "bayes_optimal", "auto_min_prompts": 8},
    {"allocator": "sara", "stopping_rule": "bayes_optimal", "auto_min_prompts": 8, "cost_unit": "tokens"},
    {"allocator": "sara", "history_decay": 0.9, "selection": "greedy"},
    {"allocator": "sara", "carry_over": True, "stopping_rule": "bayes_optimal", "auto_min_prompts": 8},
    {"allocator": "dynamic_sampling"},
    {"allocator": "dynamic_sampling", "budget_cap": 2.0},
    {"allocator": "uniform"},
    {"allocator": "uniform", "max_rollouts_per_round": 24},
]


def _steps(options, through_engine, steps=4, B=6, k=8, max_running=32):
    """``steps`` steps of one allocator on one simulated task, by ``rollout_fn`` or through the event loop."""
    allocator = Allocator(AllocationConfig(k=k, **options))
    stream = PromptStream(300, seed=3)
    task = SimulatedTask(u_shaped_gammas(300, seed=5), seed=11)
    out = []
    for _ in range(steps):
        if through_engine:
            result = run_streaming_step(allocator.rounds(stream, B), task, DecodeEngine(max_running))
        else:
            result = allocator.collect(task, stream, B)
        out.append(result)
    return out, allocator


def _same_state(a, b):
    """Equal nested state; floats to 1e-12 (a sum over a round's rollouts may run in another order)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same_state(a[key], b[key])
    elif isinstance(a, (list, tuple, np.ndarray)) and np.asarray(a).dtype != object:
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-12, atol=0)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_state(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=0)
    else:
        assert a == b


def _same_step(a, b):
    assert dataclasses.asdict(a.stats) == dataclasses.asdict(b.stats)
    for key in a.prompt_table:
        np.testing.assert_array_equal(a.prompt_table[key], b.prompt_table[key], err_msg=key)
    assert a.round_sizes == b.round_sizes
    assert len(a.groups) == len(b.groups)
    for ga, gb in zip(a.groups, b.groups):  # the same rollouts, numbered in another order within a round
        assert (ga.prompt_id, ga.is_fill, len(ga.rollout_ids)) == (gb.prompt_id, gb.is_fill, len(gb.rollout_ids))
        assert sorted(ga.success.tolist()) == sorted(gb.success.tolist())
    assert len(a.carry_rollout_ids) == len(b.carry_rollout_ids)
    assert np.bincount(a.rollout_fates, minlength=5).tolist() == np.bincount(b.rollout_fates, minlength=5).tolist()


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_rounds_through_the_event_loop_decide_exactly_as_collect(options):
    direct, a1 = _steps(options, through_engine=False)
    looped, a2 = _steps(options, through_engine=True)
    for a, b in zip(direct, looped):
        _same_step(a, b)
    s1, s2 = a1.state_dict(), a2.state_dict()  # refill model, totals, extensions: identical
    c1, c2 = s1.pop("carry", None), s2.pop("carry", None)
    _same_state(s1, s2)
    if c1 is not None:  # the carried prompts are the same; their rollouts are the same per prompt, in another order
        assert {key: c1[key] for key in ("pid", "n", "nsc", "s", "p", "committed")} == \
            {key: c2[key] for key in ("pid", "n", "nsc", "s", "p", "committed")}
        for c in (c1, c2):
            c["rollouts"] = sorted(zip(c["r_slot"], c["r_success"], c["r_tokens"]))
        assert c1["rollouts"] == c2["rollouts"]
    assert sum(r.stats.rounds for r in direct) >= len(direct)


def test_round_rollouts_take_their_ids_in_finishing_order():
    cfg = AllocationConfig(allocator="uniform", k=4)
    collector = Allocator(cfg).rounds(PromptStream(2, shuffle=False), B=2)
    first = collector.start()
    assert [(r.rid, r.prompt_id) for r in first.submit] == [(i, i // 4) for i in range(8)]
    assert collector.in_flight == 8
    # finish in reverse order, tokens = 100 + request id
    for rid in range(7, 0, -1):
        assert collector.complete(rid, float(rid % 2), 100 + rid).submit == []
        assert collector.recorded == 8 - rid
    assert not collector.done
    collector.complete(0, 0.0, 100)
    assert collector.done and collector.in_flight == 0
    result = collector.finish()
    # prompt 0's requests 0-3 finished 8th..5th (ids 7, 6, 5, 4); prompt 1's 4-7 finished 1st..4th (ids 0..3)
    assert result.groups[0].rollout_ids.tolist() == [4, 5, 6, 7]
    assert result.groups[1].rollout_ids.tolist() == [0, 1, 2, 3]
    assert result.groups[1].success.tolist() == [1.0, 0.0, 1.0, 0.0]  # requests 7, 6, 5, 4
    assert result.stats.tokens_generated == sum(100 + rid for rid in range(8))
    assert result.prompt_table["tokens"].tolist() == [400 + 6, 400 + 22]


def test_round_collector_refuses_what_rounds_cannot_mean():
    collector = Allocator(AllocationConfig(allocator="uniform", k=2)).rounds(PromptStream(4), B=1)
    with pytest.raises(RuntimeError, match="needs a started step"):
        collector.complete(0, 1.0, 3)
    collector.start()
    with pytest.raises(RuntimeError, match="already called"):
        collector.start()
    with pytest.raises(ValueError, match="not a request of the current round"):
        collector.complete(2, 1.0, 3)
    with pytest.raises(ValueError, match="success must be 0, 1 or NaN"):
        collector.complete(0, 0.5, 3)
    with pytest.raises(ValueError, match="token count"):
        collector.complete(0, 1.0, -1)
    collector.complete(0, float("nan"), 3)
    with pytest.raises(ValueError, match="scored once"):
        collector.complete(0, 1.0, 3)
    with pytest.raises(ValueError, match="rounds never abort"):
        collector.aborted(1, 2)
    with pytest.raises(ValueError, match="rounds never abort"):
        collector.withdrawn(1)
    with pytest.raises(RuntimeError, match="before the step is done"):
        collector.finish()
    collector.complete(1, 1.0, 4)
    result = collector.finish()
    assert result.stats.unscorable == 1 and result.stats.tokens_generated == 7
    with pytest.raises(RuntimeError, match="already called"):
        collector.finish()
    with pytest.raises(ValueError, match="collection='streaming'"):
        Allocator(AllocationConfig(allocator="sara", collection="streaming")).rounds(PromptStream(4), B=1)


class _ScoredTask:
    """Prompt p's rollouts all fail, with format scores that spread for even p: ``0.1 * (j % 2)`` for its j-th
    request of the round (odd p: all 0)."""

    def scores(self, prompt_ids, counts):
        out = []
        for pid, count in zip(prompt_ids, counts):
            out += [0.1 * (j % 2) if pid % 2 == 0 else 0.0 for j in range(count)]
        return np.array(out)

    def __call__(self, prompt_ids, counts):  # the trainer's rollout_fn labels a round by allocator_labels
        scores = self.scores(prompt_ids, counts)
        return RoundOutcome(allocator_labels(scores, counts, 0.5, "score"), np.full(len(scores), 5))


def test_ds_filter_score_relabels_a_round_as_the_rollout_fn_does():
    cfg = AllocationConfig(allocator="dynamic_sampling", k=4, ds_filter="score", budget_cap=3.0)
    direct = Allocator(cfg).collect(_ScoredTask(), PromptStream(40, shuffle=False), B=3)
    collector = Allocator(cfg).rounds(PromptStream(40, shuffle=False), B=3)
    actions = collector.start()
    task = _ScoredTask()
    while not collector.done:
        pids = [r.prompt_id for r in actions.submit]  # prompt-major, as submitted
        blocks = list(dict.fromkeys(pids))
        scores = task.scores(blocks, [pids.count(pid) for pid in blocks])
        # labels as the scorer gives them (score > threshold: all 0), the scores beside them, finishing backwards
        for i in range(len(pids) - 1, -1, -1):
            step = collector.complete(actions.submit[i].rid, 0.0, 5, score=float(scores[i]))
        actions = step
    looped = collector.finish()
    _same_step(direct, looped)
    assert looped.stats.committed == 3 and [g.prompt_id % 2 for g in looped.groups] == [0, 0, 0]
    with pytest.raises(ValueError, match="needs each completion's score"):
        fresh = Allocator(cfg).rounds(PromptStream(40), B=3)
        fresh.start()
        fresh.complete(0, 0.0, 5)


class _SlowScorer:
    """Labels from the simulated engine, after ``delay`` seconds per reward pass."""

    def __init__(self, engine, delay):
        self.engine, self.delay, self.passes = engine, delay, 0

    def score(self, prompt_ids, batch: list[Finished]):
        time.sleep(self.delay)
        self.passes += 1
        return np.array([self.engine.success.pop(f.rid) for f in batch])

    def keep(self, positions):
        pass


@pytest.mark.parametrize("lag", [0, 1, 3])
def test_overlapped_scoring_leaves_round_decisions_unchanged(lag):
    """A round decides only once it is all in, so the reward lag changes when labels arrive, never a decision;
    with lag >= 1 the passes overlap the round's slowest completions."""
    def run(reward_lag):
        allocator = Allocator(AllocationConfig(allocator="sara", k=8))
        sim = SimulatedEngine(SimulatedTask(u_shaped_gammas(200, seed=1), seed=2), DecodeEngine(16))
        collector = allocator.rounds(PromptStream(200, seed=4), B=4)
        scorer = _SlowScorer(sim, 0.002)
        run = drive_streaming_engine(collector, sim, lambda pid: [pid], scorer, reward_lag=reward_lag)
        return collector.finish(), run, scorer

    base, base_run, _ = run(0)
    result, stream_run, scorer = run(lag)
    _same_step(base, result)
    for ga, gb in zip(base.groups, result.groups):  # the engine schedule is the same too: identical ids
        assert ga.rollout_ids.tolist() == gb.rollout_ids.tolist()
    assert stream_run.engine_steps == base_run.engine_steps
    assert stream_run.scored == result.stats.rollouts_generated
    assert 0.0 <= stream_run.reward_wait_seconds <= stream_run.reward_seconds + 0.5
    if lag == 0:
        assert stream_run.reward_wait_seconds == stream_run.reward_seconds


def test_an_empty_round_is_answered_at_once(monkeypatch):
    """A strategy that yields a round of nothing gets an empty outcome at once (no request would ever finish)."""
    from sara_trl.allocation.strategies import STRATEGIES, StrategyResult
    from sara_trl.allocation.types import Fate

    def empty_then_one(ctx):
        yield from ctx.ledger.round(np.zeros(0, np.int64), np.zeros(0, np.int64))
        slots = ctx.ledger.add(ctx.draw(1))
        yield from ctx.ledger.round(slots, np.array([2]))
        ctx.ledger.mark(slots, Fate.COMMITTED)
        return StrategyResult("filled")

    monkeypatch.setitem(STRATEGIES, "empty_then_one", empty_then_one)
    collector = Allocator(AllocationConfig(allocator="empty_then_one", k=2)).rounds(PromptStream(3), B=1)
    first = collector.start()
    assert [r.rid for r in first.submit] == [0, 1] and collector.rounds == 2  # the empty round counts, as in stats
    assert collector.round_of(0) == collector.round_of(1) == 2
    collector.complete(1, 1.0, 4)
    collector.complete(0, 0.0, 6)
    result = collector.finish()
    assert result.stats.rounds == 2 and result.round_sizes == [0, 2] and result.prompt_table["round"].tolist() == [2]
    assert result.groups[0].rollout_ids.tolist() == [0, 1] and result.groups[0].success.tolist() == [1.0, 0.0]


def _drive_backwards(collector, score_of):
    """Finish every round's requests last to first, success = score > 0.5, the score beside it."""
    actions = collector.start()
    while not collector.done:
        for request in reversed(actions.submit):
            score = score_of(request)
            step = collector.complete(request.rid, float(score > 0.5), 5, score=score)
        actions = step
    return collector.finish()


def test_ds_filter_score_labels_an_unspread_group_by_its_mean_as_rollout_fn_does():
    """Scores 0.5 and 0.50000006 straddle the threshold but do not spread beyond float noise: the group is not mixed
    (its mean labels it), whatever the per-completion labels say."""
    cfg = AllocationConfig(allocator="dynamic_sampling", k=4, ds_filter="score", budget_cap=1.0)
    scores = np.array([0.5, 0.50000006] * 2)
    direct = Allocator(cfg).collect(lambda p, c: RoundOutcome(allocator_labels(scores, c, 0.5, "score"),
                                                              np.full(4, 5)), PromptStream(4), B=1)
    looped = _drive_backwards(Allocator(cfg).rounds(PromptStream(4), B=1), lambda r: float(scores[r.rid % 4]))
    _same_step(direct, looped)
    assert (looped.stats.committed, looped.stats.abandoned, looped.stats.stop_reason) == (0, 1, "budget")


def test_score_and_label_must_agree_on_nan():
    cfg = AllocationConfig(allocator="dynamic_sampling", k=2, ds_filter="score")
    collector = Allocator(cfg).rounds(PromptStream(4), B=1)
    collector.start()
    with pytest.raises(ValueError, match="NaN exactly when its success label is NaN"):
        collector.complete(0, float("nan"), 5, score=0.5)
    with pytest.raises(ValueError, match="NaN exactly when its success label is NaN"):
        collector.complete(0, 1.0, 5, score=float("nan"))
    collector.complete(0, float("nan"), 5, score=float("nan"))  # unscorable both ways: fine


def test_ids_tokens_and_labels_are_never_truncated():
    collector = Allocator(AllocationConfig(allocator="uniform", k=2)).rounds(PromptStream(4), B=1)
    collector.start()
    for bad in (0.7, "0", True):
        with pytest.raises(ValueError, match="request id must be an integer"):
            collector.complete(bad, 1.0, 3)
    with pytest.raises(ValueError, match="token count must be an integer"):
        collector.complete(0, 1.0, 2.9)
    with pytest.raises(ValueError, match="token count must be an integer"):
        collector.complete(0, 1.0, float("nan"))
    with pytest.raises(ValueError, match="success must be a number"):
        collector.complete(0, "nan", 3)
    collector.complete(np.int64(0), None, 3.0)  # numpy ids, integral floats and None (unscorable) are fine
    collector.complete(1, 1.0, 4)
    assert collector.finish().stats.tokens_generated == 7
    with pytest.raises(ValueError, match="integer request positions"):
        RoundOutcome.coerce(RoundOutcome(np.zeros(2), np.ones(2, np.int64), order=np.arange(2) + 0.5), 2)


def test_a_failing_strategy_fails_the_step(monkeypatch):
    from sara_trl.allocation.strategies import STRATEGIES

    def one_round_then_fail(ctx):
        slots = ctx.ledger.add(ctx.draw(1))
        yield from ctx.ledger.round(slots, np.array([2]))
        raise KeyError("the strategy broke")

    monkeypatch.setitem(STRATEGIES, "broken", one_round_then_fail)
    collector = Allocator(AllocationConfig(allocator="broken", k=2)).rounds(PromptStream(3), B=1)
    collector.start()
    collector.complete(0, 1.0, 3)
    with pytest.raises(KeyError, match="the strategy broke"):
        collector.complete(1, 0.0, 3)
    assert collector.recorded == 2 and not collector.done
    for call in (lambda: collector.complete(1, 0.0, 3), collector.finish):
        with pytest.raises(RuntimeError, match="this step failed .KeyError"):
            call()


def test_rounds_takes_the_step_when_called_as_streaming_does():
    """Allocator.rounds() starts the step at once: the carry is taken then (a collect() right after starts without
    it), as Allocator.streaming() does."""
    cfg = AllocationConfig(allocator="sara", k=8, carry_over=True)
    allocator, stream = Allocator(cfg), PromptStream(300, seed=3)
    task = SimulatedTask(u_shaped_gammas(300, seed=5), seed=11)
    first = allocator.collect(task, stream, 6)
    carried = allocator.carried_prompts
    assert carried > 0 and len(first.carry_rollout_ids) > 0
    collector = allocator.rounds(stream, 6)
    assert allocator.carried_prompts == 0 and "carry" not in allocator.state_dict()
    result = run_streaming_step(collector, task, DecodeEngine(32))
    assert result.stats.carried_in == carried
