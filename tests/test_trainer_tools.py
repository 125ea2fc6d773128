"""Custom rollouts (``rollout_func``) in SaraGRPOTrainer / SaraRLOOTrainer on a tiny random Llama (CPU): each round
calls the user's function once, the cache keeps what it returned (prompt ids, ``env_mask``, extra fields), the replay
hands it back to TRL unchanged, and with ``allocator="uniform"`` the loss is TRL's GRPOTrainer's on the same
trajectories. ``tools`` and ``environment_factory`` stay refused."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.trainer.prepare import require_rounds
from sara_trl.trainer.replay import active_replay

# Prompt i's mode: "always" solved, "never" solved, or "coin": its rollouts alternate solved / not solved (so any two
# of them are a mixed group).
MODES = ["always", "never", "coin", "coin"] * 3
SOLVED_IDS, UNSOLVED_IDS = [101, 102], [201, 202, 203, 204, 205]  # then EOS; the unsolved ones end with 2 "environment"
ENV_TOKENS = 2  # tokens (env_mask 0) before the EOS


def mode_dataset() -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Question {i}"}] for i in range(len(MODES))],
                              "mode": MODES})


class ScriptedRollouts:
    """A ``rollout_func`` with scripted completions: records every call, tags every rollout, and returns an
    ``env_mask`` (optionally) and the extra fields ``solved`` and ``tag``."""

    def __init__(self, with_env_mask: bool = True, solved=None):
        self.calls: list[int] = []  # prompts asked per call
        self.tags: list[str] = []  # per rollout, in generation order
        self.completions: dict[str, list[int]] = {}
        self.env_masks: dict[str, list[int]] = {}
        self.seen: dict[str, int] = {}  # rollouts so far per prompt text
        self.with_env_mask = with_env_mask
        self.solved = solved  # optional (position in the call) -> bool, overriding the modes

    def __call__(self, prompts, trainer):
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        eos = trainer.processing_class.eos_token_id
        completion_ids, env_mask, solved, tags = [], [], [], []
        for position, prompt in enumerate(prompts):
            text = prompt[-1]["content"]
            j = self.seen.get(text, 0)
            self.seen[text] = j + 1
            if self.solved is not None:
                ok = self.solved(position)
            else:
                mode = MODES[int(text.split()[-1])]
                ok = mode == "always" or (mode == "coin" and j % 2 == 0)
            ids = (SOLVED_IDS if ok else UNSOLVED_IDS) + [eos]
            mask = [1] * len(ids) if ok else [1] * (len(ids) - 1 - ENV_TOKENS) + [0] * ENV_TOKENS + [1]
            tag = f"call{len(self.calls)}-{position}"
            completion_ids.append(ids)
            env_mask.append(mask)
            solved.append(ok)
            tags.append(tag)
            self.completions[tag], self.env_masks[tag] = ids, mask
        self.calls.append(len(prompts))
        self.tags.extend(tags)
        output = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "solved": solved,
                  "tag": tags, "source": "scripted"}
        if self.with_env_mask:
            output["env_mask"] = env_mask
        return output


def solved_reward(completions, solved, source, **kwargs):
    """Reward 1 when the rollout_func's extra field says so (extra fields reach the reward functions)."""
    assert all(s == "scripted" for s in source)  # a non-list extra field is one value for every rollout
    return [float(s) for s in solved]


def spy_replays(trainer) -> list[dict]:
    """Per training batch: the tags TRL's reward hook received in the replay, the committed plan, TRL's output."""
    records = []
    calculate, generate_and_score = trainer._calculate_rewards, trainer._generate_and_score_completions

    def calculate_spy(inputs, prompts, completions, completion_ids_list):
        if active_replay(trainer) is not None:
            records.append({"tags": [row.get("tag") for row in inputs],
                            "completion_ids": [list(ids) for ids in completion_ids_list]})
        return calculate(inputs, prompts, completions, completion_ids_list)

    def generate_spy(inputs):
        output = generate_and_score(inputs)
        if trainer.model.training:
            records[-1]["output"] = {k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)}
            records[-1]["step"] = trainer.sara_last_step
        return output

    trainer._calculate_rewards = calculate_spy
    trainer._generate_and_score_completions = generate_spy
    return records


