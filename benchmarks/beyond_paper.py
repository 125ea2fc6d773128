"""Beyond-paper options, measured: ``python benchmarks/beyond_paper.py [--quick] [--out DIR] [--bank PATH]``.

Writes ``BEYOND_PAPER.md`` and ``beyond_paper.json`` (default: this folder). Every table compares, on the same
seeds (same success rates, same prompt-stream seed, same outcome-RNG seed), dynamic sampling (DS, the reference),
the paper-default SARA and the options of issue 8 (all of them off by default in ``AllocationConfig``):

1. **In-step only** (no history): ``tau_low="auto"`` (Bayes-optimal stopping under an empirical-Bayes prior), with
   and without the reliability cap, Beta vs mixture prior, token-aware cost, and with ``carry_over`` (the prompts in
   flight at the end of a step continue in the next, so no step boundary wastes them); plus the exact optimum of
   the law.
2. **Multi-epoch** (a small dataset, many steps, prompts recur): history warm-start and predictive selection.
3. **Drift**: the multi-epoch pool with 2% of prompts redrawing their success rate every step (a moving policy).
4. **Replay** of the real SmolLM2 bank (``benchmarks/data/smollm2_bank.npz``) when it exists.

Cost metric: rollouts (tokens) generated per effective group in the batch, summed over all steps of a run (cold
first steps included), divided by DS's on the same seed; the mean and a 95% Student-t interval over seeds are shown.
"Would-mix" is the expected share of abandoned groups that would have become mixed at size k (exact from the
simulator's gamma, hypergeometric for the replay bank).

The full run takes about 15 minutes on 2 shared CPU cores; ``--quick`` runs a smoke-sized version in seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

# The allocator's linear algebra is tiny (a 4-parameter prior fit per step); BLAS worker threads only contend for
# the shared cores and slow it down many times over. Respect an explicit setting.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks import replay, sim  # noqa: E402
from benchmarks.common import environment_lines, fmt_ci, mean_ci, md_table  # noqa: E402
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream  # noqa: E402
from sara_trl.allocation.optimal_stopping import MixturePrior, evaluate_policy, solve_rate  # noqa: E402
from sara_trl.allocation.types import FATE_ABANDONED  # noqa: E402

K = 8
B = 64
DS = AllocationConfig(allocator="dynamic_sampling", budget_cap=40.0)  # as in run.py: DS must always fill
SARA = AllocationConfig()
AUTO = AllocationConfig(tau_low="auto")
HIST = 0.9  # history decay used in the tables

IN_STEP = [
    ("DS", DS),
    ("SARA (paper default, tau_low=0.45)", SARA),
    ("auto (mixture prior)", AUTO),
    ("auto + loss cap 0.10", dataclasses.replace(AUTO, auto_loss_cap=0.10)),
    ("auto (Beta prior)", dataclasses.replace(AUTO, auto_prior="beta")),
    ("auto, token cost", dataclasses.replace(AUTO, cost_unit="tokens")),
    ("auto, token cost + loss cap 0.10", dataclasses.replace(AUTO, cost_unit="tokens", auto_loss_cap=0.10)),
    ("SARA, refill_margin=0", dataclasses.replace(SARA, refill_margin=0.0)),
    ("auto, refill_margin=0", dataclasses.replace(AUTO, refill_margin=0.0)),
    ("auto + loss cap 0.10, refill_margin=0", dataclasses.replace(AUTO, auto_loss_cap=0.10, refill_margin=0.0)),
    ("SARA + carry_over", dataclasses.replace(SARA, carry_over=True)),
    ("auto + carry_over", dataclasses.replace(AUTO, carry_over=True)),
    ("auto + loss cap 0.10 + carry_over", dataclasses.replace(AUTO, auto_loss_cap=0.10, carry_over=True)),
    ("auto + loss cap 0.12 + carry_over", dataclasses.replace(AUTO, auto_loss_cap=0.12, carry_over=True)),
    ("auto + loss cap 0.15 + carry_over", dataclasses.replace(AUTO, auto_loss_cap=0.15, carry_over=True)),
    ("auto, token cost + carry_over", dataclasses.replace(AUTO, cost_unit="tokens", carry_over=True)),
]
ROBUST = [("DS", DS), ("SARA (paper default)", SARA), ("auto (mixture prior)", AUTO)]
TUNED = dataclasses.replace(AUTO, history_decay=0.97, selection="greedy", n0=1, selection_floor=0.05,
                            selection_pool=8.0)
TUNED_NAME = "auto + history 0.97 + greedy, n0=1, floor 0.05, pool 8"
MULTI = [
    ("DS", DS),
    ("SARA (paper default)", SARA),
    ("predictive only: uniform + history + greedy", AllocationConfig(allocator="uniform", history_decay=HIST,
                                                                     selection="greedy")),
    ("SARA + history", dataclasses.replace(SARA, history_decay=HIST)),
    ("SARA + history + Thompson", dataclasses.replace(SARA, history_decay=HIST, selection="thompson")),
    ("auto + history", dataclasses.replace(AUTO, history_decay=HIST)),
    ("auto + history + Thompson", dataclasses.replace(AUTO, history_decay=HIST, selection="thompson")),
    ("auto + history + greedy", dataclasses.replace(AUTO, history_decay=HIST, selection="greedy")),
    ("auto + history + greedy, n0=1", dataclasses.replace(AUTO, history_decay=HIST, selection="greedy", n0=1)),
    (TUNED_NAME, TUNED),
    (TUNED_NAME + ", token cost", dataclasses.replace(TUNED, cost_unit="tokens")),
    (TUNED_NAME + ", refill_margin=0", dataclasses.replace(TUNED, refill_margin=0.0)),
    (TUNED_NAME + " + carry_over", dataclasses.replace(TUNED, carry_over=True)),
]
DRIFT = [MULTI[i] for i in (0, 1, 2, 4, 6, 7, 9)]
REPLAY = [MULTI[i] for i in (0, 1, 2)] + [("auto (mixture prior)", AUTO),
                                          ("auto + carry_over", dataclasses.replace(AUTO, carry_over=True))] + [
    MULTI[i] for i in (6, 9, 12)]

FULL = dict(seeds=tuple(range(10)), in_steps=30, pool=20_000, multi_seeds=(0, 1, 2), multi_steps=150, multi_pool=512,
            drift=0.02, robust_steps=15, replay_steps=60)
QUICK = dict(seeds=(0, 1), in_steps=3, pool=3_000, multi_seeds=(0,), multi_steps=6, multi_pool=256, drift=0.02,
             robust_steps=2, replay_steps=4)


class DriftSource(sim.SimSource):
    """:class:`benchmarks.sim.SimSource` whose prompts redraw their success rate from the law with probability
    ``rate`` at the start of every step (a moving policy: a prompt becomes solvable or unsolvable)."""

    def __init__(self, gammas, seed, law, rate):
        super().__init__(gammas, seed)
        self.law, self.rate = law, rate
        self.drift_rng = np.random.default_rng([seed, 4242])
        self.steps = 0

    def start_step(self) -> None:
        super().start_step()
        if self.steps:
            move = np.flatnonzero(self.drift_rng.random(len(self.gammas)) < self.rate)
            if len(move):
                self.gammas[move] = self.law(len(move), int(self.drift_rng.integers(2**31)))
        self.steps += 1


def run_one(source, cfg: AllocationConfig, steps: int, seed: int) -> dict:
    """``steps`` consecutive steps of one allocator; totals over the run plus the allocator's final diagnostics."""
    alloc = Allocator(cfg)
    stream = PromptStream(len(source), seed=seed)
    tot = dict(rollouts=0, tokens=0, eff=0, groups=0, abandoned=0, would=0.0, rounds=0, min_eff_frac=1.0,
               active_left=0)
    hits = []
    for _ in range(steps):
        source.start_step()
        res = alloc.collect(source, stream, B)
        st = res.stats
        ab = [r for r in res.records if r.fate == FATE_ABANDONED]
        if ab:
            pid = np.array([r.prompt_id for r in ab], np.int64)
            s = np.array([r.s for r in ab], np.int64)
            # An all-pass prefix with unscorable rollouts has s < n: use s as its length (an upper bound on r).
            n = np.array([r.s if 0 < r.s < r.n else r.n for r in ab], np.int64)
            tot["would"] += float(source.would_mix(pid, n, s, cfg.k).sum())
        tot["rollouts"] += st.rollouts_generated
        tot["tokens"] += st.tokens_generated
        tot["eff"] += st.effective_in_batch
        tot["groups"] += st.batch_groups
        tot["abandoned"] += len(ab)
        tot["rounds"] += st.rounds
        # Waste = rollouts never trained or abandoned: with carry_over only what the last step still holds.
        tot["active_left"] += 0 if cfg.carry_over else st.rollouts_active_left + st.rollouts_surplus
        tot["min_eff_frac"] = min(tot["min_eff_frac"], st.effective_fraction)
        d = alloc.diagnostics()
        if d and np.isfinite(d.get("history_hit_rate", np.nan)):
            hits.append(d["history_hit_rate"])
    if cfg.carry_over:
        tot["active_left"] = st.rollouts_active_left + st.rollouts_surplus
    tot["steps"] = steps
    tot["diag"] = alloc.diagnostics()
    tot["hit_rate"] = float(np.mean(hits)) if hits else float("nan")
    return tot


