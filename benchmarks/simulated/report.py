"""The rendering half of ``benchmarks/simulated/run.py``: :class:`~benchmarks.simulated.suite.SuiteResults` ->
``RESULTS.md`` text.

Static prose lives in ``benchmarks/simulated/templates/results.md`` (named blocks with ``${placeholders}``); this
module only formats numbers, builds the tables and decides which conditional paragraphs apply. Nothing here simulates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks import sim
from benchmarks.common import Interval, TextBlocks, current_command, environment_lines, fmt_ci, md_table
from benchmarks.simulated.suite import (
    BATCH,
    CARRY_OVER,
    DEFAULTS,
    EARLY_COMMIT,
    TO_DECISION,
    TO_DECISION_CARRY_OVER,
    SuiteResults,
)

__all__ = ["render_results", "relative_to_repo"]

REPO = Path(__file__).resolve().parents[2]
TEXT = TextBlocks(Path(__file__).resolve().parent / "templates" / "results.md")


def render_results(results: SuiteResults, train: dict | None, bank_path: Path, train_path: Path) -> str:
    """The full ``RESULTS.md``.

    Args:
        results: sections 1-5.
        train: the ``train_results.json`` document of ``benchmarks/train_runs/train_runs.py`` (section 6), or None.
        bank_path: the replay bank the run used (named in section 4).
        train_path: where ``train`` was read from (named in section 6).
    """
    settings, head = results.settings, results.headline
    stamp = _stamp(results, settings.seeds, settings.steps)
    dec = results.decidability
    i_n0 = DEFAULTS.n0 - 1
    return TEXT(
        "document",
        quick_banner=TEXT("quick_banner") + "\n\n" if settings.quick else "",
        generated=results.generated, elapsed=f"{results.elapsed_s:.0f}",
        quick_flag=" --quick" if settings.quick else "",
        u_shaped=sim.DISTRIBUTIONS["u_shaped"].description, headline_phi=f"{head.theory['phi']:.3f}",
        headline_table=headline_table(head.summary), stamp=stamp, targets_table=_targets_table(results),
        distribution_list="\n".join(f"- **{d}**: {sim.DISTRIBUTIONS[d].description}" for d in settings.distributions),
        grid_table=_grid_table(results), group_sizes=", ".join(str(k) for k in settings.group_sizes),
        savings_by_k=_savings_by_k(results), thm1_pairs=_thm1_pairs(results),
        theorem_table=_theorem_table(results), theorem_verdict=_theorem_verdict(results),
        decidability_prompts=dec["prompts"], n0=DEFAULTS.n0, decided_at_n0=f"{dec['decided'][i_n0]:.1%}",
        mixed_at_n0=f"{dec['decided_effective'][i_n0]:.1%}", abandonable_at_n0=f"{dec['decided_saturated'][i_n0]:.1%}",
        decided_at_4=f"{dec['decided'][3]:.1%}", agreement_at_4=f"{dec['agree'][3]:.1%}",
        tau_table=_tau_table(results), n0_table=_n0_table(results), budget=f"{results.fixed_budget_rollouts:.0f}",
        fixed_budget_table=md_table(["allocator", "effective groups per step"],
                                    [[n, _ci(v, 1)] for n, v in results.fixed_budget.items()]),
        fixed_budget_text=_fixed_budget_text(results.fixed_budget), core_findings=_core_findings(results),
        replay_section=_replay_section(results, bank_path), overhead_section=_overhead_section(results, stamp),
        training_section=_training_section(train, train_path),
    ) + "\n\n"


def relative_to_repo(path: Path) -> str:
    """``path`` relative to the repository root when it lies inside it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------------------------ formatting
def _stamp(results: SuiteResults, seeds: int, steps: int) -> str:
    seeds_text = f"0..{seeds - 1} ({seeds} seeds) x {steps} consecutive steps each, none dropped"
    return environment_lines(results.command, seeds_text, results.environment)


