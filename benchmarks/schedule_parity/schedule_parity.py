# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Same allocator, same options, two schedules: do rounds and streaming spend the same rollouts?
``python -m benchmarks.schedule_parity.schedule_parity [--seeds 20] [--quick] [--out DIR] [--render-only JSON]``.

Both schedules decide with the rules of :mod:`sara_trl.allocation.refill` (one copy); they differ in *when*: after a
whole round, or after each completion on a continuously running engine (with aborts once B groups commit). This
study runs every allocator (dynamic sampling, SARA) and every option that both schedules accept (the paper's
settings; ``continue_to_decision``; a ``commit_min`` below k; Bayes-optimal stopping with rollout and token costs;
``carry_over``; history warm-start and history with greedy selection, on a pool of 400 prompts so that prompts come
back; a binding budget cap) on the simulator's
U-shaped task (``benchmarks/sim.py``: 42% never solved, 24% always solved, the rest Beta(1, 1); successes 400 and
failures 700 tokens on average), B = 16, k = 8, 16 consecutive steps per seed, the streaming engine running
B x k = 128 requests at once (the trainer's default). Each seed is one prompt pool, one prompt stream and one
outcome stream, used by both schedules.

Reported per setting: the per-seed ratio streaming / rounds of the rollouts generated per step (every rollout:
trained, abandoned, surplus, aborted) and of the tokens, mean and 95% Student-t interval over seeds. The target
(issue 26): rollouts within 3%, i.e. the interval inside [0.97, 1.03].

Writes ``SCHEDULE_PARITY.md`` and ``schedule_parity.json`` (default: this folder).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import environment, environment_lines, fmt_ci, mean_ci  # noqa: E402
from benchmarks.sim import DISTRIBUTIONS, SimSource, per_seed, run_steps  # noqa: E402
from sara_trl.allocation import AllocationConfig  # noqa: E402

HERE = Path(__file__).resolve().parent
B, K, STEPS, POOL = 16, 8, 16, 20_000
HISTORY_POOL = 400  # history and selection need prompts that come back: ~50 drawn per step, an epoch in ~8 steps
IN_FLIGHT = B * K  # the trainer's default (trainer.streaming.default_max_in_flight): the batch's rollouts
TARGET = 0.03
BREAKDOWN = ("rollouts", "tokens", "rollouts_trained", "rollouts_abandoned", "rollouts_surplus", "rollouts_active_left")
COMMAND = "python -m benchmarks.schedule_parity.schedule_parity"

SETTINGS: dict[str, dict] = {
    "DS": {"allocator": "dynamic_sampling"},
    "SARA (paper)": {},
    "SARA, continue_to_decision": {"continue_to_decision": True},
    "SARA, commit_min=4": {"commit_min": 4},
    "SARA, Bayes-optimal (rollouts)": {"stopping_rule": "bayes_optimal"},
    "SARA, Bayes-optimal (tokens)": {"stopping_rule": "bayes_optimal", "cost_unit": "tokens"},
    "SARA, carry_over": {"carry_over": True},
    "SARA, Bayes-optimal + carry_over": {"stopping_rule": "bayes_optimal", "carry_over": True},
    "SARA, history 0.5 (pool 400)": {"history_decay": 0.5},
    "SARA, history 0.5 + greedy selection (pool 400)": {"history_decay": 0.5, "selection": "greedy"},
    "SARA, budget_cap=1.0": {"budget_cap": 1.0},
}


def run(seeds: list[int], steps: int, settings: dict[str, dict]) -> dict:
    """Both schedules of every setting over ``seeds``; per-seed means of rollouts and tokens per step."""
    dist = DISTRIBUTIONS["u_shaped"]
    out = {}
    for label, options in settings.items():
        base = AllocationConfig(k=K, **options)
        # the same options in both schedules: the values rounds resolve (continue_to_decision, refill_margin), not
        # each schedule's own defaults (streaming's are wider, AllocationConfig.to_decision / .margin)
        base = replace(base, continue_to_decision=base.to_decision, refill_margin=base.margin)
        pool = HISTORY_POOL if base.history_decay is not None else POOL
        per = {}
        for collection in ("rounds", "streaming"):
            config = replace(base, collection=collection)
            rows = []
            for seed in seeds:
                src = SimSource(dist.sample(pool, seed), seed=seed)
                r, _ = run_steps(src, config, B, steps, seed, max_in_flight=IN_FLIGHT)
                for row in r:
                    row["seed"] = seed
                rows.extend(r)
            per[collection] = {key: per_seed(rows, key).tolist() for key in BREAKDOWN}
            per[collection]["unfilled"] = int(sum(row["unfilled"] for row in rows))
        ratio_r = np.array(per["streaming"]["rollouts"]) / np.array(per["rounds"]["rollouts"])
        ratio_t = np.array(per["streaming"]["tokens"]) / np.array(per["rounds"]["tokens"])
        iv = mean_ci(ratio_r)
        out[label] = {"options": options, "pool": pool, "per_seed": per,
                      "rollouts_ratio": {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n,
                                         "per_seed": ratio_r.tolist()},
                      "tokens_ratio": vars(mean_ci(ratio_t)) | {"per_seed": ratio_t.tolist()},
                      "met": bool(iv.lo >= 1 - TARGET and iv.hi <= 1 + TARGET)}
        print(f"{label:40s} rollouts {fmt_ci(iv)}  tokens {fmt_ci(mean_ci(ratio_t))}", flush=True)
    return out


def render(result: dict) -> str:
    """The Markdown report of :func:`run`'s result (with its ``meta``)."""
    meta = result["meta"]
    rows = []
    for label, r in result["settings"].items():
        iv_r = r["rollouts_ratio"]
        iv_t = r["tokens_ratio"]
        cells = []
        for collection in ("rounds", "streaming"):
            per = r["per_seed"][collection]
            cells.append(" / ".join(f"{np.mean(per[key]):.1f}" for key in ("rollouts", "rollouts_abandoned",
                                                                               "rollouts_surplus")))
        rows.append([label, *cells, fmt_ci(_iv(iv_r)), fmt_ci(_iv(iv_t)), "met" if r["met"] else "not met"])
    met = sum(r["met"] for r in result["settings"].values())
    return f"""# Same allocator, two schedules: rollouts in rounds and in streaming

Question: with the decisions, refill sizing and budget written once (`sara_trl.allocation.refill`), does an
allocator with given options spend the same rollouts in either collection schedule? Target (issue 26): the
streaming / rounds ratio of rollouts per step within 3% (95% interval over seeds inside [0.97, 1.03]).

Setting: simulated U-shaped task, B = {meta['B']}, k = {meta['k']}, {meta['steps']} steps per seed, streaming with
{meta['in_flight']} requests in flight (the trainer's default, B x k); {meta['seeds']} seeds (each one pool, stream
and outcome stream for both schedules). Ratios are per seed (means over the seed's steps), with 95% Student-t
intervals over seeds.

Rollouts per step are given as all / abandoned / surplus. Surplus: generated, neither trained nor abandoned by the
rule (groups committed beyond B, requests aborted in flight when the batch fills); the rest of "all" is trained
(B x commit floor) and undecided at the end of the step (`active_left`: carried into the next step with
`carry_over`, else dropped).

| setting | rounds: rollouts / step | streaming: rollouts / step | rollouts ratio | tokens ratio | within 3% |
| :--- | ---: | ---: | ---: | ---: | :--- |
""" + "\n".join("| " + " | ".join(row) + " |" for row in rows) + f"""

{met} of {len(rows)} settings are within 3%. {_reading(result)}

{environment_lines(meta['command'], meta['seed_list'], meta['env'])}
"""


def _reading(result: dict) -> str:
    """What the table says, from its numbers: where the schedules differ and by how much."""
    settings = result["settings"]

    def mean(label, collection, key):
        return float(np.mean(settings[label]["per_seed"][collection][key]))

    plain = [label for label, r in settings.items()
             if not r["options"].get("carry_over") and "budget_cap" not in r["options"]
             and r["options"].get("allocator", "sara") == "sara"]
    carry = [label for label, r in settings.items() if r["options"].get("carry_over")]
    abandoned = [mean(x, "streaming", "rollouts_abandoned") - mean(x, "rounds", "rollouts_abandoned") for x in plain]
    aborted = [mean(x, "streaming", "rollouts_surplus") - mean(x, "rounds", "rollouts_surplus") for x in plain]
    ratios = [settings[x]["rollouts_ratio"]["mean"] for x in plain]
    text = ("Without `carry_over` (and below a binding budget cap), two things move in opposite directions in "
            "streaming SARA. Abandoned rollouts per "
            f"step change by {min(abandoned):+.0f} to {max(abandoned):+.0f} (streaming minus rounds; mostly fewer: an "
            "unmixed prompt is held once the mixed ones alone complete the batch, and a prompt is decided the moment "
            f"its outcome arrives), and surplus grows by {min(aborted):+.0f} to {max(aborted):+.0f}: requests aborted "
            f"in flight when the batch fills. Net: {min(ratios):.3f} to {max(ratios):.3f} of rounds' rollouts; the "
            "tokens ratio is lower, since an aborted request stops part-way.")
    if carry:
        extra = [mean(x, "streaming", "rollouts_surplus") for x in carry]
        cr = [settings[x]["rollouts_ratio"]["mean"] for x in carry]
        text += (" With `carry_over` a held prompt's requests run on and what finishes is carried into the next step, "
                 "as rounds carry an undecided prompt's whole round; only what is still in flight when the batch "
                 f"fills, or needs to make room for a top-up, is aborted ({min(extra):.1f}-{max(extra):.1f} rollouts "
                 f"per step): {min(cr):.3f}-{max(cr):.3f} of rounds' rollouts. (Until commit df045a7 streaming "
                 "aborted a held prompt's requests at once in every case, and streamed at 1.11-1.14 of rounds' "
                 "rollouts with `carry_over`.)")
    if "DS" in settings:
        text += (f" Dynamic sampling streams at {settings['DS']['rollouts_ratio']['mean']:.3f}: it refills as "
                 "groups complete instead of drawing a whole round of groups sized on the mean yield.")
    capped = [label for label, r in settings.items() if "budget_cap" in r["options"]]
    for label in capped:
        unfilled = [settings[label]["per_seed"][c]["unfilled"] for c in ("rounds", "streaming")]
        text += (f" With `{label.split(', ')[-1]}` both schedules spend the whole budget and leave groups unfilled "
                 f"({unfilled[0]} and {unfilled[1]} fill groups over all steps and seeds).")
    return text


def _iv(d: dict):
    from benchmarks.common import Interval

    return Interval(d["mean"], d["lo"], d["hi"], d["n"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="independent seeds (default 20)")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps per seed (default {STEPS})")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 2 steps, 3 settings (a smoke run)")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: this study's folder)")
    parser.add_argument("--render-only", type=Path, metavar="JSON",
                        help="redraw SCHEDULE_PARITY.md from a saved schedule_parity.json (no run)")
    args = parser.parse_args(argv)
    if args.render_only is not None:
        result = json.loads(args.render_only.read_text())
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "SCHEDULE_PARITY.md").write_text(render(result))
        return result
    seeds = list(range(2 if args.quick else args.seeds))
    steps = 2 if args.quick else args.steps
    settings = dict(list(SETTINGS.items())[:3]) if args.quick else SETTINGS
    start = time.perf_counter()
    result = {"settings": run(seeds, steps, settings)}
    result["meta"] = {"B": B, "k": K, "steps": steps, "in_flight": IN_FLIGHT, "pool": POOL, "seeds": len(seeds),
                      "seed_list": f"{seeds[0]}..{seeds[-1]}", "command": COMMAND + (" --quick" if args.quick else ""),
                      "seconds": round(time.perf_counter() - start, 1), "env": environment()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "schedule_parity.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "SCHEDULE_PARITY.md").write_text(render(result))
    return result


if __name__ == "__main__":
    main()