def sara_logs(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "sara/rollouts_generated" in entry]


def test_grpo_rollout_func_trains_two_sara_steps(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    rollouts = ScriptedRollouts()
    args = SaraConfig(**cpu_trainer_kwargs(allocator="sara", budget_cap=12.0))
    assert args.collection == "rounds"
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer, rollout_func=rollouts)
    records = spy_replays(trainer)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}

    trainer.train()

    logs = sara_logs(trainer)
    assert len(logs) == len(records) == 2
    # One rollout_func call per round; the accounting counts exactly what it was asked for.
    assert len(rollouts.calls) == sum(entry["sara/rounds"] for entry in logs)
    assert sum(rollouts.calls) == sum(entry["sara/rollouts_generated"] for entry in logs)
    assert sum(rollouts.calls) == trainer.sara_allocator.total_rollouts == len(rollouts.tags)
    k = args.num_generations
    start = 0
    for record, entry in zip(records, logs):
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        step, output = record["step"], record["output"]
        step_tags = rollouts.tags[start:start + int(entry["sara/rollouts_generated"])]
        start += int(entry["sara/rollouts_generated"])
        assert entry["sara/unfilled"] == 0
        # The replay's input rows carry the extra fields of exactly the committed rollouts, in row order, and TRL got
        # their completion ids back.
        expected = [step_tags[r] for group in step.groups for r in group.rollout_ids]
        assert record["tags"] == expected and len(expected) == args.generation_batch_size
        assert record["completion_ids"] == [rollouts.completions[tag] for tag in expected]
        assert all(MODES[group.prompt_id] == "coin" for group in step.groups)
        # env_mask became TRL's tool_mask, row by row.
        tool_mask = output["tool_mask"]
        for row, tag in enumerate(expected):
            mask = rollouts.env_masks[tag]
            assert tool_mask[row, :len(mask)].tolist() == mask
            assert output["completion_ids"][row, :len(mask)].tolist() == rollouts.completions[tag]
        assert (output["advantages"].abs() > 0).all() and output["advantages"].shape == (k * args.num_groups,)
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())


def test_grpo_rollout_func_with_trl_generation(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """A rollout_func that calls the trainer's own transformers generation; 2 SARA steps, padding rows included."""
    asked = []

    def generate(prompts, trainer):
        asked.append(len(prompts))
        prompt_ids, images, fields = trainer._tokenize_prompts(prompts)
        completion_ids, logprobs = trainer._generate_single_turn(prompt_ids, images, fields, 1)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
                "first_token": [ids[0] for ids in completion_ids]}

    def parity_reward(completions, first_token, **kwargs):
        return [float(t % 2 == 0) for t in first_token]

    args = SaraConfig(**cpu_trainer_kwargs(allocator="sara", commit_min=2, budget_cap=6.0))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=parity_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer, rollout_func=generate)
    trainer.train()
    logs = sara_logs(trainer)
    assert len(logs) == 2
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert sum(asked) == generated == trainer.sara_allocator.total_rollouts
    assert len(asked) == sum(entry["sara/rounds"] for entry in logs)


def test_uniform_loss_equals_trl_on_the_same_rollouts(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """allocator='uniform' trains what TRL's GRPOTrainer trains on the same scripted rollouts: same first loss."""
    prompt = [{"role": "user", "content": "Question 0"}]
    dataset = Dataset.from_dict({"prompt": [prompt] * 8})

    def solved(position):  # per group of k = 4: two solved (short), two not (longer, with environment tokens)
        return position % 4 < 2

    losses = {}
    for name in ("trl", "sara"):
        kwargs = cpu_trainer_kwargs(max_steps=1)
        if name == "trl":
            trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=GRPOConfig(**kwargs),
                                  train_dataset=dataset, processing_class=tokenizer,
                                  rollout_func=ScriptedRollouts(solved=solved))
        else:
            trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward,
                                      args=SaraConfig(**kwargs, allocator="uniform"), train_dataset=dataset,
                                      processing_class=tokenizer, rollout_func=ScriptedRollouts(solved=solved))
        trainer.train()
        losses[name] = trainer.state.log_history[0]["loss"]
    assert losses["trl"] != 0.0
    assert losses["sara"] == pytest.approx(losses["trl"], rel=1e-5, abs=1e-7)