def _ci(iv: Interval | None, digits: int = 3) -> str:
    return "n/a" if iv is None else fmt_ci(iv, digits)


def _all_filled(summary: dict) -> bool:
    return summary["steps_filled"] == summary["steps"]


def _not_filled_mark(summary: dict) -> str:
    """A mark for cost ratios of runs that did not deliver B groups every step (not a saving)."""
    return "" if _all_filled(summary) else " (not filled)"


def _filled(summary: dict) -> str:
    """'200/200' or '0/200 (budget 200)': steps that filled B, and why the others stopped."""
    other = ", ".join(f"{k} {v}" for k, v in sorted(summary["stops"].items()) if k != "filled")
    return f"{summary['steps_filled']}/{summary['steps']}" + (f" ({other})" if other else "")


def _mean3(iv: Interval | None) -> str:
    return f"{iv.mean:.3f}" if iv else "n/a"


# ------------------------------------------------------------------------------------------------ tables
def headline_table(summaries: dict[str, dict]) -> str:
    """One row per allocator present, in a fixed order (the headline and the replay tables)."""
    rows = []
    for name in [n for n in ("uniform", "DS", "SARA", EARLY_COMMIT, TO_DECISION, CARRY_OVER, TO_DECISION_CARRY_OVER)
                 if n in summaries]:
        s = summaries[name]
        rows.append([
            name, _ci(s["rollouts"], 0), _ci(s["rollouts_ratio"]), _ci(s["tokens"], 0), _ci(s["tokens_ratio"]),
            _ci(s["rollouts_useful_ratio"]),
            f"{s['rounds_median']:.0f} (p90 {s['rounds_p90']:.0f}, max {s['rounds_max']})",
            _ci(s["effective_fraction"]), _ci(s["abandoned"], 1), _ci(s["wrong_exact_rate"]),
            _ci(s["wrong_sampled_rate"]), _ci(s["peff_rate"]), _filled(s),
        ])
    return md_table(["allocator", "rollouts/step", "x DS", "tokens/step", "tokens x DS",
                     "x DS excl. surplus+active", "rounds/step: median", "effective fraction",
                     "abandoned prompts/step", "abandoned that would mix (exact)", "(sampled)",
                     "summed p_eff / abandoned", "steps filled"], rows)