def run_table(configs, make_source, seeds, steps, log) -> dict:
    """Every config on every seed; per-seed ratios to the first config (DS)."""
    out = {name: [] for name, _ in configs}
    for seed in seeds:
        for name, cfg in configs:
            t0 = time.time()
            out[name].append(run_one(make_source(seed), cfg, steps, seed))
            log(f"    seed {seed} {name}: {time.time() - t0:.1f}s")
    return out


def _ratio(runs, ref, key):
    return np.array([r[key] / r["eff"] / (d[key] / d["eff"]) for r, d in zip(runs, ref)])


def _fmt_diag(run) -> str:
    d = run["diag"]
    if not d or not np.isfinite(d.get("lam", np.nan)):
        return ""
    unit = "tok" if d["cost_pass"] != 1.0 or d["cost_fail"] != 1.0 else "roll"
    prior = f"w0={d['prior_w0']:.2f} w1={d['prior_w1']:.2f} Beta({d['prior_a']:.2f},{d['prior_b']:.2f})"
    return (f"{prior}; stop runs at fail n={d['abandon_at_fail']:.0f} / pass n={d['abandon_at_pass']:.0f}; "
            f"lam*={d['lam']:.4g} {unit}/group")


def table(res: dict, with_diag: bool = True, with_hits: bool = False, oracle: float | None = None) -> str:
    names = list(res)
    ref = res[names[0]]
    header = ["allocator", "rollouts / DS", "tokens / DS", "rollouts per effective group", "end-of-step waste",
              "effective fraction (min step)", "would-mix / abandoned", "rounds per step"]
    if with_hits:
        header.append("history hit rate")
    if with_diag:
        header.append("prior, boundary, lam* (last step, seed 0)")
    rows = []
    for name in names:
        runs = res[name]
        r_ratio = mean_ci(_ratio(runs, ref, "rollouts"))
        t_ratio = mean_ci(_ratio(runs, ref, "tokens"))
        per_eff = mean_ci([r["rollouts"] / r["eff"] for r in runs])
        frac = mean_ci([r["eff"] / r["groups"] for r in runs])
        min_frac = min(r["min_eff_frac"] for r in runs)
        ab = sum(r["abandoned"] for r in runs)
        would = f"{sum(r['would'] for r in runs) / ab:.1%}" if ab else "-"
        rounds = np.mean([r["rounds"] / r["steps"] for r in runs])
        waste = np.mean([r["active_left"] / r["eff"] for r in runs])
        row = [name, fmt_ci(r_ratio), fmt_ci(t_ratio), fmt_ci(per_eff, 2), f"{waste:.2f}",
               f"{frac.mean:.3f} ({min_frac:.2f})", would, f"{rounds:.1f}"]
        if with_hits:
            h = np.nanmean([r["hit_rate"] for r in runs])
            row.append("-" if not np.isfinite(h) else f"{h:.2f}")
        if with_diag:
            row.append(_fmt_diag(runs[0]))
        rows.append(row)
    if oracle is not None:
        extra = ["oracle (draws only prompts whose k-group mixes)", f"{oracle:.3f}", "", f"{K:.2f}", "0", "1.000", "-",
                 ""]
        extra += [""] * (len(header) - len(extra))
        rows.append(extra)
    return md_table(header, rows)


