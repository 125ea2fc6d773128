r"""Data report: do the gold answers of the math benchmarks verify against themselves with ``sara_trl.rewards``?

For every record of each benchmark file in the shared data directory this script scores

* **self**: the gold answer written as a correct completion (``... The final answer is $\boxed{<gold>}$``) against
  the gold answer; the share that scores 1.0 is the share of records the verifier can grade at all;
* **perturbed**: a clearly wrong answer built from the gold (plain numbers + 1, otherwise the last digit changed,
  digit-free answers changed to another value) against the gold; it must score 0.0, otherwise the gold parses to
  something degenerate (e.g. only a prefix of the expression) and the verifier would accept wrong answers too;
* for Minerva, each entry of ``answer_alternatives`` against the gold: alternatives that do not verify are listed,
  because accepting them would grade a different value as correct.

Every failure is listed in the Markdown report. Run from the repository root::

    python -m benchmarks.data_report.data_report --data_dir DIR  # MATH500, AIME24, AMC23, GSM8K, Minerva, OlympiadBench
    python -m benchmarks.data_report.data_report --data_dir DIR --include-train  # + MATH train (7,500; minutes)

``--data_dir`` (required) is a folder holding the full benchmark files under their standard names
(:data:`sara_trl.data.LOCAL_FILES`: ``math500.jsonl``, ``aime24.jsonl``, ...). Output:
``benchmarks/data_report/DATA_REPORT.md``
(``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from decimal import Decimal
from pathlib import Path

from sara_trl.rewards import MathReward, Status, normalize_math_answer

DATASETS = [
    ("MATH500", "math500.jsonl"),
    ("AIME24", "aime24.jsonl"),
    ("AMC23", "amc23.jsonl"),
    ("GSM8K test", "gsm8k_test.jsonl"),
    ("Minerva", "minerva_math.jsonl"),
    ("OlympiadBench", "olympiadbench.jsonl"),
]
TRAIN = [("MATH train", "math_train.jsonl")]


def completion(answer: str) -> str:
    return f"Step by step reasoning. The final answer is $\\boxed{{{answer}}}$."


_NUM = re.compile(r"^\s*-?\d+(\.\d+)?\s*$")


def perturb(gold: str) -> str:
    """A clearly wrong answer derived from ``gold`` (see the module docstring)."""
    g = gold.strip()
    if _NUM.match(g):
        return str(Decimal(g) + 1)
    unit = re.search(r"\s*\\(?:mbox|text|mathrm)\s*\{[^{}]*\}(\^\d)?$", g)
    if unit and unit.start() > 0 and re.search(r"\d", g[: unit.start()]):
        return perturb(g[: unit.start()]) + g[unit.start() :]
    digits = list(re.finditer(r"\d", g))
    if digits:
        m = digits[-1]
        d = int(m.group(0))
        return g[: m.start()] + str((d + 1) % 10 if d else 7) + g[m.end() :]
    if re.fullmatch(r"\(?[A-E]\)?|\\text\{\(?[A-E]\)?\}", g):
        c = re.search(r"[A-E]", g).group(0)
        return "ABCDE"[("ABCDE".index(c) + 1) % 5]
    return f"{g}+1"


def read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def check(name: str, records: list[dict], verifier: MathReward) -> dict:
    golds = [r["answer"] for r in records]
    t0 = time.perf_counter()
    self_v = verifier.verdicts([completion(g) for g in golds], golds)
    wrongs = [perturb(g) for g in golds]
    bad_v = verifier.verdicts([completion(w) for w in wrongs], golds)
    seconds = time.perf_counter() - t0
    out = {
        "name": name,
        "n": len(records),
        "seconds": seconds,
        "self": {s.value: sum(v.status is s for v in self_v) for s in Status},
        "perturbed": {s.value: sum(v.status is s for v in bad_v) for s in Status},
        "self_failures": [
            (r.get("id", r.get("unique_id", i)), g, normalize_math_answer(g), v.status.value, v.reason)
            for i, (r, g, v) in enumerate(zip(records, golds, self_v))
            if v.status is not Status.CORRECT
        ],
        "perturbed_failures": [
            (r.get("id", r.get("unique_id", i)), g, w, v.status.value)
            for i, (r, g, w, v) in enumerate(zip(records, golds, wrongs, bad_v))
            if v.status is not Status.WRONG
        ],
    }
    if records and "answer_alternatives" in records[0]:
        pairs = [(r, a) for r in records for a in (r.get("answer_alternatives") or [])]
        alt_v = verifier.verdicts([completion(a) for _, a in pairs], [r["answer"] for r, _ in pairs])
        out["alternatives"] = {
            "n": len(pairs),
            "records_with": sum(1 for r in records if r.get("answer_alternatives")),
            "agree": sum(v.status is Status.CORRECT for v in alt_v),
            "disagree": [
                (r.get("id"), r["answer"], a, v.status.value)
                for (r, a), v in zip(pairs, alt_v)
                if v.status is not Status.CORRECT
            ],
        }
    if records and "is_multiple_answer" in records[0]:
        out["multiple_answer"] = sum(bool(r.get("is_multiple_answer")) for r in records)
        out["with_unit"] = sum(bool(r.get("unit")) for r in records)
        out["with_tolerance"] = [(r.get("id"), r["answer"], r.get("error")) for r in records if r.get("error")]
    return out


def measure_overhead(data_dir: Path, n: int = 200, k: int = 8) -> dict:
    """Wall-clock cost of the bounded-time machinery (seconds; noisy on a shared machine).

    * ``cold_start``: first call of a fresh pool (worker interpreters start, import math-verify, warm up);
    * ``pool`` vs ``inline``: ``n`` MATH500 comparisons (gold vs. its own correct completion) through the worker
      processes vs. math-verify in the calling thread (``num_workers=0``, no hard limit), both with cold caches;
    * ``message_us``: pool messaging cost per task (trivial tasks sent 16 per message, as ``math_reward`` does);
    * ``grpo_batch``: ``n // k`` prompts x ``k`` completions (half right, half wrong), one call, as a trainer sends it;
    * ``fast_path_us``: microseconds per completion for integer answers (GSM8K), which never reach a worker.
    """
    from sara_trl.rewards import clear_caches, get_pool, shutdown_verifiers
    from sara_trl.rewards.math_verifier import default_num_workers

    golds = [r["answer"] for r in read(data_dir / "math500.jsonl")][:n]
    comps = [completion(g) for g in golds]
    out = {"n": n, "k": k}
    shutdown_verifiers()
    clear_caches()
    pooled = MathReward()
    warm = ([completion(str(i)) for i in range(8)], [rf"\frac{{{i}}}{{7}}" for i in range(8)])
    t0 = time.perf_counter()
    pooled(*warm)  # starts every worker
    out["cold_start"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pooled(comps, answer=golds)
    out["pool"] = time.perf_counter() - t0
    # messaging alone: trivial tasks in messages of 16, as math_reward sends them
    pool = get_pool(out_workers := default_num_workers(), pooled.timeout_s, pooled.grace_s, None, None)
    pool.run(repr, [(0,)] * out_workers)
    m = 2000
    t0 = time.perf_counter()
    pool.run(repr, [(i,) for i in range(m)], groups=[list(range(i, min(i + 16, m))) for i in range(0, m, 16)])
    out["message_us"] = 1e6 * (time.perf_counter() - t0) / m
    pool.close()
    clear_caches()
    inline = MathReward(num_workers=0)
    inline(*warm)
    t0 = time.perf_counter()
    inline(comps, answer=golds)
    out["inline"] = time.perf_counter() - t0
    clear_caches()
    shutdown_verifiers()
    pooled(*warm)
    group_golds = golds[: n // k]
    batch_c, batch_g = [], []
    for g in group_golds:
        for j in range(k):
            batch_c.append(completion(g if j % 2 == 0 else perturb(g)))
            batch_g.append(g)
    t0 = time.perf_counter()
    pooled(batch_c, answer=batch_g)
    out["grpo_batch"] = time.perf_counter() - t0
    ints = [r["answer"] for r in read(data_dir / "gsm8k_test.jsonl")]
    t0 = time.perf_counter()
    pooled([completion(a) for a in ints], answer=ints)
    out["fast_path_us"] = 1e6 * (time.perf_counter() - t0) / len(ints)
    out["workers"] = default_num_workers()
    return out


def pct(a: int, n: int) -> str:
    return f"{100.0 * a / n:.1f} %" if n else "n/a"


def esc(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render(results: list[dict], data_dir: Path, total_s: float, overhead: dict | None = None) -> str:
    lines = [
        "# Data report: gold answers vs. `sara_trl.rewards.math_reward`",
        "",
        "Generated by `python -m benchmarks.data_report.data_report --data_dir DIR` (do not edit by hand).",
        "Each gold answer is",
        "written as a correct completion (`... The final answer is $\\boxed{<gold>}$`) and scored against itself",
        "(**self**), and a clearly wrong answer derived from it (plain numbers + 1, otherwise the last digit changed)",
        "is scored against it (**perturbed**, must be wrong). A self-verify failure means the verifier cannot grade",
        "that record; a perturbed answer accepted as correct means the gold parses to something degenerate.",
        "",
        f"Data: `{data_dir.name}/` files; Python {platform.python_version()}; total {total_s:.1f} s.",
        "",
        "How to read the failure lists: `unparseable_gold` means math-verify cannot read the gold answer even after",
        "`normalize_math_answer`, so `math_reward` returns None (unscorable; the allocator ignores such rollouts).",
        "`timeout` means sympy needed more than the soft limit (5 s) for the comparison; the reward is None and the",
        "event is counted in `sara_trl.rewards.stats()`. A perturbed answer reported `correct` is a false positive",
        "unless the perturbation only changed a redundant second form of the answer (e.g. `\\dfrac23 \\approx 0.68`).",
        "",
        "| dataset | records | self-verify correct | unparseable gold | timeout/error | perturbed rejected | seconds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        n = r["n"]
        s, p = r["self"], r["perturbed"]
        lines.append(
            f"| {r['name']} | {n} | {s['correct']} ({pct(s['correct'], n)}) | {s['unparseable_gold']} | "
            f"{s['timeout'] + s['error']} | {p['wrong']} ({pct(p['wrong'], n)}) | {r['seconds']:.1f} |"
        )
    if overhead:
        o = overhead
        lines += [
            "",
            "## Verifier overhead",
            "",
            f"Wall-clock seconds on this machine ({o['workers']} verifier workers; shared CPU, so treat as rough):",
            "",
            "| measurement | seconds |",
            "| --- | ---: |",
            f"| cold start of the worker pool (first call) | {o['cold_start']:.2f} |",
            f"| {o['n']} MATH500 comparisons, worker processes (hard time limit) | {o['pool']:.2f} |",
            f"| {o['n']} MATH500 comparisons, inline in the calling thread (no hard limit) | {o['inline']:.2f} |",
            f"| pool messaging per task (trivial tasks, 16 per message) | {o['message_us'] / 1e6:.6f} |",
            f"| GRPO-like batch: {o['n'] // o['k']} prompts x {o['k']} completions, one call | {o['grpo_batch']:.2f} |",
            f"| integer answers (fast path, no worker), per completion | {o['fast_path_us'] / 1e6:.6f} |",
        ]
    for r in results:
        lines += ["", f"## {r['name']}", ""]
        if r["self_failures"]:
            lines += [
                "Self-verify failures:",
                "",
                "| id | gold | normalized | status | reason |",
                "| --- | --- | --- | --- | --- |",
            ]
            lines += [
                f"| {esc(a)} | `{esc(b)}` | `{esc(c)}` | {d} | {esc(e)} |" for a, b, c, d, e in r["self_failures"]
            ]
        else:
            lines.append(f"All {r['n']} gold answers verify against themselves.")
        lines.append("")
        if r["perturbed_failures"]:
            lines += [
                "Perturbed answers not rejected:",
                "",
                "| id | gold | perturbed | status |",
                "| --- | --- | --- | --- |",
            ]
            lines += [f"| {esc(a)} | `{esc(b)}` | `{esc(c)}` | {d} |" for a, b, c, d in r["perturbed_failures"]]
        else:
            lines.append(f"All {r['n']} perturbed answers are rejected.")
        if "alternatives" in r:
            a = r["alternatives"]
            lines += [
                "",
                f"`answer_alternatives`: {a['n']} alternatives on {a['records_with']} records; {a['agree']} "
                f"({pct(a['agree'], a['n'])}) verify against the gold answer. The ones that do not are listed below;",
                "many are answers to a *different* sub-question of the same problem or values that differ "
                "numerically, so `load_minerva()` leaves them out unless `alternatives=True` is passed.",
                "",
                "| id | gold | alternative | status |",
                "| --- | --- | --- | --- |",
            ]
            lines += [f"| {esc(i)} | `{esc(g)}` | `{esc(x)}` | {s} |" for i, g, x, s in a["disagree"]]
        if "multiple_answer" in r:
            lines += [
                "",
                f"Multiple-answer records: {r['multiple_answer']} (compared as sets/tuples by math-verify); records "
                f"with a unit outside the answer: {r['with_unit']}; records with a numeric tolerance "
                "(not applied: math-verify compares numbers to 6 decimal places, and `math_reward` additionally "
                "requires a relative agreement of 1e-4 for numbers below 1 in magnitude): "
                + (", ".join(f"{esc(i)} (`{esc(g)}`, error {esc(e)})" for i, g, e in r["with_tolerance"]) or "none")
                + ".",
            ]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "DATA_REPORT.md"))
    ap.add_argument("--include-train", action="store_true", help="also check MATH train (7,500 records)")
    ap.add_argument("--timeout", type=float, default=5.0, help="soft verifier limit per comparison, seconds")
    ap.add_argument("--no-overhead", action="store_true", help="skip the verifier overhead measurement")
    ap.add_argument("--data_dir", type=Path, default=None,
                    help="folder holding the full benchmark files (math500.jsonl, aime24.jsonl, ...; required)")
    args = ap.parse_args(argv)
    todo = DATASETS + (TRAIN if args.include_train else [])
    if args.data_dir is None:
        ap.error("--data_dir DIR is required: the folder holding " + ", ".join(f for _, f in todo))
    data_dir = args.data_dir.resolve()
    missing = [f for _, f in todo if not (data_dir / f).is_file()]
    if missing:
        ap.error(f"--data_dir {args.data_dir}: missing {', '.join(missing)}")
    verifier = MathReward(timeout_s=args.timeout)
    t0 = time.perf_counter()
    results = []
    for name, fname in todo:
        res = check(name, read(data_dir / fname), verifier)
        s = res["self"]
        print(
            f"{name:15s} n={res['n']:5d} self-correct={s['correct']:5d} unparseable={s['unparseable_gold']:3d} "
            f"timeout/error={s['timeout'] + s['error']:3d} perturbed-rejected={res['perturbed']['wrong']:5d} "
            f"({res['seconds']:.1f} s)",
            flush=True,
        )
        results.append(res)
    overhead = None if args.no_overhead else measure_overhead(data_dir)
    if overhead:
        print("overhead:", {k: round(v, 4) if isinstance(v, float) else v for k, v in overhead.items()})
    Path(args.out).write_text(render(results, data_dir, time.perf_counter() - t0, overhead), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