def _targets_table(results: SuiteResults) -> str:
    head = results.headline.summary
    sara, ds = head["SARA"], head["DS"]
    rows = []

    def add(name, ok, val):
        rows.append([name, "met" if ok else "**missed**", val])

    add("SARA <= 0.80 of DS rollouts (k=8, U-shaped)", sara["rollouts_ratio"].hi <= 0.80, _ci(sara["rollouts_ratio"]))
    wrong = sara["wrong_exact_rate"]
    add("abandoned-but-would-mix <= 10% of abandoned", wrong is not None and wrong.hi <= 0.10, _ci(wrong))
    add("tokens <= 0.80 of DS", sara["tokens_ratio"].hi <= 0.80, _ci(sara["tokens_ratio"]))
    variants = [(n, head[n]) for n in (TO_DECISION, CARRY_OVER, TO_DECISION_CARRY_OVER) if n in head]
    meeting = [n for n, v in variants if v["rounds_median"] <= 4 and v["rollouts_ratio"].hi <= 0.80
               and v["effective_fraction"].lo >= 1.0]
    if sara["rounds_median"] <= 4:
        rounds_status = "met"
    elif meeting:
        rounds_status = "met with `" + meeting[0].removeprefix("SARA ") + "` (paper default: missed)"
    else:
        rounds_status = "**missed**"
    rows.append(["median rounds per step <= 4", rounds_status,
                 f"paper-default SARA median {sara['rounds_median']:.0f} (mean {_ci(sara['rounds'], 2)}, p90 "
                 f"{sara['rounds_p90']:.0f}); DS median {ds['rounds_median']:.0f}"
                 + "".join(f"; {n}: median {v['rounds_median']:.0f} (p90 {v['rounds_p90']:.0f}) at "
                           f"{_ci(v['rollouts_ratio'])} of DS's rollouts" for n, v in variants)])
    add("effective fraction 1.0 for SARA and DS",
        sara["effective_fraction"].lo >= 1.0 and ds["effective_fraction"].lo >= 1.0,
        f"SARA {sara['effective_fraction'].mean:.4f}, DS {ds['effective_fraction'].mean:.4f}")
    ks = list(results.settings.group_sizes)
    u_shaped = [results.grid[("u_shaped", k)].summary["SARA"] for k in ks]
    savings = [1.0 - s["rollouts_ratio"].mean for s in u_shaped]
    grows = all(b > a for a, b in zip(savings, savings[1:]))
    all_filled = all(_all_filled(s) for s in u_shaped)
    value = ", ".join(f"k={k}: {v:.3f}" + ("" if _all_filled(s) else f" (SARA filled {_filled(s)} steps)")
                      for k, v, s in zip(ks, savings, u_shaped))
    rows.append(["savings over DS grow with k (U-shaped)",
                 "met" if grows and all_filled else "met, with a caveat" if grows else "**missed**",
                 value + ("" if all_filled else
                          "; a k where SARA did not fill every batch is not a clean saving (see Findings)")])
    if results.overhead is not None:
        bins_1024 = [b for b in results.overhead.bins if b["target"] == 1024]
        if bins_1024 and bins_1024[0]["rounds"]:
            b = bins_1024[0]
            add("allocator overhead <= 1 ms per round at 1,024 active prompts", b["median_ms"] <= 1.0,
                f"median {b['median_ms']:.3f} ms (p90 {b['p90_ms']:.3f} ms) over {b['rounds']} rounds of "
                f"~{b['mean_prompts']:.0f} prompts")
    return md_table(["target", "status", "measured (95% CI over seeds)"], rows)


def _cells(results: SuiteResults):
    """Grid cells in table order (distribution-major)."""
    return [results.grid[(d, k)] for d in results.settings.distributions for k in results.settings.group_sizes]


def _grid_table(results: SuiteResults) -> str:
    rows = []
    for cell in _cells(results):
        s = cell.summary
        sara = s["SARA"]
        rows.append([
            cell.distribution, cell.k, f"{cell.theory['phi']:.3f}", f"{s['uniform']['effective_fraction'].mean:.3f}",
            f"{s['DS']['rollouts'].mean:.0f}", _ci(sara["rollouts_ratio"]) + _not_filled_mark(sara),
            _ci(sara["tokens_ratio"]) + _not_filled_mark(sara), _ci(sara["rollouts_useful_ratio"]),
            f"{sara['rounds_median']:.0f} / {s['DS']['rounds_median']:.0f}",
            f"{sara['effective_fraction'].mean:.3f}", _ci(sara["wrong_exact_rate"]), _mean3(sara["peff_rate"]),
            _filled(sara), _filled(s["DS"]),
        ])
    return md_table(["distribution", "k", "Phi", "uniform eff. frac.", "DS rollouts/step", "SARA/DS rollouts",
                     "SARA/DS tokens", "SARA/DS excl. surplus+active", "median rounds SARA / DS",
                     "SARA eff. frac.", "wrong-abandon share (exact)", "summed p_eff / abandoned",
                     "SARA steps filled", "DS steps filled"], rows)


def _savings_by_k(results: SuiteResults) -> str:
    parts = []
    for d in results.settings.distributions:
        savings = [1.0 - results.grid[(d, k)].summary["SARA"]["rollouts_ratio"].mean
                   for k in results.settings.group_sizes]
        grows = all(b > a for a, b in zip(savings, savings[1:]))
        parts.append(f"{d}: " + " -> ".join(f"{v:.1%}" for v in savings) + (" (grows)" if grows else
                                                                             " (not monotone)"))
    return "; ".join(parts)