def summary(res: dict) -> dict:
    names = list(res)
    ref = res[names[0]]
    out = {}
    for name in names:
        runs = res[name]
        ab = sum(r["abandoned"] for r in runs)
        out[name] = {
            "rollouts_vs_ds": dataclasses.asdict(mean_ci(_ratio(runs, ref, "rollouts"))),
            "tokens_vs_ds": dataclasses.asdict(mean_ci(_ratio(runs, ref, "tokens"))),
            "rollouts_per_effective": float(np.mean([r["rollouts"] / r["eff"] for r in runs])),
            "effective_fraction": float(np.mean([r["eff"] / r["groups"] for r in runs])),
            "min_effective_fraction": float(min(r["min_eff_frac"] for r in runs)),
            "would_mix_share": (sum(r["would"] for r in runs) / ab) if ab else None,
            "rounds_per_step": float(np.mean([r["rounds"] / r["steps"] for r in runs])),
            "end_of_step_waste_per_effective": float(np.mean([r["active_left"] / r["eff"] for r in runs])),
            "diagnostics_seed0": runs[0]["diag"],
        }
    return out


def law_optimum() -> list[list]:
    """Exact costs under the u_shaped law itself (no sampling): DS = k / Phi, each policy by exact evaluation."""
    law = MixturePrior(0.42, 0.24, 1.0, 1.0)
    ds = K / (0.34 * (1 - 2 / (K + 1)))
    rows = []
    ab = np.zeros(K + 1, bool)
    ab[4:] = True
    r, c = evaluate_policy(law, K, K, ab, ab, n0=2)
    rows.append(["SARA tau_low=0.45 (abandon both runs at n=4)", f"{c[0] / r[0] / ds:.4f}", "4 / 4"])
    for name, cap in (("Bayes optimum", None), ("Bayes optimum, loss cap 0.10", 0.10)):
        lam, sol = solve_rate(law, K, K, 2, loss_cap=cap)
        f, p = sol.abandon_points()
        rows.append([name, f"{lam / ds:.4f}", f"{f} / {p}"])
    # Token cost: success 400, failure 700 tokens (the simulator's means); DS pays k rollouts of mean cost.
    lam, sol = solve_rate(law, K, K, 2, t_pass=400.0, t_fail=700.0)
    ds_tok = ds * (0.24 * 400 + 0.42 * 700 + 0.34 * 550) / 1.0  # E[cost per rollout] under DS draws
    f, p = sol.abandon_points()
    rows.append(["Bayes optimum, token cost (tokens / DS tokens)", f"{lam / ds_tok:.4f}", f"{f} / {p}"])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-sized run (seconds); numbers are not results")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder for BEYOND_PAPER.md / beyond_paper.json")
    ap.add_argument("--bank", type=Path, default=replay.DEFAULT_BANK, help="replay bank (.npz)")
    args = ap.parse_args(argv)
    P = QUICK if args.quick else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    def log(msg):
        print(msg, flush=True)

    law = sim.DISTRIBUTIONS["u_shaped"].sample
    log("1. in-step (u_shaped, large pool)")
    in_step = run_table(IN_STEP, lambda s: sim.SimSource(law(P["pool"], s), seed=s), P["seeds"], P["in_steps"], log)
    log("1b. robustness over distributions")
    robust = {}
    for dname in ("hard", "beta_0.3", "beta_1_1"):
        d = sim.DISTRIBUTIONS[dname]
        robust[dname] = run_table(ROBUST, lambda s, d=d: sim.SimSource(d.sample(P["pool"], s), seed=s), P["seeds"],
                                  P["robust_steps"], log)
    log("2. multi-epoch (small pool)")
    multi = run_table(MULTI, lambda s: sim.SimSource(law(P["multi_pool"], s), seed=s), P["multi_seeds"],
                      P["multi_steps"], log)
    log("3. drift")
    drift = run_table(DRIFT, lambda s: DriftSource(law(P["multi_pool"], s), s, law, P["drift"]), P["multi_seeds"],
                      P["multi_steps"], log)
    replay_res, bank_info = None, None
    if args.bank.exists():
        log("4. replay bank")
        success, tokens, meta = replay.load_bank(args.bank)
        bank_info = replay.bank_summary(success, K)
        replay_res = run_table(REPLAY, lambda s: replay.ReplaySource(success, tokens, seed=s), P["multi_seeds"],
                               P["replay_steps"], log)

    # Oracle for the multi-epoch pool: only prompts that will mix are drawn, k rollouts each.
    ds_multi = np.mean([r["rollouts"] / r["eff"] for r in multi["DS"]])
    oracle = K / ds_multi
    elapsed = time.time() - t_start
    cmd = "python benchmarks/beyond_paper.py" + (" --quick" if args.quick else "")
    md = report(P, in_step, robust, multi, drift, replay_res, bank_info, oracle, elapsed, cmd, args)
    (args.out / "BEYOND_PAPER.md").write_text(md)
    js = {"params": {k: list(v) if isinstance(v, tuple) else v for k, v in P.items()}, "quick": args.quick,
          "in_step": summary(in_step), "robust": {k: summary(v) for k, v in robust.items()},
          "multi_epoch": summary(multi), "drift": summary(drift), "oracle_multi_epoch": oracle,
          "replay": summary(replay_res) if replay_res else None, "elapsed_s": elapsed}
    (args.out / "beyond_paper.json").write_text(json.dumps(js, indent=1, default=_json_default))
    log(f"wrote {args.out / 'BEYOND_PAPER.md'} in {elapsed:.0f}s")
    return 0


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def _val(res, name, key="rollouts"):
    return mean_ci(_ratio(res[name], res["DS"], key))


