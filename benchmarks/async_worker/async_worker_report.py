# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Report of the asynchronous-worker runs:
``python -m benchmarks.async_worker.async_worker_report [--runs DIR] [--out FILE]``.

Reads the run files ``async_worker_bench.py`` (this folder) wrote (default ``benchmarks/async_worker/runs/``) and
writes ``ASYNC_WORKER.md`` (``--out``) and its numbers beside it (same name, ``.json``): issue 54's targets judged on
95% Student-t intervals over seeds (``benchmarks.common.mean_ci``; each seed one number: SARA's value over DS's, or
their difference, on the same seed), every arm's means, the per-seed table, and for TRL's default worker the share of
trained tokens that carried a nonzero advantage per seed. "Met" means the whole interval is within the target; with
fewer than 3 seeds a target is not judged. No plot: three arms x a few seeds read better as the tables.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from benchmarks.async_worker.async_worker_bench import ARMS, OUT_DIR
from benchmarks.common import Interval, environment_lines, fmt_ci, md_table, mean_ci
from benchmarks.real_training.real_training_report import load_runs as load_folder

MIN_SEEDS = 3
#: issue 54's token target: SARA's generated tokens per trained effective group over DS's
TOKEN_TARGET = {"mean": 0.75, "upper": 0.85}


def load_runs(folder: Path) -> tuple[dict, dict]:
    """``(settings.json document, {arm: {seed: run record}})`` of a run folder, arms in :data:`ARMS` order
    (:func:`benchmarks.real_training.real_training_report.load_runs` keyed by ``"arm"``).

    Raises
    ------
    FileNotFoundError
        No ``settings.json`` (not a folder ``async_worker_bench.py`` wrote).
    """
    return load_folder(folder, key="arm", order=ARMS)


def _div(a: float, b: float) -> float:
    return a / b if b else float("nan")


def measures(rec: dict) -> dict:
    """One run's figures: ``effective_groups``, ``generated_tokens`` (tokens), ``tokens_per_group`` (generated tokens
    per trained effective group), ``gen_seconds_per_group`` (seconds the server was busy per trained effective
    group), ``busy_share``, ``idle_share`` (trainer's queue wait / window), ``staleness`` (TRL's, rows at
    consumption, policy versions), ``group_staleness`` (SARA's worker, groups at push; None for TRL), ``dropped_stale``
    (rows), ``nonzero_token_share`` / ``nonzero_row_share`` (of trained tokens / rows with a nonzero advantage),
    ``pass_at_1``, ``train_seconds``, ``steps``. A ratio with a zero denominator is NaN."""
    trained, groups = rec["trained"], rec["effective_groups"]
    return {
        "effective_groups": groups, "generated_tokens": rec["generated_tokens"],
        "tokens_per_group": _div(rec["generated_tokens"], groups),
        "gen_seconds_per_group": _div(rec["generation_seconds"], groups),
        "busy_share": rec["busy_share"], "idle_share": rec["idle_share"],
        "staleness": rec["staleness_mean"], "group_staleness": rec["sara_group_staleness_mean"],
        "dropped_stale": rec["dropped_stale"],
        "nonzero_token_share": _div(trained.get("tokens_nonzero", 0.0), trained.get("tokens", 0.0)),
        "nonzero_row_share": _div(trained.get("rows_nonzero", 0.0), trained.get("rows", 0.0)),
        "pass_at_1": rec["pass_at_1"], "train_seconds": rec["train_seconds"], "steps": rec["steps"],
    }


def paired(runs: dict, a: str, b: str, key: str, how: str = "ratio") -> dict:
    """``{seed: a's key over b's}`` (``how="ratio"``) or ``a's minus b's`` (``"diff"``), over the seeds both arms
    ran whose value is finite."""
    out = {}
    for seed in sorted(set(runs.get(a, {})) & set(runs.get(b, {}))):
        x, y = measures(runs[a][seed])[key], measures(runs[b][seed])[key]
        if x is None or y is None:
            continue
        v = _div(x, y) if how == "ratio" else x - y
        if math.isfinite(v):
            out[seed] = v
    return out


def interval(values: dict) -> dict | None:
    """``{"mean", "lo", "hi", "n"}`` of :func:`benchmarks.common.mean_ci` over the values (None when empty)."""
    if not values:
        return None
    iv = mean_ci(list(values.values()))
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n}


