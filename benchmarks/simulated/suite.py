"""The computing half of ``benchmarks/simulated/run.py``: every section of ``RESULTS.md`` as numbers, no text and no
plots.

:func:`run_suite` runs the sections and returns a :class:`SuiteResults`; ``report.py`` (this folder) turns one into
Markdown and ``plots.py`` (:func:`~benchmarks.simulated.plots.suite_plots`) into PNGs. :meth:`SuiteResults.to_json`
and :meth:`SuiteResults.from_json` write and read ``results.json``, so the report can be rendered again from a saved
run (``run.py --render-only``) without simulating anything.

Sections: (1) a grid of success-rate distributions x group sizes k x allocators (uniform, dynamic sampling "DS",
SARA and variants); (2) the savings-theorem predictions of each grid setting (:func:`benchmarks.sim.theory`);
(3) tau_low and n0 sweeps, the fixed-budget yield (paper Thm 3, Fig. 6c) and the decidability curve (Fig. 3a);
(4) replay of a bank of real outcomes; (5) allocator overhead (wall time: the only non-deterministic numbers).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import replay, sim
from benchmarks.common import Interval, mean_ci
from benchmarks.simulated import overhead
from sara_trl.allocation import AllocationConfig

__all__ = [
    "BATCH", "DEFAULTS", "DS_BUDGET_CAP", "HEADLINE", "EARLY_COMMIT", "TO_DECISION", "CARRY_OVER",
    "TO_DECISION_CARRY_OVER", "Settings", "FULL", "QUICK", "GridCell", "SweepPoint", "ReplayAtK", "ReplayResults",
    "OverheadResults", "SuiteResults", "summarize", "run_suite",
]

BATCH = 64  # B: effective groups per step (paper App. D)
DEFAULTS = AllocationConfig()  # paper App. D: k=8, n0=2, tau_low=0.45, commit_min=k, Beta(1,1), budget cap 6 Bk
# DS is the reference ("oracle", paper App. E): it must fill every batch, so its safety cap is lifted (the paper's
# 6Bk cap binds for DS whenever Phi < 1/6, e.g. the hard pool). SARA keeps the paper's 6Bk.
DS_BUDGET_CAP = 40.0
HEADLINE = ("u_shaped", 8)  # the (distribution, k) setting of the headline table, the plots and the sweeps

# SARA variants, by the name their rows carry in every table.
EARLY_COMMIT = "SARA commit_min=2"  # commits at the first mix: the setting the review's Thm 2 formula is exact for
# The continue phase batched into one round (same rollouts per prompt at commit_min = k, fewer rounds).
TO_DECISION = "SARA to_decision"
# The prompts still undecided at the end of a step carried into the next (no end-of-step waste).
CARRY_OVER = "SARA carry_over"
TO_DECISION_CARRY_OVER = "SARA to_decision + carry_over"

_SARA_TO_DECISION = {"allocator": "sara", "continue_to_decision": True}
_SARA_CARRY_OVER = {"allocator": "sara", "carry_over": True}
_SARA_TO_DECISION_CARRY_OVER = {"allocator": "sara", "continue_to_decision": True, "carry_over": True}


@dataclass(frozen=True)
class Settings:
    """Sizes of one run: ``FULL`` for the committed results, ``QUICK`` for the smoke test (seconds)."""

    quick: bool
    seeds: int  # seeds 0..seeds-1 per setting; each seed draws its own prompt pool
    steps: int  # consecutive steps per seed, all counted
    pool: int  # prompts per seed's pool
    distributions: tuple[str, ...]  # keys of benchmarks.sim.DISTRIBUTIONS
    group_sizes: tuple[int, ...]  # k values of the grid
    tau_values: tuple[float, ...]  # tau_low sweep (Fig. 6a)
    n0_values: tuple[int, ...]  # probe-size sweep (Fig. 6b)
    fixed_budget_steps: int  # steps per seed of the fixed-budget comparison (Fig. 6c)
    overhead_batch_sizes: tuple[int, ...]  # B values timed by benchmarks.simulated.overhead.measure
    overhead_steps: int
    replay_seeds: int
    replay_steps: int
    replay_group_sizes: tuple[int, ...]
    decidability_prompts: int  # simulated prompts of the Fig. 3a curve


FULL = Settings(quick=False, seeds=20, steps=10, pool=20_000,
                distributions=("u_shaped", "hard", "beta_0.3", "beta_1_1"), group_sizes=(4, 8, 16, 32),
                tau_values=(0.1, 0.15, 0.25, 0.35, 0.45, 0.55, 0.6, 0.7),
                n0_values=(1, 2, 3, 4), fixed_budget_steps=5, overhead_batch_sizes=(16, 64, 256, 1024),
                overhead_steps=10, replay_seeds=20, replay_steps=10, replay_group_sizes=(4, 8, 16),
                decidability_prompts=20_000)
QUICK = Settings(quick=True, seeds=3, steps=2, pool=4_000, distributions=("u_shaped",), group_sizes=(4, 8),
                 tau_values=(0.25, 0.45, 0.6), n0_values=(1, 2), fixed_budget_steps=1, overhead_batch_sizes=(16, 64),
                 overhead_steps=1, replay_seeds=2, replay_steps=2, replay_group_sizes=(8,), decidability_prompts=2_000)


# ------------------------------------------------------------------------------------------------ results
@dataclass
class GridCell:
    """One (distribution, k) setting of section 1.

    ``summary``: allocator name -> :func:`summarize` dict. ``theory``: :func:`benchmarks.sim.theory` averaged over the
    seeds' pools (rollouts per step). ``ds_steps_over_cap``: share of DS's steps that cost more than SARA's budget
    cap (``DEFAULTS.budget_cap`` B k rollouts). ``sara_saving``: per-seed 1 - SARA/DS rollouts, and ``rows`` /
    ``traces``: the per-step records behind them; these three are held in memory only (plots), not in the JSON.
    """

    distribution: str
    k: int
    summary: dict[str, dict]
    theory: dict
    ds_steps_over_cap: float
    sara_saving: Interval | None = None
    rows: dict[str, list[dict]] = field(default_factory=dict, repr=False)
    traces: dict[str, list] = field(default_factory=dict, repr=False)


@dataclass
class SweepPoint:
    """SARA at one value of a swept parameter (U-shaped, k=8), paired by seed with DS of the grid.

    ``saving`` / ``token_saving``: 1 - SARA/DS rollouts / tokens per seed, mean and interval over seeds.
    """

    value: float
    summary: dict
    saving: Interval
    token_saving: Interval


@dataclass
class ReplayAtK:
    """Replay at one group size: allocator -> :func:`summarize` dict, and the bank's shape at that k."""

    summary: dict[str, dict]
    bank: dict