def test_rloo_rollout_func(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    rollouts = ScriptedRollouts(with_env_mask=False)
    args = SaraRLOOConfig(**cpu_trainer_kwargs(allocator="dynamic_sampling", budget_cap=12.0, beta=0.0))
    trainer = SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer, rollout_func=rollouts)
    records = spy_replays(trainer)
    trainer.train()
    logs = sara_logs(trainer)
    assert len(logs) == 2 and sum(rollouts.calls) == sum(entry["sara/rollouts_generated"] for entry in logs)
    start = 0
    for record, entry in zip(records, logs):
        step = record["step"]
        step_tags = rollouts.tags[start:start + int(entry["sara/rollouts_generated"])]
        start += int(entry["sara/rollouts_generated"])
        expected = [step_tags[r] for group in step.groups for r in group.rollout_ids]
        # RLOO's TRL pipeline was handed the rollout_func's completions; TRL's RLOO merges no extra fields.
        assert all(tag is None for tag in record["tags"])
        assert record["completion_ids"] == [rollouts.completions[tag] for tag in expected]
        assert all(MODES[group.prompt_id] == "coin" for group in step.groups)
        assert "tool_mask" not in record["output"]

    # env_mask has no place in RLOO's loss: refused with the reason.
    trainer = SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer,
                              rollout_func=ScriptedRollouts(with_env_mask=True))
    with pytest.raises(ValueError, match="returned `env_mask`, but the loss of its TRL base has no"):
        trainer.train()


def test_rollout_func_contract_errors(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    args = SaraConfig(**cpu_trainer_kwargs())
    bad = {
        "must return keys \\['logprobs'\\]": lambda prompts, trainer: {"prompt_ids": [], "completion_ids": []},
        "returned 1 `completion_ids` for [0-9]+ prompts": lambda prompts, trainer: {
            "prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]], "logprobs": None},
        "extra field 'x' is a list of 1 values": lambda prompts, trainer: {
            "prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * len(prompts), "logprobs": None, "x": [0]},
    }
    for message, func in bad.items():
        trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=args,
                                  train_dataset=mode_dataset(), processing_class=tokenizer, rollout_func=func)
        with pytest.raises(ValueError, match=message):
            trainer.train()


def test_rollout_func_runs_in_rounds_only(tiny_model_dir, tokenizer):
    base = dict(output_dir="o", use_cpu=True, report_to="none", num_generations=4, per_device_train_batch_size=8,
                max_steps=1, use_vllm=True, vllm_mode="colocate")
    auto = SaraConfig(**base)
    assert auto.collection == "streaming" and auto.collection_auto
    require_rounds(SaraGRPOTrainer, auto, "rollout_func")
    assert auto.collection == "rounds"
    with pytest.raises(ValueError, match="does not support `rollout_func` with collection='streaming'"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward,
                        args=SaraConfig(**base, collection="streaming"), train_dataset=mode_dataset(),
                        processing_class=tokenizer, rollout_func=ScriptedRollouts())


@pytest.mark.parametrize("extra, message", [
    ({"tools": [solved_reward]}, "does not support `tools` yet"),
    ({"environment_factory": object}, "does not support `environment_factory` yet"),
])
def test_tools_and_environments_still_refused(extra, message, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    with pytest.raises(ValueError, match=message):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=SaraConfig(**cpu_trainer_kwargs()),
                        train_dataset=mode_dataset(), processing_class=tokenizer, **extra)