def _thm1_pairs(results: SuiteResults) -> str:
    parts = []
    for cell in _cells(results):
        s = cell.summary["SARA"]
        if s["wrong_exact_rate"] is not None and s["peff_rate"] is not None:
            parts.append(f"{cell.distribution} k={cell.k}: {s['wrong_exact_rate'].mean:.3f} vs "
                         f"{s['peff_rate'].mean:.3f}")
    return "; ".join(parts)


def _theorem_table(results: SuiteResults) -> str:
    rows = []
    for cell in _cells(results):
        t, s = cell.theory, cell.summary
        rows.append([cell.distribution, cell.k, f"{t['phi']:.3f}", f"{t['psi']:.3f}", t["n_a"], f"{t['e_stop']:.2f}",
                     f"{t['ds']:.0f}", f"{s['DS']['rollouts'].mean:.0f} / {s['DS']['rollouts_useful'].mean:.0f}",
                     f"{t['eq6']:.0f}", f"{t['corrected']:.0f}", f"{t['corrected_full']:.0f}",
                     f"{s['SARA']['rollouts'].mean:.0f} / {s['SARA']['rollouts_useful'].mean:.0f}",
                     f"{s[EARLY_COMMIT]['rollouts'].mean:.0f} / {s[EARLY_COMMIT]['rollouts_useful'].mean:.0f}"])
    return md_table(["distribution", "k", "Phi", "Psi", "n_a", "E[min(Tmix,n_a)]", "DS pred.",
                     "DS meas. total / excl.", "Eq. 6 (B/Phi)", "review (B/Psi)", "review, full groups",
                     "SARA meas. total / excl.", "SARA commit_min=2 meas. total / excl."], rows)


_PREDICTIONS = (("eq6", "paper Eq. 6, (B/Phi) E[min(Tmix,n_a)]"), ("corrected", "review, (B/Psi) E[min(Tmix,n_a)]"),
                ("corrected_full", "full groups, (B/Psi)(Psi k + (1-Psi) n_a)"))
_MEASURED = (("SARA", "SARA (commit_min = k, default)"), (EARLY_COMMIT, "SARA commit_min = 2 (early commit)"))


def _theorem_verdict(results: SuiteResults) -> str:
    """Which prediction matches: relative error against the total measured cost, and whether the prediction lies in
    the measured bracket [excl. surplus+active, total], over the settings where every allocator filled every step."""
    cells = _cells(results)
    filled = [all(_all_filled(c.summary[n]) for n in ("SARA", EARLY_COMMIT, "DS")) for c in cells]
    valid = [c for c, ok in zip(cells, filled) if ok]
    skipped = [f"{c.distribution} k={c.k}" for c, ok in zip(cells, filled) if not ok]
    if not valid:
        return TEXT("theorem_no_verdict")

    def score(prediction: str, allocator: str) -> tuple[float, int]:
        errors, inside = [], 0
        for c in valid:
            s = c.summary[allocator]
            excl, total = s["rollouts_useful"].mean, s["rollouts"].mean
            predicted = c.theory[prediction]
            errors.append((predicted - total) / total)
            inside += int(excl * 0.98 <= predicted <= total * 1.02)
        return float(np.mean(np.abs(errors))), inside

    rows = [[label, name, f"{score(p, a)[0]:.1%}", f"{score(p, a)[1]}/{len(valid)}"]
            for a, label in _MEASURED for p, name in _PREDICTIONS]
    table = md_table(["measured allocator", "prediction", "mean abs. rel. error vs total",
                      "inside [excl., total] (+-2%)"], rows)
    return TEXT("theorem_verdict", settings=len(valid),
                left_out=f" (left out: {', '.join(skipped)})" if skipped else "",
                table=table, early_commit_review=f"{score('corrected', EARLY_COMMIT)[0]:.1%}",
                early_commit_eq6=f"{score('eq6', EARLY_COMMIT)[0]:.1%}",
                default_full_groups=f"{score('corrected_full', 'SARA')[0]:.1%}")


