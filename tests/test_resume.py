"""Checkpoint and resume: 2 steps + save + 1 resumed step equals 3 straight steps (same seed) on the tiny model, with
and without carry_over (whose checkpoint also holds the carried prompts' completions)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer

MODES = ["always", "never", "coin", "coin"] * 6


def mode_reward(completions, completion_ids, mode, **kwargs):
    return [
        1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
        for ids, m in zip(completion_ids, mode)
    ]


BEYOND_PAPER = {"stopping_rule": "bayes_optimal", "auto_min_prompts": 4, "history_decay": 0.9, "selection": "greedy"}


@pytest.mark.parametrize("carry_over,options", [(False, {}), (True, {}), (False, BEYOND_PAPER)],
                         ids=["paper", "carry_over", "beyond_paper"])
def test_resume_matches_straight_run(carry_over, options, tmp_path, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """With the beyond-paper options the checkpoint also holds the fitted prior, the outcome table, the prompt
    history and the selection generator (sara_state.json is JSON: every array saved as a list)."""
    data = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Question {i}?"}] for i in range(len(MODES))], "mode": MODES}
    )

    def make(output_dir):
        args = SaraConfig(**cpu_trainer_kwargs(output_dir=str(output_dir), max_steps=3, save_strategy="steps",
                                               save_steps=2, budget_cap=12.0, carry_over=carry_over,
                                               refill_margin=2.0 if carry_over else 0.5, **options))
        return SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                               processing_class=tokenizer)

    straight = make(tmp_path / "straight")
    straight.train()
    checkpoint = tmp_path / "straight" / "checkpoint-2"
    saved = json.loads((checkpoint / "sara_state.json").read_text())
    assert saved["allocator"]["steps"] == 2 and saved["stream"]["cursor"] > 0
    # With carry_over the undecided prompts of step 2 and their completions are in the checkpoint.
    assert ("carry" in saved["allocator"]) == carry_over == (checkpoint / "sara_carry.pt").is_file()
    if options:
        ext = saved["allocator"]["extensions"]
        assert ext["table"] is not None and ext["history"] is not None and ext["buffer"] is not None

    resumed = make(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(checkpoint))

    # Same allocator and stream state after step 3 ...
    assert resumed.sara_allocator.state_dict() == straight.sara_allocator.state_dict()
    assert resumed.sara_stream.state_dict() == straight.sara_stream.state_dict()
    assert resumed.sara_allocator.steps == 3
    # ... the same third step (prompts drawn, outcomes, accounting) ...
    def step3(trainer):
        entry = next(e for e in trainer.state.log_history if e.get("step") == 3 and "sara/rounds" in e)
        return {name: value for name, value in entry.items()  # all but the wall-clock of the collection
                if (name.startswith("sara/") and name != "sara/collect_seconds") or name == "loss"}

    last, resumed_last = step3(straight), step3(resumed)
    assert len(last) > 20 and resumed_last == last
    assert [r.__dict__ for r in resumed.sara_last_step.records] == [r.__dict__ for r in straight.sara_last_step.records]
    # ... and the same parameters.
    straight_params = dict(straight.model.named_parameters())
    for name, param in resumed.model.named_parameters():
        torch.testing.assert_close(param, straight_params[name], rtol=0, atol=1e-7)
    if carry_over:  # a checkpoint that lost the carried completions must not resume silently without them
        (checkpoint / "sara_carry.pt").unlink()
        with pytest.raises(FileNotFoundError, match=r"carries \d+ undecided prompts .*sara_carry.pt"):
            make(tmp_path / "broken").train(resume_from_checkpoint=str(checkpoint))


def test_streaming_on_two_processes_saves_and_restores_each_process_carry(tmp_path, monkeypatch):
    """Streaming with carry_over on 2 processes (here two stand-in trainers, the gather replaced by the list of both
    processes' states): each process writes its own carried completions (``sara_carry_rank<R>.pt``) and no
    ``sara_carry.pt``; on resume each process restores its own allocator carry and completions, and a process whose
    carry file is missing refuses to resume without it."""
    import numpy as np

    from sara_trl.allocation import AllocationConfig, Allocator, ShardStream
    from sara_trl.trainer import checkpoint as ckpt
    from sara_trl.trainer.rollout import RolloutCache
    from sara_trl.trainer.state import SaraRun

    cfg = AllocationConfig(k=4, collection="streaming", carry_over=True)
    carried = [[5, 6], [7]]  # process r carries these completions (one rollout each of its carried prompts)

    def trainer(rank, with_carry):
        alloc = Allocator(cfg)
        if with_carry:
            count = len(carried[rank])
            pids = np.arange(count, dtype=np.int64) * 2 + rank  # its own shard's prompts
            alloc.load_state_dict({**alloc.state_dict(), "carry": {
                "pid": pids.tolist(), "n": [1] * count, "nsc": [1] * count, "s": [1] * count, "p": [1.0] * count,
                "committed": [False] * count, "r_slot": list(range(count)), "r_success": [1.0] * count,
                "r_tokens": [1] * count}})
        cache = None
        if with_carry:
            cache = RolloutCache(completion_ids=[[t] for t in carried[rank]], logprobs=[None] * len(carried[rank]),
                                 rewards=[torch.ones(len(carried[rank]), 1)],
                                 success=[np.ones(len(carried[rank]))],
                                 tokens=[np.ones(len(carried[rank]), np.int64)], round_index=[0] * len(carried[rank]),
                                 carried=len(carried[rank]))
        args = SimpleNamespace(should_save=rank == 0, collection="streaming", to_allocation_config=lambda: cfg)
        return SimpleNamespace(sara=SaraRun(allocator=alloc, stream=ShardStream(20, rank, 2, seed=0), success_rule=None,
                                           carry=cache),
                               args=args, accelerator=SimpleNamespace(num_processes=2, process_index=rank),
                               state=SimpleNamespace(global_step=3), _get_output_dir=lambda trial: str(tmp_path))

    saving = [trainer(rank, True) for rank in range(2)]
    states = [{"allocator": t.sara.allocator.state_dict(), "stream": t.sara.stream.state_dict()} for t in saving]
    monkeypatch.setattr(ckpt, "rank_states", lambda t: states)
    for t in reversed(saving):  # the non-saving process writes its own carry file too
        ckpt.save_sara_state(t, None)
    folder = tmp_path / "checkpoint-3"
    assert sorted(p.name for p in folder.iterdir()) == ["sara_carry_rank0.pt", "sara_carry_rank1.pt",
                                                        "sara_state.json"]
    for rank in range(2):
        fresh = trainer(rank, False)
        ckpt.load_sara_state(fresh, str(folder))
        own = saving[rank].sara.allocator.carried_prompt_ids.tolist()
        assert fresh.sara.allocator.carried_prompt_ids.tolist() == own == [2 * i + rank for i in range(len(own))]
        assert fresh.sara.carry.completion_ids == [[t] for t in carried[rank]]
        assert fresh.sara.carry.carried == fresh.sara.allocator.carried_rollouts == len(carried[rank])
    (folder / "sara_carry_rank1.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"carries 1 undecided prompts .*sara_carry_rank1.pt"):
        ckpt.load_sara_state(trainer(1, False), str(folder))
    ckpt.load_sara_state(trainer(0, False), str(folder))  # process 0 still has its own


def test_optimizer_state_loads_onto_cpu_on_several_cpu_processes(tmp_path):
    """transformers loads the optimizer state with ``map_location=args.device`` on several processes: ``cpu:0`` on a
    CPU, which torch refuses; inside ``optimizer_state_onto_cpu`` it loads onto ``cpu``, elsewhere nothing changes."""
    from sara_trl.trainer.checkpoint import optimizer_state_onto_cpu

    path = tmp_path / "optimizer.pt"
    torch.save({"exp_avg": torch.arange(3.0)}, path)
    with pytest.raises(RuntimeError, match="restore data location"):  # what the fix is for
        torch.load(path, map_location="cpu:0", weights_only=True)
    original = torch.load
    two_cpus = SimpleNamespace(args=SimpleNamespace(device=torch.device("cpu"), world_size=2))
    with optimizer_state_onto_cpu(two_cpus):
        state = torch.load(path, map_location="cpu:0", weights_only=True)
    assert torch.equal(state["exp_avg"], torch.arange(3.0)) and torch.load is original
    for unchanged in (SimpleNamespace(args=SimpleNamespace(device=torch.device("cpu"), world_size=1)),
                      SimpleNamespace(args=SimpleNamespace(device=torch.device("meta"), world_size=2))):
        with optimizer_state_onto_cpu(unchanged):
            assert torch.load is original
