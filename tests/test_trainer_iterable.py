"""An iterable ``train_dataset`` (issue 28): SaraGRPOTrainer on ``Dataset.to_iterable_dataset()`` draws the documented
prompts in the documented order (source order, or the stream's buffered shuffle), reads each row once, only through
SARA's stream, trains like the map-style dataset, resumes at the saved position without re-reading the data, and
refuses what cannot work with a clear error."""

from __future__ import annotations

import copy
import json
from collections import Counter

import numpy as np
import pytest
import torch
from datasets import Dataset, IterableDataset
from datasets.distributed import split_dataset_by_node

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer

MODES = ["always", "never", "coin", "coin"] * 6
SEEN: list[list[int]] = []  # per reward call, the `pid` column of its rows


def mode_reward(completions, completion_ids, mode, pid, **kwargs):
    SEEN.append(list(pid))
    return [
        1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
        for ids, m in zip(completion_ids, mode)
    ]


def rows(n: int) -> dict:
    return {"prompt": [[{"role": "user", "content": f"Question {i}?"}] for i in range(n)],
            "mode": [MODES[i % len(MODES)] for i in range(n)], "pid": list(range(n))}


def buffered_order(n: int, buffer_size: int, seed: int) -> list[int]:
    """The stream's documented shuffle of a pass of n rows (see IterablePromptStream): fill a buffer in source order,
    each draw takes rng.integers(len(buffer)) with rng = default_rng(seed), the last row fills the hole."""
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


def record_steps(trainer) -> list:
    """The StepResult of every training generation batch."""
    steps = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        if trainer.model.training:
            steps.append(trainer.sara_last_step)
        return output

    trainer._generate_and_score_completions = spy
    return steps


def drawn(step) -> list[int]:
    return step.prompt_table["prompt_id"].tolist()


def train(data, tiny_model_dir, tokenizer, kwargs):
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=SaraConfig(**kwargs),
                              train_dataset=data, processing_class=tokenizer)
    steps = record_steps(trainer)
    SEEN.clear()
    trainer.train()
    return trainer, steps


COUNTED = {"rows": 0}


def counted_rows():
    for i in range(24):
        COUNTED["rows"] += 1
        yield {"prompt": [{"role": "user", "content": f"Question {i}?"}], "mode": MODES[i], "pid": i}


@pytest.mark.parametrize("source, shuffle", [("to_iterable_dataset", False), ("to_iterable_dataset", True),
                                             ("from_generator", False)])
def test_two_steps_draw_the_documented_prompts_in_order(source, shuffle, tiny_model_dir, tokenizer,
                                                        cpu_trainer_kwargs):
    # Uniform allocator, B = 2, k = 4: each step draws the stream's next two prompts.
    if source == "to_iterable_dataset":
        data = Dataset.from_dict(rows(24)).to_iterable_dataset(num_shards=3)
    else:  # features unknown (column_names None): rows are checked as they are read
        data = IterableDataset.from_generator(counted_rows)
        COUNTED["rows"] = 0
    trainer, steps = train(data, tiny_model_dir, tokenizer,
                           cpu_trainer_kwargs(allocator="uniform", shuffle_dataset=shuffle))
    expected = [[0, 1], [2, 3]] if not shuffle else [[20, 14], [11, 5]]
    if shuffle:  # seed 0 (`seed`, as stream_seed is unset), a buffer of 1000 rows: here the whole pass of 24
        assert sum(expected, []) == buffered_order(24, 1000, seed=0)[:4]
    assert [drawn(step) for step in steps] == expected
    # Each rollout was scored with its own row: prompt p's `pid` column is p, k = 4 times per prompt.
    assert [Counter(pids) for pids in SEEN] == [Counter({p: 4 for p in ids}) for ids in expected]
    stream = trainer.sara_stream
    assert stream.source.last_open == (0, "start") and stream.epoch == 0
    # Source order reads a row only when it is drawn; the shuffle fills its buffer (the whole pass here). Nobody
    # else read the data: TRL's dataloader iterated a placeholder.
    assert stream.cursor == (4 if not shuffle else 24)
    if source == "from_generator":
        assert COUNTED["rows"] == 4
    assert stream.held_rows == (0 if not shuffle else 20)  # released after each step; the buffer keeps 20


def test_rloo_trains_on_an_iterable_dataset(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    trainer = SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=mode_reward,
                              args=SaraRLOOConfig(**cpu_trainer_kwargs(allocator="uniform", shuffle_dataset=False)),
                              train_dataset=Dataset.from_dict(rows(24)).to_iterable_dataset(),
                              processing_class=tokenizer)
    steps = record_steps(trainer)
    trainer.train()
    assert [drawn(step) for step in steps] == [[0, 1], [2, 3]] and trainer.sara_stream.cursor == 4