def verdict(iv: dict | None, *, upper: float | None = None, mean: float | None = None,
            lower: float | None = None) -> str:
    """"met" when the interval's upper end is below ``upper`` (and its mean at most ``mean``) or its lower end at
    least ``lower``; "not met" otherwise, or "not shown" for a ``lower`` target whose interval still reaches above
    it; "not judged" with fewer than :data:`MIN_SEEDS` seeds."""
    if iv is None or iv["n"] < MIN_SEEDS:
        return f"not judged ({0 if iv is None else iv['n']} seeds < {MIN_SEEDS})"
    if lower is not None:
        return "met" if iv["lo"] >= lower else ("not met" if iv["hi"] < lower else "not shown (interval spans it)")
    return "met" if iv["hi"] < upper and (mean is None or iv["mean"] <= mean) else "not met"


def summarize(meta: dict, runs: dict) -> dict:
    """Every figure of the report, JSON-able: ``per_run`` ({arm: {seed: measures}}), ``per_arm`` ({arm: {measure:
    interval}}), ``ratios`` / ``differences`` (per seed, with their intervals) and ``targets``."""
    per_run = {a: {s: measures(r) for s, r in seeds.items()} for a, seeds in runs.items()}
    per_arm = {}
    for a, seeds in per_run.items():
        per_arm[a] = {}
        for key in next(iter(seeds.values())):
            vals = {s: m[key] for s, m in seeds.items() if m[key] is not None and math.isfinite(m[key])}
            per_arm[a][key] = interval(vals)
    ratios = {f"{key} {a}/{b}": paired(runs, a, b, key) for key in ("tokens_per_group", "gen_seconds_per_group")
              for a, b in (("SARA", "DS"), ("DS", "TRL"), ("SARA", "TRL"))}
    diffs = {f"{key} SARA-DS": paired(runs, "SARA", "DS", key, "diff") for key in ("idle_share", "pass_at_1")}
    tok, idle, acc = (ratios["tokens_per_group SARA/DS"], diffs["idle_share SARA-DS"], diffs["pass_at_1 SARA-DS"])
    targets = [
        {"target": "generated tokens per trained effective group, SARA / DS: mean <= 0.75, upper 95% end < 0.85",
         "per_seed": tok, "interval": interval(tok),
         "verdict": verdict(interval(tok), upper=TOKEN_TARGET["upper"], mean=TOKEN_TARGET["mean"])},
        {"target": "trainer idle share, SARA - DS: below 0 (upper end < 0)", "per_seed": idle,
         "interval": interval(idle), "verdict": verdict(interval(idle), upper=0.0)},
        {"target": "held-out pass@1 at equal wall-clock, SARA - DS: not below 0 (lower end >= 0)", "per_seed": acc,
         "interval": interval(acc), "verdict": verdict(interval(acc), lower=0.0)},
    ]
    return {"settings": meta["settings"], "command": meta.get("command"), "per_run": per_run, "per_arm": per_arm,
            "ratios": {k: {"per_seed": v, "interval": interval(v)} for k, v in ratios.items()},
            "differences": {k: {"per_seed": v, "interval": interval(v)} for k, v in diffs.items()},
            "targets": targets}


def _fmt(iv: dict | None, digits: int = 3) -> str:
    if iv is None:
        return "-"
    return fmt_ci(Interval(iv["mean"], iv["lo"], iv["hi"], iv["n"]), digits) + ("" if iv["n"] > 1 else " (1 seed)")


def _seeds(values: dict, digits: int = 3) -> str:
    return ", ".join(f"{s}: {v:.{digits}f}" for s, v in values.items()) or "-"


