"""The allocation core is open: an allocator defined in this file, with a rounds face and a streaming face, registers
itself (no file under src/ names it) and runs through the simulator in both schedules with the accounting invariant.

The toy rule ("two and two"): commit a prompt once it has at least two successes and two failures; abandon it when
its first ``n0`` outcomes agree, or when it reaches k rollouts undecided; otherwise give it one more rollout.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.simulator import SimulatedTask
from benchmarks.simulator.latency import DecodeEngine
from benchmarks.simulator.simulate import run_streaming_step, u_shaped_gammas
from sara_trl.allocation import AllocationConfig, AllocationConfigError, Allocator, PromptStream
from sara_trl.allocation.config import inert_options
from sara_trl.allocation.registry import REGISTRY, AllocatorSpec, register
from sara_trl.allocation.strategies.base import StrategyResult, StreamingPolicy
from sara_trl.allocation.types import ABANDON, COMMIT, CONTINUE, Fate, RoundOutcome

NAME = "two_and_two"


def two_and_two(n: np.ndarray, s: np.ndarray, n0: int, k: int) -> np.ndarray:
    """The toy rule on ``(P,)`` counts of rollouts ``n`` and successes ``s``: COMMIT, ABANDON or CONTINUE."""
    n, s = np.asarray(n), np.asarray(s)
    commit = (s >= 2) & (n - s >= 2)
    abandon = ~commit & (((n == n0) & ((s == 0) | (s == n))) | (n >= k))
    return np.where(commit, COMMIT, np.where(abandon, ABANDON, CONTINUE))


def collect_two_and_two(ctx):
    """Rounds face: each round gives every undecided prompt one more rollout and probes fresh ones with n0, as many
    as the groups still missing beyond the undecided prompts."""
    cfg, led = ctx.config, ctx.ledger
    while ctx.need > 0:
        act = led.active()
        fresh = max(ctx.need - len(act), 0)
        if led.generated + len(act) + fresh * cfg.n0 > ctx.budget:
            return StrategyResult("budget")
        pids = ctx.draw(fresh) if fresh else np.zeros(0, np.int64)
        if len(act) == 0 and len(pids) == 0:
            return StrategyResult("stream")
        new = led.add(pids)
        slots = np.concatenate([act, new])
        yield from led.round(slots, np.concatenate([np.ones(len(act), np.int64), np.full(len(new), cfg.n0)]))
        led.mark(slots, two_and_two(led.n[slots], led.s[slots], cfg.n0, cfg.k))
    return StrategyResult("filled")


class TwoAndTwoStreaming(StreamingPolicy):
    """Streaming face: probe n0, decide after each completion, one more request when all are in."""

    def __init__(self, collector, speculate=False):
        super().__init__(collector)
        self.probe = collector.config.n0

    def outcome(self, slot, was_mixed, score, actions):
        c = self.c
        led = c.ledger
        dec = int(two_and_two(led.n[slot], led.s[slot], c.config.n0, c.config.k))
        if dec != CONTINUE:
            c.close(slot, actions, Fate(dec))
        elif c.outstanding(slot) == 0:
            c.enqueue(slot, 1)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.delitem(REGISTRY, NAME, raising=False)
    spec = AllocatorSpec(name=NAME, rounds=collect_two_and_two, streaming=TwoAndTwoStreaming,
                         ignores=lambda config: {"tau_low"})
    register(spec)
    yield spec
    REGISTRY.pop(NAME, None)


def _check_rule(result, script, n0, k):
    """Every decided prompt's fate is the toy rule at its final count, and no earlier count decided it; the
    accounting invariant holds with no rollout carried."""
    st = result.stats
    st.check()
    assert st.rollouts_carried_in == 0
    assert st.rollouts_generated == (st.rollouts_trained + st.rollouts_abandoned + st.rollouts_surplus
                                     + st.rollouts_active_left)
    decided = 0
    for r in result.records:
        if r.fate == "active":
            continue
        row = script[r.prompt_id]
        counts = np.arange(n0, r.n + 1)
        rules = two_and_two(counts, np.cumsum(row)[counts - 1], n0, k)
        assert (rules[:-1] == CONTINUE).all(), (r, row)
        assert rules[-1] == (COMMIT if r.fate in ("trained", "surplus") else ABANDON), (r, row)
        decided += 1
    return decided


class Scripted:
    """Prompt p's j-th rollout succeeds iff script[p][j] == 1, whatever the order of calls; 10 + (3p + j) % 11
    tokens, so requests in flight finish at different engine steps."""

    def __init__(self, script):
        self.script, self.seen = script, np.zeros(len(script), np.int64)

    def __call__(self, prompt_ids, counts):
        succ, tokens = [], []
        for p, c in zip(np.asarray(prompt_ids).tolist(), np.asarray(counts).tolist()):
            for j in range(self.seen[p], self.seen[p] + c):
                succ.append(self.script[p][j])
                tokens.append(10 + (3 * p + j) % 11)
            self.seen[p] += c
        return RoundOutcome(np.asarray(succ, np.float64), np.asarray(tokens, np.int64))


def _script(num, k, seed):
    g = u_shaped_gammas(num, seed=seed)
    return (np.random.default_rng(seed).random((num, k)) < g[:, None]).astype(np.int64)


def test_a_registered_allocator_is_a_valid_option_in_both_schedules(toy):
    assert NAME in AllocationConfig.__dataclass_fields__["allocator"].metadata["choices"]
    assert AllocationConfig(allocator=NAME, collection="streaming").allocator == NAME
    assert inert_options(AllocationConfig(allocator=NAME, tau_low=0.3)) == ("tau_low",)
    with pytest.raises(AllocationConfigError, match="carry_over is a SARA option"):
        AllocationConfig(allocator=NAME, carry_over=True)


@pytest.mark.parametrize("schedule", ["rounds", "streaming"])
def test_the_toy_allocator_runs_through_the_simulator(toy, schedule):
    k, n0, B, num = 8, 2, 12, 3000
    script = _script(num, k, seed=5)
    cfg = AllocationConfig(allocator=NAME, k=k, n0=n0, collection=schedule)
    alloc = Allocator(cfg)
    stream = PromptStream(num, seed=2)
    if schedule == "rounds":
        result = alloc.collect(Scripted(script), stream, B)
        again = run_streaming_step(Allocator(cfg).rounds(PromptStream(num, seed=2), B), Scripted(script),
                                   DecodeEngine(64))
        # the event loop answers the same rounds: the same prompts, counts and fates
        for key in ("prompt_id", "n", "s", "fate"):
            np.testing.assert_array_equal(result.prompt_table[key], again.prompt_table[key])
    else:
        collector = alloc.streaming(stream, B, max_in_flight=32)
        result = run_streaming_step(collector, Scripted(script), DecodeEngine(32))
        assert result.stats.rollouts_aborted == collector.aborted_rollouts > 0  # in flight at the B-th commit
    assert result.stats.stop_reason == "filled"
    assert len(result.groups) == B and not any(g.is_fill for g in result.groups)
    for g in result.groups:  # a committed group has two successes and two failures
        assert (g.success == 1).sum() >= 2 and (g.success == 0).sum() >= 2
    assert _check_rule(result, script, n0, k) >= B


def test_the_toy_allocator_on_a_simulated_task_keeps_the_invariant_over_steps(toy):
    """Ten steps in each schedule on the simulated task (latent success rates, random lengths): every step fills its
    batch and keeps the accounting invariant, aborted requests included."""
    task = SimulatedTask(u_shaped_gammas(4000, seed=1), seed=3)
    for schedule in ("rounds", "streaming"):
        alloc = Allocator(AllocationConfig(allocator=NAME, k=8, collection=schedule))
        stream = PromptStream(4000, seed=0)
        for _ in range(10):
            if schedule == "rounds":
                res = alloc.collect(task, stream, 16)
            else:
                res = run_streaming_step(alloc.streaming(stream, 16, max_in_flight=64), task, DecodeEngine(64))
            res.stats.check()
            assert res.stats.stop_reason == "filled" and res.stats.committed >= 16
