"""``environment_factory`` in SaraGRPOTrainer on a tiny random Llama (CPU), with scripted generation: a guess-the-number
environment (``reset(**row)`` stores the row's target and returns an observation, ``guess(n)`` is its tool,
``get_reward()`` is 1.0 once guessed). Each round draws one instance per rollout from TRL's pool, resets it with the
row (observation appended to the prompt), runs TRL's tool loop over the instance's method and scores with the round's
``environments``; the replay resets nothing and runs no tool. With ``allocator="uniform"`` the batch, loss and metrics
are TRL's GRPOTrainer's on the same scripted trajectories. ``collection='auto'`` keeps it in rounds (streaming it is
tested in ``tests/test_trainer_trajectory_streaming.py``); ``rollout_func`` and RLOO refuse it."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from _helpers_trainer import ScriptedGeneration
from datasets import Dataset
from test_trainer_tools import sara_logs, spy_replays, tool_tokenizer
from trl import GRPOConfig, GRPOTrainer

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.trainer.environment import ReplayedEnvironment, replayed_environments
from sara_trl.trainer.plan import plan_collection

# Prompt i's mode, as in test_trainer_tools: "always" guessed, "never" guessed, "coin": its rollouts alternate.
MODES = ["always", "never", "coin", "coin"] * 3
OBSERVATION = " I picked a number: guess it."
TOOL_CALL = '<tool_call>\n{{"name": "guess", "arguments": {{"n": {n}}}}}\n</tool_call><|im_end|>'


def target_of(question: int) -> int:
    return 3 * question + 1


def env_dataset(questions=None) -> Dataset:
    questions = list(range(len(MODES))) if questions is None else questions
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Question {q}"}] for q in questions],
                              "target": [target_of(q) for q in questions]})


class GuessEnv:
    """Guess the row's number: one ``guess`` tool, solved when a guess hits the target."""

    log: list[tuple] = []  # every reset and guess, in order, over every instance

    def __init__(self):
        self.target, self.solved = None, False

    def reset(self, target, **kwargs):
        self.target, self.solved = int(target), False
        GuessEnv.log.append(("reset", self.target))
        return OBSERVATION

    def guess(self, n: int) -> str:
        """Guess the number.

        Args:
            n: The guessed number.
        """
        GuessEnv.log.append(("guess", self.target, n))
        self.solved = self.solved or n == self.target
        return "correct" if n == self.target else ("higher" if n < self.target else "lower")

    def get_reward(self) -> float:
        return 1.0 if self.solved else 0.0


def events(kind: str) -> list[tuple]:
    return [event for event in GuessEnv.log if event[0] == kind]


class ScriptedGuesser(ScriptedGeneration):
    """Scripted generation for the environment tests: a first turn calls ``guess`` (the target when
    ``hit(question, position)``, else one more), a turn after the tool response says "done". Records also whether
    every prompt carried the environment's observation, and each first turn's tokens and hit."""

    def __init__(self, trainer, hit):
        super().__init__(trainer)
        self.hit = hit
        self.observed: list[bool] = []
        self.first_turns: list[tuple[int, bool]] = []  # per first turn, in generation order: (tokens, hit)

    def turn(self, question, position, text, after_tool):
        self.observed.append(f"Question {question}{OBSERVATION}" in text)
        if after_tool:
            return "done<|im_end|>"
        hit = self.hit(question, position)
        turn = TOOL_CALL.format(n=target_of(question) + (0 if hit else 1))
        self.first_turns.append((len(self.ids(turn)), hit))
        return turn


def done_reward(completions, **kwargs):
    """A shaped (non-binary) score: 0.5 for ending with "done"; SARA's label comes from GuessEnv."""
    return [0.5 * float(completion[-1]["content"].strip() == "done") for completion in completions]


def env_kwargs(cpu_trainer_kwargs, **overrides):
    return cpu_trainer_kwargs(max_completion_length=128, **overrides)