def render(summary: dict, meta: dict, runs: dict) -> str:
    """The Markdown report."""
    s = summary["settings"]
    out = [
        "# Asynchronous GRPO on the CPU: TRL's default worker vs dynamic sampling vs SARA (issue 54, item 5)", "",
        f"Each run trains SmolLM2-135M-Instruct (LoRA r = {s['lora_r']}) on the real-training task for "
        f"{s['train_seconds']:g} s of wall-clock, with k = {s['k']}, {s['groups']} groups per optimizer step, "
        f"{s['max_inflight']} requests in flight, max_staleness {s['max_staleness']}, learning rate {s['lr']:g}; "
        f"the vLLM server on core {s['server_cpu']}, the trainer (and its rollout worker) on core {s['trainer_cpu']}. "
        "Intervals: 95% Student-t over seeds, each seed one number (a ratio or difference on the same seed). "
        "How each figure is measured: README.md in this folder.", "",
        "## Targets", "",
        md_table(["target", "per seed", "mean [95% interval]", "verdict"],
                 [[t["target"], _seeds(t["per_seed"]), _fmt(t["interval"]), t["verdict"]]
                  for t in summary["targets"]]), "",
        "## Per arm (mean [95% interval] over seeds)", ""]
    rows = [("effective groups trained", "effective_groups", 1), ("generated tokens", "generated_tokens", 0),
            ("generated tokens / effective group", "tokens_per_group", 0),
            ("generation seconds / effective group", "gen_seconds_per_group", 2),
            ("server busy share", "busy_share", 3), ("trainer idle share", "idle_share", 3),
            ("staleness at consumption (TRL)", "staleness", 2),
            ("group staleness at push (SARA's worker)", "group_staleness", 2),
            ("rows dropped as stale", "dropped_stale", 1),
            ("share of trained tokens with advantage != 0", "nonzero_token_share", 3),
            ("held-out pass@1", "pass_at_1", 3), ("window, seconds", "train_seconds", 0),
            ("optimizer steps", "steps", 1)]
    arms = list(summary["per_arm"])
    out += [md_table(["measure", *arms], [[name, *[_fmt(summary["per_arm"][a].get(key), d) for a in arms]]
                                          for name, key, d in rows]), "",
            "## Ratios and differences per seed", "",
            md_table(["quantity", "per seed", "mean [95% interval]"],
                     [[k, _seeds(v["per_seed"]), _fmt(v["interval"])] for k, v in
                      {**summary["ratios"], **summary["differences"]}.items()]), "",
            "## TRL's default worker: trained tokens carrying a nonzero advantage", "",
            "Every group TRL's worker pushes is trained; a saturated group's rows carry zero advantage but still "
            "count in the loss's token denominator.", ""]
    trl = summary["per_run"].get("TRL", {})
    out += [md_table(["seed", "tokens with advantage != 0", "rows with advantage != 0"],
                     [[seed, f"{m['nonzero_token_share']:.3f}", f"{m['nonzero_row_share']:.3f}"]
                      for seed, m in trl.items()]) if trl else "No TRL run.", "",
            "## Per run", "",
            md_table(["arm", "seed", "window s", "steps", "effective groups", "generated tokens", "tokens / group",
                      "gen s / group", "idle share", "staleness", "stale drops", "pass@1", "load start -> end"],
                     [[a, seed, f"{m['train_seconds']:.0f}", m["steps"], f"{m['effective_groups']:.1f}",
                       f"{m['generated_tokens']:.0f}", f"{m['tokens_per_group']:.0f}",
                       f"{m['gen_seconds_per_group']:.2f}", f"{m['idle_share']:.3f}",
                       "-" if m["staleness"] is None else f"{m['staleness']:.2f}", f"{m['dropped_stale']:.0f}",
                       f"{m['pass_at_1']:.3f}",
                       f"{runs[a][seed]['load_average_start']:.1f} -> {runs[a][seed]['load_average_end']:.1f}"]
                      for a, seeds in summary["per_run"].items() for seed, m in seeds.items()]), ""]
    out += ["## Does SARA's advantage shrink here?", "", _shrink_text(summary), ""]
    seeds = sorted({seed for seeds in runs.values() for seed in seeds})
    out.append(environment_lines(meta.get("command") or "?", ", ".join(map(str, seeds)),
                                 meta["environment"]))
    return "\n".join(out) + "\n"


def _shrink_text(summary: dict) -> str:
    """What the figures say about SARA's gain under asynchronous training (generated from the numbers)."""
    tok = summary["targets"][0]["interval"]
    ds = summary["per_arm"].get("DS", {}).get("idle_share")
    if tok is None or ds is None:
        return "Needs SARA and DS runs."
    text = (f"SARA generated {tok['mean']:.2f} of DS's tokens per trained effective group (mean over {tok['n']} "
            f"seeds). That saving becomes trained groups only while the trainer waits for rollouts: DS's trainer "
            f"waited {ds['mean']:.2f} of the window. ")
    if ds["mean"] < 0.1:
        text += ("The trainer hardly waited, so generation was not the bottleneck and fewer tokens per group cannot "
                 "buy more trained groups in the same wall-clock: here SARA's advantage shrinks to what the "
                 "trainer's idle time allows. ")
    text += ("SARA's groups also take longer to complete (sequential probes), so they are staler at push; compare "
             "the staleness rows and the stale drops above.")
    return text


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=OUT_DIR, help="the runs folder")
    ap.add_argument("--out", type=Path, default=OUT_DIR.parent / "ASYNC_WORKER.md",
                    help="the report (its numbers go beside it, as .json)")
    args = ap.parse_args(argv)
    meta, runs = load_runs(args.runs)
    if not runs:
        raise SystemExit(f"no run files in {args.runs}")
    summary = summarize(meta, runs)
    text = render(summary, meta, runs)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return text


if __name__ == "__main__":
    main()