@dataclass
class ReplayResults:
    """Section 4: the bank's metadata, its shape at k=8 and one :class:`ReplayAtK` per group size."""

    meta: dict
    bank: dict
    by_k: dict[int, ReplayAtK]


@dataclass
class OverheadResults:
    """Section 5 (wall time, machine-dependent): :func:`benchmarks.simulated.overhead.summarize` bins, the per-step
    finish time per batch size (:func:`benchmarks.simulated.overhead.summarize_finish`), and the raw
    ``(prompts, seconds)`` rounds (memory only, for the plot)."""

    bins: list[dict]
    finish: list[dict]
    rounds: list = field(default_factory=list, repr=False)


@dataclass
class SuiteResults:
    """Everything ``RESULTS.md`` reports except section 6 (read from ``train_results.json`` when rendering).

    ``grid`` is keyed by ``(distribution, k)``; ``fixed_budget`` maps an allocator to its effective groups per step
    at DS's budget; ``decidability`` holds the Fig. 3a curves (:func:`benchmarks.sim.decidability`, lists of k
    values) and the number of simulated prompts. ``elapsed_s`` and ``generated`` are filled in by the caller.
    """

    settings: Settings
    command: str
    environment: dict
    grid: dict[tuple[str, int], GridCell]
    tau_sweep: list[SweepPoint]
    n0_sweep: list[SweepPoint]
    fixed_budget: dict[str, Interval]
    decidability: dict
    replay: ReplayResults | None
    overhead: OverheadResults | None
    elapsed_s: float = 0.0
    generated: str = ""

    @property
    def headline(self) -> GridCell:
        return self.grid[HEADLINE]

    @property
    def fixed_budget_rollouts(self) -> float:
        """Mean over seeds of the per-step budget of the fixed-budget comparison (DS's cost at the headline)."""
        return self.headline.summary["DS"]["rollouts"].mean

    # ---------------------------------------------------------------------------------------- JSON
    def to_json(self) -> dict:
        """The ``results.json`` document (plain JSON types; intervals as ``[mean, lo, hi, n]``)."""
        replay_json = None
        if self.replay is not None:
            replay_json = {
                "bank": self.replay.bank, "meta": self.replay.meta,
                "by_k": {str(k): {n: summary_json(s) for n, s in v.summary.items()}
                         for k, v in self.replay.by_k.items()},
                "bank_by_k": {str(k): v.bank for k, v in self.replay.by_k.items()}}
        return {
            "mode": "quick" if self.settings.quick else "full", "environment": self.environment,
            "command": self.command, "elapsed_s": self.elapsed_s,
            "grid": {f"{c.distribution}/k={c.k}": {"summary": {n: summary_json(s) for n, s in c.summary.items()},
                                                  "theory": c.theory, "ds_steps_over_cap": c.ds_steps_over_cap}
                     for c in self.grid.values()},
            "tau_sweep": [_sweep_json("tau_low", p) for p in self.tau_sweep],
            "n0_sweep": [_sweep_json("n0", p) for p in self.n0_sweep],
            "fixed_budget": {n: _interval_json(v) for n, v in self.fixed_budget.items()},
            "replay": replay_json,
            "overhead": None if self.overhead is None else {"bins": self.overhead.bins, "finish": self.overhead.finish},
            "generated": self.generated,
            "decidability": self.decidability,
        }

    @classmethod
    def from_json(cls, doc: dict) -> SuiteResults:
        """Inverse of :meth:`to_json` (the in-memory-only fields come back empty).

        Raises:
            KeyError: ``doc`` lacks a field the report needs (e.g. a ``results.json`` written before ``generated``,
                ``decidability``, ``ds_steps_over_cap``, ``token_saving``, ``bank_by_k`` and ``finish`` were saved).
        """
        grid = {}
        for key, cell in doc["grid"].items():
            dist, k = key.split("/k=")
            summaries = {n: _summary_from_json(s) for n, s in cell["summary"].items()}
            grid[(dist, int(k))] = GridCell(dist, int(k), summaries, cell["theory"], cell["ds_steps_over_cap"])
        rep = doc["replay"]
        replay_res = None if rep is None else ReplayResults(
            rep["meta"], rep["bank"],
            {int(k): ReplayAtK({n: _summary_from_json(s) for n, s in v.items()}, rep["bank_by_k"][k])
             for k, v in rep["by_k"].items()})
        ov = doc["overhead"]
        return cls(
            settings=QUICK if doc["mode"] == "quick" else FULL, command=doc["command"], environment=doc["environment"],
            grid=grid, tau_sweep=[_sweep_from_json("tau_low", p) for p in doc["tau_sweep"]],
            n0_sweep=[_sweep_from_json("n0", p) for p in doc["n0_sweep"]],
            fixed_budget={n: Interval(*v) for n, v in doc["fixed_budget"].items()},
            decidability=doc["decidability"], replay=replay_res,
            overhead=None if ov is None else OverheadResults(ov["bins"], ov["finish"]),
            elapsed_s=doc["elapsed_s"], generated=doc["generated"])


