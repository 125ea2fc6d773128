"""Continuous mode of the streaming collector (``B=None``): groups handed out one by one as they commit, freed slots
refilled at once, requests in flight running on across accounting windows, each window's accounting exact."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.simulator.simulate import u_shaped_gammas
from sara_trl.allocation import AllocationConfig, PromptStream, StreamingCollector
from sara_trl.allocation.types import WindowStats


class ScriptedEngine:
    """A continuous-batching engine on a script: prompt p's j-th request (in submission order) succeeds iff
    ``script[p][j]`` and decodes ``5 + (7p + 3j) % 17`` tokens, one token per request per time unit; requests
    finish in order of their end time (ties by request id); an abort reports the tokens decoded so far."""

    def __init__(self, script):
        self.script, self.seen, self.t = script, np.zeros(len(script), np.int64), 0
        self.running: dict[int, tuple[int, int, int, float]] = {}  # rid -> (prompt, start, end, success)

    def apply(self, collector, actions):
        for req in actions.submit:
            j = int(self.seen[req.prompt_id])
            self.seen[req.prompt_id] += 1
            length = 5 + (7 * req.prompt_id + 3 * j) % 17
            self.running[req.rid] = (req.prompt_id, self.t, self.t + length, float(self.script[req.prompt_id][j]))
        aborted = []
        for rid in actions.abort:
            _, start, _, _ = self.running.pop(rid)
            collector.aborted(rid, self.t - start)
            aborted.append(self.t - start)
        return aborted

    def next_finished(self):
        rid = min(self.running, key=lambda r: (self.running[r][2], r))
        pid, start, end, success = self.running.pop(rid)
        self.t = end
        return rid, pid, success, end - start


@pytest.mark.parametrize("allocator", ["sara", "dynamic_sampling"])
def test_continuous_mode_hands_out_groups_over_ten_windows_with_exact_accounting(allocator):
    k, cap, per_window, windows = 8, 32, 4, 10
    probe = 2 if allocator == "sara" else k
    num = 5000
    g = u_shaped_gammas(num, seed=2)
    script = (np.random.default_rng(2).random((num, 4 * k)) < g[:, None]).astype(np.int64)
    emitted = []
    collector = StreamingCollector(AllocationConfig(k=k, allocator=allocator, collection="streaming"), None,
                                   PromptStream(num, seed=0).take, max_in_flight=cap, on_group=emitted.append)
    engine = ScriptedEngine(script)
    log = []  # per recorded completion, in recording order: (prompt, success, tokens)
    aborted = engine.apply(collector, collector.start())
    assert len(engine.running) == cap  # the engine is filled at once
    window_log, survived = [], 0
    for w in range(windows):
        done_in_window, aborts_in_window, first = [], list(aborted), len(emitted)
        while len(emitted) - first < per_window:
            rid, pid, success, tokens = engine.next_finished()
            log.append((pid, success, tokens))
            done_in_window.append(tokens)
            aborts_in_window += engine.apply(collector, collector.complete(rid, success, tokens))
            assert cap - len(engine.running) < probe  # freed slots are refilled at once (whole probes)
        aborted = []
        running_before = set(engine.running)
        stats = collector.window()
        assert isinstance(stats, WindowStats)
        # nothing is aborted at the boundary: the same requests run on
        assert set(engine.running) == running_before and stats.in_flight == len(running_before) > 0
        window_log.append(running_before)
        if w:
            survived += len(window_log[-2] - running_before)  # requests of the last window that finished in this one
        # the window's accounting, from the engine's side
        groups = emitted[first:]
        assert stats.groups_emitted == len(groups) == per_window
        assert stats.rollouts_generated == len(done_in_window) + len(aborts_in_window)
        assert stats.tokens_generated == sum(done_in_window) + sum(aborts_in_window)
        assert stats.rollouts_aborted == len(aborts_in_window)
        assert stats.rollouts_emitted == sum(grp.size for grp in groups)
        assert stats.tokens_emitted == sum(log[i][2] for grp in groups for i in grp.rollout_ids.tolist())
        start, end = stats.rollouts_active
        assert stats.rollouts_generated == (stats.rollouts_emitted + stats.rollouts_abandoned + stats.rollouts_aborted
                                            + end - start)
        tstart, tend = stats.tokens_active
        assert stats.tokens_generated == (stats.tokens_emitted + stats.tokens_abandoned + stats.tokens_aborted
                                          + tend - tstart)
        # the ledger keeps only undecided prompts: the draw's avoid set stays small
        led = collector.ledger
        assert led.size == len(led.active()) and led.size <= cap
        assert end == int(led.n[: led.size].sum())
    assert survived > 0  # requests in flight ran on from one window into the next
    # every group is the prompt's recorded completions, committed by the rule: mixed, topped up to k (SARA) or k
    for grp in emitted:
        rows = [log[i] for i in grp.rollout_ids.tolist()]
        assert {pid for pid, _, _ in rows} == {grp.prompt_id}
        np.testing.assert_array_equal(grp.success, [success for _, success, _ in rows])
        assert grp.size == k and grp.effective
    ids = np.concatenate([grp.rollout_ids for grp in emitted])
    assert len(np.unique(ids)) == len(ids)
    # stop: everything in flight is aborted
    actions = collector.stop()
    assert sorted(actions.abort) == sorted(engine.running) and not actions.submit
    engine.apply(collector, actions)
    assert collector.done and collector.stop_reason == "stopped" and collector.in_flight == 0
    last = collector.window()
    assert last.rollouts_aborted == len(actions.abort) > 0 and last.in_flight == 0 and last.groups_emitted == 0


def test_continuous_mode_arguments_are_checked():
    cfg = AllocationConfig(k=8, collection="streaming")
    with pytest.raises(ValueError, match="needs"):
        StreamingCollector(cfg, None, PromptStream(10).take, max_in_flight=8)
    with pytest.raises(ValueError, match="on_group is for continuous mode"):
        StreamingCollector(cfg, 2, PromptStream(10).take, max_in_flight=8, on_group=print)
    step = StreamingCollector(cfg, 2, PromptStream(10).take, max_in_flight=8)
    with pytest.raises(RuntimeError, match="continuous mode"):
        step.window()
    with pytest.raises(RuntimeError, match="continuous run"):
        step.stop()
    endless = StreamingCollector(cfg, None, PromptStream(10).take, max_in_flight=8, on_group=print)
    with pytest.raises(RuntimeError, match="started collector"):
        endless.window()
    endless.start()
    with pytest.raises(RuntimeError, match="continuous mode"):
        endless.finish()
