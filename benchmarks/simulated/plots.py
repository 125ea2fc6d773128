"""PNG plots mirroring the paper's figures (matplotlib, Agg backend). Each function takes already-aggregated numbers
and a path; none runs a simulation. :func:`suite_plots` draws all of ``benchmarks/simulated/run.py``'s figures from its
results.

matplotlib is an optional dependency of sara_trl (the ``plots`` extra, part of ``dev``); only this module needs it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["fig3a", "fig3c", "fig6a", "fig6b", "fig6c", "fig6d", "overhead_plot", "replay_plot", "training_plot",
           "effective_curve_band", "suite_plots"]

COLORS = {"uniform": "#7f7f7f", "DS": "#1f77b4", "SARA": "#d62728", "SARA + carry_over": "#ff7f0e"}


def _save(fig, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mark_unfilled(ax, xs, ys, ok, valid_values) -> None:
    """Draw points whose SARA steps did not all fill B as grey crosses clipped to the axis (their savings are not
    savings: the batch was not delivered), and fit the y-axis to the valid points."""
    ok = np.asarray(ok, bool)
    vals = np.asarray(valid_values, float)
    vals = vals[np.isfinite(vals)]
    lo = min(-0.05, float(vals.min()) - 0.05) if vals.size else -0.1
    hi = float(vals.max()) + 0.1 if vals.size else 1.0
    ax.set_ylim(lo, hi)
    bad = ~ok
    if bad.any():
        y = np.clip(np.asarray(ys, float)[bad], lo + 0.02 * (hi - lo), hi)
        ax.plot(np.asarray(xs, float)[bad], y, "x", color="grey", ms=9, mew=2,
                label="SARA did not fill its batches (see Findings)")


def fig3a(dec: dict, k: int, n0: int, tau_low: float, path: Path) -> None:
    """Decided fraction vs rollouts observed (paper Fig. 3a). ``dec`` from :func:`benchmarks.sim.decidability`."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    n = dec["n"]
    ax.stackplot(n, dec["decided_effective"], dec["decided_saturated"], colors=["#2ca02c", "#ff7f0e"], alpha=0.55,
                 labels=["decided effective (mixed)", f"decided saturated (p_eff < {tau_low:g})"], step="post")
    ax.plot(n, dec["agree"], "k.-", label="agreement with oracle label")
    ax.axvline(n0, color="grey", ls=":", lw=1)
    ax.text(n0, 0.02, f" n0={n0}", color="grey", fontsize=8)
    ax.set_xlabel("rollouts observed n")
    ax.set_ylabel("fraction of groups")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(1, k)
    ax.set_title(f"(3a) Early decidability, k={k}")
    ax.legend(fontsize=7, loc="center right")
    _save(fig, path)


def fig3c(curves: dict, uniform: tuple[float, float], B: int, path: Path) -> None:
    """Effective groups vs rollouts spent within a step (paper Fig. 3c).

    ``curves``: name -> (x grid, mean y, lo, hi). ``uniform``: (rollouts per uniform step, mean effective groups).
    """
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    xmax = 0
    for name, (x, y, lo, hi) in curves.items():
        ax.plot(x, y, color=COLORS.get(name), label=name)
        ax.fill_between(x, lo, hi, color=COLORS.get(name), alpha=0.2)
        xmax = max(xmax, x[-1])
    ux, uy = uniform
    xs = np.linspace(0, xmax, 50)
    ax.plot(xs, uy / ux * xs, color=COLORS["uniform"], ls="--", label="uniform (repeated steps)")
    ax.plot([ux], [uy], "o", color=COLORS["uniform"])
    ax.axhline(B, color="k", lw=0.7, ls=":")
    ax.set_xlabel("rollouts spent in the step")
    ax.set_ylabel("effective groups collected")
    ax.set_ylim(0, B * 1.15)
    ax.set_title("(3c) Effective groups vs rollouts")
    ax.legend(fontsize=8)
    _save(fig, path)