def _interval_json(iv: Interval | None) -> list | None:
    return None if iv is None else [iv.mean, iv.lo, iv.hi, iv.n]


def summary_json(summary: dict) -> dict:
    """A :func:`summarize` dict as JSON: each :class:`~benchmarks.common.Interval` as ``[mean, lo, hi, n]``."""
    return {k: (_interval_json(v) if isinstance(v, Interval) else v) for k, v in summary.items()}


def _summary_from_json(summary: dict) -> dict:
    # Intervals are the only list values of a summary.
    return {k: (Interval(*v) if isinstance(v, list) else v) for k, v in summary.items()}


def _sweep_json(parameter: str, point: SweepPoint) -> dict:
    return {parameter: point.value, "saving": _interval_json(point.saving),
            "token_saving": _interval_json(point.token_saving), **summary_json(point.summary)}


def _sweep_from_json(parameter: str, doc: dict) -> SweepPoint:
    doc = dict(doc)
    value, saving, token_saving = doc.pop(parameter), Interval(*doc.pop("saving")), Interval(*doc.pop("token_saving"))
    return SweepPoint(value, _summary_from_json(doc), saving, token_saving)


# ------------------------------------------------------------------------------------------------ aggregation
def _rate(rows: list[dict], num: str, den: str) -> np.ndarray | None:
    """Per-seed ratio of sums (e.g. wrong abandonments / abandoned); None if some seed has a zero denominator."""
    n = sim.per_seed(rows, num, "sum")
    d = sim.per_seed(rows, den, "sum")
    return None if (d == 0).any() else n / d