def check_env_rows(tokenizer, output, targets):
    """Each row: prompt with the observation; completion = guess call + tool response (tool_mask 0) + "done"."""
    for row, target in enumerate(targets):
        prompt = tokenizer.decode(output["prompt_ids"][row][output["prompt_mask"][row].bool()].tolist())
        assert OBSERVATION in prompt
        length = int(output["completion_mask"][row].sum())
        ids = output["completion_ids"][row, :length].tolist()
        mask = output["tool_mask"][row, :length].tolist()
        zeros = [i for i, m in enumerate(mask) if m == 0]
        assert zeros and zeros == list(range(zeros[0], zeros[-1] + 1))  # one contiguous block: the tool response
        assert f'"n": {target}' in tokenizer.decode(ids[:zeros[0]]) or f'"n": {target + 1}' in tokenizer.decode(
            ids[:zeros[0]])
        tool_text = tokenizer.decode(ids[zeros[0]:zeros[-1] + 1])
        assert "<tool_response>" in tool_text and re.search(r"correct|higher|lower", tool_text)
        assert tokenizer.decode(ids[zeros[-1] + 1:]) == "done<|im_end|>" and all(mask[zeros[-1] + 1:])


def check_split_by_fate(model, records, logs):
    """sara/model_tokens_*, tool_tokens_*, tool_calls_* of each step, exactly: a rollout's model tokens are its
    scripted first turn plus "done<|im_end|>", its tool tokens TRL's rendering of its guess's response ("correct" on
    a hit, "lower" on a miss: its length read off TRL's training rows), one guess each; summed by the rollout's fate.
    The trained ones are also what TRL's batch holds (tool_mask 1 / 0 under completion_mask)."""
    import numpy as np

    from sara_trl.allocation import Fate

    done = len(model.ids("done<|im_end|>"))
    response_tokens = {}  # "correct" / "lower" -> tool tokens, from TRL's rows
    for record in records:
        output = record["output"]
        for row in range(output["completion_ids"].shape[0]):
            mask = output["tool_mask"][row][output["completion_mask"][row].bool()]
            ids = output["completion_ids"][row][output["completion_mask"][row].bool()][mask == 0].tolist()
            response = "correct" if "correct" in model.tokenizer.decode(ids) else "lower"
            assert response_tokens.setdefault(response, len(ids)) == len(ids)
    assert set(response_tokens) == {"correct", "lower"}  # the coin groups hold both
    start = 0
    for record, entry in zip(records, logs):
        step, output = record["step"], record["output"]
        turns = model.first_turns[start:start + int(entry["sara/rollouts_generated"])]
        start += len(turns)
        per_rollout = {"model_tokens": np.array([first + done for first, _ in turns]),
                       "tool_tokens": np.array([response_tokens["correct" if hit else "lower"] for _, hit in turns]),
                       "tool_calls": np.ones(len(turns), np.int64)}
        fates = step.rollout_fates
        assert np.array_equal(np.flatnonzero(fates == Fate.TRAINED),
                              np.sort(np.concatenate([g.rollout_ids for g in step.groups])))
        for unit, values in per_rollout.items():
            assert entry[f"sara/{unit}_generated"] == values.sum() and entry[f"sara/{unit}_carried_in"] == 0
            for name, fate in (("trained", Fate.TRAINED), ("abandoned", Fate.ABANDONED), ("surplus", Fate.SURPLUS),
                               ("active_left", Fate.ACTIVE)):
                assert entry[f"sara/{unit}_{name}"] == values[fates == fate].sum(), (unit, name)
            assert entry[f"sara/{unit}_generated"] == sum(
                entry[f"sara/{unit}_{name}"] for name in ("trained", "abandoned", "surplus", "active_left"))
        for name in ("generated", "trained", "abandoned", "surplus", "active_left"):
            split = entry[f"sara/model_tokens_{name}"] + entry[f"sara/tool_tokens_{name}"]
            assert split == entry[f"sara/tokens_{name}"]
        assert entry["sara/tool_calls_generated"] == entry["sara/rollouts_generated"]
        assert entry["sara/tool_calls_abandoned"] == entry["sara/rollouts_abandoned"] > 0  # the allocator abandoned
        mask, completion = output["tool_mask"].bool(), output["completion_mask"].bool()
        assert entry["sara/model_tokens_trained"] == int((completion & mask).sum())
        assert entry["sara/tool_tokens_trained"] == int((completion & ~mask).sum())


