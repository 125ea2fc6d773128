# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""GRPO + SARA on Countdown with Qwen2.5-3B: the paper's planning setting (App. E), on one GPU.

    accelerate launch examples/countdown_3b.py                                     # SARA, paper settings
    accelerate launch examples/countdown_3b.py --allocator dynamic_sampling \
        --output_dir outputs/qwen2.5-3b-countdown-ds                               # DS (DAPO) baseline
    accelerate launch examples/countdown_3b.py --allocator uniform \
        --output_dir outputs/qwen2.5-3b-countdown-uniform                          # plain GRPO baseline
    accelerate launch examples/countdown_3b.py --push_to_hub --hub_model_id you/qwen2.5-3b-sara-countdown

Task (TinyZero's Countdown, `Jiayi-Pan/Countdown-Tasks-3to4`): given 3-4 numbers and a target, write an expression
that uses every number exactly once and equals the target. The prompt asks for the expression inside
`<answer> </answer>` tags; `sara_trl.rewards.countdown_reward` checks it exactly (restricted parser, exact fractions,
no eval). Success is binary, as SARA needs.

Settings (paper App. E): B = 64 groups of k = 8 per optimizer step, n0 = 2, tau_low = 0.45, commit_min = k, Beta(1, 1)
prior, cap 6*B*k; learning rate 1e-6, KL 1e-3, clip 0.2, max completion 4096 tokens, temperature 1.0, 120 steps, vLLM
colocated. All fields are command-line flags. One optimizer step = 512 completions = 8 per device x 64 accumulation
steps x 1 GPU; on W GPUs pass `--gradient_accumulation_steps $((64 / W))`. For ZeRO-3:
`accelerate launch --config_file examples/accelerate_configs/deepspeed_zero3.yaml --num_processes 8
examples/countdown_3b.py --gradient_accumulation_steps 8`.

Data: TinyZero's 327,680-row Countdown train split from the Hugging Face Hub, unless you pass `--data_dir DIR` (a
folder of your own holding `countdown_3to4_train_head.jsonl`, e.g. a prefix of that split; the standard names are
`sara_trl.data.LOCAL_FILES`) or `--dataset_path FILE` (a local JSONL/Parquet file with `nums`/`target`). Offline
(`HF_HUB_OFFLINE=1`, or the Hub unreachable) without either, the script stops in seconds, before loading the model,
with one line naming these flags.
Evaluate on the 1,024-task test split with `python -m sara_trl.evaluate --benchmarks countdown`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sara_trl import cli  # torch-free: --help and flag mistakes are answered before torch and TRL load

if TYPE_CHECKING:
    from sara_trl import SaraConfig, SaraGRPOTrainer

PROG = "examples/countdown_3b.py"


@dataclass
class ScriptArguments:
    """What to train on (the training settings themselves are SaraConfig fields)."""

    model_name_or_path: str = field(
        default="Qwen/Qwen2.5-3B", metadata={"help": "Model id on the Hub or local folder."}
    )
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local JSONL/Parquet file with nums/target columns (overrides --data_dir and "
                                        "the Hub)."}
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "Folder holding the data files under their standard names (the train tasks "
                                        "in countdown_3to4_train_head.jsonl, see sara_trl.data.LOCAL_FILES); default: "
                                        "the Hugging Face Hub."}
    )
    num_train_prompts: int | None = field(
        default=None, metadata={"help": "Keep only the first N training tasks (None: all)."}
    )


#: Paper App. E settings (Countdown: 120 steps). Each one is only a default: any command-line flag replaces it.
PAPER_DEFAULTS = dict(
    output_dir="outputs/qwen2.5-3b-countdown-sara",
    allocator="sara",
    num_generations=8,
    n0=2,
    tau_low=0.45,
    commit_min=None,
    prior_alpha=1.0,
    prior_beta=1.0,
    budget_cap=6.0,
    per_device_train_batch_size=8,
    gradient_accumulation_steps=64,
    learning_rate=1e-6,
    beta=1e-3,
    epsilon=0.2,
    max_completion_length=4096,
    temperature=1.0,
    max_steps=120,
    use_vllm=True,
    vllm_mode="colocate",
    vllm_gpu_memory_utilization=0.35,
    vllm_enable_sleep_mode=True,
    bf16=True,
    gradient_checkpointing=True,
    logging_steps=1,
    save_steps=20,
    report_to="none",
    seed=42,
)


def build_dataset(script_args: ScriptArguments):
    """Countdown training tasks: conversational prompts plus the ``nums`` and ``target`` columns the reward reads.

    Raises ``SystemExit`` with one line naming ``--data_dir`` / ``--dataset_path`` when the data is given by neither
    and the Hub cannot serve it (offline or unreachable).
    """
    from sara_trl.data import DataUnavailableError, load_countdown

    kwargs = {"data_dir": script_args.data_dir} if script_args.data_dir is not None else {}
    try:
        return load_countdown(
            split="train", path=script_args.dataset_path, num_tasks=script_args.num_train_prompts, **kwargs
        )
    except DataUnavailableError as err:
        raise SystemExit(f"{PROG}: error: {err.hint('--dataset_path FILE', '--data_dir DIR')}") from None


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, SaraConfig]:
    """Command line -> (ScriptArguments, SaraConfig); PAPER_DEFAULTS apply unless a flag overrides them.

    ``--help`` and flag mistakes are answered from the torch-free preview of SaraConfig's flags (``sara_trl.cli``),
    in about a second; SaraConfig itself (torch, TRL) is imported only for a valid command line."""
    return cli.parse_args((ScriptArguments, "sara_trl:SaraConfig"), argv, defaults=PAPER_DEFAULTS)


def main(argv: list[str] | None = None) -> SaraGRPOTrainer:
    script_args, training_args = parse_args(argv)
    from sara_trl import SaraGRPOTrainer  # torch and TRL: loaded once the command line is valid
    from sara_trl.rewards import countdown_reward

    train_dataset = build_dataset(script_args)  # before the model: missing data fails in seconds

    trainer = SaraGRPOTrainer(
        model=script_args.model_name_or_path,
        reward_funcs=countdown_reward,
        args=training_args,
        train_dataset=train_dataset,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name="countdown")
    return trainer


if __name__ == "__main__":
    main(sys.argv[1:])
    from sara_trl.trainer.distributed import end_distributed

    end_distributed()  # frees the process group before exit (docs/multiprocess.md, "Ending the script")