def report(P, in_step, robust, multi, drift, replay_res, bank_info, oracle, elapsed, cmd, args) -> str:
    seeds = ", ".join(map(str, P["seeds"]))
    mseeds = ", ".join(map(str, P["multi_seeds"]))
    L = ["# Beyond the paper: Bayes-optimal stopping, history warm-start, predictive selection, token cost", ""]
    if args.quick:
        L += ["**QUICK RUN: smoke-test sizes, the numbers below are not results.**", ""]
    L += [
        "Options of `AllocationConfig` added for issue 8, all off by default (the defaults reproduce the paper's SARA "
        "decision for decision, `tests/test_beyond_paper.py::test_off_by_default_equivalence`):",
        "",
        "| field | default | meaning |",
        "| :--- | :--- | :--- |",
        "| `tau_low` | `0.45` | `\"auto\"`: Bayes-optimal continue/abandon boundary over (n, side) by backward "
        "induction at the self-consistent cost per effective group (Dinkelbach), prior fitted online |",
        "| `auto_prior` | `\"mixture\"` | fitted family: point masses at 0 and 1 + Beta, or `\"beta\"` |",
        "| `auto_prior_decay` | `0.9` | per-step decay of the outcome table the prior (and token means) are fitted "
        "on |",
        "| `auto_min_prompts` | `64` | outcomes needed before the fit is used (until then the paper's rule at 0.45) |",
        "| `auto_loss_cap` | `None` | abandon only where p_eff < cap (Thm 1 bound on would-mix per "
        "abandonment) |",
        "| `cost_unit` | `\"rollouts\"` | `\"tokens\"`: a rollout costs its expected length (success / failure "
        "means) |",
        "| `history_decay` | `None` | lambda: per-prompt decayed Beta pseudo-counts carried across steps "
        "(App. D) |",
        "| `selection` | `None` | `\"thompson\"` / `\"greedy\"`: fresh prompts ranked by the history posterior |",
        "| `selection_pool` | `4.0` | candidate pool drawn from the stream, as a multiple of the prompts requested |",
        "| `selection_floor` | `0.1` | epsilon-uniform share of picks: every candidate's chance >= eps * requested / "
        "pool |",
        "| `selection_seed` | `0` | seed of the selection generator (checkpointed) |",
        "",
        "Metrics are logged by `Allocator.diagnostics()` (fitted prior `prior_w0/w1/a/b`, boundary "
        "`abandon_at_fail/pass`, `lam`, `history_hit_rate`, `cost_pass/fail`, `boundary_recomputes`, "
        "`selection_pool`).",
        "",
        "Columns: *rollouts / DS* and *tokens / DS*: generated per effective group in the batch, over all steps of a "
        "run (cold start included), divided by DS on the same seed; mean [95% t-interval] over seeds. *end-of-step "
        "waste*: rollouts per effective group spent on prompts still in flight when the B-th group committed "
        "(`rollouts_active_left`), set by the scheduler's refill rule (`refill_margin`, default 0.5 sd), not by the "
        "stopping rule. *would-mix / abandoned*: expected share of abandoned groups that would have mixed at size k. "
        "DS runs with its safety cap lifted (as in `RESULTS.md`).",
        "",
        f"## 1. In-step only (no history), k={K}, B={B}, realistic U-shaped law",
        "",
        f"`u_shaped` law (42% gamma=0, 24% gamma=1, 34% Beta(1,1)), pool of {P['pool']} prompts (little recurrence), "
        f"{P['in_steps']} steps per seed.",
        "",
        table(in_step),
        "",
        environment_lines(cmd, seeds),
        "",
        "Exact values under the law itself (no sampling noise; `optimal_stopping.evaluate_policy` / `solve_rate`), "
        "relative to DS's exact k/Phi:",
        "",
        md_table(["policy", "cost / DS (exact)", "abandon all-fail / all-pass run at n ="], law_optimum()),
        "",
    ]
    L += _in_step_text(in_step)
    L += ["", "### Other success-rate laws (auto vs paper default)", ""]
    for dname, res in robust.items():
        L += [f"**{dname}**: {sim.DISTRIBUTIONS[dname].description}. {P['robust_steps']} steps x seeds {seeds}.",
              "", table(res), ""]
    L += [
        f"## 2. Multi-epoch: {P['multi_pool']} prompts, {P['multi_steps']} steps (prompts recur every few steps)",
        "",
        f"Same law, small pool; history decay lambda={HIST} unless stated. Seeds {mseeds}.",
        "",
        table(multi, with_hits=True, oracle=oracle),
        "",
        environment_lines(cmd, mseeds),
        "",
    ]
    L += _multi_text(multi, oracle)
    L += [
        "",
        f"## 3. Drift: the multi-epoch pool with {P['drift']:.0%} of prompts redrawing gamma every step",
        "",
        "A moving policy: a prompt's success rate is redrawn from the law at random steps, so history goes stale.",
        "",
        table(drift, with_hits=True),
        "",
    ]
    L += _drift_text(drift)
    L += ["", "## 4. Replay of real SmolLM2 outcomes", ""]
    if replay_res is None:
        L += [f"Skipped: no replay bank at `{args.bank}` yet (produced by `benchmarks/make_replay_bank.py`, another "
              "work item). Rerun this script once it exists."]
    else:
        L += [f"Bank: {bank_info['prompts']} prompts x {bank_info['completions']} completions, mean success "
              f"{bank_info['mean_success']:.3f}, all-fail {bank_info['all_fail']:.1%}, all-pass "
              f"{bank_info['all_pass']:.1%}, Phi(k=8)={bank_info.get('phi', float('nan')):.3f}. "
              f"{P['replay_steps']} steps (the bank recurs: multi-epoch).", "", table(replay_res, with_hits=True), "",
              f"Read this table with its regime in mind: the bank has {bank_info['prompts']} prompts (Phi(k=8) = "
              f"{bank_info.get('phi', float('nan')):.2f}) for B={B} groups per step, so every step redraws the same "
              "prompts (often several times per step, for every allocator) and the refill over-draws. Without carry_over the groups committed beyond "
              "B and the prompts in flight are thrown away each step; with it they are trained in later steps, so "
              "over-draws cost nothing and selection can ask for few, well-predicted prompts. On a dataset much "
              "larger than B (sections 1-2) the effect of carry_over is the few percent of end-of-step waste."]
    L += ["", "## Targets (issue 8)", ""] + _targets(in_step, multi) + [
        "", "## What is not covered", "",
        "- The boundary assumes one rollout per round for a continuing prompt (`round_increment=1`, the paper's "
        "setting); with larger increments it is still applied per state but is no longer exactly optimal.",
        "- The empirical-Bayes fit is parametric: prompts abandoned after two or three same-outcome rollouts cannot "
        "distinguish a point mass at 0 from a Beta with mass near 0, so the continuation probabilities beyond the "
        "abandon point are extrapolated by the family (correct by construction in simulation, an assumption on real "
        "data).",
        "- Under history the prior is fitted only on prompts drawn without history (the unbiased sample under "
        "selection); once every prompt has history the fit is frozen at its last value.",
        "- The stopping rule optimises the renewal-reward rate (B -> infinity). With the paper's step boundary, "
        "the prompts still in flight when the B-th group commits are wasted, a cost that grows as the per-prompt "
        "commit rate falls (aggressive abandonment). `carry_over=True` removes the boundary instead of correcting "
        "lam* for it: those prompts continue in the next step, so the renewal rate is what a run pays. Its price "
        "is one step of staleness for the carried rollouts, which these simulations (fixed success rates) cannot "
        "show; a finite-B correction that keeps the step boundary is not implemented.",
        "",
        f"*Total time {elapsed:.0f} s.*",
    ]
    return "\n".join(L) + "\n"


