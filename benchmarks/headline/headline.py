# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""The README's headline table and figure, recomputed from committed result files only (nothing is run).

    python -m benchmarks.headline.headline            # print the table, write benchmarks/headline/plots/headline.png
    python -m benchmarks.headline.headline --no-plot  # print the table only

Every cell is a ratio to dynamic sampling (DS) on the same seed: mean and 95% Student-t interval over seeds
(:func:`benchmarks.common.mean_ci`), never over steps. Sources:

- real training (``benchmarks/real_training/runs/``, report ``benchmarks/real_training/REAL_TRAINING.md``): per-seed
  totals of rollouts, completion tokens, generation seconds and step seconds (generation + training), through
  :func:`benchmarks.real_training.real_training_report.seed_ratios` (timing ratios only for seeds whose DS run was
  timed on the same kind of machine). Where leaving one seed out moves a mean by 0.03 or more, the cell says so
  (leave-one-seed-out);
- real training with DS repeated on the same day (``benchmarks/real_training/session_check/``, report
  ``benchmarks/real_training/SESSION_CHECK.md``): SARA-auto45 (the 0.45 loss cap in the default collection) and a DS
  run of each of its seeds, both run on one day on one machine, so that their time ratios compare allocators and not
  sessions; the same totals and ratios;
- the vLLM-CPU engine (``benchmarks/streaming_engine/streaming_engine_defaults_seed*.json``, seeds 0-4, and the
  second study's files that also ran the paper rule, seeds 5-8; one invocation per seed, configurations paired by
  common random numbers; pooled report
  ``benchmarks/streaming_engine/streaming_engine_defaults_pooled.md``): per seed, the mean over its steps of
  generation seconds, requests submitted (aborted ones included) and tokens of SARA in streaming with streaming's
  defaults (its default collection, paper rule), divided by DS in rounds (DS's default) on the same seed;
- the same engine's fourth study (``benchmarks/streaming_engine/streaming_engine_carryfix_seed*.json``, report
  ``benchmarks/streaming_engine/streaming_engine_carryfix_pooled.md``): the best beyond-paper setting in streaming with
  its loss cap raised to 0.45 (``auto_loss_cap=0.45``) and ``carry_over``, on the current streaming collector (commit
  9a0e092: held prompts' requests run on, spare mixed prompts are not topped up, a carried prompt keeps its truncation
  flag), paired the same way with DS in rounds; the figure also shows the same setting on the earlier collectors (the
  second study, ``streaming_engine_cap45_seed*.json``: held requests aborted at once; the third,
  ``streaming_engine_held_seed*.json``: held requests run on, commit 0233114);
- the replay of the real-training task's outcomes at the paper's batch size
  (``benchmarks/real_replay/real_replay.json``, cell k=8, B=64): the ratio intervals over seeds that run saved.
  (The simulated pools, without time, are in docs/benchmarks.md.)

The figure shows the real-training ratios of uniform sampling, paper SARA and the beyond-paper SARA setting (left),
and the engine studies' ratios of SARA's default collection (right), with their intervals. ``tests/test_docs.py``
checks that README.md holds this table as printed here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.common import Interval, mean_ci
from benchmarks.real_training.real_training_report import load_runs, seed_ratios

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
REAL_RUNS = BENCH / "real_training" / "runs"
#: DS rerun on the day (and machine) SARA-auto45 ran, seed by seed: clean timing ratios (report SESSION_CHECK.md)
SAME_DAY_RUNS = BENCH / "real_training" / "session_check"
SAME_DAY_REPORT = "[SESSION_CHECK.md](benchmarks/real_training/SESSION_CHECK.md)"


def _by_seed(pattern: str) -> tuple:
    """The result files matching ``pattern`` in benchmarks/streaming_engine, in the order of their seed number."""
    files = (BENCH / "streaming_engine").glob(pattern)
    return tuple(sorted(files, key=lambda f: int(f.stem.rsplit("seed", 1)[1])))


CAP45_SEEDS = _by_seed("streaming_engine_cap45_seed*.json")
HELD_SEEDS = _by_seed("streaming_engine_held_seed*.json")
CURRENT_SEEDS = _by_seed("streaming_engine_carryfix_seed*.json")


