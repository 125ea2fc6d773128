# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Do the GPU survey's outcomes match vLLM on CPU?
``python -m benchmarks.real_task_survey.vllm_vs_survey [--prompts 24]``.

The replay bank of the real-training task (``benchmarks/real_task_survey/data/real_task_bank.npz``) was generated on
a GPU with transformers ``generate``; training here samples with vLLM's CPU engine. This script samples the same prompts
(the first ``--prompts`` of each family in ``--families``, cell of :data:`benchmarks.real_task.REAL_TASK`) with vLLM on
CPU (SmolLM2-135M from :func:`sara_trl.utils.smollm2_checkpoint`, float32, ``enforce_eager=True``, the same chat
template and token ids, temperature 0.6, top-p 1, no top-k, 96 new tokens, ``n`` = the survey's 32 samples), scores
them with the same checker and compares, per family, the success rate and the mean completion length in tokens
(counted as the survey counts: up to and including the first EOS).

Samples of one prompt are correlated, so the test pairs by prompt: the per-prompt differences (vLLM - survey) of
success rate and of mean length get a Student-t 95% interval and a paired t-test p-value over prompts. A pooled
two-proportion z-test (which ignores the pairing) is shown beside it. Writes ``vllm_vs_survey.json`` and
``VLLM_VS_SURVEY.md`` (default: this folder). Not yet run to completion: on this project's shared 2-core machine,
with other engines running, even 4 prompts x 32 samples did not finish in 7 minutes; run it on an idle machine.
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

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from benchmarks.common import md_table, mean_ci  # noqa: E402
from benchmarks.real_task import FAMILIES, REAL_TASK, load_survey_cell  # noqa: E402

HERE = Path(__file__).resolve().parent


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """Mean of ``a - b`` over prompts, its Student-t 95% interval and the paired t-test p-value."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    iv = mean_ci(d) if len(d) > 1 else None  # the benchmarks' one interval helper
    p = float(stats.ttest_rel(a, b).pvalue) if len(d) > 1 and d.std() > 0 else 1.0
    return {"mean": float(d.mean()), "lo": iv.lo if iv else float("nan"), "hi": iv.hi if iv else float("nan"), "p": p}


def two_proportion(x1: int, n1: int, x2: int, n2: int) -> float:
    """Two-sided p-value of the pooled two-proportion z-test (samples treated as independent)."""
    p = (x1 + x2) / (n1 + n2)
    se = np.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return 1.0 if se == 0 else float(2 * stats.norm.sf(abs(x1 / n1 - x2 / n2) / se))


def sample_vllm(families: list[str], prompts: int, n: int, seed: int) -> dict:
    """``{family: (success (prompts, n) int8, tokens (prompts, n) int64)}`` from vLLM on CPU."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    from benchmarks.quickstart_task.make_replay_bank import completion_lengths
    from sara_trl.rewards import numeric_reward
    from sara_trl.utils import smollm2_checkpoint

    _, _, meta = load_survey_cell(REAL_TASK.cell)
    model = smollm2_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(model)
    llm = LLM(model=model, dtype="float32", enforce_eager=True, seed=seed, max_model_len=512)
    params = SamplingParams(n=n, temperature=REAL_TASK.temperature, top_p=1.0, top_k=0,
                            max_tokens=REAL_TASK.max_completion_length)  # per-request seeds fail on CPU
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    requests, answers = [], []
    for f in families:
        for e, a in zip(meta["expressions"][f][:prompts], meta["answers"][f][:prompts]):
            chat = [{"role": "user", "content": REAL_TASK.instruction.format(expression=e)}]
            text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            requests.append(TokensPrompt(prompt_token_ids=tokenizer(text)["input_ids"]))
            answers.append(a)
    outs = llm.generate(requests, params)
    T = REAL_TASK.max_completion_length
    success, tokens = [], []
    for out, answer in zip(outs, answers):
        ids = np.full((n, T), pad if pad is not None else eos, np.int64)
        for j, o in enumerate(out.outputs):
            ids[j, : len(o.token_ids)] = o.token_ids
        tokens.append(completion_lengths(ids, eos, pad))
        rewards = numeric_reward([o.text for o in out.outputs], answer=[answer] * n)
        success.append(np.array([r == 1.0 for r in rewards], np.int8))
    success, tokens = np.array(success), np.array(tokens)
    return {f: (success[i * prompts:(i + 1) * prompts], tokens[i * prompts:(i + 1) * prompts])
            for i, f in enumerate(families)}


def compare(families: list[str], vllm: dict, prompts: int) -> dict:
    """Per family: survey vs vLLM success rate and mean length, paired by prompt."""
    s_all, t_all, meta = load_survey_cell(REAL_TASK.cell)
    names = list(FAMILIES)
    out = {}
    for f in families:
        vs, vt = vllm[f]
        ss, st = s_all[names.index(f), :prompts], t_all[names.index(f), :prompts].astype(np.int64)
        out[f] = {"prompts": prompts, "samples": int(vs.shape[1]),
                  "success_vllm": float(vs.mean()), "success_survey": float(ss.mean()),
                  "success_diff": paired(vs.mean(1), ss.mean(1)),
                  "success_two_proportion_p": two_proportion(int(vs.sum()), vs.size, int(ss.sum()), ss.size),
                  "tokens_vllm": float(vt.mean()), "tokens_survey": float(st.mean()),
                  "tokens_diff": paired(vt.mean(1), st.mean(1)),
                  "capped_vllm": float(np.mean(vt >= REAL_TASK.max_completion_length)),
                  "capped_survey": float(np.mean(st >= REAL_TASK.max_completion_length))}
    return out


def render(doc: dict) -> str:
    rows = []
    for f, c in doc["families"].items():
        sd, td = c["success_diff"], c["tokens_diff"]
        rows.append([f, f"{c['prompts']} x {c['samples']}", f"{c['success_survey']:.3f}", f"{c['success_vllm']:.3f}",
                     f"{sd['mean']:+.3f} [{sd['lo']:+.3f}, {sd['hi']:+.3f}]", f"{sd['p']:.2f}",
                     f"{c['success_two_proportion_p']:.2f}", f"{c['tokens_survey']:.1f}", f"{c['tokens_vllm']:.1f}",
                     f"{td['mean']:+.1f} [{td['lo']:+.1f}, {td['hi']:+.1f}]", f"{td['p']:.2f}"])
    return "\n".join([
        "# GPU survey (transformers) vs vLLM on CPU: same prompts, same sampling settings",
        "",
        f"Generated by `{doc['command']}` on {doc['machine']} ({doc['date']}, vLLM {doc['versions']['vllm']}, "
        f"transformers {doc['versions']['transformers']}, torch {doc['versions']['torch']}; sampling wall-clock "
        f"{doc['generate_s']:.0f} s, not a timing result). Survey: cell `{doc['cell']}` of "
        "`benchmarks/real_task_survey/data/survey/` (H200, transformers `generate`, float32, no TF32). vLLM: the CPU "
        "engine, float32, `enforce_eager=True`, same chat template and prompt token ids, temperature "
        f"{doc['temperature']:g}, top-p 1, no top-k, {doc['max_tokens']} new tokens. Differences are vLLM - survey, "
        "per prompt, then a Student-t 95% interval and a paired t-test over prompts; the two-proportion p-value "
        "treats the samples as independent (too optimistic when prompts differ).",
        "",
        md_table(["family", "prompts x samples", "success (survey)", "success (vLLM)", "difference [95%]",
                  "paired p", "two-proportion p", "tokens (survey)", "tokens (vLLM)", "difference [95%]",
                  "paired p"], rows),
        "",
    ])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=["add_0_2", "sub_0_20"], choices=list(FAMILIES))
    ap.add_argument("--prompts", type=int, default=24, help="prompts per family (the bank's first ones)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    _, _, meta = load_survey_cell(REAL_TASK.cell)
    if not 2 <= args.prompts <= meta["prompts_per_family"]:
        ap.error(f"--prompts must lie in [2, {meta['prompts_per_family']}]")
    t0 = time.perf_counter()
    vllm_out = sample_vllm(args.families, args.prompts, meta["k"], args.seed)
    generate_s = time.perf_counter() - t0
    import torch
    import transformers
    import vllm

    doc = {"command": "python -m benchmarks.real_task_survey.vllm_vs_survey " + " ".join(argv or sys.argv[1:]),
           "cell": REAL_TASK.cell, "temperature": REAL_TASK.temperature, "max_tokens": REAL_TASK.max_completion_length,
           "families": compare(args.families, vllm_out, args.prompts), "generate_s": generate_s,
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
           "versions": {"vllm": vllm.__version__, "transformers": transformers.__version__,
                        "torch": torch.__version__}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vllm_vs_survey.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "VLLM_VS_SURVEY.md").write_text(render(doc))
    print(render(doc))
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