def _tau_table(results: SuiteResults) -> str:
    rows = []
    for p in results.tau_sweep:
        s = p.summary
        rows.append([f"{p.value:g}", sim.abandon_point_uniform(8, p.value), _ci(p.saving), _ci(s["tokens_ratio"]),
                     _ci(s["wrong_exact_rate"]), _ci(s["wrong_sampled_rate"]), _mean3(s["peff_rate"]),
                     f"{s['rounds_median']:.0f}", f"{s['effective_fraction'].mean:.3f}"])
    return md_table(["tau_low", "n_a", "rollout saving vs DS", "SARA/DS tokens", "wrong-abandon share (exact)",
                     "wrong-abandon share (sampled)", "summed p_eff / abandoned", "median rounds", "eff. frac."], rows)


def _n0_table(results: SuiteResults) -> str:
    rows = [[p.value, _ci(p.saving), _ci(p.token_saving), _ci(p.summary["wrong_exact_rate"]),
             f"{p.summary['rounds_median']:.0f}", f"{p.summary['effective_fraction'].mean:.3f}"]
            for p in results.n0_sweep]
    return md_table(["n0", "rollout saving vs DS", "token saving vs DS", "wrong-abandon share (exact)",
                     "median rounds", "eff. frac."], rows)


def _fixed_budget_text(yields: dict[str, Interval]) -> str:
    sara = [n for n in yields if n.startswith("SARA (target")]
    ds = [n for n in yields if n.startswith("DS (target")]
    text = TEXT("fixed_budget_uniform", uniform=f"{yields['uniform'].mean:.1f}")
    if ds:
        text += f", DS {' / '.join(f'{yields[n].mean:.1f}' for n in ds)} ({', '.join(ds)})"
    text += ". "
    if sara:
        above = all(yields[n].lo > yields["uniform"].hi for n in sara)
        text += TEXT("fixed_budget_sara", values=" / ".join(f"{yields[n].mean:.1f}" for n in sara),
                     names=", ".join(sara),
                     verdict=TEXT("fixed_budget_sara_above" if above else "fixed_budget_sara_not_above")) + " "
    if "SARA, no reallocation" in yields:
        text += TEXT("fixed_budget_no_reallocation", groups=f"{yields['SARA, no reallocation'].mean:.1f}")
    return text


