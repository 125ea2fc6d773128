"""The batch engine of rounds (``sara_trl.trainer.round_engine``) on scripted stand-ins, without a model: one
generation call per step, every request finished in request order, multi-turn inner engines stepped to the end of
the round, environment leases handed back, and the engine's faces the event loop uses (abort, pending)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sara_trl.allocation import AllocationConfig, Allocator, PromptStream
from sara_trl.allocation.event_loop import Finished, drive_streaming_engine
from sara_trl.trainer.rollout import RolloutCache
from sara_trl.trainer.round_engine import GenerateEngine, RoundEngine
from sara_trl.trainer.streaming import TrainerScorer


class ScriptedTrainer:
    """Prompt ``p`` tokenizes to ``[p]``; its completion is ``[p, p]`` from a prompt, ``ids + [0]`` from token ids;
    the reward is 1 for an even prompt. Counts generation calls and their rows."""

    def __init__(self):
        self.accelerator = SimpleNamespace(num_processes=1, process_index=0, device=torch.device("cpu"))
        self.args = SimpleNamespace(success_reward_func=None, success_threshold=0.5, success_threshold_explicit=True,
                                    allocator="sara", ds_filter="success")
        self.reward_funcs, self.reward_func_names, self.reward_weights = [None], ["even"], torch.ones(1)
        self._pending_extra_logs = {}
        self.sara = SimpleNamespace(rollout_func=None, success_rule=None)
        self.calls: list[int] = []

    def _sara_row(self, pid):
        return {"prompt": f"prompt {pid}"}

    def _tokenize_prompts(self, prompts):
        return [[int(p.split()[1])] for p in prompts], None, {}

    def _sara_generate_round(self, prompt_ids, images, fields):
        self.calls.append(len(prompt_ids))
        return [[ids[0], ids[0]] if len(ids) == 1 else ids + [0] for ids in prompt_ids], None

    def _sara_decode(self, prompts, prompt_ids, completion_ids):
        return [str(ids) for ids in completion_ids]

    def _calculate_rewards(self, rows, prompts, completions, completion_ids):
        return torch.tensor([[float(ids[0] % 2 == 0)] for ids in completion_ids])


class TwoTurns:
    """A multi-turn stand-in over a batch engine: each rollout of an odd prompt takes a second turn (from its ids),
    so the round needs two inner steps; finished rollouts are held until ``release``."""

    needs_prompt_id = True

    def __init__(self, inner):
        self.inner, self.env_resets, self.released, self.held = inner, 0, [], set()
        self._prompt = {}

    @property
    def pending(self):
        return self.inner.pending

    def add_prompt(self, rid, pid):
        self.env_resets += 1
        self._prompt[rid] = pid
        self.inner.add(rid, [pid])

    def step(self):
        done = []
        for out in self.inner.step():
            if self._prompt[out.rid] % 2 and len(out.completion_ids) == 2:
                self.inner.add(out.rid, out.completion_ids)  # the second turn
            else:
                self.held.add(out.rid)
                done.append(Finished(out.rid, out.completion_ids))
        return done[::-1]  # out of order on purpose

    def release(self, rid):
        self.held.discard(rid)
        self.released.append(rid)


def test_generate_engine_one_call_per_step_in_queue_order():
    trainer = ScriptedTrainer()
    engine = GenerateEngine(trainer)
    for rid, pid in enumerate([4, 4, 7]):
        engine.add_prompt(rid, pid)
    assert engine.pending == 3
    done = engine.step()
    assert trainer.calls == [3] and engine.pending == 0 and engine.step() == [] and trainer.calls == [3]
    assert [(d.rid, d.completion_ids) for d in done] == [(0, [4, 4]), (1, [4, 4]), (2, [7, 7])]
    assert [d.record.prompt for d in done] == ["prompt 4"] * 2 + ["prompt 7"]
    assert [d.record.completion for d in done] == ["[4, 4]"] * 2 + ["[7, 7]"] and done[0].record.trajectory is None
    engine.add(5, [1, 2])
    engine.add_prompt(6, 3)
    with pytest.raises(ValueError, match="either rollouts from prompts or turns from token ids"):
        engine.step()
    engine.add(8, [1])
    assert engine.abort([8, 9]) == [0, 0] and engine.pending == 0


def test_round_engine_steps_a_multi_turn_round_to_its_end_in_request_order():
    trainer = ScriptedTrainer()
    inner = TwoTurns(GenerateEngine(trainer))
    engine = RoundEngine(trainer, inner)
    for rid, pid in [(10, 3), (11, 4), (12, 5)]:
        engine.add_prompt(rid, pid)
    done = engine.step()
    # one call for the first turns, one for the two odd prompts' second turns; request order, the round's ids
    assert trainer.calls == [3, 2] and engine.pending == 0 and engine.rounds == 1
    assert [(d.rid, d.completion_ids) for d in done] == [(10, [3, 3, 0]), (11, [4, 4]), (12, [5, 5, 0])]
    assert [pid for pid, _ in engine.local] == [3, 4, 5] and engine.per_rank == 3 and engine.env_resets == 3
    assert inner.held == {0, 1, 2}  # leased until the round's reward pass is over
    engine.add_prompt(13, 6)
    engine.step()
    assert inner.released == [0, 1, 2] and inner.held == {3} and engine.env_resets == 4
    engine.close()
    assert inner.held == set()
    engine.add_prompt(14, 1)
    assert engine.abort([14]) == [0] and engine.pending == 0


def test_rounds_on_the_event_loop_match_the_rollout_fn_road():
    """The same allocator step through ``Allocator.collect`` (one ``rollout_fn`` call per round) and through the
    event loop on the batch engine: the same rounds, groups, rollout ids and accounting."""
    def run_collect():
        trainer = ScriptedTrainer()

        def rollout_fn(prompt_ids, counts):
            requests = np.repeat(prompt_ids, counts)
            return (requests % 2 == 0).astype(float), np.full(len(requests), 2)

        allocator = Allocator(AllocationConfig(allocator="sara", k=4, budget_cap=8.0))
        return allocator.collect(rollout_fn, PromptStream(num_prompts=40, seed=1), 3), trainer

    def run_loop():
        trainer = ScriptedTrainer()
        allocator = Allocator(AllocationConfig(allocator="sara", k=4, budget_cap=8.0))
        collector = allocator.rounds(PromptStream(num_prompts=40, seed=1), 3)
        cache = RolloutCache()
        engine = RoundEngine(trainer, GenerateEngine(trainer))
        drive_streaming_engine(collector, engine, None,
                               TrainerScorer(trainer, cache, None, round_of=collector.round_of, lockstep=engine))
        return collector.finish(), cache, trainer

    (expected, _), (result, cache, trainer) = run_collect(), run_loop()
    assert result.stats.as_dict() == expected.stats.as_dict() and result.round_sizes == expected.round_sizes
    assert [(g.prompt_id, g.rollout_ids.tolist(), g.success.tolist()) for g in result.groups] == [
        (g.prompt_id, g.rollout_ids.tolist(), g.success.tolist()) for g in expected.groups]
    assert trainer.calls == list(result.round_sizes)  # one generation call per round, over the whole round
    assert cache.round_index == [r + 1 for r, size in enumerate(result.round_sizes) for _ in range(size)]
    assert cache.num_rollouts == result.stats.rollouts_generated
