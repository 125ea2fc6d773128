"""Custom rollouts (``rollout_func``) in SaraGRPOTrainer / SaraRLOOTrainer on a tiny random Llama (CPU): each round
calls the user's function once, the cache keeps what it returned (prompt ids, ``env_mask``, extra fields), the replay
hands it back to TRL unchanged, and with ``allocator="uniform"`` the loss is TRL's GRPOTrainer's on the same
trajectories. With ``tools=`` (scripted generation: the model calls a tool, then answers), each round runs TRL's own
tool loop, the replay hands back whole trajectories with TRL's ``tool_mask``, and with ``allocator="uniform"`` the
loss and ``tools/*`` metrics are TRL's GRPOTrainer's. RLOO (no tool loop in TRL) refuses ``tools`` and
``environment_factory``; ``environment_factory`` in SaraGRPOTrainer is tested in
``tests/test_trainer_environment.py``."""

from __future__ import annotations

import pytest
import torch
from _helpers_trainer import ScriptedGeneration
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.trainer.plan import plan_collection
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
    assert args.schedule == "rounds"
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
    assert auto.schedule == "streaming" and auto.collection == "auto"
    plan = plan_collection(SaraGRPOTrainer, auto, processes=1, rollout_func=True)
    assert (plan.schedule, plan.engine, plan.multi_turn) == ("rounds", "generate", "rollout_func")
    assert auto.collection == "auto"  # the config is only read
    with pytest.raises(ValueError, match="does not support `rollout_func` with collection='streaming'"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward,
                        args=SaraConfig(**base, collection="streaming"), train_dataset=mode_dataset(),
                        processing_class=tokenizer, rollout_func=ScriptedRollouts())


