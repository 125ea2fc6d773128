# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Which predictive-selection rule for issue 56's training runs: greedy vs Thompson on the replayed outcomes of the
real-training task, on a small pool that recurs as the study's does.

    python -m benchmarks.selection_training.selection_replay [--quick] [--out DIR]

Each seed draws its own pool of ``P`` bank rows of ``benchmarks/real_task_survey/data/real_task_bank.npz`` (the task's
family shares by largest remainder, as ``make_real_task`` splits them; rows at random within a family) and replays
``steps`` consecutive steps at ``B`` groups of k = 8 on it (``ReplaySource``: each outcome one of the row's 32 real
SmolLM2-135M samples). Every configuration sees the same pool, prompt stream and outcome seeds per seed.

Configurations: DS (rounds, as ``collection="auto"`` runs it on the engine; budget cap 8, as in training); issue 56's
in-step setting ``SARA-auto45`` (``stopping_rule="bayes_optimal", auto_loss_cap=0.45, carry_over=True,
auto_min_prompts=16``) in streaming collection (what ``collection="auto"`` runs on the colocated vLLM engine), with
``max_in_flight = B k`` (the trainer's default there); and the same with ``history_decay`` (0.9 or 0.97) alone or
with ``selection="greedy"`` / ``"thompson"`` (the selector's defaults: pool 4 x the request, floor 0.1,
``selection_seed`` = the seed, as the trainer sets it).

Per (configuration, seed), sums over the steps: rollouts, tokens, effective groups in the trained batches, draws;
ratios to DS per seed; the share of draws on prompts whose 32 bank samples all agree (they never mix in this static
replay) and on prompts whose outcomes in the run never mixed (the study's operational definition,
``benchmarks/selection_training/draws.py``); draws per prompt; draws of a prompt already drawn in the same step;
the exact probability that an abandoned prompt would have mixed. Mean and 95% Student-t interval over seeds.

Writes ``selection_replay.json`` and ``SELECTION_REPLAY.md`` (default: this folder). ``--quick``: 2 seeds, 2 steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the allocator's algebra is tiny; BLAS threads only contend
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks import replay, sim  # noqa: E402
from benchmarks.common import Interval, environment, environment_lines, fmt_ci, md_table, mean_ci  # noqa: E402
from benchmarks.real_task import REAL_TASK, _split_counts, load_mixture_bank  # noqa: E402
from benchmarks.selection_training import draws  # noqa: E402
from sara_trl.allocation import AllocationConfig  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BANK = REPO / "benchmarks" / "real_task_survey" / "data" / "real_task_bank.npz"
K = 8
BUDGET_CAP = 8.0  # as benchmarks/real_training/real_training.py (--budget-cap)
REFERENCE = "DS"
#: issue 56's in-step setting (benchmarks/real_training: SARA-auto45), streaming as collection="auto" runs it
AUTO45 = {"allocator": "sara", "stopping_rule": "bayes_optimal", "auto_loss_cap": 0.45, "carry_over": True,
          "auto_min_prompts": 16, "collection": "streaming"}
CONFIGS: dict[str, dict] = {
    "DS": {"allocator": "dynamic_sampling", "collection": "rounds"},
    "SARA-auto45": AUTO45,
    "+ history 0.9": {**AUTO45, "history_decay": 0.9},
    "+ history 0.9 + greedy": {**AUTO45, "history_decay": 0.9, "selection": "greedy"},
    "+ history 0.9 + thompson": {**AUTO45, "history_decay": 0.9, "selection": "thompson"},
    "+ history 0.97 + greedy": {**AUTO45, "history_decay": 0.97, "selection": "greedy"},
    "+ history 0.97 + thompson": {**AUTO45, "history_decay": 0.97, "selection": "thompson"},
}


@dataclass(frozen=True)
class Cell:
    """One replayed setting: ``B`` groups per step, a pool of ``prompts`` bank rows, ``steps`` steps per seed."""

    B: int
    prompts: int
    steps: int

    @property
    def key(self) -> str:
        return f"B={self.B},P={self.prompts},steps={self.steps}"


@dataclass(frozen=True)
class Settings:
    seeds: tuple[int, ...]
    cells: tuple[Cell, ...]
    configs: tuple[str, ...]


FULL = Settings(seeds=tuple(range(16)), cells=(Cell(4, 32, 8), Cell(4, 24, 6)), configs=tuple(CONFIGS))
QUICK = Settings(seeds=(0, 1), cells=(Cell(4, 32, 2),), configs=("DS", "SARA-auto45", "+ history 0.9 + greedy"))


def pool_rows(task_index: np.ndarray, task_names: list, prompts: int, seed: int) -> np.ndarray:
    """``(prompts,)`` bank rows of one seed's pool: each family's count by largest remainder of its share (as
    ``make_real_task``), rows drawn without replacement within the family with ``default_rng([seed, 56])``.

    Raises
    ------
    ValueError
        A family with fewer bank rows than its count.
    """
    rng = np.random.default_rng([seed, 56])
    out = []
    for family, count in _split_counts(REAL_TASK.weights, prompts).items():
        rows = np.flatnonzero(np.asarray(task_index) == task_names.index(family))
        if len(rows) < count:
            raise ValueError(f"family {family} has {len(rows)} bank rows, the pool needs {count}")
        out.append(rng.choice(rows, count, replace=False))
    return np.concatenate(out).astype(np.int64)


def run_one(success, tokens, rows, bank_never: set, cfg: AllocationConfig, cell: Cell, seed: int) -> dict:
    """One (configuration, seed) of a cell: sums over its steps and the per-prompt shares."""
    tables = []
    source = replay.ReplaySource(success, tokens, seed=seed, rows=rows)
    steps, _ = sim.run_steps(source, cfg, cell.B, cell.steps, seed, max_in_flight=cell.B * K,
                             on_result=lambda step, res: tables.append(draws.step_table(res.prompt_table,
                                                                                        res.stats.carried_in)))
    tot = {key: float(sum(s[key] for s in steps)) for key in
           ("rollouts", "tokens", "effective_in_batch", "abandoned", "wrong_exact", "filled", "prompts_drawn")}
    never_run = draws.never_mixed(draws.pooled_outcomes(tables))
    bank = draws.draw_shares(tables, bank_never)
    run = draws.draw_shares(tables, never_run)
    per_prompt = draws.draws_per_prompt(tables, len(rows))
    return {**tot, "rollouts_per_effective": tot["rollouts"] / max(tot["effective_in_batch"], 1.0),
            "draw_share_bank": bank["draw_share"], "outcome_share_bank": bank["outcome_share"],
            "draw_share_run": run["draw_share"], "draws_per_prompt": float(per_prompt.mean()),
            "draws_per_prompt_max": int(per_prompt.max()), "prompts_never_drawn": int((per_prompt == 0).sum()),
            "repeats_in_step": draws.repeats_in_step(tables) / max(bank["draws"], 1),
            "would_mix": tot["wrong_exact"] / tot["abandoned"] if tot["abandoned"] else 0.0,
            "trained_success": draws.trained_success(tables)["success"], "steps": cell.steps}


RATIOS = ("rollouts", "tokens", "rollouts_per_effective")
SHARES = ("draw_share_bank", "draw_share_run", "draws_per_prompt", "repeats_in_step", "would_mix",
          "trained_success", "effective_fraction")


def summarize(per_seed: dict) -> dict:
    """``{config: {metric: [mean, lo, hi, n]}}``: ratios to DS per seed (:data:`RATIOS`), plain means of the rest."""
    ref = per_seed[REFERENCE]
    out = {}
    for name, by_seed in per_seed.items():
        row = {}
        for key in RATIOS:
            row[f"{key}_ratio"] = list(dataclasses.astuple(mean_ci([by_seed[s][key] / ref[s][key] for s in by_seed])))
        for key in SHARES:
            if key == "effective_fraction":
                vals = [by_seed[s]["effective_in_batch"] / (by_seed[s]["steps"] * by_seed[s]["B"]) for s in by_seed]
            else:
                vals = [by_seed[s][key] for s in by_seed]
            row[key] = list(dataclasses.astuple(mean_ci(vals)))
        row["rollouts"] = float(np.mean([by_seed[s]["rollouts"] for s in by_seed]))
        filled, steps = (int(sum(by_seed[s][key] for s in by_seed)) for key in ("filled", "steps"))
        row["filled"] = f"{filled}/{steps}"
        out[name] = row
    return out


def run_all(settings: Settings, bank: Path = BANK, log=print) -> dict:
    """Every cell x configuration x seed; returns the ``selection_replay.json`` document."""
    success, tokens, meta, task_index, _ = load_mixture_bank(bank, REAL_TASK.weights)
    scor = (success == 0) | (success == 1)
    c1, c0 = ((success == 1) & scor).sum(1), ((success == 0) & scor).sum(1)
    cells = {}
    for cell in settings.cells:
        t0 = time.perf_counter()
        per_seed: dict = {name: {} for name in settings.configs}
        pool_never = []
        for seed in settings.seeds:
            rows = pool_rows(task_index, meta["task_names"], cell.prompts, seed)
            bank_never = {i for i, r in enumerate(rows) if c1[r] == 0 or c0[r] == 0}
            pool_never.append(len(bank_never) / len(rows))
            for name in settings.configs:
                cfg = AllocationConfig(k=K, budget_cap=BUDGET_CAP, selection_seed=seed, **CONFIGS[name])
                per_seed[name][seed] = {**run_one(success, tokens, rows, bank_never, cfg, cell, seed), "B": cell.B}
        cells[cell.key] = {"cell": dataclasses.asdict(cell), "pool_never_share": float(np.mean(pool_never)),
                           "summary": summarize(per_seed), "per_seed": per_seed}
        log(f"  {cell.key}: {time.perf_counter() - t0:.1f} s")
    return {"settings": {"seeds": list(settings.seeds), "cells": [dataclasses.asdict(c) for c in settings.cells],
                         "configs": list(settings.configs), "k": K, "budget_cap": BUDGET_CAP},
            "bank": str(bank.relative_to(REPO)) if bank.is_relative_to(REPO) else str(bank),
            "configs": {n: CONFIGS[n] for n in settings.configs}, "cells": cells, "environment": environment()}


def _iv(v, digits=3, pct=False) -> str:
    return fmt_ci(Interval(*v), digits, pct)


def paired_rows(cell: dict) -> list[list]:
    """Per history decay with both rules in the cell: greedy - Thompson per seed, for rollouts x DS and the share
    of draws on never-mixing prompts (bank)."""
    ps = cell["per_seed"]
    if REFERENCE not in ps:
        return []
    ref, rows = ps[REFERENCE], []
    for decay in sorted({c.split()[2] for c in ps if c.startswith("+ history") and c.endswith(("greedy", "thompson"))}):
        g, t = ps.get(f"+ history {decay} + greedy"), ps.get(f"+ history {decay} + thompson")
        if g is None or t is None:
            continue
        seeds = sorted(set(g) & set(t))
        r = mean_ci([g[s]["rollouts"] / ref[s]["rollouts"] - t[s]["rollouts"] / ref[s]["rollouts"] for s in seeds])
        n = mean_ci([g[s]["draw_share_bank"] - t[s]["draw_share_bank"] for s in seeds])
        rows.append([decay, fmt_ci(r), fmt_ci(n, 1, pct=True)])
    return rows


def render(doc: dict, command: str) -> str:
    st = doc["settings"]
    lines = [
        "# Selection rule for issue 56, chosen on the replay",
        "",
        f"Generated by `{command}` from the bank `{doc['bank']}` (real SmolLM2-135M outcomes of the real-training "
        f"task, 32 per prompt). {len(st['seeds'])} seeds per cell; each seed its own pool of bank rows (the task's "
        f"family shares), k = {st['k']}, budget cap {st['budget_cap']:g} x B k, every configuration on the same "
        "pool, stream and outcome seeds. Ratios to DS per seed (sums over the steps), then mean [95% interval] over "
        "seeds. A static bank does not learn: a prompt keeps its success rate, so history is never stale here, "
        "while in training it drifts.",
        "",
        "Columns: **rollouts / effective group x DS**: rollouts per mixed group in the trained batches, over DS's; "
        "**never-mixing draws (bank)**: share of draws on prompts whose 32 bank samples all agree; **(run)**: on "
        "prompts whose outcomes in the run never mixed (the study's operational definition); **draws / prompt**: "
        "fresh draws per pool prompt over the run; **repeats in step**: share of draws of a prompt already drawn in "
        "the same step (streaming forgets decided prompts, so a small pool is drawn again within a step); "
        "**would mix**: exact probability that an abandoned prompt would have mixed at k; **trained success**: "
        "mean success rate of the trained groups.",
        "",
    ]
    for key, cell in doc["cells"].items():
        c = cell["cell"]
        lines += [f"## B = {c['B']}, pool of {c['prompts']} prompts, {c['steps']} steps",
                  "", f"Pool prompts whose 32 bank samples all agree: {100 * cell['pool_never_share']:.1f}%.", ""]
        rows = []
        for name, s in cell["summary"].items():
            rows.append([name, f"{s['rollouts']:.0f}", _iv(s["rollouts_ratio"]), _iv(s["tokens_ratio"]),
                         _iv(s["rollouts_per_effective_ratio"]), _iv(s["effective_fraction"]),
                         _iv(s["draw_share_bank"], 1, True), _iv(s["draw_share_run"], 1, True),
                         _iv(s["draws_per_prompt"], 2), _iv(s["repeats_in_step"], 1, True),
                         _iv(s["would_mix"], 1, True), _iv(s["trained_success"]), s["filled"]])
        lines += [md_table(["configuration", "rollouts / run", "rollouts x DS", "tokens x DS",
                            "rollouts / effective group x DS", "effective fraction", "never-mixing draws (bank)",
                            "(run)", "draws / prompt", "repeats in step", "would mix", "trained success",
                            "steps filled"], rows), ""]
        paired = paired_rows(cell)
        if paired:
            lines += ["Greedy - Thompson on the same seed (rollouts x DS and never-mixing draws (bank), differences "
                      "per seed, mean [95% interval]):", "",
                      md_table(["history decay", "rollouts x DS: greedy - Thompson",
                                "never-mixing draws: greedy - Thompson"], paired), ""]
    lines += [environment_lines(command, ", ".join(map(str, st["seeds"])), doc["environment"]), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 2 steps, 3 configurations (seconds)")
    ap.add_argument("--out", type=Path, default=HERE, help="folder for selection_replay.json and SELECTION_REPLAY.md")
    ap.add_argument("--render-only", type=Path, metavar="JSON",
                    help="rewrite SELECTION_REPLAY.md from a saved selection_replay.json (no replay)")
    args = ap.parse_args(argv)
    if args.render_only:
        doc = json.loads(args.render_only.read_text())
        (args.out / "SELECTION_REPLAY.md").write_text(render(doc, doc["command"]))
        print(f"wrote {args.out / 'SELECTION_REPLAY.md'}")
        return 0
    settings = QUICK if args.quick else FULL
    doc = run_all(settings)
    command = "python -m benchmarks.selection_training.selection_replay" + (" --quick" if args.quick else "")
    doc["command"] = command
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "selection_replay.json").write_text(json.dumps(doc, indent=1))
    (args.out / "SELECTION_REPLAY.md").write_text(render(doc, command))
    print(f"wrote {args.out / 'SELECTION_REPLAY.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
