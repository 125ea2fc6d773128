# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Issue 56: SARA with predictive prompt selection in real training, on a small prompt pool that every run revisits.

    python -m benchmarks.selection_training.selection_training              # the study (defaults below), resumable
    python -m benchmarks.selection_training.selection_training --quick      # a few-minute smoke run, temporary folder
    python -m benchmarks.selection_training.selection_training --estimate   # the study's wall time from earlier runs

The runs are ``benchmarks/real_training/real_training.py``'s (imported, not copied): SmolLM2-135M-Instruct trained
with ``SaraGRPOTrainer`` on the real-training task through TRL's colocated vLLM engine on the CPU, one subprocess per
(configuration, seed), held-out pass@1 on ``make_real_task(--eval-prompts, "heldout")`` every ``--eval-every`` steps,
a run's file written when it ends (rerunning the command resumes at the first missing run). What this study changes:

* a training pool of ``--prompts`` 32 prompts (``make_real_task(32, "train")``), so that prompts come back: at
  B = 4 DS draws about 19.3 prompts a step (half its 38.7 per step at B = 8 over the 40 steps of
  ``benchmarks/real_training/runs/DS_seed*.json``), 155 draws over 8 steps, 4.8 per prompt;
* B = 4 groups of k = 8 (``--groups 4``), 8 optimizer steps, learning rate 2e-5, budget cap 8 x B k, held-out pass@1
  from 64 prompts x 4 samples at steps 0, 4 and 8;
* the configurations of :data:`CONFIGS`: DS, SARA-auto45 (issue 56's in-step setting, the entry of
  ``real_training.py``) and SARA-auto45-sel (the same with ``history_decay`` and the selection rule chosen on the
  replay, ``SELECTION_REPLAY.md``); ``uniform`` on request (``--allocators DS,SARA-auto45,SARA-auto45-sel,uniform``);
* each step's record also holds the step's prompt table (prompt id, outcomes, successes and fate of every prompt of
  the step, how many rows were carried in: ``sara_last_step``, read after the step, so training is unchanged), the
  step's accounting (``StepStats``) and every ``sara/*`` metric logged, and each run the pool's families: what
  ``selection_training_report.py`` needs for the draws per prompt, the share of draws on prompts that never mixed and
  the success rate of the trained groups.

Run it on an otherwise idle machine: the seconds are part of the result (each run file records the load average at
its start and end). ``SELECTION_TRAINING.md`` (rendered by ``selection_training_report.py``) is the report;
``README.md`` here says what to expect and how long it takes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchmarks.real_training import real_training
from benchmarks.selection_training import draws

HERE = Path(__file__).resolve().parent
MODULE = "benchmarks.selection_training.selection_training"
OUT_DIR = HERE / "runs"
#: the selection rule and history decay chosen on the replay (SELECTION_REPLAY.md, README.md here)
SELECTION = {"history_decay": 0.9, "selection": "greedy"}
CONFIGS = {
    "DS": real_training.ALLOCATORS["DS"],
    "SARA-auto45": real_training.ALLOCATORS["SARA-auto45"],
    "SARA-auto45-sel": {**real_training.ALLOCATORS["SARA-auto45"], **SELECTION},
    "uniform": real_training.ALLOCATORS["uniform"],
}
#: what the study runs unless told otherwise (argparse defaults of real_training.parse_args, by destination)
DEFAULTS = {"allocators": "DS,SARA-auto45,SARA-auto45-sel", "seeds": "0,1,2", "steps": 8, "groups": 4, "k": 8,
            "lr": 2e-5, "budget_cap": 8.0, "prompts": 32, "eval_every": 4, "eval_prompts": 64, "eval_samples": 4,
            "engine": "vllm", "out_dir": OUT_DIR}
#: the smoke run: DS (rounds) and the selection configuration (streaming) on the real engine, 3 steps of B = 2, k = 4
QUICK = ["--allocators=DS,SARA-auto45-sel", "--seeds=0", "--steps=3", "--groups=2", "--k=4", "--prompts=8",
         "--eval-every=3", "--eval-prompts=4", "--eval-samples=2", "--budget-cap=2.0", "--engine=vllm"]


def record_step(trainer, step: dict, logs: dict) -> None:
    """``real_training.worker``'s ``on_step``: add the step's prompt table (:func:`draws.step_table`), its
    accounting (``StepStats`` numbers and stop reason) and its ``sara/*`` metrics to the step record; read only."""
    result = trainer.sara_last_step
    step["prompts"] = draws.step_table(result.prompt_table, result.stats.carried_in)
    step["stats"] = {key: value for key, value in result.stats.as_dict().items()
                     if isinstance(value, (int, float, str))}
    step["sara"] = {key[len("sara/"):]: float(value) for key, value in logs.items()
                    if key.startswith("sara/") and isinstance(value, (int, float))}
    # the table is this step's (the trainer logs after collecting): its rollouts are the logged ones
    step["table_is_this_step"] = bool(result.stats.rollouts_generated == round(logs["sara/rollouts_generated"]))


def worker(allocator: str, seed: int, args) -> dict:
    """One run (``real_training.worker`` with :data:`CONFIGS` and :func:`record_step`) plus the pool's families."""
    from benchmarks.real_task import make_real_task

    rec = real_training.worker(allocator, seed, args, CONFIGS, on_step=record_step)
    rec["train_tasks"] = list(make_real_task(args.prompts, "train")["task"])
    rec["config"] = CONFIGS[allocator]
    return rec


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--estimate" in argv:
        from benchmarks.selection_training.estimate import main as estimate

        return estimate([a for a in argv if a != "--estimate"])
    if "--quick" in argv:
        given = {a.split("=")[0] for a in argv}
        argv = [a for a in argv if a != "--quick"] + [q for q in QUICK if q.split("=")[0] not in given]
        if "--out-dir" not in given:
            argv.append(f"--out-dir={tempfile.mkdtemp(prefix='selection_training_quick_')}")
    return real_training.main(argv, allocators=CONFIGS, module=MODULE, worker_fn=worker, defaults=DEFAULTS,
                              description=__doc__.split("\n\n")[0])


if __name__ == "__main__":
    raise SystemExit(main())