def test_environment_trains_in_rounds(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """allocator='sara': per round, one reset per rollout (observation in every prompt) and one guess per rollout
    through TRL's tool loop; the env's get_reward is the success label; the replay resets nothing, guesses nothing."""
    GuessEnv.log = []
    seen: dict[int, int] = {}

    def hit(question, position):
        j = seen.get(question, 0)
        seen[question] = j + 1
        return MODES[question] == "always" or (MODES[question] == "coin" and j % 2 == 0)

    args = SaraConfig(**env_kwargs(cpu_trainer_kwargs, allocator="sara", budget_cap=12.0,
                                   success_reward_func="GuessEnv"))
    assert args.schedule == "rounds"
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=done_reward, args=args, train_dataset=env_dataset(),
                              processing_class=tool_tokenizer(tokenizer), environment_factory=GuessEnv)
    assert trainer.reward_func_names == ["done_reward", "GuessEnv"]
    assert [tool.__name__ for tool in trainer.tools] == ["guess"]
    model = ScriptedGuesser(trainer, hit)
    records = spy_replays(trainer)
    constructed = len(GuessEnv.log)  # TRL's probe instance is not reset
    trainer.train()

    logs = sara_logs(trainer)
    assert len(logs) == len(records) == 2 and constructed == 0
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    rounds = sum(entry["sara/rounds"] for entry in logs)
    # Per round: the resets of its rollouts, then one first turn over them, then one turn after the tool responses.
    assert [after for _, after in model.calls] == [False, True] * int(rounds)
    first_turns = [rows for rows, after in model.calls if not after]
    # The log is, round after round, the resets of its rollouts then their guesses (the replay adds nothing).
    kinds = "".join(event[0][0] for event in GuessEnv.log)  # "r" reset, "g" guess
    assert kinds == "".join("r" * rows + "g" * rows for rows in first_turns)
    assert len(events("reset")) == len(events("guess")) == generated == sum(e["sara/env_resets"] for e in logs)
    assert all(model.observed)  # every generated prompt carried the observation
    for record, entry in zip(records, logs):
        step, output = record["step"], record["output"]
        step.stats.check()
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        assert entry["sara/unfilled"] == 0
        assert all(MODES[group.prompt_id] == "coin" for group in step.groups)
        check_env_rows(model.tokenizer, output, [target_of(g.prompt_id) for g in step.groups for _ in g.rollout_ids])
        assert (output["advantages"].abs() > 0).all()
    tool_logs = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert [entry["tools/call_frequency"] for entry in tool_logs] == [1.0, 1.0]
    check_split_by_fate(model, records, logs)
    # The rounds' instances came from TRL's pool (grown to the largest round), and the pool is TRL's again.
    pool = trainer._environment_pool[None]
    assert all(isinstance(env, GuessEnv) for env in pool) and len(pool) == max(first_turns)
    assert all(isinstance(env, GuessEnv) for env in trainer.environments)