def test_tools_refusals(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Tools run in rounds under collection='auto' (with its reason) and stream when asked to, do not combine with a
    rollout_func, and RLOO has no tool loop."""
    base = dict(output_dir="o", use_cpu=True, report_to="none", num_generations=4, per_device_train_batch_size=8,
                max_steps=1, use_vllm=True, vllm_mode="colocate")
    plan = plan_collection(SaraGRPOTrainer, SaraConfig(**base), processes=1, tools=True)
    assert plan.schedule == "rounds" and "chain of single requests, not yet measured faster" in plan.schedule_reason
    plan = plan_collection(SaraGRPOTrainer, SaraConfig(**base, collection="streaming"), processes=1, tools=True)
    assert (plan.schedule, plan.engine, plan.multi_turn) == ("streaming", "requests", "tools")
    with pytest.raises(ValueError, match="streaming_max_in_flight .* under collection='auto'"):
        plan_collection(SaraGRPOTrainer, SaraConfig(**base, streaming_max_in_flight=8), processes=1, tools=True)
    with pytest.raises(ValueError, match="does not support `tools`: together with `rollout_func` yet"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=solved_reward, args=SaraConfig(**cpu_trainer_kwargs()),
                        train_dataset=mode_dataset(), processing_class=tokenizer, tools=[lookup],
                        rollout_func=ScriptedRollouts())
    for extra in ({"tools": [lookup]}, {"environment_factory": object}):
        name = next(iter(extra))
        with pytest.raises(ValueError, match=f"does not support `{name}`: TRL's RLOOTrainer has no tool loop"):
            SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=solved_reward,
                            args=SaraRLOOConfig(**cpu_trainer_kwargs()), train_dataset=mode_dataset(),
                            processing_class=tokenizer, **extra)


# ---------------------------------------------------------------------------------------------------- tools=
# The model's scripted turns, by the question it answers (its prompt says "Question N") and how far it got: a first
# turn calls the tool `lookup` (or, by the question's `plan`, an unknown tool, or answers at once), a turn after a tool
# response answers "yes" or "no".
TOOL_CALL = '<tool_call>\n{{"name": "{name}", "arguments": {{"key": {key}}}}}\n</tool_call><|im_end|>'


def lookup(key: int) -> str:
    """Look a key up in the table.

    Args:
        key: The key to look up.
    """
    lookup.calls += 1
    return f"value-{key}"


def tool_tokenizer(tokenizer):
    """The SmolLM2 tokenizer with Qwen3's chat template (which renders tool calls; TRL then sets its response template
    and swaps in its prefix-preserving training template), and <|im_end|>, which ends its turns, as EOS (as Qwen's)."""
    from sara_trl.utils import use_tool_chat_template

    return use_tool_chat_template(tokenizer)


class ScriptedToolModel(ScriptedGeneration):
    """Scripted generation for the tool tests. ``first(question, position)`` says what a first turn does:
    ``"lookup"`` (a tool call), ``"missing"`` (a call of an unknown tool: a failure), or an answer;
    ``answer(question, position)`` is the final answer after a tool response."""

    def __init__(self, trainer, first, answer):
        super().__init__(trainer)
        self.first, self.answer = first, answer

    def turn(self, question, position, text, after_tool):
        if after_tool:
            return self.answer(question, position) + "<|im_end|>"
        action = self.first(question, position)
        return (TOOL_CALL.format(name=action, key=question) if action in ("lookup", "missing")
                else action + "<|im_end|>")


def answer_reward(completions, **kwargs):
    """1 when the last assistant turn answers "yes"."""
    return [float(completion[-1]["content"].strip() == "yes") for completion in completions]


def tool_kwargs(cpu_trainer_kwargs, **overrides):
    return cpu_trainer_kwargs(max_completion_length=128, **overrides)


def spy_tool_loop(monkeypatch) -> list[int]:
    """Rows of each call of TRL's own ``_tool_call_loop`` (the replay answers without reaching it)."""
    calls = []
    loop = GRPOTrainer._tool_call_loop

    def spy(self, prompts, *args):
        calls.append(len(prompts))
        return loop(self, prompts, *args)

    monkeypatch.setattr(GRPOTrainer, "_tool_call_loop", spy)
    return calls


def check_tool_rows(model, output, expected_first):
    """Every row of TRL's batch: completion = first turn + TRL's tool suffix + answer, tool_mask 0 exactly over the
    tool suffix; ``expected_first`` gives each row's first-turn text, None when it answered at once."""
    tokenizer = model.tokenizer
    for row, first in enumerate(expected_first):
        length = int(output["completion_mask"][row].sum())
        ids = output["completion_ids"][row, :length].tolist()
        mask = output["tool_mask"][row, :length].tolist()
        if first is None:  # answered at once: no tool output
            assert all(mask)
            continue
        first_ids = model.ids(first)
        assert ids[:len(first_ids)] == first_ids
        zeros = [i for i, m in enumerate(mask) if m == 0]
        assert zeros == list(range(len(first_ids), zeros[-1] + 1))  # one contiguous block right after the call
        tool_text = tokenizer.decode(ids[zeros[0]:zeros[-1] + 1])
        assert "<tool_response>" in tool_text and ("value-" in tool_text or "not found" in tool_text)
        answer = tokenizer.decode(ids[zeros[-1] + 1:])
        assert answer in ("yes<|im_end|>", "no<|im_end|>") and all(mask[zeros[-1] + 1:])


def test_grpo_tools_train_in_rounds_through_trl_tool_loop(tiny_model_dir, tokenizer, cpu_trainer_kwargs,
                                                           monkeypatch):
    """allocator='sara' with tools: each rollout's tool turn runs TRL's own tool loop (one rollout at a time), each
    round generates its first turns in one call and its post-tool turns in one more; the replay hands back whole
    trajectories (tool output masked by tool_mask), the tool runs once per rollout that calls it, never again in the
    replay."""
    lookup.calls = 0
    seen: dict[int, int] = {}

    def answer(question, position):  # "always": yes, "never": no, "coin": alternate per answer of that question
        mode = MODES[question]
        j = seen.get(question, 0)
        seen[question] = j + 1
        return "yes" if mode == "always" or (mode == "coin" and j % 2 == 0) else "no"

    args = SaraConfig(**tool_kwargs(cpu_trainer_kwargs, allocator="sara", budget_cap=12.0))
    assert args.schedule == "rounds"
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=answer_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tool_tokenizer(tokenizer),
                              tools=[lookup])
    model = ScriptedToolModel(trainer, first=lambda question, position: "lookup", answer=answer)
    loops = spy_tool_loop(monkeypatch)
    records = spy_replays(trainer)
    trainer.train()

    logs = sara_logs(trainer)
    assert len(logs) == len(records) == 2
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    # TRL's tool loop once per rollout (each called the tool once), in the rounds only.
    assert loops == [1] * int(generated) and lookup.calls == generated
    # Generation: per round, one first turn over all its rollouts, then one turn after the tool responses.
    rounds = int(sum(entry["sara/rounds"] for entry in logs))
    assert [after for _, after in model.calls] == [False, True] * rounds
    for record in records:
        step, output = record["step"], record["output"]
        assert all(MODES[group.prompt_id] == "coin" for group in step.groups)
        check_tool_rows(model, output, [TOOL_CALL.format(name="lookup", key=group.prompt_id)
                                        for group in step.groups for _ in group.rollout_ids])
    tool_logs = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert [entry["tools/call_frequency"] for entry in tool_logs] == [1.0, 1.0]
    assert [entry["tools/failure_frequency"] for entry in tool_logs] == [0.0, 0.0]
    for entry in logs:  # one lookup per rollout: its calls follow its fate; model + tool tokens = its tokens
        for name in ("generated", "trained", "abandoned", "surplus", "active_left", "carried_in"):
            assert entry[f"sara/tool_calls_{name}"] == entry[f"sara/rollouts_{name}"]
            split = entry[f"sara/model_tokens_{name}"] + entry[f"sara/tool_tokens_{name}"]
            assert split == entry[f"sara/tokens_{name}"]
        assert entry["sara/tool_tokens_abandoned"] > 0 and entry["sara/model_tokens_abandoned"] > 0


