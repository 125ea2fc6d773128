# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Render ``SELECTION_TRAINING.md`` (issue 56) from the run files of ``selection_training.py``.

    python -m benchmarks.selection_training.selection_training_report [--runs DIR] [--out FILE]

Costs are per effective batch: a run's rollouts, completion tokens, generation seconds and step seconds (generation +
training) divided by its effective batches (the sum over steps of ``sara/effective_fraction``: B effective groups
make one), each divided by the DS run of the same seed; timing ratios only where both runs were timed on the same
kind of machine. Mean and 95% Student-t interval over seeds.

From each step's prompt table (``benchmarks/selection_training/draws.py``): a **draw** is a prompt's fresh draw (a
row not carried in); a prompt **never mixed** when all its outcomes in the run (every completion generated for it,
whatever its fate) are successes, or all are failures; **study-wide** pools every run of the folder (all
configurations and seeds, which share the training pool), so a prompt counts as never mixing only if no run ever saw
it mix: a classification that does not depend on how many rollouts a configuration spent on it. **Trained success**:
the mean success rate of the trained groups (a group's successes / its outcomes). Leave-one-seed-out: every mean over
seeds in the report is recomputed without each seed in turn; the section lists those that one seed moves by 0.03 or
more.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.common import fmt_ci, md_table, mean_ci
from benchmarks.real_task import REAL_TASK
from benchmarks.real_training.real_training_report import finished_day, load_runs, machine_of, totals
from benchmarks.selection_training import draws

HERE = Path(__file__).resolve().parent
REFERENCE = "DS"
SELECTED = "SARA-auto45-sel"
COSTS = ("rollouts", "tokens", "generation_seconds", "step_seconds")
TIMING = ("generation_seconds", "step_seconds")
LOO_MOVE = 0.03  # issue 56: leave-one-seed-out where one seed moves a mean by this much or more
TARGET_ROLLOUTS, TARGET_ROLLOUTS_HI = 0.50, 0.60  # issue 56: <= 0.50 of DS's rollouts, interval's upper end < 0.60
MIN_SEEDS = 3  # issue 56: at least 3 seeds; targets are judged only over that many


def run_metrics(rec: dict, never_study: set[int] | None = None) -> dict:
    """One run's figures: totals and costs per effective batch, pass@1 per evaluation step and by family, and the
    draw accounting of its prompt tables (``draws_*`` keys; ``never_study``: the study-wide never-mixing prompts).

    Raises
    ------
    KeyError
        A step without a prompt table (a run file not written by ``selection_training.py``).
    """
    tot = totals(rec)
    eff = float(sum(s["effective_fraction"] for s in rec["steps"]))
    out = {**tot, "effective_batches": eff, "effective_fraction": eff / len(rec["steps"])}
    for key in COSTS:
        out[f"{key}_per_batch"] = tot[key] / eff if eff > 0 else float("nan")
    out["pass_at_1"] = {int(e["step"]): float(e["pass_at_1"]) for e in rec["evals"]}
    out["final_by_family"] = dict(zip(REAL_TASK.weights, rec["evals"][-1]["by_family"]))
    tables = [s["prompts"] for s in rec["steps"]]
    tasks = rec["train_tasks"]
    per_prompt = draws.draws_per_prompt(tables, len(tasks))
    never_run = draws.never_mixed(draws.pooled_outcomes(tables))
    shares = draws.draw_shares(tables, never_run)
    out.update({"draws": shares["draws"], "draws_per_step": shares["draws"] / len(tables),
                "draws_per_prompt": float(per_prompt.mean()), "draws_per_prompt_min": int(per_prompt.min()),
                "draws_per_prompt_max": int(per_prompt.max()),
                "never_prompts": len(never_run) / len(tasks), "never_draw_share": shares["draw_share"],
                "never_outcome_share": shares["outcome_share"]})
    if never_study is not None:
        out["never_draw_share_study"] = draws.draw_shares(tables, never_study)["draw_share"]
    out["repeats_in_step"] = draws.repeats_in_step(tables) / shares["draws"] if shares["draws"] else 0.0
    out["trained_success"] = draws.trained_success(tables)["success"]
    trained = [tasks[pid] for t in tables for pid, f in zip(t["prompt_id"], t["fate"]) if f == 0]
    out["trained_families"] = {f: (trained.count(f) / len(trained) if trained else float("nan"))
                               for f in REAL_TASK.weights}
    hits = [s["sara"]["history_hit_rate"] for s in rec["steps"] if "history_hit_rate" in s.get("sara", {})]
    out["history_hit_rate"] = float(np.mean(hits)) if hits else None
    out["tables_match"] = all(s.get("table_is_this_step", True) for s in rec["steps"])
    return out


def study_never(runs: dict) -> set[int]:
    """Prompt ids that never mixed in any run of the folder (outcomes pooled over every configuration and seed)."""
    pooled: dict[int, list[int]] = {}
    for by_seed in runs.values():
        for rec in by_seed.values():
            for pid, (n, s) in draws.pooled_outcomes([st["prompts"] for st in rec["steps"]]).items():
                acc = pooled.setdefault(pid, [0, 0])
                acc[0] += n
                acc[1] += s
    return draws.never_mixed({pid: (n, s) for pid, (n, s) in pooled.items()})


def cost_ratios(meta: dict, runs: dict, metrics: dict) -> dict:
    """``{config: {cost: {seed: ratio}}}``: cost per effective batch over DS's of the same seed (timing costs only
    where both runs ran on the same kind of machine)."""
    ref = metrics.get(REFERENCE, {})
    out = {}
    for name, by_seed in metrics.items():
        out[name] = {}
        for key in COSTS:
            out[name][key] = {
                seed: m[f"{key}_per_batch"] / ref[seed][f"{key}_per_batch"] for seed, m in by_seed.items()
                if seed in ref and ref[seed][f"{key}_per_batch"] > 0
                and (key not in TIMING or machine_of(runs[name][seed], meta)
                     == machine_of(runs[REFERENCE][seed], meta))}
    return out


def leave_one_out(by_seed: dict, move: float = LOO_MOVE) -> tuple[int, float, float] | None:
    """``(seed, mean without it, mean with all)`` for the seed whose removal moves the mean most, when that move is
    at least ``move``; None otherwise or with fewer than 3 seeds."""
    if len(by_seed) < 3:
        return None
    full = float(np.mean(list(by_seed.values())))
    without = {s: float(np.mean([v for t, v in by_seed.items() if t != s])) for s in by_seed}
    seed = max(without, key=lambda s: abs(without[s] - full))
    return (seed, without[seed], full) if abs(without[seed] - full) >= move - 1e-12 else None


def _ci(values, digits=3, pct=False) -> str:
    vals = [v for v in values if v is not None and not np.isnan(v)]
    return fmt_ci(mean_ci(vals), digits, pct) if vals else "n/a"


def render(meta: dict, runs: dict, runs_rel: str = "benchmarks/selection_training/runs/") -> str:
    """The report's Markdown."""
    st = meta["settings"]
    never = study_never(runs)
    metrics = {name: {seed: run_metrics(rec, never) for seed, rec in by_seed.items()} for name, by_seed in runs.items()}
    ratios = cost_ratios(meta, runs, metrics)
    configs = ", ".join(f"**{n}** `{json.dumps(meta['allocators'][n])}`" for n in runs if n in meta["allocators"])
    seeds = ", ".join(f"{n} {sorted(by)}" for n, by in runs.items())
    loo: list[list] = []

    def track(label: str, name: str, by_seed: dict, digits: int = 3) -> None:
        hit = leave_one_out(by_seed)
        if hit:
            loo.append([name, label, f"{hit[2]:.{digits}f} ({len(by_seed)})", f"seed {hit[0]}: {hit[1]:.{digits}f}"])

    lines = [
        "# SARA with predictive prompt selection in real training, on a revisited prompt pool (issue 56)",
        "",
        f"Generated by `python -m benchmarks.selection_training.selection_training_report` from `{runs_rel}`, written "
        f"by `{meta['command']}`.",
        "",
        f"**Setting.** SmolLM2-135M-Instruct, `SaraGRPOTrainer`, generation through TRL's colocated vLLM engine on "
        f"the CPU; the real-training task with a pool of {st['prompts']} training prompts that every run revisits; "
        f"B = {st['groups']} groups of k = {st['k']}, {st['steps']} optimizer steps, learning rate {st['lr']:g}, "
        f"budget cap {st['budget-cap']:g} x B k; held-out pass@1 on {st['eval-prompts']} prompts x "
        f"{st['eval-samples']} samples every {st['eval-every']} steps. Configurations: {configs}.",
        "",
        f"Seeds finished: {seeds}. Study-wide never-mixing prompts: {len(never)} of {st['prompts']}.",
        "",
        "## Cost per effective batch, over DS's (per seed; mean [95% interval] over seeds)",
        "",
    ]
    rows = []
    for name, by_seed in metrics.items():
        r = ratios[name]
        rows.append([name, len(by_seed), f"{np.mean([m['rollouts'] for m in by_seed.values()]):.0f}",
                     f"{np.mean([m['tokens'] for m in by_seed.values()]):.0f}",
                     _ci([m["effective_fraction"] for m in by_seed.values()]),
                     *[(_ci(list(r[key].values())) + ("" if len(r[key]) == len(by_seed) else f" ({len(r[key])} seeds)"))
                       if r[key] else "n/a" for key in COSTS]])
        for key in COSTS:
            track(f"{key.replace('_', ' ')} per effective batch x DS", name, r[key])
    lines += [md_table(["configuration", "seeds", "rollouts / run", "tokens / run", "effective fraction",
                        "rollouts x DS", "tokens x DS", "generation s x DS", "step s x DS"], rows), ""]

    eval_steps = sorted(set.intersection(*(set(m["pass_at_1"]) for by in metrics.values() for m in by.values())))
    rows = []
    ref = metrics.get(REFERENCE, {})
    for name, by_seed in metrics.items():
        final = eval_steps[-1]
        diff = {s: m["pass_at_1"][final] - ref[s]["pass_at_1"][final] for s, m in by_seed.items() if s in ref}
        rows.append([name, *[_ci([m["pass_at_1"][e] for m in by_seed.values()]) for e in eval_steps],
                     _ci(list(diff.values())) if name != REFERENCE and diff else "-"])
        for e in eval_steps:
            track(f"pass@1 at step {e}", name, {s: m["pass_at_1"][e] for s, m in by_seed.items()})
        if name != REFERENCE:
            track("final pass@1 - DS's", name, diff)
    lines += ["## Held-out pass@1 at each evaluation step (mean [95% interval] over seeds)", "",
              md_table(["configuration", *[f"step {e}" for e in eval_steps], "final - DS (same seed)"], rows), "",
              "Final held-out pass@1 by family:", "",
              md_table(["configuration", *REAL_TASK.weights],
                       [[name, *[_ci([m["final_by_family"][f] for m in by_seed.values()]) for f in REAL_TASK.weights]]
                        for name, by_seed in metrics.items()]), ""]

    rows = []
    for name, by_seed in metrics.items():
        ms = list(by_seed.values())
        hit = [m["history_hit_rate"] for m in ms if m["history_hit_rate"] is not None]
        rows.append([name, _ci([m["draws_per_step"] for m in ms], 1), _ci([m["draws_per_prompt"] for m in ms], 2),
                     f"{min(m['draws_per_prompt_min'] for m in ms)}-{max(m['draws_per_prompt_max'] for m in ms)}",
                     _ci([m["never_prompts"] for m in ms], 1, True), _ci([m["never_draw_share"] for m in ms], 1, True),
                     _ci([m["never_outcome_share"] for m in ms], 1, True),
                     _ci([m["never_draw_share_study"] for m in ms], 1, True),
                     _ci([m["repeats_in_step"] for m in ms], 1, True), _ci([m["trained_success"] for m in ms]),
                     _ci(hit, 2) if hit else "-"])
        for key in ("never_draw_share", "never_draw_share_study", "trained_success"):
            track(key.replace("_", " "), name, {s: m[key] for s, m in by_seed.items()})
    lines += ["## What each configuration drew and trained on (mean [95% interval] over seeds)", "",
              "Never-mixing: in the run (all of the prompt's outcomes in that run agree) and study-wide (in every "
              "run of the folder). Rollouts on never-mixing prompts count their scored outcomes; repeats in step: "
              "draws of a prompt already drawn in the same step.", "",
              md_table(["configuration", "draws / step", "draws / prompt", "min-max", "pool never mixing (run)",
                        "draws on never-mixing (run)", "rollouts on never-mixing (run)",
                        "draws on never-mixing (study-wide)", "repeats in step", "trained success",
                        "history hit rate"], rows), "",
              "Families of the trained groups (share of trained groups; the pool's shares are the task's):", "",
              md_table(["configuration", *REAL_TASK.weights],
                       [[name, *[_ci([m["trained_families"][f] for m in by_seed.values()], 1, True)
                                 for f in REAL_TASK.weights]] for name, by_seed in metrics.items()]), ""]

    lines += ["## Targets (issue 56)", ""]
    if SELECTED in ratios and ratios[SELECTED]["rollouts"]:
        r = mean_ci(list(ratios[SELECTED]["rollouts"].values()))
        met = r.mean <= TARGET_ROLLOUTS and r.hi < TARGET_ROLLOUTS_HI
        final = eval_steps[-1]
        diff = [m["pass_at_1"][final] - ref[s]["pass_at_1"][final] for s, m in metrics[SELECTED].items() if s in ref]
        d = mean_ci(diff)
        if r.n < MIN_SEEDS:  # no interval to judge by: a target is judged over the minimum of seeds
            verdict = f"not judged: {r.n} of the {MIN_SEEDS} seeds the issue asks for"
            below = verdict
        else:
            verdict = "met" if met else "missed"
            # "met" only when the whole interval is at or above 0 (as every target here); an interval spanning 0
            # shows neither
            below = ("met: the whole interval is at or above 0" if d.lo >= 0 else
                     "not met: the whole interval is below 0" if d.hi < 0 else "not shown: the interval spans 0")
        lines += [f"- {SELECTED} rollouts per effective batch x DS: {fmt_ci(r)} over {r.n} seeds (target <= "
                  f"{TARGET_ROLLOUTS:.2f}, upper end < {TARGET_ROLLOUTS_HI:.2f}): {verdict}.",
                  f"- Final held-out pass@1 - DS's, same seed: {fmt_ci(d)} (not below DS's: {below}"
                  f"; mean {'>=' if d.mean >= 0 else '<'} 0).", ""]
    else:
        lines += [f"No {SELECTED} run with a DS run of the same seed yet.", ""]

    lines += [f"## Leave-one-seed-out: means one seed moves by {LOO_MOVE} or more", ""]
    lines += [md_table(["configuration", "figure", "all seeds (n)", "largest move: without"], loo) if loo
              else f"No mean in this report moves by {LOO_MOVE} or more when one seed is left out.", ""]

    rows = []
    for name, by_seed in runs.items():
        for seed, rec in by_seed.items():
            load = rec.get("load_average_start")
            ds = runs.get(REFERENCE, {}).get(seed)
            paired = "-" if name == REFERENCE else "no DS run" if ds is None else (
                "yes" if (machine_of(ds, meta), finished_day(ds)) == (machine_of(rec, meta), finished_day(rec))
                else "no")
            rows.append([name, seed, machine_of(rec, meta), finished_day(rec), paired,
                         "?" if load is None else f"{load:.1f}", f"{rec.get('load_average_after', float('nan')):.1f}",
                         (rec.get("commit") or "?")[:7], "yes" if metrics[name][seed]["tables_match"] else "NO"])
    lines += ["## Runs", "", "Load: the 1-minute load average at the run's start and end (2 cores).", "",
              md_table(["configuration", "seed", "machine", "finished", "same day and machine as DS", "load at start",
                        "load at end", "commit", "prompt tables match the logged rollouts"], rows), ""]
    return "\n".join(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=HERE / "runs")
    ap.add_argument("--out", type=Path, default=HERE / "SELECTION_TRAINING.md")
    args = ap.parse_args(argv)
    meta, runs = load_runs(args.runs)
    folder = args.runs.resolve()
    rel = folder.relative_to(HERE.parents[1]) if folder.is_relative_to(HERE.parents[1]) else folder
    text = render(meta, runs, f"{rel}/")
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return text


if __name__ == "__main__":
    main()
