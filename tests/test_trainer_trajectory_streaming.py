"""Streaming collection of multi-turn rollouts (``tools=``, ``environment_factory``): each rollout is a chain of
requests (:class:`sara_trl.trainer.trajectory.TrajectoryEngine`) on a scripted request-level engine (one token per
engine step, so rollouts finish out of order), a tiny random Llama training on CPU.

- The chain builds what TRL's batch tool loop builds from the same turns: completion ids over every turn, tool_mask,
  log-probs (0.0 on tool tokens), messages, tool call and failure counts.
- An abort stops a trajectory's remaining turns; its model and tool tokens so far are surplus, and its environment
  instance goes back to the pool.
- The trainer streams with tools and with an environment: SARA's steps train TRL's rows (tool output masked), the
  accounting holds for model tokens, tool tokens and tool calls, every reset is one rollout, no instance is leaked.
"""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from _scripted_requests import ScriptedRequests
from datasets import Dataset
from test_trainer_environment import OBSERVATION, GuessEnv, done_reward, env_dataset, target_of
from test_trainer_tools import (
    MODES,
    TOOL_CALL,
    answer_reward,
    check_tool_rows,
    lookup,
    sara_logs,
    spy_replays,
    tool_tokenizer,
)

from sara_trl import SaraConfig, SaraGRPOTrainer
from sara_trl.trainer.trajectory import TrajectoryEngine


def first_turns(question, text, after_tool):
    """Rollouts of "Question q": q % 4 = 0, 1 call lookup, 2 calls a missing tool (a failure), 3 answers at once;
    after a tool response: "yes" when the lookup answered, else "no"."""
    if after_tool:
        return ("yes" if "value-" in text else "no") + "<|im_end|>"
    action = ("lookup", "lookup", "missing", "yes")[question % 4]
    return TOOL_CALL.format(name=action, key=question) if action != "yes" else "yes<|im_end|>"


def tools_trainer(tiny_model_dir, tokenizer, cpu_trainer_kwargs, **overrides):
    args = SaraConfig(**cpu_trainer_kwargs(max_completion_length=128, **overrides))
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Question {i}"}] for i in range(12)]})
    return SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=answer_reward, args=args, train_dataset=dataset,
                           processing_class=tool_tokenizer(tokenizer), tools=[lookup])


def run_chains(engine, prompt_ids):
    for rid, pid in enumerate(prompt_ids):
        engine.add_prompt(rid, pid)
    finished = {}
    while engine.pending:
        for done in engine.step():
            finished[done.rid] = done
    return [finished[rid] for rid in range(len(prompt_ids))]