def _in_step_text(res) -> list[str]:
    s, a = _val(res, "SARA (paper default, tau_low=0.45)"), _val(res, "auto (mixture prior)")
    c = _val(res, "auto + loss cap 0.10")
    t = _val(res, "auto, token cost", "tokens")
    s0, a0 = _val(res, "SARA, refill_margin=0"), _val(res, "auto, refill_margin=0")
    c0 = _val(res, "auto + loss cap 0.10, refill_margin=0")
    waste = {n: np.mean([r["active_left"] / r["eff"] for r in res[n]]) for n in res}
    return [
        f"Measured with the scheduler's default refill (`refill_margin=0.5`): paper-default SARA {s.mean:.3f} of DS's "
        f"rollouts, `tau_low=\"auto\"` {a.mean:.3f}, with the 10% reliability cap {c.mean:.3f}; token-aware cost "
        f"{t.mean:.3f} of DS's tokens. With `refill_margin=0`: SARA {s0.mean:.3f}, auto {a0.mean:.3f}, auto + cap "
        f"{c0.mean:.3f}. With `carry_over=True` (no end-of-step waste): SARA {_val(res, 'SARA + carry_over').mean:.3f}"
        f", auto {_val(res, 'auto + carry_over').mean:.3f}, auto + cap "
        f"{_val(res, 'auto + loss cap 0.10 + carry_over').mean:.3f} (cap 0.12: "
        f"{_val(res, 'auto + loss cap 0.12 + carry_over').mean:.3f}, 0.15: "
        f"{_val(res, 'auto + loss cap 0.15 + carry_over').mean:.3f}; the cap bounds p_eff at every abandonment, "
        "so the average would-mix share sits below it and a cap a little above the 10% target still meets it); "
        "token cost + carry_over "
        f"{_val(res, 'auto, token cost + carry_over', 'tokens').mean:.3f} of DS's tokens.",
        "",
        "Why the in-step gain is small, and why it can vanish: (1) under this law the exact optimum at commit_min=k "
        "(table above) is only ~5% cheaper than tau_low=0.45; it abandons an all-fail run right after the "
        "two-rollout probe and an all-pass run after three, accepting that ~14% of abandoned groups would have mixed "
        "(they are cheap to replace); the 10% cap costs ~1% more. (2) That optimum is a renewal-reward (B -> "
        "infinity) rate. At B=64 the step ends with prompts in flight: their rollouts are the end-of-step waste "
        f"column ({waste['auto (mixture prior)']:.2f} rollouts per effective group for auto vs "
        f"{waste['SARA (paper default, tau_low=0.45)']:.2f} for SARA at the default margin), and the groups that "
        "mixed in the last round but were not needed also inflate the abandonment cost per *committed* group. Both "
        "grow as the commit rate per fresh prompt falls, which is exactly what early abandonment does (about 0.14 "
        "of fresh prompts commit under the optimum vs 0.20 under tau_low=0.45), so the end effect eats the "
        "stopping rule's saving; the cap, abandoning a little later, keeps more of it. Plugging the true law in as "
        "the prior (no fitting) leaves the same gap, so it is not an estimation error. Carrying the in-flight "
        "prompts into the next step (`carry_over`) is the remedy: the rows with it are the renewal-reward rates "
        "the optimum is computed for (DS, which has its own batching waste of surplus groups, stays as measured).",
    ]


