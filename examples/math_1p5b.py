# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""GRPO + SARA on MATH with DeepSeek-R1-Distill-Qwen-1.5B: the paper's main setting (App. E), on one GPU.

    accelerate launch examples/math_1p5b.py                                        # SARA, paper settings
    accelerate launch examples/math_1p5b.py --allocator dynamic_sampling \
        --output_dir outputs/r1-distill-qwen-1.5b-math-ds                          # DS (DAPO) baseline
    accelerate launch examples/math_1p5b.py --allocator uniform \
        --output_dir outputs/r1-distill-qwen-1.5b-math-uniform                     # plain GRPO baseline
    accelerate launch examples/math_1p5b.py --push_to_hub --hub_model_id you/r1-1.5b-sara-math
    accelerate launch examples/math_1p5b.py --continue_to_decision False --refill_margin 0.5  # paper continuation

Settings (paper App. E): B = 64 groups of k = 8 completions per optimizer step, probe n0 = 2, abandon threshold
tau_low = 0.45, full groups (commit_min = k), Beta(1, 1) prior, safety cap 6*B*k rollouts per step; learning rate
1e-6, KL coefficient 1e-3, clip epsilon 0.2, max completion 4096 tokens, temperature 1.0, 300 steps; rollouts with
vLLM colocated on the training GPU. Every field is a command-line flag (`HfArgumentParser` over `SaraConfig` and the
script arguments below), so the three allocators run with otherwise identical settings. SARA collects by streaming
here (`collection="auto"` with the colocated engine), with streaming's defaults: an unmixed prompt's continuation
goes out at once, up to its next abandon point (`continue_to_decision`), and fresh prompts are drawn with a margin
of 2 standard deviations of the expected commits (`refill_margin`). Projected, not measured (H200 kernel-latency
fits, 8 ms assumed engine overhead per step, 512 sequences, against DS in rounds with blocking scoring): 0.73 [0.71,
0.75] of DS's step time, against 0.86 [0.84, 0.89] with the paper's continuation and the rounds' margin
(`--continue_to_decision False --refill_margin 0.5`; docs/collection-modes.md, "Replayed and projected").

Batch layout: one optimizer step = B*k = 512 completions = per_device_train_batch_size (8) x gradient_accumulation_steps
(64) x GPUs (1). On W GPUs pass `--gradient_accumulation_steps $((64 / W))` to keep B = 64, e.g.
`accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml --num_processes 8 examples/math_1p5b.py
--gradient_accumulation_steps 8`.

Data: the MATH training split (7,500 problems), prompt "{problem} Reason step by step, and put your final answer within
\boxed{}.", scored by `sara_trl.rewards.math_reward` (math-verify). Downloaded from the Hugging Face Hub unless you pass
`--data_dir DIR` (a folder of your own holding `math_train.jsonl`; the standard names are
`sara_trl.data.LOCAL_FILES`) or `--dataset_path FILE` (any local JSONL/Parquet file with `problem` and `answer`
columns). Offline (`HF_HUB_OFFLINE=1`, or the Hub unreachable) without either, the script stops in seconds, before
loading the model, with one line naming these flags.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sara_trl import cli  # torch-free: --help and flag mistakes are answered before torch and TRL load

if TYPE_CHECKING:
    from sara_trl import SaraConfig, SaraGRPOTrainer

PROG = "examples/math_1p5b.py"


@dataclass
class ScriptArguments:
    """What to train on (the training settings themselves are SaraConfig fields)."""

    model_name_or_path: str = field(
        default="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", metadata={"help": "Model id on the Hub or local folder."}
    )
    dataset_name: str = field(
        default="math",
        metadata={"help": "Dataset short name (sara_trl.data.DATASET_NAMES), default the MATH train split."},
    )
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local JSONL/Parquet file with problem/answer columns (overrides --data_dir "
                                        "and the Hub)."}
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "Folder holding the data files under their standard names (e.g. "
                                        "math_train.jsonl, see sara_trl.data.LOCAL_FILES); default: the Hugging Face "
                                        "Hub."}
    )
    num_train_prompts: int | None = field(
        default=None, metadata={"help": "Keep only the first N training prompts (None: all)."}
    )


#: Paper App. E settings. Each one is only a default: any flag on the command line replaces it.
PAPER_DEFAULTS = dict(
    output_dir="outputs/r1-distill-qwen-1.5b-math-sara",
    # SARA (App. D/E)
    allocator="sara",
    num_generations=8,  # k
    n0=2,
    tau_low=0.45,
    commit_min=None,  # = k: every trained group is full
    prior_alpha=1.0,
    prior_beta=1.0,
    budget_cap=6.0,
    # GRPO (App. E)
    per_device_train_batch_size=8,
    gradient_accumulation_steps=64,  # 8 x 64 = 512 = B*k rows per optimizer step on one GPU
    learning_rate=1e-6,
    beta=1e-3,  # KL coefficient
    epsilon=0.2,  # clip
    max_completion_length=4096,
    temperature=1.0,
    max_steps=300,
    # Rollouts with vLLM on the training GPU
    use_vllm=True,
    vllm_mode="colocate",
    vllm_gpu_memory_utilization=0.35,
    vllm_enable_sleep_mode=True,
    # Bookkeeping
    bf16=True,
    gradient_checkpointing=True,
    logging_steps=1,
    save_steps=50,
    report_to="none",
    seed=42,
)


def build_dataset(script_args: ScriptArguments):
    """The training prompts: a conversational dataset with an ``answer`` column (read by ``math_reward``).

    Raises ``SystemExit`` with one line naming ``--data_dir`` / ``--dataset_path`` when the data is given by neither
    and the Hub cannot serve it (offline or unreachable).
    """
    from sara_trl.data import DataUnavailableError, load_dataset_by_name

    kwargs = {"data_dir": script_args.data_dir} if script_args.data_dir is not None else {}
    try:
        dataset = load_dataset_by_name(script_args.dataset_name, path=script_args.dataset_path, **kwargs)
    except DataUnavailableError as err:
        raise SystemExit(f"{PROG}: error: {err.hint('--dataset_path FILE', '--data_dir DIR')}") from None
    if script_args.num_train_prompts is not None:
        dataset = dataset.select(range(min(script_args.num_train_prompts, len(dataset))))
    return dataset


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, SaraConfig]:
    """Command line -> (ScriptArguments, SaraConfig); PAPER_DEFAULTS apply unless a flag overrides them.

    ``--help`` and flag mistakes are answered from the torch-free preview of SaraConfig's flags (``sara_trl.cli``),
    in about a second; SaraConfig itself (torch, TRL) is imported only for a valid command line."""
    return cli.parse_args((ScriptArguments, "sara_trl:SaraConfig"), argv, defaults=PAPER_DEFAULTS)


def main(argv: list[str] | None = None) -> SaraGRPOTrainer:
    script_args, training_args = parse_args(argv)
    from sara_trl import SaraGRPOTrainer  # torch and TRL: loaded once the command line is valid
    from sara_trl.rewards import math_reward

    train_dataset = build_dataset(script_args)  # before the model: missing data fails in seconds

    trainer = SaraGRPOTrainer(
        model=script_args.model_name_or_path,
        reward_funcs=math_reward,
        args=training_args,
        train_dataset=train_dataset,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    return trainer


if __name__ == "__main__":
    main(sys.argv[1:])
    from sara_trl.trainer.distributed import end_distributed

    end_distributed()  # frees the process group before exit (docs/multiprocess.md, "Ending the script")