def test_uniform_with_environment_equals_trl(tiny_model_dir, smollm2_tokenizer_dir, cpu_trainer_kwargs):
    """allocator='uniform' trains what TRL's GRPOTrainer trains on the same scripted environment trajectories: the
    same prompts (observation appended), completions, tool_mask, rewards and advantages, loss and metrics; TRL resets
    each instance once per rollout, SARA too (the replay resets none)."""
    from transformers import AutoTokenizer

    dataset = env_dataset([0] * 8)

    def hit(question, position):  # per group of 4: hit, miss, hit, miss
        return position % 2 == 0

    results = {}
    for name in ("trl", "sara"):
        GuessEnv.log = []
        processing_class = tool_tokenizer(AutoTokenizer.from_pretrained(smollm2_tokenizer_dir))
        kwargs = env_kwargs(cpu_trainer_kwargs, max_steps=1)
        if name == "trl":
            trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=done_reward, args=GRPOConfig(**kwargs),
                                  train_dataset=dataset, processing_class=processing_class,
                                  environment_factory=GuessEnv)
        else:
            trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=done_reward,
                                      args=SaraConfig(**kwargs, allocator="uniform", success_reward_func="GuessEnv"),
                                      train_dataset=dataset, processing_class=processing_class,
                                      environment_factory=GuessEnv)
        model = ScriptedGuesser(trainer, hit)
        outputs = []
        generate_and_score = trainer._generate_and_score_completions

        def capture(inputs, generate_and_score=generate_and_score, outputs=outputs, trainer=trainer):
            output = generate_and_score(inputs)
            if trainer.model.training:
                outputs.append({k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
            return output

        trainer._generate_and_score_completions = capture
        trainer.train()
        results[name] = {"log": trainer.state.log_history[0], "output": outputs[0], "resets": len(events("reset")),
                         "guesses": len(events("guess"))}
        check_env_rows(model.tokenizer, outputs[0], [target_of(0)] * 8)

    trl, sara = results["trl"], results["sara"]
    assert sara["resets"] == trl["resets"] == 8 and sara["guesses"] == trl["guesses"] == 8
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask", "advantages"):
        assert torch.equal(sara["output"][key], trl["output"][key]), key
    assert trl["log"]["loss"] != 0.0 and trl["log"]["rewards/GuessEnv/mean"] == 0.5
    for key in ("loss", "reward", "reward_std", "rewards/GuessEnv/mean", "rewards/done_reward/mean",
                "tools/call_frequency", "tools/failure_frequency", "completions/mean_length", "num_tokens"):
        assert sara["log"][key] == pytest.approx(trl["log"][key], rel=1e-5, abs=1e-7), key
    assert sara["log"]["sara/env_resets"] == 8.0


def test_environment_refusals(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Rounds under collection='auto' (with its reason), streaming when asked to, not with a rollout_func, and RLOO
    (no tool loop in TRL) refuses it."""
    base = dict(output_dir="o", use_cpu=True, report_to="none", num_generations=4, per_device_train_batch_size=8,
                max_steps=1, use_vllm=True, vllm_mode="colocate")
    plan = plan_collection(SaraGRPOTrainer, SaraConfig(**base), processes=1, environment_factory=True)
    assert plan.schedule == "rounds" and "`environment_factory` rollouts run in rounds by default" in \
        plan.schedule_reason
    plan = plan_collection(SaraGRPOTrainer, SaraConfig(**base, collection="streaming"), processes=1,
                           environment_factory=True)
    assert (plan.schedule, plan.multi_turn) == ("streaming", "environment_factory")
    with pytest.raises(ValueError, match="does not support `environment_factory`: together with `rollout_func`"):
        SaraGRPOTrainer(model=tiny_model_dir, args=SaraConfig(**cpu_trainer_kwargs()), train_dataset=env_dataset(),
                        processing_class=tokenizer, environment_factory=GuessEnv,
                        rollout_func=lambda prompts, trainer: {})
    with pytest.raises(ValueError, match="does not support `environment_factory`: TRL's RLOOTrainer .* no tool loop"):
        SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=done_reward, args=SaraRLOOConfig(**cpu_trainer_kwargs()),
                        train_dataset=env_dataset(), processing_class=tokenizer, environment_factory=GuessEnv)


class OtherEnv(GuessEnv):
    pass


def trl_draw(trainer, rows):
    """TRL's draw for a batch (GRPOTrainer._generate_and_score_completions): row i of environment ``name`` takes the
    next instance of that name's pool."""
    cursor, drawn = {}, []
    for row in rows:
        name = row["environment"]
        drawn.append(trainer._environment_pool[name][cursor.get(name, 0)])
        cursor[name] = cursor.get(name, 0) + 1
    return drawn


def test_replayed_pool_hands_each_row_its_observation():
    """While the replay runs, TRL's pool holds one stand-in per row, in row order under each name, whose reset gives
    the cached observation; TRL's pool and ``trainer.environments`` are restored afterwards."""
    factories = {"a": GuessEnv, "b": OtherEnv}
    real = GuessEnv()
    trainer = SimpleNamespace(environment_factories=factories, _multi_environment=True, environments=[real],
                              _environment_pool={"a": [real], "b": []})
    pool = trainer._environment_pool
    rows = [{"environment": name} for name in ("a", "b", "a")]
    with replayed_environments(trainer, ["a", "b", "a"], ["x", None, "z"]) as stand_ins:
        drawn = trl_draw(trainer, rows)
        assert drawn == [stand_ins[0], stand_ins[2], stand_ins[1]]  # stand-ins listed by name: a, a, b
        assert all(isinstance(env, ReplayedEnvironment) for env in drawn)
        assert [env.reset(target=1) for env in drawn] == ["x", None, "z"]
    assert trainer._environment_pool is pool and trainer.environments == [real]


def test_environment_reward_alone(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """With the environment's get_reward as the only reward source, reward_funcs may be omitted (as in TRL): its column
    is the score, and success_reward_func may name it."""
    for success in (None, "GuessEnv"):
        trainer = SaraGRPOTrainer(model=tiny_model_dir, args=SaraConfig(**env_kwargs(cpu_trainer_kwargs,
                                                                                      success_reward_func=success)),
                                  train_dataset=env_dataset(), processing_class=tool_tokenizer(tokenizer),
                                  environment_factory=GuessEnv)
        assert trainer.reward_func_names == ["GuessEnv"]
        assert "GuessEnv" in trainer.sara.success_rule.source


class QuizEnv:
    """An environment without tools: ``reset`` sets the question's expected answer; a reward function reads it from
    the ``environments`` argument."""

    resets = 0

    def reset(self, target, **kwargs):
        QuizEnv.resets += 1
        self.expected = "yes" if MODES[(int(target) - 1) // 3] != "never" else "no"
        return OBSERVATION


def quiz_reward(completions, environments, **kwargs):
    """1 when the answer is the one the rollout's environment expects (the round's instances reach the rewards)."""
    assert all(isinstance(env, QuizEnv) for env in environments) and len(environments) == len(completions)
    return [float(c[-1]["content"].strip() == env.expected) for c, env in zip(completions, environments)]


def test_environment_without_tools(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """An environment with no tool method: no tool loop runs; reset still runs once per generated rollout (none in
    the replay), the observation joins the prompt, and the round's instances reach the reward functions."""
    QuizEnv.resets = 0
    seen: dict[int, int] = {}
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=quiz_reward,
                              args=SaraConfig(**env_kwargs(cpu_trainer_kwargs, allocator="sara", budget_cap=12.0)),
                              train_dataset=env_dataset(), processing_class=tool_tokenizer(tokenizer),
                              environment_factory=QuizEnv)
    assert trainer.tools == []
    tok = trainer.processing_class

    def generate(input_ids, attention_mask=None, **kwargs):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            text = tok.decode([t for t, m in zip(ids, mask) if m])
            assert OBSERVATION in text
            question = int(re.findall(r"Question (\d+)", text)[-1])
            j = seen.get(question, 0)
            seen[question] = j + 1
            ok = MODES[question] == "always" or (MODES[question] == "coin" and j % 2 == 0)
            answer = "yes" if ok == (MODES[question] != "never") else "no"
            rows.append(tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"])
        width = max(len(r) for r in rows)
        completions = torch.tensor([r + [tok.eos_token_id] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, completions], dim=1)

    trainer.model.generate = generate
    records = spy_replays(trainer)
    trainer.train()
    logs = sara_logs(trainer)
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert QuizEnv.resets == generated == sum(entry["sara/env_resets"] for entry in logs)
    for entry in logs:  # no tool loop: no tool token, no tool call; the model tokens are the step's tokens
        for name in ("generated", "trained", "abandoned", "surplus", "active_left", "carried_in"):
            assert entry[f"sara/tool_tokens_{name}"] == entry[f"sara/tool_calls_{name}"] == 0.0
            assert entry[f"sara/model_tokens_{name}"] == entry[f"sara/tokens_{name}"]
        assert entry["sara/model_tokens_generated"] == entry["sara/rollouts_generated"] * 2  # "yes"/"no", <|im_end|>
    for record in records:
        assert all(MODES[group.prompt_id] == "coin" for group in record["step"].groups)
        assert "tool_mask" not in record["output"]
        for row in range(record["output"]["prompt_ids"].shape[0]):
            ids = record["output"]["prompt_ids"][row][record["output"]["prompt_mask"][row].bool()].tolist()
            assert OBSERVATION in tok.decode(ids)