def _multi_text(res, oracle) -> list[str]:
    best = min((n for n in res if n != "DS"), key=lambda n: _val(res, n).mean)
    v = _val(res, best)
    return [
        f"Best: **{best}** at {v.mean:.3f} of DS's rollouts (oracle {oracle:.3f}), effective fraction 1.0 in every "
        "step: selection only orders the draw, in-step verification still decides. The predictive-only row "
        "(uniform allocator, same history and selection) shows what prediction alone gives: cheap but the batch is "
        "not clean.",
    ]


def _drift_text(res) -> list[str]:
    return ["With drift, histories mislead for a while; in-step verification keeps every SARA variant's batch clean "
            "(effective fraction 1.0), while predictive-only selection loses effective groups."]


def _targets(in_step, multi) -> list[str]:
    summ_in, summ_multi = summary(in_step), summary(multi)
    autos = [n for n in in_step if n.startswith("auto") and "token" not in n]
    best_any = min(autos, key=lambda n: _val(in_step, n).mean)
    reliable = [n for n in autos if (summ_in[n]["would_mix_share"] or 0) <= 0.10]
    best_rel = min(reliable, key=lambda n: _val(in_step, n).mean) if reliable else None
    best = min((n for n in multi if n != "DS" and not n.startswith("predictive")), key=lambda n: _val(multi, n).mean)
    m = _val(multi, best)
    frac = summ_multi[best]["min_effective_fraction"]
    tok = _val(multi, best, "tokens")
    toks_in = [n for n in in_step if "token" in n]
    best_tok_in = min(toks_in, key=lambda n: _val(in_step, n, "tokens").mean)
    tok_in = _val(in_step, best_tok_in, "tokens")

    def ok(x):
        return "met" if x else "**not met**"

    a, wa = _val(in_step, best_any), summ_in[best_any]["would_mix_share"]
    rel_txt, rel_ok = "none", False
    if best_rel is not None:
        r = _val(in_step, best_rel)
        rel_txt = f"{best_rel}: {r.mean:.3f} (would-mix {summ_in[best_rel]['would_mix_share']:.1%})"
        rel_ok = r.mean <= 0.72
    return md_table(["target", "measured (best row)", "status"], [
        ["in-step, k=8, U-shaped: <= 0.72 of DS rollouts with would-mix <= 10% of abandoned",
         f"cheapest: {best_any} {a.mean:.3f} (would-mix {wa:.1%}); cheapest with would-mix <= 10%: {rel_txt}",
         ok(rel_ok)],
        ["multi-epoch: <= 0.30 of DS rollouts, effective fraction 1.0",
         f"{best}: {m.mean:.3f}, min effective fraction {frac:.2f}", ok(m.mean <= 0.30 and frac == 1.0)],
        ["tokens <= 0.65 of DS", f"multi-epoch ({best}) {tok.mean:.3f}; in-step ({best_tok_in}) {tok_in.mean:.3f}",
         ok(tok.mean <= 0.65) + " (multi-epoch); " + ok(tok_in.mean <= 0.65) + " (in-step)"],
    ]).split("\n")


if __name__ == "__main__":
    raise SystemExit(main())