def fig6a(rows: list[dict], default: float, path: Path) -> None:
    """tau_low sweep: rollout savings vs DS and wrong abandonments (paper Fig. 6a).

    ``rows``: dicts with ``tau``, ``saving`` (mean, lo, hi), ``wrong`` (mean, lo, hi) and ``peff`` (share, mean).
    """
    fig, ax = plt.subplots(figsize=(5.4, 3.6))
    ok = np.array([r.get("filled", True) for r in rows], bool)
    tau = np.array([r["tau"] for r in rows])
    for key, label, color in (("saving", "rollout saving vs DS", "#d62728"),
                              ("wrong", "abandoned that would have mixed (exact)", "#1f77b4")):
        m = np.array([r[key][0] for r in rows])
        lo = np.array([r[key][1] for r in rows])
        hi = np.array([r[key][2] for r in rows])
        ax.errorbar(tau[ok], m[ok], yerr=np.vstack([(m - lo)[ok], (hi - m)[ok]]),
                    marker="o", color=color, label=label,
                    capsize=2)
    peff = np.array([r["peff"] for r in rows])
    ax.plot(tau[ok], peff[ok], "s--", color="grey", ms=3, label="summed p_eff / abandoned (Thm 1 bound)")
    sav = np.array([r["saving"][0] for r in rows])
    _mark_unfilled(ax, tau, sav, ok, np.concatenate([sav[ok], peff[ok]]))
    ax.axvline(default, color="k", ls=":", lw=1)
    ax.set_xlabel("tau_low")
    ax.set_ylabel("fraction")
    ax.set_title("(6a) Abandon threshold sweep (U-shaped, k=8)")
    ax.legend(fontsize=7)
    _save(fig, path)