def summarize(rows: list[dict], ds_rows: list[dict]) -> dict:
    """Per-allocator summary over seeds (each seed: mean over its steps); ratios are paired by seed against DS.

    Returns:
        dict of :class:`~benchmarks.common.Interval` (per-step means of the :func:`benchmarks.sim.run_steps` keys,
        ``<key>_ratio`` against DS, and ``wrong_exact_rate`` / ``wrong_sampled_rate`` / ``peff_rate`` per abandoned
        prompt, None when some seed abandoned nothing), ``rounds_median`` / ``rounds_p90`` / ``rounds_max`` over
        steps, ``steps``, ``steps_filled``, ``unfilled_total`` and ``stops`` (stop reason -> steps).
    """
    out = {}
    for key in ("rollouts", "tokens", "rollouts_useful", "tokens_useful", "effective_fraction", "abandoned",
                "prompts_drawn", "rounds", "surplus", "active_left", "unfilled", "rollouts_surplus",
                "rollouts_active_left"):
        out[key] = mean_ci(sim.per_seed(rows, key))
    for key in ("rollouts", "tokens", "rollouts_useful", "tokens_useful"):
        out[f"{key}_ratio"] = mean_ci(sim.per_seed(rows, key) / sim.per_seed(ds_rows, key))
    rounds = np.array([r["rounds"] for r in rows])
    out["rounds_median"] = float(np.median(rounds))
    out["rounds_p90"] = float(np.percentile(rounds, 90))
    out["rounds_max"] = int(rounds.max())
    for name, num in (("wrong_exact_rate", "wrong_exact"), ("wrong_sampled_rate", "wrong_sampled"),
                      ("peff_rate", "sum_p_eff")):
        r = _rate(rows, num, "abandoned")
        out[name] = mean_ci(r) if r is not None else None
    out["steps"] = len(rows)
    out["steps_filled"] = int(sum(r["filled"] for r in rows))
    out["unfilled_total"] = int(sum(r["unfilled"] for r in rows))
    stops: dict[str, int] = {}
    for r in rows:
        stops[r["stop_reason"]] = stops.get(r["stop_reason"], 0) + 1
    out["stops"] = stops
    return out


