"""Subprocess body of the custom-rollout cases of tests/test_vllm_cpu.py: SmolLM2-135M on TRL's colocated vLLM engine
(CPU), with a user ``rollout_func``, with ``tools=``, or with ``environment_factory`` (one engine per process):

    python tests/_vllm_custom.py OUT.json --mode rollout_func|tools|environment [--steps N]
        [--collection rounds|streaming]

``rollout_func``: the function tokenizes the prompts itself and calls the engine (``trainer.vllm_generation.llm``)
with its own ``SamplingParams`` (``logprobs=0``); it returns the sampling log-probs, an ``env_mask`` (the last 2 tokens
0) and an extra field ``tag`` (one per rollout). Recorded: what it returned, by tag, and what TRL's pipeline received in
the replay (the tags of the input rows, the batch's ``completion_ids`` / ``tool_mask`` / ``sampling_per_token_logps``).

``tools`` / ``environment``: the SmolLM2 tokenizer with TRL's Qwen3 chat template (which renders tool calls); a tool
``lookup(key)`` (counting its invocations), or a guess-the-number environment (``reset`` / ``guess`` counted). The
135M model does not call tools by itself, so ``vllm_structured_outputs_regex`` restricts each turn to a well-formed
call of the tool or a short answer: the engine still samples (which of them, which argument). Recorded: the tool's
invocations, every replayed batch's ``completion_ids`` / ``completion_mask`` / ``tool_mask`` decoded, TRL's
``tools/*`` logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

COUNTS = {"generate_calls": 0, "generate_prompts": 0, "rollout_func_calls": 0, "rollout_func_prompts": 0,
          "lookup_calls": 0, "resets": 0, "guesses": 0, "resets_in_replay": 0, "tools_in_replay": 0}
ENV_MASKED = 2  # rollout_func: the last tokens of each completion marked as not the model's (env_mask 0)
TOOL_REGEX = (r'<tool_call>\n\{"name": "lookup", "arguments": \{"key": [0-9]\}\}\n</tool_call>|(yes|no)')
GUESS_REGEX = (r'<tool_call>\n\{"name": "guess", "arguments": \{"n": [0-9]\}\}\n</tool_call>|done')
OBSERVATION = " I picked a number from 0 to 9: guess it with the guess tool."
TRAINER: list = []  # the trainer, once built (the tools ask whether a replay is running)


def replaying() -> int:
    from sara_trl.trainer.replay import active_replay

    return int(bool(TRAINER) and active_replay(TRAINER[0]) is not None)


def lookup(key: int) -> str:
    """Look a key up in the table.

    Args:
        key: The key to look up.
    """
    COUNTS["lookup_calls"] += 1
    COUNTS["tools_in_replay"] += replaying()
    return f"value-{key}"


class GuessEnv:
    """Guess the row's number (0-9): one ``guess`` tool, solved by a guess at least as high (a coin flip for a
    model that guesses at random)."""

    def __init__(self):
        self.target, self.solved = None, False

    def reset(self, target, **kwargs):
        COUNTS["resets"] += 1
        COUNTS["resets_in_replay"] += replaying()
        self.target, self.solved = int(target), False
        return OBSERVATION

    def guess(self, n: int) -> str:
        """Guess the number.

        Args:
            n: The guessed number, from 0 to 9.
        """
        COUNTS["guesses"] += 1
        COUNTS["tools_in_replay"] += replaying()
        self.solved = self.solved or int(n) >= self.target  # at least the number: about one guess in two
        return "correct" if int(n) == self.target else ("higher" if int(n) < self.target else "lower")

    def get_reward(self) -> float:
        return 1.0 if self.solved else 0.0


def answer_reward(completions, **kwargs):
    """1 when the last assistant turn answers "yes"."""
    return [float(str(completion[-1].get("content", "")).strip() == "yes") for completion in completions]


def done_reward(completions, **kwargs):
    """0.5 for ending with "done" (a shaped score; SARA's label comes from GuessEnv)."""
    return [0.5 * float(str(completion[-1].get("content", "")).strip() == "done") for completion in completions]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--mode", choices=["rollout_func", "tools", "environment"], required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--collection", choices=["rounds", "streaming"], default="rounds")
    cli = parser.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    torch.set_num_threads(2)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from quickstart_cpu import make_task_mix

    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.rewards import numeric_reward
    from sara_trl.trainer.replay import active_replay
    from sara_trl.utils import smollm2_checkpoint

    checkpoint = smollm2_checkpoint()
    common = dict(
        output_dir=os.path.join(os.path.dirname(cli.out), "run"), use_cpu=True, bf16=False, report_to="none",
        max_steps=cli.steps, num_generations=4, per_device_train_batch_size=8, learning_rate=1e-6, beta=0.0,
        logging_steps=1, save_strategy="no", gradient_checkpointing=False, disable_tqdm=True, seed=0,
        allocator="sara", budget_cap=12.0, use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False,
        collection=cli.collection)
    record = {"returned": {}, "replays": []}
    kwargs = {}
    if cli.mode == "rollout_func":
        from vllm import SamplingParams, TokensPrompt

        args = SaraConfig(**common, max_completion_length=12, temperature=0.7, vllm_max_model_length=512)
        dataset, reward_funcs, processing_class = make_task_mix(256, seed=0), numeric_reward, None

        def rollout_func(prompts, trainer):
            """Generate the prompts on the engine directly: own templating, own SamplingParams, one call."""
            COUNTS["rollout_func_calls"] += 1
            COUNTS["rollout_func_prompts"] += len(prompts)
            tokenizer = trainer.processing_class
            prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                                        return_dict=False) for p in prompts]
            params = SamplingParams(n=1, max_tokens=trainer.args.max_completion_length,
                                    temperature=trainer.args.temperature, logprobs=0)
            outputs = trainer.vllm_generation.llm.generate(
                [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_ids], sampling_params=params,
                use_tqdm=False)
            completion_ids, logprobs, env_mask, tags = [], [], [], []
            for out in outputs:
                sample = out.outputs[0]
                ids = list(sample.token_ids)
                completion_ids.append(ids)
                logprobs.append([float(step[token].logprob) for step, token in zip(sample.logprobs, ids)])
                masked = min(ENV_MASKED, max(len(ids) - 1, 0))
                env_mask.append([1] * (len(ids) - masked) + [0] * masked)
                tag = f"call{COUNTS['rollout_func_calls']}-{len(tags)}"
                tags.append(tag)
                record["returned"][tag] = {"completion_ids": ids, "logprobs": logprobs[-1], "env_mask": env_mask[-1]}
            return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
                    "env_mask": env_mask, "tag": tags}

        kwargs["rollout_func"] = rollout_func
    else:
        from trl.chat_template_utils import qwen3_chat_template

        processing_class = AutoTokenizer.from_pretrained(checkpoint)
        processing_class.chat_template = qwen3_chat_template
        processing_class.eos_token = "<|im_end|>"
        regex = TOOL_REGEX if cli.mode == "tools" else GUESS_REGEX
        streamed_game = cli.mode == "environment" and cli.collection == "streaming"
        if streamed_game:  # a guess of 4 or 5 and every target 5: about one rollout in two wins, so groups mix
            regex = regex.replace("[0-9]", "[45]")
        # small: every rollout's prompt holds the template's tool schema (~300 tokens), prefilled on 2 CPU cores
        common.update(num_generations=2, per_device_train_batch_size=4,
                      budget_cap=2.0 if cli.mode == "tools" else 6.0 if streamed_game else 3.0)
        args = SaraConfig(**common, max_completion_length=96, temperature=1.0, vllm_max_model_length=1024,
                          max_tool_calling_iterations=1, vllm_structured_outputs_regex=regex,
                          **({"success_reward_func": "GuessEnv"} if cli.mode == "environment" else {}),
                          # k = 2: p_eff after a first outcome is 1/3, below the paper's tau_low (0.45), and
                          # streaming decides after every completion, so the config refuses streaming there (it would
                          # abandon each prompt at its first outcome); rounds decide after n0 = 2 outcomes.
                          **({"tau_low": 0.2} if streamed_game else {}))
        if cli.mode == "tools":
            questions = [f"Look up key {i % 10} with the lookup tool, then say yes if you found it, else no."
                         for i in range(32)]
            dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in questions]})
            reward_funcs = answer_reward
            kwargs["tools"] = [lookup]
        else:
            dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Game {i}."}] for i in range(32)],
                                         "target": [5 if streamed_game else 4 + i % 3 for i in range(32)]})
            reward_funcs = done_reward
            kwargs["environment_factory"] = GuessEnv

    trainer = SaraGRPOTrainer(model=checkpoint, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                              processing_class=processing_class, **kwargs)
    TRAINER.append(trainer)
    llm = trainer.vllm_generation.llm
    original_generate = llm.generate

    def counting_generate(prompts, *a, **kw):
        COUNTS["generate_calls"] += 1
        COUNTS["generate_prompts"] += len(prompts)
        return original_generate(prompts, *a, **kw)

    llm.generate = counting_generate
    tokenizer = trainer.processing_class
    calculate, generate_and_score = trainer._calculate_rewards, trainer._generate_and_score_completions

    def calculate_spy(inputs, prompts, completions, completion_ids_list):
        if active_replay(trainer) is not None:
            record["replays"].append({"tags": [row.get("tag") for row in inputs],
                                      "completion_ids": [list(ids) for ids in completion_ids_list]})
        return calculate(inputs, prompts, completions, completion_ids_list)

    def generate_spy(inputs):
        output = generate_and_score(inputs)  # collection (the rounds), then the replay
        if trainer.model.training and record["replays"]:
            rows = []
            mask = output["completion_mask"]
            tool_mask = output.get("tool_mask")
            lps = output.get("sampling_per_token_logps")
            padding = output.get("sara_padding")
            for r in range(mask.shape[0]):
                n = int(mask[r].sum())
                row = {"completion_ids": output["completion_ids"][r, :n].tolist(),
                       "padding": bool(padding[r]) if padding is not None else False}
                if tool_mask is not None:
                    row["tool_mask"] = tool_mask[r, :n].tolist()
                if lps is not None:
                    row["logprobs"] = lps[r, :n].tolist()
                if cli.mode != "rollout_func":
                    row["text"] = tokenizer.decode(row["completion_ids"])
                    row["prompt"] = tokenizer.decode(output["prompt_ids"][r][output["prompt_mask"][r].bool()].tolist())
                    zeros = [i for i, m in enumerate(row.get("tool_mask", [])) if m == 0]
                    row["zero_blocks"] = [tokenizer.decode(row["completion_ids"][a:b]) for a, b in _blocks(zeros)]
                    row["model_text"] = tokenizer.decode([t for t, m in zip(row["completion_ids"],
                                                                           row.get("tool_mask", [1] * n)) if m])
                rows.append(row)
            record["replays"][-1]["rows"] = rows
            step = trainer.sara_last_step
            record["replays"][-1]["groups"] = [[int(g.prompt_id), [int(i) for i in g.rollout_ids]]
                                               for g in step.groups]
        return output

    trainer._calculate_rewards = calculate_spy
    trainer._generate_and_score_completions = generate_spy

    class Checks(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            step = trainer.sara_last_step
            step.stats.check()

    trainer.add_callback(Checks())
    trainer.train()
    llm.generate = original_generate
    logs = [e for e in trainer.state.log_history if "sara/rollouts_generated" in e]
    result = {"counts": dict(COUNTS), "steps": logs, "record": record,
              "total_rollouts": trainer.sara_allocator.total_rollouts,
              "engine_dtype": str(llm.llm_engine.model_config.dtype),
              "tool_logs": [{k: v for k, v in e.items() if k.startswith("tools/")} for e in trainer.state.log_history
                            if any(k.startswith("tools/") for k in e)]}
    with open(cli.out, "w") as handle:
        json.dump(result, handle, indent=1, default=str)


def _blocks(positions: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of ``positions`` (ascending) as half-open ``(start, end)`` pairs."""
    runs = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1][1] = p + 1
        else:
            runs.append([p, p + 1])
    return [tuple(r) for r in runs]


if __name__ == "__main__":
    main()