def fig6b(rows: list[dict], path: Path) -> None:
    """n0 sweep: savings and wrong abandonment vs probe size (paper Fig. 6b)."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ok = np.array([r.get("filled", True) for r in rows], bool)
    n0 = np.array([r["n0"] for r in rows])
    valid = []
    for key, label, color in (("saving", "rollout saving vs DS", "#d62728"),
                              ("token_saving", "token saving vs DS", "#9467bd"),
                              ("wrong", "abandoned that would have mixed", "#1f77b4")):
        m = np.array([r[key][0] for r in rows])
        lo = np.array([r[key][1] for r in rows])
        hi = np.array([r[key][2] for r in rows])
        ax.errorbar(n0[ok], m[ok], yerr=np.vstack([(m - lo)[ok], (hi - m)[ok]]),
                    marker="o", color=color, label=label,
                    capsize=2)
        valid.extend(m[ok].tolist())
    _mark_unfilled(ax, n0, np.array([r["saving"][0] for r in rows]), ok, valid)
    ax.set_xticks(n0)
    ax.set_xlabel("probe size n0")
    ax.set_ylabel("fraction")
    ax.set_title("(6b) Probe size sweep (U-shaped, k=8)")
    ax.legend(fontsize=7)
    _save(fig, path)


def fig6c(bars: dict, B: int, budget: float, path: Path) -> None:
    """Effective groups under the same per-step budget (DS's cost) (paper Thm 3, Fig. 6c).

    ``bars``: name -> (mean, lo, hi).
    """
    names = list(bars)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    m = np.array([bars[n][0] for n in names])
    lo = np.array([bars[n][1] for n in names])
    hi = np.array([bars[n][2] for n in names])
    colors = [COLORS["SARA"] if n.startswith("SARA") else COLORS["DS"] if n.startswith("DS") else COLORS["uniform"]
              for n in names]
    ax.barh(range(len(names)), m, xerr=[m - lo, hi - m], color=colors, alpha=0.8, capsize=2)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(B, color="k", ls=":", lw=1)
    ax.set_xlabel(f"effective groups per step at a budget of {budget:.0f} rollouts")
    ax.set_title("(6c) Fixed-budget yield (U-shaped, k=8)")
    _save(fig, path)


def fig6d(series: dict, ks: list[int], path: Path) -> None:
    """Savings vs DS as a function of k (paper Fig. 6d).

    ``series``: label -> list of (mean, lo, hi, filled) per k; ``filled`` False marks a k where SARA did not fill
    every batch (drawn as a grey cross, not as a saving).
    """
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ks_a = np.asarray(ks, float)
    all_x, all_y, all_ok, valid = [], [], [], []
    for label, vals in series.items():
        m = np.array([v[0] for v in vals])
        lo = np.array([v[1] for v in vals])
        hi = np.array([v[2] for v in vals])
        ok = np.array([v[3] if len(v) > 3 else True for v in vals], bool)
        ax.errorbar(ks_a[ok], m[ok], yerr=np.vstack([(m - lo)[ok], (hi - m)[ok]]), marker="o", capsize=2, label=label)
        all_x += ks_a.tolist()
        all_y += m.tolist()
        all_ok += ok.tolist()
        valid += m[ok].tolist()
    _mark_unfilled(ax, all_x, all_y, all_ok, valid)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("group size k")
    ax.set_ylabel("rollout saving vs DS (1 - SARA/DS)")
    ax.set_title("(6d) Savings vs group size")
    ax.legend(fontsize=7)
    _save(fig, path)


def overhead_plot(rounds: list[tuple[int, float]], path: Path) -> None:
    """Allocator logic time per round vs prompts decided in the round (log-log)."""
    s = np.array([r[0] for r in rounds], float)
    t = np.array([r[1] for r in rounds], float) * 1e3
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    ax.loglog(np.maximum(s, 1), t, ".", alpha=0.5)
    ax.axhline(1.0, color="r", ls=":", lw=1)
    ax.axvline(1024, color="grey", ls=":", lw=1)
    ax.set_xlabel("prompts decided in the round")
    ax.set_ylabel("allocation logic per round (ms)")
    ax.set_title("Allocator overhead (excl. rollout source)")
    _save(fig, path)


def replay_plot(bars: dict, path: Path) -> None:
    """Rollouts and tokens per step on the replay bank, relative to DS. ``bars``: name -> (roll ratio, tok ratio)."""
    names = list(bars)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.bar(x - 0.2, [bars[n][0] for n in names], 0.4, label="rollouts / DS")
    ax.bar(x + 0.2, [bars[n][1] for n in names], 0.4, label="tokens / DS")
    ax.set_xticks(x)
    ax.set_xticklabels(names, fontsize=7, rotation=25, ha="right")
    ax.axhline(1.0, color="k", lw=0.7)
    ax.set_title("Replay of real SmolLM2 outcomes")
    ax.legend(fontsize=8)
    _save(fig, path)


def training_plot(runs: dict, path: Path) -> None:
    """Real training runs: held-out accuracy vs optimizer step and vs cumulative rollouts, and the effective fraction
    of each trained batch.

    ``runs``: name -> dict with lists ``step``, ``cum_rollouts``, ``effective_fraction``, ``eval_step``, ``eval_acc``.
    """
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for name, r in runs.items():
        c = COLORS.get(name)
        axes[0].plot(r["eval_step"], r["eval_acc"], marker="o", label=name, color=c)
        cum = dict(zip(r["step"], r["cum_rollouts"]))
        xs = [0.0 if s == 0 else cum.get(s, np.nan) for s in r["eval_step"]]
        axes[1].plot(xs, r["eval_acc"], marker="o", label=name, color=c)
        axes[2].plot(r["step"], r["effective_fraction"], marker=".", label=name, color=c)
    axes[0].set_xlabel("optimizer step")
    axes[1].set_xlabel("cumulative rollouts")
    for ax in axes[:2]:
        ax.set_ylabel("held-out greedy accuracy")
    axes[2].set_xlabel("optimizer step")
    axes[2].set_ylabel("effective fraction of trained batch")
    axes[2].set_ylim(0, 1.05)
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle("Real CPU training runs (SmolLM2-135M)")
    _save(fig, path)


# ------------------------------------------------------------------------------------------------ run.py's figures
def effective_curve_band(traces: list, grid_x: np.ndarray):
    """Mean and 5-95% band over steps of the staircase 'effective groups collected by x rollouts' (Fig. 3c).

    ``traces``: per step, ``(cumulative rollouts, cumulative effective groups)`` after each round.
    """
    ys = []
    for cum_r, cum_e in traces:
        idx = np.searchsorted(cum_r, grid_x, side="right") - 1
        ys.append(np.where(idx >= 0, cum_e[np.maximum(idx, 0)], 0))
    ys = np.array(ys, np.float64)
    return grid_x, ys.mean(0), np.percentile(ys, 5, axis=0), np.percentile(ys, 95, axis=0)


def _triple(iv) -> list[float]:
    return [iv.mean, iv.lo, iv.hi]


def suite_plots(results, train: dict | None, plot_dir: Path) -> None:
    """Every PNG of ``RESULTS.md`` from a freshly computed :class:`benchmarks.simulated.suite.SuiteResults` (it needs
    the in-memory traces, savings and overhead rounds, so not from a reloaded ``results.json``) and the training
    runs."""
    from benchmarks.simulated.suite import BATCH, DEFAULTS

    plot_dir = Path(plot_dir)
    head = results.headline
    if results.overhead is not None:
        overhead_plot(results.overhead.rounds, plot_dir / "overhead.png")
    fig3a(results.decidability, 8, DEFAULTS.n0, DEFAULTS.tau_low, plot_dir / "fig3a_decidability.png")
    xmax = max(t[0][-1] for name in ("DS", "SARA") for t in head.traces[name])
    grid_x = np.linspace(0, xmax, 300)
    curves = {name: effective_curve_band(head.traces[name], grid_x) for name in ("DS", "SARA")}
    uniform = head.summary["uniform"]
    fig3c(curves, (uniform["rollouts"].mean, uniform["effective_fraction"].mean * BATCH), BATCH,
          plot_dir / "fig3c_effective_vs_rollouts.png")

    def filled(summary: dict) -> bool:
        return summary["steps_filled"] == summary["steps"]

    def wrong(summary: dict) -> list[float]:
        return _triple(summary["wrong_exact_rate"]) if summary["wrong_exact_rate"] else [0] * 3

    fig6a([{"tau": p.value, "saving": _triple(p.saving), "wrong": wrong(p.summary),
            "peff": p.summary["peff_rate"].mean if p.summary["peff_rate"] else 0.0, "filled": filled(p.summary)}
           for p in results.tau_sweep], DEFAULTS.tau_low, plot_dir / "fig6a_tau_sweep.png")
    fig6b([{"n0": p.value, "saving": _triple(p.saving), "token_saving": _triple(p.token_saving),
            "wrong": wrong(p.summary), "filled": filled(p.summary)} for p in results.n0_sweep],
          plot_dir / "fig6b_n0_sweep.png")
    fig6c({n: tuple(_triple(v)) for n, v in results.fixed_budget.items()}, BATCH, results.fixed_budget_rollouts,
          plot_dir / "fig6c_fixed_budget.png")
    series = {d: [_triple(results.grid[(d, k)].sara_saving) + [filled(results.grid[(d, k)].summary["SARA"])]
                  for k in results.settings.group_sizes] for d in results.settings.distributions}
    fig6d(series, list(results.settings.group_sizes), plot_dir / "fig6d_savings_vs_k.png")
    if results.replay and 8 in results.replay.by_k:
        at_8 = results.replay.by_k[8].summary
        replay_plot({n: (at_8[n]["rollouts_ratio"].mean, at_8[n]["tokens_ratio"].mean) for n in at_8},
                    plot_dir / "replay_cost.png")
    if train and train.get("runs"):
        training_plot(train["runs"], plot_dir / "train_runs.png")