def _saving(rows: list[dict], ds_rows: list[dict], key: str) -> Interval:
    return mean_ci(1.0 - sim.per_seed(rows, key) / sim.per_seed(ds_rows, key))


# ------------------------------------------------------------------------------------------------ sections
def _grid_variants(distribution: str, k: int) -> list[tuple[str, dict]]:
    variants = [("uniform", {}), ("DS", {"allocator": "dynamic_sampling", "budget_cap": DS_BUDGET_CAP}),
                ("SARA", {"allocator": "sara"}), (EARLY_COMMIT, {"allocator": "sara", "commit_min": 2})]
    if distribution == "u_shaped":
        variants += [(TO_DECISION, _SARA_TO_DECISION), (TO_DECISION_CARRY_OVER, _SARA_TO_DECISION_CARRY_OVER)]
    if (distribution, k) == HEADLINE:
        variants.append((CARRY_OVER, _SARA_CARRY_OVER))
    return variants


def run_grid(settings: Settings, log: Callable[[str], None]) -> dict[tuple[str, int], GridCell]:
    """Section 1: every distribution x k x allocator (+ SARA with commit_min=2 for the theorem check)."""
    grid = {}
    for distribution in settings.distributions:
        dist = sim.DISTRIBUTIONS[distribution]
        for k in settings.group_sizes:
            t0 = time.perf_counter()
            rows, traces = {}, {}
            for name, overrides in _grid_variants(distribution, k):
                cfg = dataclasses.replace(DEFAULTS, k=k, **({"allocator": "uniform"} | overrides))
                trace = (distribution, k) == HEADLINE and name in ("DS", "SARA")
                rows[name], traces[name] = sim.run_setting(dist, cfg, BATCH, range(settings.seeds), settings.steps,
                                                           pool=settings.pool, trace=trace)
            ds = rows["DS"]
            theories = [sim.theory(dist.sample(settings.pool, s), k, DEFAULTS.tau_low, BATCH)
                        for s in range(settings.seeds)]
            cap = DEFAULTS.budget_cap * BATCH * k
            cell = GridCell(distribution, k, summary={n: summarize(r, ds) for n, r in rows.items()},
                            theory={key: float(np.mean([t[key] for t in theories])) for key in theories[0]},
                            ds_steps_over_cap=float(np.mean([r["rollouts"] > cap for r in ds])),
                            sara_saving=_saving(rows["SARA"], ds, "rollouts"), rows=rows, traces=traces)
            grid[(distribution, k)] = cell
            log(f"  grid {distribution:9s} k={k:2d}: {time.perf_counter() - t0:5.1f}s  SARA/DS rollouts "
                f"{cell.summary['SARA']['rollouts_ratio'].mean:.3f}")
    return grid


def run_sweep(settings: Settings, grid: dict, parameter: str, values, log) -> list[SweepPoint]:
    """tau_low or n0 sweep of SARA on the U-shaped distribution at k=8, paired by seed with DS from the grid."""
    dist = sim.DISTRIBUTIONS["u_shaped"]
    ds = grid[HEADLINE].rows["DS"]
    out = []
    for value in values:
        cfg = dataclasses.replace(DEFAULTS, allocator="sara", k=8, **{parameter: value})
        rows, _ = sim.run_setting(dist, cfg, BATCH, range(settings.seeds), settings.steps, pool=settings.pool)
        out.append(SweepPoint(value, summarize(rows, ds), _saving(rows, ds, "rollouts"), _saving(rows, ds, "tokens")))
    log(f"  sweep {parameter}: {len(values)} values")
    return out