def _running(files, config: str) -> tuple:
    """The result files among ``files`` that ran ``config``."""
    return tuple(f for f in files if config in {r["config"] for r in json.loads(Path(f).read_text())["runs"]})


# the first study's seeds 0-4, then the second study's seeds that also ran the paper rule (5-8)
ENGINE_SEEDS = _by_seed("streaming_engine_defaults_seed*.json") + _running(CAP45_SEEDS, "sara_default_streaming")
ENGINE_REPORT = ("[streaming_engine_defaults_pooled.md]"
                 "(benchmarks/streaming_engine/streaming_engine_defaults_pooled.md)")
CURRENT_REPORT = ("[streaming_engine_carryfix_pooled.md]"
                  "(benchmarks/streaming_engine/streaming_engine_carryfix_pooled.md)")
FIGURE = Path(__file__).resolve().parent / "plots" / "headline.png"
KEYS = ("rollouts", "tokens", "generation_seconds")
TRAINING_KEYS = (*KEYS, "step_seconds")  # real training also times whole optimizer steps (generation + training)
LOSO_SHOWN = 0.03  # a leave-one-seed-out mean this far from the full one is printed beside the figure


def fmt2(iv: Interval) -> str:
    """``mean [lo, hi]`` rounded to 2 decimals from the unrounded values; a bare mean for one seed."""
    if iv.n < 2:
        return f"{iv.mean:.2f} (1 seed)"
    return f"{iv.mean:.2f} [{iv.lo:.2f}, {iv.hi:.2f}]"


def _saved(cell: list) -> Interval:
    """A ``[mean, lo, hi, n]`` list as the benchmarks save a :class:`Interval`."""
    mean, lo, hi, n = cell
    return Interval(float(mean), float(lo), float(hi), int(n))


def real_training(runs_dir: Path = REAL_RUNS) -> dict:
    """``{allocator: {key: (Interval, leave-one-seed-out note)}}`` of the real training runs in ``runs_dir``, for
    every key of :data:`TRAINING_KEYS`."""
    meta, runs = load_runs(runs_dir)
    ratios = seed_ratios(meta, runs)
    out = {}
    for a in runs:
        if a == "DS":
            continue
        out[a] = {}
        for key in TRAINING_KEYS:
            out[a][key] = with_loso(ratios[a][key])
    return out


def with_loso(by_seed: dict) -> tuple[Interval, str]:
    """``(Interval over seeds, note)`` of per-seed ratios ``{seed: ratio}``; the note names the mean without the seed
    that moves it most, where that moves it by :data:`LOSO_SHOWN` or more (3 seeds or more), else ``""``."""
    full = mean_ci(list(by_seed.values()))
    if len(by_seed) < 3:
        return full, ""
    left = {s: float(np.mean([v for t, v in by_seed.items() if t != s])) for s in by_seed}
    worst = max(left, key=lambda s: abs(left[s] - full.mean))
    return full, (f"{left[worst]:.2f} without seed {worst}" if abs(left[worst] - full.mean) >= LOSO_SHOWN else "")


def engine(files=ENGINE_SEEDS, config: str = "sara_default_streaming", reference: str = "ds_rounds",
           skip: int = 0) -> dict:
    """``{key: (Interval, leave-one-seed-out note)}``: per seed file, ``config``'s mean per step over
    ``reference``'s on the same seed; ``skip`` > 0 leaves each run's first ``skip`` steps out of both means (the
    fitted boundary's burn-in step, for the steady-state view; those steps then draw other prompts in each
    configuration, so the ratio is of step means, as over all steps)."""
    fields = {"rollouts": "rollouts", "tokens": "tokens", "generation_seconds": "seconds"}
    per_seed = {key: {} for key in fields}
    for path in files:
        doc = json.loads(Path(path).read_text())
        runs = {r["config"]: r for r in doc["runs"]}
        for key, name in fields.items():
            mine = np.mean([st[name] for st in runs[config]["steps"][skip:]])
            ref = np.mean([st[name] for st in runs[reference]["steps"][skip:]])
            per_seed[key][doc["settings"]["seed"]] = float(mine / ref)
    return {key: with_loso(values) for key, values in per_seed.items()}