def test_chain_builds_what_trls_tool_loop_builds(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """Four rollouts (two lookups, a missing tool, a direct answer) as request chains, against TRL's own batch tool
    loop (``GRPOTrainer._tool_call_loop``) on the same turns: identical ids, tool_mask, log-probs and messages, and the
    per-rollout tool call / failure counts add up to TRL's totals."""
    trainer = tools_trainer(tiny_model_dir, tokenizer, cpu_trainer_kwargs)
    requests = ScriptedRequests(trainer.processing_class, first_turns)
    questions = [0, 1, 2, 3]
    lookup.calls = 0
    streamed = run_chains(TrajectoryEngine(trainer, requests), questions)
    assert lookup.calls == 2
    # first turns, then one post-tool turn for each of the three tool-calling rollouts (none for the answer)
    assert sorted(after for _, after, _ in requests.requests) == [False] * 4 + [True] * 3

    rows = [trainer._sara_row(q) for q in questions]
    prompts = [row["prompt"] for row in rows]
    prompt_ids, images, fields = trainer._tokenize_prompts(prompts)
    script = ScriptedRequests(trainer.processing_class, first_turns)
    firsts = [script.script(ids)[0] for ids in prompt_ids]
    lps = [[-0.01 * (i + 1) for i in range(len(ids))] for ids in firsts]

    def regenerate(ids_list, *args, **kwargs):
        out = [script.script(ids, trainer.max_completion_length - (len(ids) - len(prompt_ids[0])))[0]
               for ids in ids_list]
        return out, [[-0.01 * (i + 1) for i in range(len(ids))] for ids in out]

    trainer._generate_single_turn = regenerate
    trainer._sync_tool_dicts = [{"lookup": lookup} for _ in questions]
    trainer._async_tool_dicts = [{} for _ in questions]
    completions = trainer._sara_decode(prompts, prompt_ids, firsts)
    tool_mask, messages, ids, logprobs, calls, failures, _ = trainer._tool_call_loop(
        copy.deepcopy(prompts), prompt_ids, [list(ids) for ids in firsts], completions, [list(lp) for lp in lps],
        images, fields)
    del trainer._generate_single_turn
    assert lookup.calls == 4  # TRL's loop ran the same two lookups
    mine = [done.record.trajectory for done in streamed]
    for i, done in enumerate(streamed):
        assert done.completion_ids == ids[i] and done.logprobs == logprobs[i]
        assert mine[i].env_mask == tool_mask[i] and mine[i].turn_ids == firsts[i]
        assert mine[i].prompt_ids == prompt_ids[i]
        assert mine[i].messages == messages[i] == done.record.completion
    assert [t.tool_calls for t in mine] == [1, 1, 1, 0] and sum(t.tool_calls for t in mine) == calls
    assert [t.tool_failures for t in mine] == [0, 0, 1, 0] and sum(t.tool_failures for t in mine) == failures
    assert [0 in t.env_mask for t in mine] == [True, True, True, False]


def test_abort_counts_every_turn_so_far_as_surplus(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """A rollout aborted in its post-tool turn: its first turn, the tool response and the partial answer are its
    tokens (model and tool, in ``uncached``), its tool call counted; no further turn runs."""
    trainer = tools_trainer(tiny_model_dir, tokenizer, cpu_trainer_kwargs)
    requests = ScriptedRequests(trainer.processing_class, first_turns)
    engine = TrajectoryEngine(trainer, requests)
    engine.add_prompt(0, 0)  # calls lookup, then answers "yes"
    first = len(requests.running[0][0])
    for _ in range(first):
        assert engine.step() == []
    assert [after for _, after, _ in requests.requests] == [False, True]  # the post-tool turn is in flight
    chain = engine._chains[0]
    suffix = len(chain.context_ids) - len(chain.prompt_ids) - first
    engine.step()  # one token of the answer
    assert engine.abort([0, 7]) == [first + suffix + 1, 0]
    assert engine.uncached == {"model_tokens": first + 1, "tool_tokens": suffix, "tool_calls": 1}
    assert engine.pending == 0 and requests.pending == 0
    engine.close()


def streaming(trainer, make_requests, max_in_flight=8):
    """Run the trainer's steps through streaming collection on a scripted request engine (TRL's colocated vLLM
    engine is what the trainer uses; these tests need none)."""
    trainer.sara.plan = dataclasses.replace(trainer.sara.plan, schedule="streaming", engine="requests")
    trainer.args.streaming_max_in_flight = max_in_flight
    allocator = trainer.sara_allocator
    allocator.config = dataclasses.replace(allocator.config, collection="streaming")
    trainer.vllm_generation = SimpleNamespace(max_num_seqs=None, sync_weights=lambda: None)
    trainer._last_loaded_step = -1
    engines = []

    def request_engine(tag):
        engines.append(make_requests())
        return engines[-1]

    trainer._sara_request_engine = request_engine
    return engines


def test_tools_stream_through_request_chains(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """allocator='sara', tools, streaming: SARA decides per trajectory; the trained rows are TRL's (tool output
    masked), the tool ran once per rollout that called it and never in the replay, and the accounting of model
    tokens, tool tokens and tool calls holds by fate (checked inside the trainer, and here for the totals)."""
    seen: dict[int, int] = {}

    def turn(question, text, after_tool):  # every rollout looks up, then "always" yes / "never" no / "coin" alternate
        if not after_tool:
            return TOOL_CALL.format(name="lookup", key=question)
        mode, j = MODES[question], seen.get(question, 0)
        seen[question] = j + 1
        return ("yes" if mode == "always" or (mode == "coin" and j % 2 == 0) else "no") + "<|im_end|>"

    trainer = tools_trainer(tiny_model_dir, tokenizer, cpu_trainer_kwargs, allocator="sara", budget_cap=12.0,
                            continue_to_decision=True)
    engines = streaming(trainer, lambda: ScriptedRequests(trainer.processing_class, turn))
    lookup.calls = 0
    records = spy_replays(trainer)
    trainer.train()
    logs = sara_logs(trainer)
    assert len(logs) == len(records) == 2 and len(engines) == 2
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    started = sum(sum(1 for _, after, _ in e.requests if not after) for e in engines)
    assert generated == started  # one first-turn request per rollout
    # the tool ran once per rollout that reached its call (a rollout aborted in its first turn never did)
    assert lookup.calls == sum(entry["sara/tool_calls_generated"] for entry in logs) <= generated
    for record in records:
        step, output = record["step"], record["output"]
        assert all(MODES[group.prompt_id] == "coin" for group in step.groups)
        check_tool_rows(_Ids(trainer), output,
                        [TOOL_CALL.format(name="lookup", key=g.prompt_id) for g in step.groups for _ in g.rollout_ids])
    for entry in logs:
        for name in ("generated", "trained", "abandoned", "surplus", "active_left"):
            split = entry[f"sara/model_tokens_{name}"] + entry[f"sara/tool_tokens_{name}"]
            assert split == entry[f"sara/tokens_{name}"]
        assert entry["sara/tool_calls_trained"] == entry["sara/rollouts_trained"] == 8
        assert entry["sara/rounds"] == 0 and entry["sara/engine_steps"] > 0
    assert [e["tools/call_frequency"] for e in trainer.state.log_history if "tools/call_frequency" in e] == [1.0, 1.0]


class _Ids:
    """What check_tool_rows needs of the scripted model: the tokenizer and text -> ids."""

    def __init__(self, trainer):
        self.tokenizer = trainer.processing_class

    def ids(self, text):
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_environment_streams_with_leased_instances(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """environment_factory, streaming: every rollout resets one leased instance (sara/env_resets = rollouts
    generated), the reward (the environment's get_reward, via success_reward_func) reads that instance, no more
    instances exist than rollouts in flight, and every instance is back in the pool after each step."""
    GuessEnv.log = []
    counts: dict[int, int] = {}

    def turn(question, text, after_tool):
        if after_tool:
            return "done<|im_end|>"
        assert f"Question {question}{OBSERVATION}" in text  # the reset's observation joined the prompt
        j = counts.get(question, 0)
        counts[question] = j + 1
        mode = MODES[question]
        hit = mode == "always" or (mode == "coin" and j % 2 == 0)
        return '<tool_call>\n{"name": "guess", "arguments": {"n": %d}}\n</tool_call><|im_end|>' % (
            target_of(question) + (0 if hit else 1))

    args = SaraConfig(**cpu_trainer_kwargs(max_completion_length=128, allocator="sara", budget_cap=12.0,
                                           success_reward_func="GuessEnv", continue_to_decision=True))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=done_reward, args=args, train_dataset=env_dataset(),
                              processing_class=tool_tokenizer(tokenizer), environment_factory=GuessEnv)
    engines = streaming(trainer, lambda: ScriptedRequests(trainer.processing_class, turn), max_in_flight=8)
    chains = []
    from sara_trl.trainer import collect

    original = collect.TrajectoryEngine

    def spy(trainer_, inner):
        chains.append(original(trainer_, inner))
        return chains[-1]

    collect.TrajectoryEngine = spy
    records = spy_replays(trainer)
    try:
        trainer.train()
    finally:
        collect.TrajectoryEngine = original
    logs = sara_logs(trainer)
    assert len(logs) == 2 and len(chains) == 2
    resets = [event for event in GuessEnv.log if event[0] == "reset"]
    assert len(resets) == sum(entry["sara/rollouts_generated"] for entry in logs) == sum(c.env_resets for c in chains)
    assert [entry["sara/env_resets"] for entry in logs] == [c.env_resets for c in chains]
    assert all(c.leased == 0 for c in chains)
    assert 1 + 8 >= len(trainer._environment_pool[None]) >= 2  # the probe, then at most one per rollout in flight
    guesses = [event for event in GuessEnv.log if event[0] == "guess"]
    assert len(guesses) == sum(entry["sara/tool_calls_generated"] for entry in logs) <= len(resets)
    for entry in logs:
        assert entry["sara/tool_calls_trained"] == entry["sara/rollouts_trained"] == 8
        assert entry["sara/effective_fraction"] == 1.0
    assert all(e.pending == 0 for e in engines)
    for record in records:  # the environment's own reward decided: only the coin prompts' groups are mixed
        assert record["step"].groups and all(MODES[g.prompt_id] == "coin" for g in record["step"].groups)
    assert np.isfinite([entry["loss"] for entry in trainer.state.log_history if "loss" in entry]).all()


@pytest.mark.parametrize("name", ["tools", "environment_factory"])
def test_explicit_streaming_is_kept_and_auto_stays_in_rounds(name):
    from sara_trl.trainer.plan import plan_collection

    def args(collection):
        return SimpleNamespace(collection=collection, schedule="streaming", auto_reason=lambda: None,
                               streaming_max_in_flight=None, overlap_round_scoring=False)

    plan = plan_collection(SaraGRPOTrainer, args("streaming"), processes=1, **{name: True})
    assert (plan.schedule, plan.engine, plan.multi_turn) == ("streaming", "requests", name)
    plan = plan_collection(SaraGRPOTrainer, args("auto"), processes=1, **{name: True})
    assert (plan.schedule, plan.engine) == ("rounds", "generate") and "not yet measured faster" in plan.schedule_reason
    with pytest.raises(ValueError, match="rollout_func"):
        plan_collection(SaraGRPOTrainer, args("streaming"), processes=1, rollout_func=True)
