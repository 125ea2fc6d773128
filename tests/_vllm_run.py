"""Subprocess body of tests/test_vllm_cpu.py: SmolLM2-135M trained through TRL's colocated vLLM engine on the CPU.

One engine per process (vLLM's in-process engine cannot be rebuilt cleanly in the same process), so each test case
runs this file with its own arguments and reads the JSON it writes:

    python tests/_vllm_run.py OUT.json --trainer grpo --allocator sara [--steps 2] [--check_sync]
        [--collection streaming] [--save_steps N] [--resume_from CHECKPOINT]
    accelerate launch --config_file examples/accelerate_configs/multi_cpu.yaml tests/_vllm_run.py OUT.json --steps 1

Under a launcher (WORLD_SIZE > 1) each process builds its own colocated engine and writes ``OUT.json.rank<R>``.

Recorded: per step the ``sara/*`` and TRL sampling metrics, the number of ``LLM.generate`` calls and reward calls,
and with ``--check_sync`` the log-prob agreement between the engine and the trained model before and after a weight
sync (see :func:`engine_vs_model`). With ``--collection streaming``, every request the streaming engine finished or
aborted (engine tag, request id, tokens), and per step this process's own collector result (its prompts, what it
carried in and carries on, before the end-of-step merge).
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

COUNTS = {"generate_calls": 0, "generate_prompts": 0, "reward_calls": 0, "reward_rollouts": 0}


def counted_reward(base):
    def reward(completions, **kwargs):
        COUNTS["reward_calls"] += 1
        COUNTS["reward_rollouts"] += len(completions)
        return base(completions, **kwargs)

    reward.__name__ = base.__name__
    return reward


def engine_vs_model(trainer, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> dict:
    """Per-token log-probs of fixed completions under the vLLM engine and under the trained model.

    The engine scores ``prompt + completion`` as a prompt (``prompt_logprobs=0``: the log-prob of each actual token,
    temperature 1); the model's come from one forward pass (float32, log-softmax of the logits). Returns the mean and
    max absolute difference over the completion tokens (nats per token).
    """
    import torch
    from vllm import SamplingParams, TokensPrompt

    llm = trainer.vllm_generation.llm
    params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in zip(prompt_ids, completion_ids)],
                           sampling_params=params, use_tqdm=False)
    model = trainer.accelerator.unwrap_model(trainer.model)
    diffs = []
    with torch.no_grad():
        for p, c, out in zip(prompt_ids, completion_ids, outputs):
            ids = torch.tensor([p + c])
            logits = model(input_ids=ids).logits.float()[0, :-1]
            model_lp = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0][len(p) - 1:]
            engine_lp = torch.tensor([next(iter(d.values())).logprob if d is not None else float("nan")
                                      for d in out.prompt_logprobs[len(p):]])
            diffs.append((model_lp - engine_lp).abs())
    diff = torch.cat(diffs)
    return {"mean_abs": float(diff.mean()), "max_abs": float(diff.max()), "tokens": int(diff.numel())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--trainer", choices=["grpo", "rloo"], default="grpo")
    parser.add_argument("--allocator", default="sara")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=1e-6)
    parser.add_argument("--check_sync", action="store_true")
    parser.add_argument("--collection", choices=["rounds", "streaming"], default="rounds")
    parser.add_argument("--stopping_rule", choices=["threshold", "bayes_optimal"], default="threshold")
    parser.add_argument("--auto_min_prompts", type=int, default=64)
    parser.add_argument("--carry_over", action="store_true")
    parser.add_argument("--overlap_round_scoring", action="store_true")
    parser.add_argument("--save_steps", type=int, default=0, help="save a checkpoint every N steps (0: never)")
    parser.add_argument("--resume_from", default=None, help="checkpoint folder to resume from")
    cli = parser.parse_args()

    import torch
    from transformers import TrainerCallback

    torch.set_num_threads(1 if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 2)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from quickstart_cpu import make_task_mix

    from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
    from sara_trl.rewards import numeric_reward
    from sara_trl.utils import smollm2_checkpoint

    trainer_cls, config_cls = {"grpo": (SaraGRPOTrainer, SaraConfig), "rloo": (SaraRLOOTrainer, SaraRLOOConfig)}[
        cli.trainer]
    args = config_cls(
        output_dir=os.path.join(os.path.dirname(cli.out), "run"), use_cpu=True, bf16=False, report_to="none",
        max_steps=cli.steps, num_generations=4, per_device_train_batch_size=8, max_completion_length=12,
        temperature=0.3, learning_rate=cli.learning_rate, beta=0.0, logging_steps=1,
        save_strategy="steps" if cli.save_steps else "no", save_steps=cli.save_steps or 500,
        gradient_checkpointing=False, disable_tqdm=True, seed=0, allocator=cli.allocator, budget_cap=12.0,
        use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False, vllm_max_model_length=512,
        collection=cli.collection, stopping_rule=cli.stopping_rule, auto_min_prompts=cli.auto_min_prompts,
        carry_over=cli.carry_over, overlap_round_scoring=cli.overlap_round_scoring,
    )
    events = {"finished": [], "aborted": []}  # streaming: (engine tag, request id[, tokens]) per finished / aborted
    if cli.collection == "streaming" or cli.overlap_round_scoring:
        from sara_trl.trainer.streaming import VLLMStreamingEngine

        original_step, original_abort = VLLMStreamingEngine.step, VLLMStreamingEngine.abort

        def recording_step(self):
            done = original_step(self)
            events["finished"].extend((self._tag, f.rid, len(f.completion_ids), len(f.logprobs or [])) for f in done)
            return done

        def recording_abort(self, rids):
            live = [rid for rid in rids if rid in self.running]
            tokens = original_abort(self, rids)
            events["aborted"].extend((self._tag, rid, t) for rid, t in zip(rids, tokens) if rid in live)
            return tokens

        VLLMStreamingEngine.step, VLLMStreamingEngine.abort = recording_step, recording_abort
        from sara_trl.allocation import StreamingCollector

        original_aborted = StreamingCollector.aborted
        events["collector_aborted"] = []  # every abort reported to the collector (incl. requests never sent)

        def recording_aborted(self, rid, tokens):
            events["collector_aborted"].append((rid, int(tokens)))
            return original_aborted(self, rid, tokens)

        StreamingCollector.aborted = recording_aborted
        original_finish = StreamingCollector.finish
        events["local_steps"] = []  # this process's own share of each step, before the merge

        def recording_finish(self):
            result = original_finish(self)
            events["local_steps"].append({
                "prompt_id": result.prompt_table["prompt_id"].tolist(), "carried_in": result.stats.carried_in,
                "rollouts_carried_in": result.stats.rollouts_carried_in,
                "carry": [] if self.carry is None else self.carry["pid"].tolist(),  # what it carries on
                "carry_rollouts": len(result.carry_rollout_ids)})
            return result

        StreamingCollector.finish = recording_finish
    trainer = trainer_cls(model=smollm2_checkpoint(), reward_funcs=counted_reward(numeric_reward), args=args,
                          train_dataset=make_task_mix(256, seed=0))
    llm = trainer.vllm_generation.llm
    original_generate = llm.generate

    def counting_generate(prompts, *a, **kw):
        COUNTS["generate_calls"] += 1
        COUNTS["generate_prompts"] += len(prompts)
        return original_generate(prompts, *a, **kw)

    llm.generate = counting_generate
    decisions = []

    class RecordDecisions(TrainerCallback):
        """Every step's per-prompt table (prompt ids, n, s, fate): identical on every process in lock-step."""

        def on_step_end(self, args, state, control, **kwargs):
            table = trainer.sara_last_step.prompt_table
            decisions.append({key: [int(v) if float(v).is_integer() else float(v) for v in values]
                              for key, values in table.items()})

    trainer.add_callback(RecordDecisions())
    trainer.train(resume_from_checkpoint=cli.resume_from)
    llm.generate = original_generate
    logs = [e for e in trainer.state.log_history if "sara/rollouts_generated" in e]
    result = {"counts": dict(COUNTS), "steps": logs, "decisions": decisions,
              "world_size": trainer.accelerator.num_processes, "rank": trainer.accelerator.process_index,
              "engine_dtype": str(llm.llm_engine.model_config.dtype),
              "total_rollouts": trainer.sara_allocator.total_rollouts, "events": events,
              "allocator_steps": trainer.sara_allocator.steps}
    if cli.check_sync:
        step = trainer.sara_last_step
        prompt_ids, completion_ids = [], []
        for group in step.groups[:2]:
            row = trainer.train_dataset[int(group.prompt_id)]
            ids = trainer.processing_class.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                                               tokenize=True, return_dict=False)
            for completion in ("The answer is 12.", "I think it is 7"):
                prompt_ids.append(list(ids))
                completion_ids.append(trainer.processing_class(completion, add_special_tokens=False)["input_ids"])
        result["before_sync"] = engine_vs_model(trainer, prompt_ids, completion_ids)  # engine one step behind
        trainer.vllm_generation.sync_weights()
        result["after_sync"] = engine_vs_model(trainer, prompt_ids, completion_ids)
    out = cli.out if result["world_size"] == 1 else f"{cli.out}.rank{result['rank']}"
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1, default=str)


if __name__ == "__main__":
    main()
    from sara_trl.trainer.distributed import end_distributed

    end_distributed()  # one process or two: the script ends as examples/math_1p5b.py does