def test_sara_on_the_iterable_dataset_trains_like_on_the_map_style_one(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    # In source order both streams serve 0, 1, 2, ...: the same prompts, outcomes, decisions and parameters.
    kwargs = cpu_trainer_kwargs(allocator="sara", budget_cap=12.0, shuffle_dataset=False)
    map_trainer, map_steps = train(Dataset.from_dict(rows(24)), tiny_model_dir, tokenizer, kwargs)
    map_seen = list(SEEN)
    it_trainer, it_steps = train(Dataset.from_dict(rows(24)).to_iterable_dataset(), tiny_model_dir, tokenizer,
                                 kwargs)
    assert len(it_steps) == len(map_steps) == 2
    for a, b in zip(it_steps, map_steps):
        assert drawn(a) == drawn(b) and [vars(r) for r in a.records] == [vars(r) for r in b.records]
        assert [g.prompt_id for g in a.groups] == [g.prompt_id for g in b.groups]
    assert drawn(it_steps[0])[:4] == [0, 1, 2, 3] and SEEN == map_seen
    map_params = dict(map_trainer.model.named_parameters())
    for name, param in it_trainer.model.named_parameters():
        torch.testing.assert_close(param, map_params[name], rtol=0, atol=0)


def test_resume_continues_from_the_saved_position(tmp_path, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    # 1200 rows, shuffled through the 1000-row buffer, carry_over: the checkpoint holds the position in the pass,
    # datasets' state_dict there, the generator state, the buffer's rows and the carried prompts' rows.
    data = Dataset.from_dict(rows(1200)).to_iterable_dataset(num_shards=4)

    def make(output_dir):
        args = SaraConfig(**cpu_trainer_kwargs(output_dir=str(output_dir), max_steps=3, save_strategy="steps",
                                               save_steps=2, budget_cap=12.0, carry_over=True, refill_margin=2.0))
        trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                                  processing_class=tokenizer)
        return trainer, record_steps(trainer)

    straight, straight_steps = make(tmp_path / "straight")
    straight.train()
    checkpoint = tmp_path / "straight" / "checkpoint-2"
    state = json.loads((checkpoint / "sara_state.json").read_text())
    saved = state["stream"]
    drawn_in_two = sum(step.stats.prompts_drawn for step in straight_steps[:2])
    assert saved["kind"] == "iterable" and "rows" not in saved  # the rows are in sara_stream_rows.pt
    # Every draw refills the buffer first, so after D draws 999 + D rows of the pass have been read.
    assert (saved["epoch"], saved["cursor"]) == (0, 999 + drawn_in_two) and len(saved["buffer"]) == 999
    # datasets' own position there: a copy loaded with it yields row `cursor` next.
    probe = copy.deepcopy(data)
    probe.load_state_dict(saved["source_state"])
    assert next(iter(probe))["pid"] == saved["cursor"]
    # The held rows: the buffer, and the prompts carried into step 3 (the only ones kept after step 2).
    carried = sorted(state["allocator"]["carry"]["pid"])
    assert saved["issued"] == carried and len(carried) >= 1
    held = torch.load(checkpoint / "sara_stream_rows.pt", weights_only=False)
    assert [pid for pid, _ in held[0]] == sorted(set(saved["buffer"]) | set(saved["owed"]) | set(carried))
    assert all(row["pid"] == pid for pid, row in held[0])

    resumed, resumed_steps = make(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    # The resumed pass started at the saved row through datasets' state_dict, not from the start.
    assert resumed.sara_stream.source.last_open == (saved["cursor"], "state_dict")
    assert straight.sara_stream.source.last_open == (0, "start")
    # Step 3 is the same step, and so are the states and the parameters.
    assert len(resumed_steps) == 1 and drawn(resumed_steps[0]) == drawn(straight_steps[2])
    assert [vars(r) for r in resumed_steps[0].records] == [vars(r) for r in straight_steps[2].records]
    assert resumed.sara_stream.state_dict() == straight.sara_stream.state_dict()
    assert resumed.sara_allocator.state_dict() == straight.sara_allocator.state_dict()
    straight_params = dict(straight.model.named_parameters())
    for name, param in resumed.model.named_parameters():
        torch.testing.assert_close(param, straight_params[name], rtol=0, atol=1e-7)
    (checkpoint / "sara_stream_rows.pt").unlink()
    with pytest.raises(FileNotFoundError, match="saved from an iterable dataset but .*sara_stream_rows.pt"):
        make(tmp_path / "broken")[0].train(resume_from_checkpoint=str(checkpoint))


def test_what_cannot_work_is_refused_clearly(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    make = dict(model=tiny_model_dir, reward_funcs=mode_reward, processing_class=tokenizer)
    data = Dataset.from_dict(rows(24))
    no_prompt = data.rename_column("prompt", "question").to_iterable_dataset()
    with pytest.raises(ValueError, match=r"must have a 'prompt' column, found \['mode', 'pid', 'question'\]"):
        SaraGRPOTrainer(args=SaraConfig(**cpu_trainer_kwargs()), train_dataset=no_prompt, **make)
    with pytest.raises(ValueError, match="history_decay=0.5 keeps a table indexed by prompt"):
        SaraGRPOTrainer(args=SaraConfig(**cpu_trainer_kwargs(history_decay=0.5)),
                        train_dataset=data.to_iterable_dataset(), **make)
    with pytest.raises(ValueError, match="without `split_dataset_by_node`"):
        SaraGRPOTrainer(args=SaraConfig(**cpu_trainer_kwargs()),
                        train_dataset=split_dataset_by_node(data.to_iterable_dataset(), rank=0, world_size=2), **make)
    with pytest.raises(ValueError, match="needs `max_steps` > 0"):
        SaraGRPOTrainer(args=SaraConfig(**cpu_trainer_kwargs(max_steps=-1)), train_dataset=data.to_iterable_dataset(),
                        **make)
    # Columns unknown until read (after map): the first row without `prompt` stops the first step.
    mapped = data.to_iterable_dataset().map(lambda row: {"question": row.pop("prompt")}, remove_columns=["prompt"])
    assert mapped.column_names is None
    trainer = SaraGRPOTrainer(args=SaraConfig(**cpu_trainer_kwargs()), train_dataset=mapped, **make)
    with pytest.raises(ValueError, match=r"must have a 'prompt' column; row 0 of the iterable dataset has "
                                         r"\['mode', 'pid', 'question'\]"):
        trainer.train()