def saved_ratios(path: Path, cell: tuple, allocator: str) -> dict:
    """``{"rollouts": Interval, "tokens": Interval}`` saved by ``benchmarks/simulated/run.py`` / ``real_replay.py``."""
    doc = json.loads(Path(path).read_text())
    node = doc
    for part in cell:
        node = node[part]
    s = node["summary"][allocator]
    return {"rollouts": _saved(s["rollouts_ratio"]), "tokens": _saved(s["tokens_ratio"])}


def table() -> str:
    """The Markdown table README.md shows, one row per headline result."""
    rt = real_training()
    same_day = real_training(SAME_DAY_RUNS)

    def rt_cell(a, key, runs=rt):
        iv, note = runs[a][key]
        return fmt2(iv) + (f" ({note})" if note else "")

    def n_of(a, runs=rt):
        return max(iv.n for iv, _ in runs[a].values())

    def cell(pair, suffix=""):
        iv, note = pair
        return fmt2(iv) + suffix + (f" ({note})" if note else "")

    eng = engine()
    steps = len(json.loads(ENGINE_SEEDS[0].read_text())["runs"][0]["steps"])
    cap = engine(files=CURRENT_SEEDS, config="sara_best_cap45_default_streaming")
    cap_steps = len(json.loads(CURRENT_SEEDS[0].read_text())["runs"][0]["steps"])
    replay = saved_ratios(BENCH / "real_replay" / "real_replay.json", ("cells", "k=8,B=64"), "SARA (paper)")
    rows = [
        ["**Real training**, SmolLM2-135M on the vLLM-CPU engine, rounds collection, 8 steps, B = 8, k = 8: SARA "
         "beyond the paper "
         "(`stopping_rule=\"bayes_optimal\", auto_loss_cap=0.1, carry_over=True`)", n_of("SARA-auto"),
         *(rt_cell("SARA-auto", key) for key in TRAINING_KEYS),
         "[REAL_TRAINING.md](benchmarks/real_training/REAL_TRAINING.md)"],
        ["same runs, paper SARA (the paper's rule and rounds)", n_of("SARA"),
         *(rt_cell("SARA", key) for key in TRAINING_KEYS),
         "[REAL_TRAINING.md](benchmarks/real_training/REAL_TRAINING.md)"],
        ["**Real training, SARA's default collection** (streaming) beyond the paper, the loss cap raised to 0.45 "
         "(`stopping_rule=\"bayes_optimal\", auto_loss_cap=0.45, carry_over=True, auto_min_prompts=16`), the same "
         "task and steps, each seed's DS run repeated on the same day and machine",
         n_of("SARA-auto45", same_day), *(rt_cell("SARA-auto45", key, same_day) for key in TRAINING_KEYS),
         SAME_DAY_REPORT],
        ["**SARA's default collection** (`collection=\"auto\"`: streaming with overlapped reward scoring and "
         f"streaming's defaults, paper rule) vs DS in rounds on the same engine and task, {steps} steps per seed, "
         "no training, configurations "
         "paired by common random numbers", eng["rollouts"][0].n, cell(eng["rollouts"], " requests"),
         cell(eng["tokens"]), cell(eng["generation_seconds"]), "no training", ENGINE_REPORT],
        ["**SARA's default collection beyond the paper**, the loss cap raised to 0.45 "
         "(`stopping_rule=\"bayes_optimal\", auto_loss_cap=0.45, carry_over=True, auto_min_prompts=16`) vs DS in "
         f"rounds, the same engine, task and pairing, {cap_steps} steps per seed", cap["rollouts"][0].n,
         cell(cap["rollouts"], " requests"), cell(cap["tokens"]), cell(cap["generation_seconds"]), "no training",
         CURRENT_REPORT],
        ["**Replay** of that task's real outcomes at the paper's batch size, B = 64, k = 8, paper SARA",
         replay["rollouts"].n, fmt2(replay["rollouts"]), fmt2(replay["tokens"]), "not modelled", "not modelled",
         "[REAL_REPLAY.md](benchmarks/real_replay/REAL_REPLAY.md)"],
    ]
    head = ["setting", "seeds", "rollouts vs DS", "tokens vs DS", "generation time vs DS",
            "step time vs DS (generation + training)", "result file"]
    out = ["| " + " | ".join(head) + " |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _bars(ax, groups: list, labels: list[str], title: str) -> None:
    """Grouped bars of ``groups`` = ``[(label, colour, [Interval per key])]`` on ``ax``, DS = 1 dashed."""
    width = 0.8 / len(groups)
    for i, (label, colour, ivs) in enumerate(groups):
        x = np.arange(len(labels)) + (i - (len(groups) - 1) / 2) * width
        means = np.array([iv.mean for iv in ivs])
        err = np.array([[iv.mean - iv.lo for iv in ivs], [iv.hi - iv.mean for iv in ivs]])
        ax.bar(x, means, width, yerr=err, capsize=3, label=label, color=colour)
    ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
    ax.text(len(labels) - 0.55, 1.02, "dynamic sampling (DAPO) = 1", ha="right", va="bottom", fontsize=8)
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.set_ylim(0, 1.85)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def plot(path: Path = FIGURE) -> None:
    """Two panels of grouped bars relative to dynamic sampling (the dashed line), with 95% intervals over seeds:
    the real training runs (uniform, paper SARA, SARA beyond the paper with the 0.1 loss cap; rollouts, tokens,
    generation seconds), and the vLLM-CPU engine's paired collection studies (SARA's default collection with the
    paper's rule, seeds 0-4 from the first and 5-8 from the second; with the 0.45 loss cap and ``carry_over`` on the
    earlier collector, from the second, and on the current one, from the third; generation seconds, tokens,
    requests). A setting keeps its colour in both panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rt = real_training()
    training = []
    for a, label, colour in [("uniform", "uniform (plain GRPO)", "C0"), ("SARA", "SARA, paper defaults", "C1"),
                             ("SARA-auto", "SARA, beyond the paper, loss cap 0.1", "C2")]:
        ivs = [rt[a][key][0] for key in KEYS]
        n = [iv.n for iv in ivs]
        training.append((f"{label}, {max(n)} seeds" + (f" ({n[-1]} for time)" if n[-1] != max(n) else ""), colour,
                         ivs))
    engine_keys = ("generation_seconds", "tokens", "rollouts")
    studies = [(ENGINE_SEEDS, "sara_default_streaming", "paper rule (seeds 0-4 first study, 5-8 second)", "C1"),
               (CAP45_SEEDS, "sara_best_cap45_default_streaming",
                "loss cap 0.45, earlier collector (second study, earlier session)", "C4"),
               (HELD_SEEDS, "sara_best_cap45_default_streaming",
                "loss cap 0.45, held requests run on (third study, commit 0233114)", "C5"),
               (CURRENT_SEEDS, "sara_best_cap45_default_streaming",
                "loss cap 0.45, current collector (fourth study, commit 9a0e092)", "C3")]
    collection = []
    for files, config, label, colour in studies:
        cells = engine(files=files, config=config)
        collection.append((f"{label}, {cells['generation_seconds'][0].n} seeds", colour,
                           [cells[key][0] for key in engine_keys]))
    steps = {len(json.loads(Path(f).read_text())["runs"][0]["steps"]) for f in ENGINE_SEEDS + CAP45_SEEDS + HELD_SEEDS
             + CURRENT_SEEDS}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.9), sharey=True)
    _bars(left, training, ["rollouts", "completion tokens", "generation time"],
          "Real training, rounds collection, 8 steps\nmean and 95% interval over seeds; uniform keeps every group")
    left.set_ylabel("cost relative to dynamic sampling")
    _bars(right, collection, ["generation time", "completion tokens", "requests\n(aborted ones too)"],
          f"SARA's default collection (streaming) vs DS in rounds, {'/'.join(map(str, sorted(steps)))} steps, "
          "no training\neach study paired by common random numbers; mean and 95% interval over seeds")
    fig.suptitle("SmolLM2-135M, vLLM-CPU engine (2 cores), B = 8, k = 8", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-plot", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    print(table())
    if not args.no_plot:
        plot()
        print(f"wrote {FIGURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