# ------------------------------------------------------------------------------------------------ findings
def _core_findings(results: SuiteResults) -> str:
    """Observations about the allocation core, each generated from this run's numbers (a finding whose trigger is
    absent is not printed)."""
    items = []
    cap = DEFAULTS.budget_cap
    cells = _cells(results)
    ks = results.settings.group_sizes
    cap_bound = [c for c in cells if c.summary["SARA"]["stops"].get("budget", 0)]
    sweeps_bound = [f"tau_low={p.value:g} ({_filled(p.summary)})" for p in results.tau_sweep
                    if p.summary["stops"].get("budget", 0)]
    sweeps_bound += [f"n0={p.value} ({_filled(p.summary)})" for p in results.n0_sweep
                     if p.summary["stops"].get("budget", 0)]
    if cap_bound or sweeps_bound:
        settings = "; ".join(
            TEXT("finding_cap_binds_setting", setting=f"{c.distribution} k={c.k}", filled=_filled(c.summary["SARA"]),
                 effective_fraction=f"{c.summary['SARA']['effective_fraction'].mean:.3f}",
                 predicted=f"{c.theory['corrected_full'] / (BATCH * c.k):.1f}", cap=f"{cap:g}",
                 ds_over_cap=f"{c.ds_steps_over_cap:.0%}")
            for c in cap_bound)
        items.append(TEXT("finding_cap_binds", cap=f"{cap:g}", settings=settings,
                          sweeps=("; and at k=8 (U-shaped) with " + ", ".join(sweeps_bound)) if sweeps_bound else ""))
    max_rounds = [c for c in cells if c.summary["SARA"]["stops"].get("max_rounds", 0)]
    if max_rounds:
        items.append(TEXT("finding_max_rounds", settings=", ".join(
            f"{c.distribution} k={c.k} ({_filled(c.summary['SARA'])}; median rounds "
            f"{c.summary['SARA']['rounds_median']:.0f}, max {c.summary['SARA']['rounds_max']})" for c in max_rounds)))
    sara = [(k, results.grid[("u_shaped", k)].summary["SARA"]) for k in ks]
    to_decision = [(k, results.grid[("u_shaped", k)].summary.get(TO_DECISION)) for k in ks]
    to_decision_carry = [(k, results.grid[("u_shaped", k)].summary.get(TO_DECISION_CARRY_OVER)) for k in ks]
    rounds = [TEXT("finding_rounds",
                   medians=", ".join(f"k={k}: {s['rounds_median']:.0f} (p90 {s['rounds_p90']:.0f})" for k, s in sara),
                   floors=", ".join(f"k={k}: {sim.abandon_point_uniform(k, DEFAULTS.tau_low) - DEFAULTS.n0}"
                                    for k in ks))]
    if all(s is not None for _, s in to_decision):
        rounds.append(TEXT("finding_rounds_to_decision",
                           medians=", ".join(f"k={k}: {s['rounds_median']:.0f}" for k, s in to_decision),
                           ratios=", ".join(f"{s['rollouts_ratio'].mean:.3f}" for _, s in to_decision),
                           paper_ratios=", ".join(f"{s['rollouts_ratio'].mean:.3f}" for _, s in sara)))
    if all(s is not None for _, s in to_decision_carry):
        rounds.append(TEXT("finding_rounds_carry_over",
                           medians=", ".join(f"k={k}: {s['rounds_median']:.0f}" for k, s in to_decision_carry),
                           ratios=", ".join(f"{s['rollouts_ratio'].mean:.3f}" for _, s in to_decision_carry)))
    items.append(" ".join(rounds))
    sara_targets = {n: v for n, v in results.fixed_budget.items() if n.startswith("SARA (target")}
    yields = list(sara_targets.values())
    if len(yields) > 1 and max(v.lo for v in yields) > min(v.hi for v in yields):
        items.append(TEXT("finding_budget_bound",
                          yields=", ".join(f"{n}: {v.mean:.1f}" for n, v in sara_targets.items())))
    return "\n".join(items)


# ------------------------------------------------------------------------------------------------ sections 4-6
def _replay_section(results: SuiteResults, bank_path: Path) -> str:
    rep = results.replay
    if rep is None:
        return TEXT("replay_skipped", bank=relative_to_repo(bank_path))
    bank, meta = rep.bank, rep.meta
    description = meta.get("description") or meta.get("model") or ""
    lines = [TEXT("replay_bank", bank=relative_to_repo(bank_path), prompts=bank["prompts"],
                  completions=bank["completions"], rollouts=bank["prompts"] * bank["completions"],
                  description="; " + str(description) if description else "",
                  mean_success=f"{bank['mean_success']:.3f}", all_fail=f"{bank['all_fail']:.1%}",
                  all_pass=f"{bank['all_pass']:.1%}", unscorable=f"{bank['unscorable']:.1%}")]
    if meta:
        keys = ", ".join(f"{k}={v}" for k, v in meta.items() if not isinstance(v, (dict, list)))[:600]
        lines += ["", TEXT("replay_metadata", metadata=keys)]
    for k, at_k in rep.by_k.items():
        lines += ["", TEXT("replay_at_k", k=k, batch=BATCH, phi=f"{at_k.bank.get('phi', float('nan')):.3f}",
                           table=headline_table(at_k.summary))]
    lines.append("")
    if 8 in rep.by_k:
        lines += [TEXT("replay_plot"), ""]
    lines.append(_stamp(results, results.settings.replay_seeds, results.settings.replay_steps))
    return "\n".join(lines)