def test_uniform_with_tools_equals_trl(tiny_model_dir, tokenizer, smollm2_tokenizer_dir, cpu_trainer_kwargs):
    """allocator='uniform' with tools trains what TRL's GRPOTrainer trains on the same scripted trajectories: the same
    completions and tool_mask, loss and tool metrics. Per group of 4: a tool call answered yes, one answered no, a
    call of an unknown tool (a failure), an answer without any tool call."""
    from transformers import AutoTokenizer

    prompt = [{"role": "user", "content": "Question 0"}]
    dataset = Dataset.from_dict({"prompt": [prompt] * 8})

    def first(question, position):
        return ("lookup", "lookup", "missing", "yes")[position % 4]

    def answer(question, position):
        return "yes" if position % 2 == 0 else "no"

    results = {}
    for name in ("trl", "sara"):
        lookup.calls = 0
        processing_class = tool_tokenizer(AutoTokenizer.from_pretrained(smollm2_tokenizer_dir))
        kwargs = tool_kwargs(cpu_trainer_kwargs, max_steps=1)
        if name == "trl":
            trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=answer_reward, args=GRPOConfig(**kwargs),
                                  train_dataset=dataset, processing_class=processing_class, tools=[lookup])
        else:
            trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=answer_reward,
                                      args=SaraConfig(**kwargs, allocator="uniform"), train_dataset=dataset,
                                      processing_class=processing_class, tools=[lookup])
        model = ScriptedToolModel(trainer, first=first, answer=answer)
        outputs = []
        generate_and_score = trainer._generate_and_score_completions

        def capture(inputs, generate_and_score=generate_and_score, outputs=outputs, trainer=trainer):
            output = generate_and_score(inputs)
            if trainer.model.training and active_replay(trainer) is None:
                outputs.append({k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
            return output

        trainer._generate_and_score_completions = capture
        trainer.train()
        results[name] = {"log": trainer.state.log_history[0], "output": outputs[0], "tool_runs": lookup.calls}
        call = TOOL_CALL.format(name="lookup", key=0)
        check_tool_rows(model, outputs[0], [call, call, TOOL_CALL.format(name="missing", key=0), None] * 2)

    trl, sara = results["trl"], results["sara"]
    assert sara["tool_runs"] == trl["tool_runs"] == 4  # the tool ran once per rollout that called it
    # 8 rollouts, per group of 4: 3 tool calls (2 lookups, 1 failed), then the answers of the 6 tool-calling rollouts
    # alternate yes / no (positions in the turn after the tools), and 2 answer yes at once. Model tokens = the scripted
    # turns, tool tokens = the rest of the completion tokens (TRL's tool_mask 0), everything trained (uniform).
    call = len(model.ids(TOOL_CALL.format(name="lookup", key=0)))
    missing = len(model.ids(TOOL_CALL.format(name="missing", key=0)))
    yes, no = len(model.ids("yes<|im_end|>")), len(model.ids("no<|im_end|>"))
    model_tokens = 4 * call + 2 * missing + (3 + 2) * yes + 3 * no
    tool_mask, completion_mask = sara["output"]["tool_mask"].bool(), sara["output"]["completion_mask"].bool()
    tool_tokens = int((completion_mask & ~tool_mask).sum())
    assert tool_tokens > 0 and int((completion_mask & tool_mask).sum()) == model_tokens
    assert {k: v for k, v in sara["log"].items() if k.startswith(("sara/model_", "sara/tool_"))} == {
        "sara/model_tokens_generated": model_tokens, "sara/model_tokens_trained": model_tokens,
        "sara/tool_tokens_generated": tool_tokens, "sara/tool_tokens_trained": tool_tokens,
        "sara/tool_calls_generated": 6.0, "sara/tool_calls_trained": 6.0,
        **{f"sara/{unit}_{name}": 0.0 for unit in ("model_tokens", "tool_tokens", "tool_calls")
           for name in ("abandoned", "surplus", "active_left", "carried_in")}}
    assert model_tokens + tool_tokens == sara["log"]["sara/tokens_generated"]
    for key in ("completion_ids", "completion_mask", "tool_mask", "advantages"):
        assert torch.equal(sara["output"][key], trl["output"][key]), key
    assert trl["log"]["tools/call_frequency"] == 0.75 and trl["log"]["tools/failure_frequency"] == pytest.approx(1 / 3)
    assert trl["log"]["loss"] != 0.0
    for key in ("loss", "tools/call_frequency", "tools/failure_frequency", "completions/mean_length",
                "completions/max_length", "completions/clipped_ratio", "num_tokens", "reward"):
        assert sara["log"][key] == pytest.approx(trl["log"][key], rel=1e-5, abs=1e-7), key


def test_tools_with_padding_rows_repair_call_frequency(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Short groups (commit_min < k): TRL's tools/call_frequency counted padding rows in its denominator; SARA
    recomputes it over the real rows (padding rows are masked out of the loss, tool mask included)."""
    calls = {"first": 0}
    seen: dict[int, int] = {}

    def first(question, position):  # every other first turn calls the tool, the others answer at once
        calls["first"] += 1
        j = seen.get(question, 0)
        seen[question] = j + 1
        if calls["first"] % 2:
            return "lookup"
        return "yes" if MODES[question] == "always" or (MODES[question] == "coin" and j % 2 == 0) else "no"

    def answer(question, position):
        j = seen.get(question, 0)
        return "yes" if MODES[question] == "always" or (MODES[question] == "coin" and j % 2 == 1) else "no"

    args = SaraConfig(**tool_kwargs(cpu_trainer_kwargs, allocator="sara", commit_min=2, budget_cap=6.0))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=answer_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tool_tokenizer(tokenizer),
                              tools=[lookup])
    ScriptedToolModel(trainer, first=first, answer=answer)
    records = spy_replays(trainer)
    trainer.train()
    tool_logs = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert len(tool_logs) == len(records) == 2
    padded = 0
    for record, log in zip(records, tool_logs):
        output = record["output"]
        padding = output.get("sara_padding", torch.zeros(output["tool_mask"].shape[0], dtype=torch.bool))
        called = output["tool_mask"].eq(0).any(dim=1)  # a row whose completion holds tool output
        real = int((~padding).sum())
        padded += int(padding.sum())
        assert not output["tool_mask"][padding].eq(0).any()  # padding rows: no tool output
        expected = float(called[~padding].sum()) / real if real else float("nan")
        assert log["tools/call_frequency"] == pytest.approx(expected, nan_ok=True)
    assert padded > 0  # the script made short groups


def test_tool_trajectories_survive_carry_and_checkpoint_state():
    """carry_over and a checkpoint's carried cache keep each rollout's tool record (what the replay hands TRL)."""
    import numpy as np

    from sara_trl.trainer.rollout import RolloutCache, Trajectory

    trajectories = {i: Trajectory(prompt_ids=[7, 8], env_mask=[1, 0, 0, 1], turn_ids=[5], tool_calls=i,
                                  tool_failures=i // 2, messages=[{"role": "tool", "name": "lookup",
                                                                   "content": f"value-{i}"}])
                    for i in range(3)}
    cache = RolloutCache(completion_ids=[[5, 9, 9, 6]] * 3, logprobs=[None] * 3, rewards=[torch.zeros(3, 1)],
                         success=[np.zeros(3)], tokens=[np.full(3, 4)], round_index=[1, 1, 1],
                         trajectories=trajectories)
    carried = cache.carry(np.array([2, 0]))
    assert carried.trajectories == {0: trajectories[2], 1: trajectories[0]}
    restored = RolloutCache.from_state(carried.state())
    assert restored.trajectories == carried.trajectories


def test_tool_accounting_splits_tokens_and_calls_by_fate():
    """sara/model_tokens_*, tool_tokens_*, tool_calls_*: each rollout's tokens split by its tool_mask (no mask: all
    model tokens), its calls, by its fate; carried rollouts count as carried in, not generated; a broken split
    raises."""
    import dataclasses

    import numpy as np

    from sara_trl.allocation import Fate, StepStats
    from sara_trl.trainer.metrics import TOOL_METRICS, check_tool_accounting, tool_accounting
    from sara_trl.trainer.rollout import RolloutCache, Trajectory

    masks = {0: [1, 0, 0, 1], 1: [1, 1, 0, 1, 1], 3: [1, 0, 0, 0, 1, 1]}  # rollout 2: no tool loop (no mask)
    calls = {0: 1, 1: 2, 3: 1}
    trajectories = {i: Trajectory(prompt_ids=[7], env_mask=m, tool_calls=calls[i]) for i, m in masks.items()}
    trajectories[2] = Trajectory(prompt_ids=[7], observation="obs")
    ids = [[5] * 4, [5] * 5, [5] * 3, [5] * 6]
    cache = RolloutCache(completion_ids=ids, logprobs=[None] * 4, tokens=[np.array([4, 5, 3, 6])],
                         round_index=[0, 1, 1, 2], carried=1, trajectories=trajectories)
    fates = np.array([Fate.TRAINED, Fate.ABANDONED, Fate.TRAINED, Fate.ACTIVE], np.int8)
    stats = StepStats(rollouts_generated=3, rollouts_carried_in=1, rollouts_trained=2, rollouts_abandoned=1,
                      rollouts_active_left=1, tokens_generated=14, tokens_carried_in=4, tokens_trained=7,
                      tokens_abandoned=5, tokens_active_left=6)
    values = tool_accounting(cache, fates, stats)
    assert set(values) == set(TOOL_METRICS)
    assert {k: v for k, v in values.items() if k.startswith("model_")} == {
        "model_tokens_generated": 4 + 3 + 3, "model_tokens_carried_in": 2, "model_tokens_trained": 2 + 3,
        "model_tokens_abandoned": 4, "model_tokens_surplus": 0, "model_tokens_active_left": 3}
    assert {k: v for k, v in values.items() if k.startswith("tool_tokens")} == {
        "tool_tokens_generated": 1 + 0 + 3, "tool_tokens_carried_in": 2, "tool_tokens_trained": 2,
        "tool_tokens_abandoned": 1, "tool_tokens_surplus": 0, "tool_tokens_active_left": 3}
    assert {k: v for k, v in values.items() if k.startswith("tool_calls")} == {
        "tool_calls_generated": 3, "tool_calls_carried_in": 1, "tool_calls_trained": 1, "tool_calls_abandoned": 2,
        "tool_calls_surplus": 0, "tool_calls_active_left": 1}

    with pytest.raises(AssertionError, match="accounting broken: 5 model \\+ 2 tool tokens trained, but the step "
                                             "counts 8 tokens trained"):
        tool_accounting(cache, fates, dataclasses.replace(stats, tokens_trained=8))
    with pytest.raises(AssertionError, match="accounting broken: generated 3 tool_calls \\(\\+ carried in 1\\) but "
                                             "fates .* sum to 5"):
        check_tool_accounting({**values, "tool_calls_surplus": 1}, stats)
    with pytest.raises(ValueError, match="3 rollout fates for 4 cached rollouts"):
        tool_accounting(cache, fates[:3], stats)
    trajectories[3] = Trajectory(prompt_ids=[7], env_mask=[1, 0])
    with pytest.raises(ValueError, match="rollout 3: its tool mask has 2 entries for 6 completion tokens"):
        tool_accounting(cache, fates, stats)