def run_fixed_budget(settings: Settings, grid: dict) -> dict[str, Interval]:
    """Fig. 6c: effective groups per step when each allocator gets DS's measured per-seed cost (U-shaped, k=8)."""
    ds_cost = sim.per_seed(grid[HEADLINE].rows["DS"], "rollouts")
    budget = {seed: float(ds_cost[i]) for i, seed in enumerate(range(settings.seeds))}
    yields = sim.fixed_budget_yield(sim.DISTRIBUTIONS["u_shaped"], 8, BATCH, range(settings.seeds),
                                    settings.fixed_budget_steps, budget, pool=settings.pool)
    return {name: mean_ci(v) for name, v in yields.items()}


def run_decidability(settings: Settings) -> dict:
    """Fig. 3a curves for the paper rule at k=8 on one U-shaped pool (lists indexed by n - 1)."""
    dec = sim.decidability(sim.DISTRIBUTIONS["u_shaped"].sample(settings.pool, 0), 8, DEFAULTS.tau_low,
                           num=settings.decidability_prompts)
    return {"prompts": settings.decidability_prompts, **{key: np.asarray(v).tolist() for key, v in dec.items()}}


def _replay_variants(k: int) -> list[tuple[str, dict]]:
    variants = [("uniform", {"allocator": "uniform"}), ("DS", {"allocator": "dynamic_sampling"}),
                ("SARA", {"allocator": "sara"})]
    if k == 8:
        variants += [(TO_DECISION, _SARA_TO_DECISION), (CARRY_OVER, _SARA_CARRY_OVER),
                     (TO_DECISION_CARRY_OVER, _SARA_TO_DECISION_CARRY_OVER)]
    return variants


def run_replay(settings: Settings, bank_path: Path) -> ReplayResults:
    """Section 4: every allocator on the replayed bank, per group size the bank can serve."""
    success, tokens, meta = replay.load_bank(bank_path)
    by_k = {}
    for k in settings.replay_group_sizes:
        if k > success.shape[1]:
            continue
        rows = {}
        for name, overrides in _replay_variants(k):
            cfg = dataclasses.replace(DEFAULTS, k=k, **overrides)
            rows[name] = []
            for seed in range(settings.replay_seeds):
                src = replay.ReplaySource(success, tokens, seed=seed)
                steps, _ = sim.run_steps(src, cfg, BATCH, settings.replay_steps, seed)
                for row in steps:
                    row["seed"] = seed
                rows[name].extend(steps)
        by_k[k] = ReplayAtK({n: summarize(r, rows["DS"]) for n, r in rows.items()}, replay.bank_summary(success, k))
    return ReplayResults(meta, replay.bank_summary(success, 8), by_k)


def run_overhead(settings: Settings) -> OverheadResults:
    """Section 5: allocator logic time per round (SARA, U-shaped, k=8)."""
    meas = overhead.measure(B_values=settings.overhead_batch_sizes, steps=settings.overhead_steps)
    return OverheadResults(overhead.summarize(meas), overhead.summarize_finish(meas), meas["rounds"])


def run_suite(settings: Settings, command: str, environment: dict, bank_path: Path, with_overhead: bool,
              log: Callable[[str], None]) -> SuiteResults:
    """Run sections 1-5 (replay only when ``bank_path`` exists; overhead only when ``with_overhead``)."""
    grid = run_grid(settings, log)
    tau_sweep = run_sweep(settings, grid, "tau_low", settings.tau_values, log)
    n0_sweep = run_sweep(settings, grid, "n0", settings.n0_values, log)
    fixed_budget = run_fixed_budget(settings, grid)
    log("  fixed budget done")
    decidability = run_decidability(settings)
    replay_res = None
    if bank_path.exists():
        replay_res = run_replay(settings, bank_path)
        log("  replay done")
    else:
        log(f"  replay skipped: no bank at {bank_path}")
    overhead_res = None
    if with_overhead:
        overhead_res = run_overhead(settings)
        log("  overhead done")
    return SuiteResults(settings, command, environment, grid, tau_sweep, n0_sweep, fixed_budget, decidability,
                        replay_res, overhead_res, generated=_dt.datetime.now().strftime("%Y-%m-%d %H:%M"))
