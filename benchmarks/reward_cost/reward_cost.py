r"""Wall-clock cost of one reward pass of :func:`sara_trl.rewards.math_reward`, per call and per completion:
``python -m benchmarks.reward_cost.reward_cost --data_dir DIR [--problems 250] [--repeats 2] [--out FILE]`` (default
``--out``: ``reward_cost.json`` in this folder).

Input to the reward-scoring term of the latency model (:class:`benchmarks.simulator.latency.RewardCost`): a reward
pass of ``n`` completions is modelled as ``per_call + per_item * n`` seconds.

Completions: for each of the first ``--problems`` problems of MATH-500 (``math500.jsonl`` in the folder given as
``--data_dir``, required), one correct and one wrong completion, shaped like an R1-distill
completion: a reasoning block (``<think>`` ... ``</think>``: the problem's reference solution, repeated to about
``--chars`` characters, ~1,500 tokens; the boxes inside it are not answers) followed by "The final answer is
$\boxed{X}$", X the problem's gold answer (correct) or the next problem's gold answer (wrong, unless the two golds
are equal). The gold column is the dataset's ``answer``.

Timing: the completions are shuffled once (fixed seed) and cut into calls of ``n`` = 1, 8 and 64 completions (64, 32
and 7 calls per repeat, ``--repeats`` repeats); each call is timed with ``time.perf_counter`` around
``math_reward(completions, answer=...)``. Before every call the verifier's comparison cache is emptied
(:func:`sara_trl.rewards.math_verifier.clear_caches`): "cold", every (prediction, gold) pair is compared again.
Before each batch size and repeat the verifier's worker processes are restarted
(:func:`sara_trl.rewards.shutdown_verifiers`) and warmed on one throw-away comparison (not timed), so no batch size
profits from parses made for another; within a repeat the workers keep the golds and predictions they parsed (a
correct completion's answer is its gold's string, as in training where a prompt's k completions share one gold).
A last pass repeats the n = 8 calls without clearing ("warm": every pair is a cache hit; what is left is answer
extraction and normalization in the calling process), a lower bound. The load average (``/proc/loadavg``) is read
before and after; the machine is shared, so the figures are an upper bound of what an idle core pays. Fit:
non-negative least squares of the cold call times on ``n`` gives ``per_call`` (intercept) and ``per_item``
(slope), in seconds.
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

ROOT = Path(__file__).resolve().parents[2]

BATCHES = (1, 8, 64)
CALLS = {1: 64, 8: 32, 64: 7}  # timed calls per batch size and repeat (each a fresh slice of the completions)


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages (``/proc/loadavg``)."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:  # pragma: no cover - not Linux
        return [float(x) for x in os.getloadavg()]


def build_completions(rows: list[dict], chars: int) -> tuple[list[str], list[str], list[bool]]:
    """One correct and one wrong completion per row: (texts, golds, intended correctness)."""
    texts, golds, intended = [], [], []
    for i, row in enumerate(rows):
        gold = row["answer"]
        wrong = rows[(i + 1) % len(rows)]["answer"]
        solution = row.get("solution") or row["problem"]
        reps = max(1, -(-chars // max(1, len(solution))))
        think = "<think>\n" + "\n\n".join([solution] * reps)[:chars] + "\n</think>\n\n"
        for answer, ok in ((gold, True), (wrong, wrong == gold)):
            texts.append(think + f"The final answer is $\\boxed{{{answer}}}$.")
            golds.append(gold)
            intended.append(ok)
    return texts, golds, intended


def fit_call_cost(n, seconds) -> dict:
    """Least squares ``seconds ~ per_call + per_item * n`` with both coefficients >= 0 (``scipy.optimize.nnls``;
    a call cannot cost less than nothing), in seconds, with the rms residual."""
    from scipy.optimize import nnls

    n = np.asarray(n, float)
    y = np.asarray(seconds, float)
    (per_call, per_item), _ = nnls(np.c_[np.ones_like(n), n], y)
    rms = float(np.sqrt(np.mean((per_call + per_item * n - y) ** 2)))
    return {"per_call": float(per_call), "per_item": float(per_item), "rms_seconds": rms}


def summarize(seconds: list[float], n: int) -> dict:
    s = np.asarray(seconds, float)
    return {"batch": n, "calls": int(s.size), "ms_per_call_mean": float(s.mean() * 1e3),
            "ms_per_call_median": float(np.median(s) * 1e3), "ms_per_call_p90": float(np.quantile(s, 0.9) * 1e3),
            "ms_per_call_min": float(s.min() * 1e3), "ms_per_call_max": float(s.max() * 1e3),
            "ms_per_completion_mean": float(s.mean() * 1e3 / n)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=250, help="MATH-500 problems (2 completions each)")
    ap.add_argument("--repeats", type=int, default=2, help="passes over each batch size, each on fresh workers")
    ap.add_argument("--chars", type=int, default=6000, help="characters of the reasoning block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "reward_cost" / "reward_cost.json")
    ap.add_argument("--data_dir", type=Path, default=None, help="folder holding math500.jsonl (required)")
    args = ap.parse_args(argv)
    if args.data_dir is None or not (args.data_dir / "math500.jsonl").is_file():
        ap.error(f"--data_dir DIR must name a folder holding math500.jsonl (got {args.data_dir})")

    from sara_trl.rewards import math_reward, shutdown_verifiers
    from sara_trl.rewards.math_verifier import clear_caches, default_num_workers

    path = args.data_dir / "math500.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][: args.problems]
    texts, golds, intended = build_completions(rows, args.chars)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(texts))
    texts = [texts[i] for i in order]
    golds = [golds[i] for i in order]
    intended = [intended[i] for i in order]

    def restart_pool() -> float:
        """Fresh verifier workers (empty parse caches), started and warmed on a throw-away comparison."""
        shutdown_verifiers()
        clear_caches()
        t0 = time.perf_counter()
        math_reward([r"$\boxed{x^2+1}$"], answer=[r"\frac{1}{2}"])
        return time.perf_counter() - t0

    load_before = loadavg()
    startup = []
    cold: dict[int, list[float]] = {}
    rewards: list = [None] * len(texts)
    for n in BATCHES:
        cold[n] = []
        for _ in range(args.repeats):
            startup.append(restart_pool())
            for j in range(CALLS[n]):
                lo = (j * n) % len(texts)
                idx = [(lo + i) % len(texts) for i in range(n)]
                clear_caches()
                t = time.perf_counter()
                out = math_reward([texts[i] for i in idx], answer=[golds[i] for i in idx])
                cold[n].append(time.perf_counter() - t)
                for i, r in zip(idx, out):
                    rewards[i] = r
    warm = []
    for j in range(CALLS[8]):
        idx = [(j * 8 + i) % len(texts) for i in range(8)]
        t = time.perf_counter()
        math_reward([texts[i] for i in idx], answer=[golds[i] for i in idx])
        warm.append(time.perf_counter() - t)
    load_after = loadavg()

    scored = [r for r in rewards if r is not None]
    agree = sum(int((r == 1.0) == ok) for r, ok in zip(rewards, intended) if r is not None)
    ns = [n for n in BATCHES for _ in cold[n]]
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.reward_cost.reward_cost " + " ".join(argv if argv is not None
                                                                         else sys.argv[1:]),
        "environment": environment(),
        "load_average_before": load_before, "load_average_after": load_after,
        "verifier_workers": default_num_workers(),
        "settings": {"problems": len(rows), "completions": len(texts), "chars_reasoning": args.chars,
                     "mean_chars": float(np.mean([len(t) for t in texts])), "seed": args.seed,
                     "calls_per_batch_and_repeat": {str(k): v for k, v in CALLS.items()},
                     "repeats": args.repeats},
        "pool_startup_s": startup,  # per batch size: restart + first comparison, not in the timings
        "verdicts": {"scored": len(scored), "unscorable": len(texts) - len(scored),
                     "correct": int(sum(r == 1.0 for r in scored)), "agree_with_construction": agree},
        "cold": [summarize(cold[n], n) for n in BATCHES],
        "warm_batch8": summarize(warm, 8),
        "fit": fit_call_cost(ns, [s for n in BATCHES for s in cold[n]]),
        "raw_seconds": {str(n): cold[n] for n in BATCHES},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["cold"]:
        print(f"n={row['batch']:3d}: {row['ms_per_call_mean']:.1f} ms per call (median "
              f"{row['ms_per_call_median']:.1f}), {row['ms_per_completion_mean']:.2f} ms per completion")
    print("warm n=8:", f"{result['warm_batch8']['ms_per_call_mean']:.1f} ms per call")
    print("fit:", result["fit"], "load", load_before, "->", load_after, "verdicts", result["verdicts"])
    return result


if __name__ == "__main__":
    main()