def _overhead_section(results: SuiteResults, stamp: str) -> str:
    if results.overhead is None:
        return TEXT("overhead_skipped")
    table = md_table(["prompts per round (target)", "rounds measured", "mean prompts in bin", "median ms/round",
                      "p90 ms/round"],
                     [[b["target"], b["rounds"], f"{b['mean_prompts']:.0f}", f"{b['median_ms']:.3f}",
                       f"{b['p90_ms']:.3f}"] for b in results.overhead.bins])
    finish = "; ".join(f"B={f['batch_size']}: {f['median_ms']:.2f} ms for ~{f['mean_prompts_drawn']:.0f} drawn prompts"
                       for f in results.overhead.finish)
    return TEXT("overhead", table=table, finish=finish, stamp=stamp)


def _training_section(train: dict | None, train_path: Path) -> str:
    if not train:
        return TEXT("training_not_run", train_results=relative_to_repo(train_path))
    env, config, runs = train.get("environment", {}), train.get("config", {}), train["runs"]
    lines = [TEXT("training_source", train_results=relative_to_repo(train_path),
                  command=current_command(train.get("command", "?")), task=train.get("task", "?"),
                  seed=config.get("seed", "?"),
                  **{key: env.get(key, "?") for key in ("cpu", "cores", "torch", "torch_threads", "trl",
                                                        "transformers", "sara_trl")}), ""]
    ds = runs.get("DS")
    ds_rollouts = ds["cum_rollouts"][-1] if ds and ds["step"] else None
    ds_tokens = ds["cum_tokens"][-1] if ds and ds["step"] else None
    rows = []
    for name, r in runs.items():
        if not r["step"]:
            rows.append([name, 0] + ["n/a"] * 9)
            continue
        acc = r.get("eval_acc", [])
        rows.append([name, r["step"][-1], f"{r['cum_rollouts'][-1]:.0f}",
                     f"{r['cum_rollouts'][-1] / ds_rollouts:.2f}" if ds_rollouts else "n/a",
                     f"{r['cum_tokens'][-1]:.0f}", f"{r['cum_tokens'][-1] / ds_tokens:.2f}" if ds_tokens else "n/a",
                     f"{np.mean(r['rounds']):.1f}", f"{np.mean(r['effective_fraction']):.3f}",
                     f"{r['raw_success'][0]:.3f} -> {r['raw_success'][-1]:.3f}",
                     f"{acc[0]:.3f} -> {acc[-1]:.3f}" if len(acc) >= 2 else "n/a",
                     f"{r.get('train_wall_s', r['wall_s'][-1]):.0f}"])
    lines += [md_table(["allocator", "optimizer steps", "rollouts", "x DS", "tokens", "tokens x DS",
                        "rounds per step", "mean effective fraction of trained batches",
                        "success over generated rollouts, first -> last step",
                        "held-out greedy accuracy, before -> after", "wall-clock (s, incl. evals)"], rows), ""]
    if all(n in runs and runs[n]["step"] for n in ("uniform", "DS", "SARA")):
        uniform, ds, sara = runs["uniform"], runs["DS"], runs["SARA"]
        uniform_effective = np.mean(uniform["effective_fraction"])
        lines += [TEXT("training_measured",
                       rollouts_vs_ds=f"{sara['cum_rollouts'][-1] / ds['cum_rollouts'][-1]:.2f}",
                       tokens_vs_ds=f"{sara['cum_tokens'][-1] / ds['cum_tokens'][-1]:.2f}", steps=sara["step"][-1],
                       uniform_zero_advantage=f"{1 - uniform_effective:.1%}",
                       uniform_effective=f"{uniform_effective:.0%}",
                       sara_rounds=f"{np.mean(sara['rounds']):.1f}", ds_rounds=f"{np.mean(ds['rounds']):.1f}"), ""]
    eval_prompts = config.get("eval_prompts")
    lines += [TEXT("training_caveat", steps=config.get("steps"), eval_prompts=eval_prompts,
                   one_prompt=f"{1 / eval_prompts:.3f}") if eval_prompts else "", "", TEXT("training_plot")]
    return "\n".join(lines)
