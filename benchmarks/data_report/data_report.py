r"""Data report: do the gold answers of the benchmark files verify against themselves with ``sara_trl.rewards``?

For every distinct gold answer of each benchmark file in the data directory (the ten files of
:data:`sara_trl.data.LOCAL_FILES`; a Countdown row's ``target`` is checked as a number gold) this script runs

* the **gold self-check** (:mod:`sara_trl.rewards.selfcheck`): the gold written as a correct completion
  (``... The final answer is $\boxed{<gold>}$.``) must grade correct against the gold, as it is and as each common
  re-writing a model produces (without or with ``\text{}``, ``\left(``/``\right)``, ``\dfrac``/``\frac``, a
  trailing period, a trailing ``\%`` dropped or written ``%``); every failing pair is listed, by kind;
* **perturbed**: a clearly wrong answer built from the gold (plain numbers + 1, otherwise the last digit changed,
  digit-free answers changed to another value) must score 0.0, otherwise the gold parses to something degenerate
  (e.g. only a prefix of the expression) and the verifier would accept wrong answers too;
* the **agreement with math-verify** on its own (``verify(parse(gold), parse(completion))``) on all those pairs:
  where both can grade a pair, how often they disagree and in which kinds;
* for Minerva, each entry of ``answer_alternatives`` against the gold: alternatives that do not verify are listed,
  because accepting them would grade a different value as correct.

Run from the repository root::

    python -m benchmarks.data_report.data_report --data_dir DIR  # all ten files (minutes)
    python -m benchmarks.data_report.data_report --data_dir DIR --no-train  # without MATH train and MATH train 12k
    python -m benchmarks.data_report.data_report --data_dir DIR --self-check-only --json OUT.json  # counts only
    python -m benchmarks.data_report.data_report --data_dir DIR --before OUT.json  # compare with an earlier run

``--data_dir`` (required) is a folder holding the full benchmark files under their standard names
(``math500.jsonl``, ``aime24.jsonl``, ...). Output: ``benchmarks/data_report/DATA_REPORT.md`` (``--out`` to change);
``--json`` also writes the self-check and agreement counts. The committed ``self_check_before.json`` holds the
counts of the verifier before issue 55 (the same self-check on the same files), ``SELF_CHECK_BEFORE.md`` the
failures that run listed, and ``data_report.json`` the counts of the committed report.
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
from sara_trl.rewards.selfcheck import REWRITE_KINDS, gold_rewrites, gold_self_check, math_verify_agreement

DATASETS = [
    ("MATH500", "math500.jsonl"),
    ("AIME24", "aime24.jsonl"),
    ("AMC23", "amc23.jsonl"),
    ("GSM8K test", "gsm8k_test.jsonl"),
    ("Minerva", "minerva_math.jsonl"),
    ("OlympiadBench", "olympiadbench.jsonl"),
    ("Countdown 3to4 (train head)", "countdown_3to4_train_head.jsonl"),
    ("Countdown TinyZero test", "countdown_tinyzero_test.jsonl"),
]
TRAIN = [("MATH train", "math_train.jsonl"), ("MATH train 12k", "math_train_12k.jsonl")]


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


def gold_of(record: dict) -> str:
    """The gold answer of a record: ``answer``, or a Countdown row's ``target`` as a number."""
    return str(record["answer"]) if "answer" in record else str(record["target"])


def check(name: str, records: list[dict], verifier: MathReward, self_check_only: bool = False,
          agreement: bool = False) -> dict:
    golds = [gold_of(r) for r in records]
    uniq = list(dict.fromkeys(golds))
    t0 = time.perf_counter()
    n_pairs, failures = gold_self_check(uniq, verifier)
    by_kind = {k: 0 for k in REWRITE_KINDS}
    for f in failures:
        by_kind[f.kind] += 1
    failing = sorted({f.index for f in failures})
    self_status = {uniq[f.index]: f.status for f in failures if f.kind == "self"}
    out = {
        "name": name,
        "n": len(records),
        "unique": len(uniq),
        "pairs": n_pairs,
        "failing_golds": len(failing),
        "failing_records": sum(1 for g in golds if g in {uniq[i] for i in failing}),
        "by_kind": by_kind,
        "self_correct": sum(1 for g in golds if g not in self_status),
        "self_unparseable": sum(1 for g in golds if self_status.get(g) == Status.UNPARSEABLE_GOLD.value),
        "self_timeout": sum(1 for g in golds if self_status.get(g) in (Status.TIMEOUT.value, Status.ERROR.value)),
        "failures": [
            (_record_id(records, golds, f.gold), f.gold, f.kind, f.prediction, normalize_math_answer(f.prediction),
             f.status, f.reason)
            for f in failures
        ],
    }
    if self_check_only:
        out["seconds"] = time.perf_counter() - t0
        return out
    wrongs = [perturb(g) for g in uniq]
    bad_v = verifier.verdicts([completion(w) for w in wrongs], uniq)
    out["perturbed_rejected"] = sum(v.status is Status.WRONG for v in bad_v)
    out["perturbed_failures"] = [
        (_record_id(records, golds, g), g, w, v.status.value)
        for g, w, v in zip(uniq, wrongs, bad_v)
        if v.status is not Status.WRONG
    ]
    out["seconds"] = time.perf_counter() - t0
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
    if agreement:
        t1 = time.perf_counter()
        labelled = [(kind, g, text) for g in uniq for kind, text in gold_rewrites(g)]
        labelled += [("perturbed", g, w) for g, w in zip(uniq, wrongs)]
        agr = math_verify_agreement([(g, a) for _, g, a in labelled], verifier)
        agr["period_both"] = sum(1 for (k, _, _), both in zip(labelled, agr.pop("graded")) if k == "period" and both)
        agr["by_kind"] = {}
        for j, g, a, ours, mv in agr["examples"]:
            key = f"{labelled[j][0]}: ours {ours}, math-verify {mv}"
            agr["by_kind"][key] = agr["by_kind"].get(key, 0) + 1
        agr["examples"] = [(labelled[j][0], g, a, ours, mv) for j, g, a, ours, mv in agr["examples"]]
        agr["seconds"] = time.perf_counter() - t1
        out["agreement"] = agr
    return out


def _record_id(records: list[dict], golds: list[str], gold: str):
    i = golds.index(gold)
    r = records[i]
    return r.get("id", r.get("unique_id", i))


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


def _kinds(by_kind: dict) -> str:
    return ", ".join(f"{k} {by_kind.get(k, 0)}" for k in REWRITE_KINDS if by_kind.get(k, 0)) or "none"


def render(results: list[dict], data_dir: Path, total_s: float, overhead: dict | None = None,
           before: dict | None = None) -> str:
    kinds = ", ".join(f"`{k}`" for k in REWRITE_KINDS)
    lines = [
        "# Data report: gold answers vs. `sara_trl.rewards.math_reward`",
        "",
        "Generated by `python -m benchmarks.data_report.data_report --data_dir DIR` (do not edit by hand).",
        "",
        "**Gold self-check** (`sara_trl.rewards.selfcheck`): every distinct gold answer is written as a correct",
        "completion (`... The final answer is $\\boxed{<answer>}$.`) and graded against itself, once as it is and",
        f"once per re-writing a model commonly produces (kinds {kinds}: without or with `\\text{{}}`,",
        "`\\left(`/`\\right)` removed or added, `\\dfrac` <-> `\\frac`, a trailing period, a trailing `\\%` dropped",
        "or written `%`). Every (gold, re-writing) pair must grade `correct`; every one that does not is listed below,",
        "by kind. A gold that fails as it is (`self`) cannot be graded at all: `unparseable_gold` gives every rollout",
        "of its prompt the reward None. **Perturbed**: a clearly wrong answer derived from the gold (plain numbers",
        "+ 1, otherwise the last digit changed) must grade `wrong`; one accepted means the gold parses to something",
        "degenerate. Countdown rows have no `answer`: their `target` is checked as a number gold (their own verifier,",
        "`countdown_reward`, is checked by `tests/test_rewards_countdown.py`).",
        "",
        f"Data: `{data_dir.name}/` files; Python {platform.python_version()}; math-verify {_mv_version()};"
        f" total {total_s:.1f} s.",
        "",
        "`timeout` means sympy needed more than the soft limit (5 s) for the comparison; the reward is None and the",
        "event is counted in `sara_trl.rewards.stats()`. A perturbed answer reported `correct` is a false positive",
        "unless the perturbation only changed a redundant second form of the answer (e.g. `\\dfrac23 \\approx 0.68`).",
        "",
        "| dataset | records | distinct golds | (gold, re-writing) pairs | golds graded correct as they are |"
        " golds failing a re-writing | failing pairs by kind | perturbed rejected | seconds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in results:
        n, u = r["n"], r["unique"]
        self_ok = u - r["by_kind"].get("self", 0)
        pert = (f"{r['perturbed_rejected']} ({pct(r['perturbed_rejected'], u)})"
                if "perturbed_rejected" in r else "not run")
        lines.append(
            f"| {r['name']} | {n} | {u} | {r['pairs']} | {self_ok} ({pct(self_ok, u)}) | {r['failing_golds']} | "
            f"{_kinds(r['by_kind'])} | {pert} | {r['seconds']:.1f} |"
        )
    if before:
        lines += [
            "",
            "## Before and after this verifier version",
            "",
            f"Golds failing the self-check, by kind, with the verifier before ({before.get('label', 'before')}) and",
            "now; the same self-check (same re-writings) on the same files.",
            "",
            "| dataset | golds failing, before | golds failing, now | failing pairs by kind, before |"
            " failing pairs by kind, now |",
            "| --- | ---: | ---: | --- | --- |",
        ]
        tb = tn = 0
        for r in results:
            b = before["datasets"].get(r["name"])
            if b is None:
                continue
            tb += b["failing_golds"]
            tn += r["failing_golds"]
            lines.append(f"| {r['name']} | {b['failing_golds']} | {r['failing_golds']} | {_kinds(b['by_kind'])} | "
                         f"{_kinds(r['by_kind'])} |")
        lines.append(f"| **all** | **{tb}** | **{tn}** | | |")
    if any("agreement" in r for r in results):
        lines += [
            "",
            "## Agreement with math-verify on its own",
            "",
            f"The same pairs (every re-writing and the perturbed answer) graded by the installed math-verify"
            f" ({_mv_version()}) as its README uses it, `verify(parse(\"$\\boxed{{gold}}$\"), parse(completion))`.",
            "Counted where both can grade a pair (`math_reward` gives correct or wrong, math-verify parses the",
            "gold). A change in either grader changes these numbers; the disagreements are listed per dataset below.",
            "",
            "math-verify cannot read a boxed answer with a trailing period (`\\boxed{204.}` extracts the string",
            "`204.`), so every `period` pair whose gold it can parse is a disagreement; the last column leaves them",
            "out.",
            "",
            "| dataset | pairs | both grade | disagree | rate | ours correct, math-verify wrong |"
            " ours wrong, math-verify correct | gold unparsed by math-verify | disagree, `period` pairs left out |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in results:
            a = r.get("agreement")
            if a is None:
                continue
            k = a["kinds"]
            lines.append(
                f"| {r['name']} | {a['pairs']} | {a['both_grade']} | {a['disagree']} | {100 * a['rate']:.2f} % | "
                f"{k['ours correct, math-verify wrong']} | {k['ours wrong, math-verify correct']} | "
                f"{a['unparsed_by_math_verify']} | {_not_period(a)} |"
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
        if r["failures"]:
            lines += [
                f"Self-check failures ({len(r['failures'])} pairs, {r['failing_golds']} golds):",
                "",
                "| id | gold | kind | boxed answer | normalized answer | status | reason |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            lines += [
                f"| {esc(i)} | `{esc(g)}` | {k} | `{esc(p)}` | `{esc(nz)}` | {st} | {esc(rs)} |"
                for i, g, k, p, nz, st, rs in r["failures"]
            ]
        else:
            lines.append(f"All {r['unique']} distinct gold answers grade correct against themselves and every "
                         "re-writing.")
        if "perturbed_failures" in r:
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
                lines.append(f"All {r['unique']} perturbed answers are rejected.")
        a = r.get("agreement")
        if a and a["examples"]:
            lines += [
                "",
                f"Disagreements with math-verify on its own ({a['disagree']} of {a['both_grade']} pairs both grade; "
                "by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(a["by_kind"].items())) + "):",
                "",
                "| kind | gold | boxed answer | math_reward | math-verify |",
                "| --- | --- | --- | --- | --- |",
            ]
            shown: dict[str, int] = {}
            for k, g, x, o, m in a["examples"]:
                key = f"{k}: ours {o}, math-verify {m}"
                shown[key] = shown.get(key, 0) + 1
                if shown[key] <= _MAX_EXAMPLES:
                    lines.append(f"| {k} | `{esc(g)}` | `{esc(x)}` | {o} | {m} |")
            more = {k: n - _MAX_EXAMPLES for k, n in shown.items() if n > _MAX_EXAMPLES}
            if more:
                lines += ["", f"(the first {_MAX_EXAMPLES} of each kind are listed; not listed: "
                          + ", ".join(f"{k} {n}" for k, n in sorted(more.items())) + ")"]
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


_MAX_EXAMPLES = 25


def _not_period(agreement: dict) -> str:
    """Disagreements and pairs both grade, without the ``period`` re-writings (math-verify cannot read them)."""
    n = sum(v for k, v in agreement["by_kind"].items() if not k.startswith("period:"))
    both = agreement["both_grade"] - agreement.get("period_both", 0)
    return f"{n} of {both} ({100 * n / both:.2f} %)" if both else "n/a"


def _mv_version() -> str:
    try:
        from importlib.metadata import version

        return version("math-verify")
    except Exception:  # pragma: no cover
        return "unknown"


def summary(results: list[dict], label: str) -> dict:
    """The self-check counts of a run, as ``--json`` writes them (``--before`` reads them back)."""
    return {
        "label": label,
        "math_verify": _mv_version(),
        "datasets": {
            r["name"]: {
                "records": r["n"], "distinct_golds": r["unique"], "pairs": r["pairs"],
                "failing_golds": r["failing_golds"], "failing_records": r["failing_records"],
                "by_kind": r["by_kind"],
                **({"agreement": {k: r["agreement"][k] for k in ("pairs", "both_grade", "disagree", "rate", "kinds",
                                                                  "unparsed_by_math_verify", "by_kind",
                                                                  "period_both")}}
                   if "agreement" in r else {}),
            }
            for r in results
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "DATA_REPORT.md"))
    ap.add_argument("--no-train", action="store_true", help="leave out MATH train and MATH train 12k (minutes)")
    ap.add_argument("--timeout", type=float, default=5.0, help="soft verifier limit per comparison, seconds")
    ap.add_argument("--no-overhead", action="store_true", help="skip the verifier overhead measurement")
    ap.add_argument("--no-agreement", action="store_true", help="skip the comparison with math-verify on its own")
    ap.add_argument("--self-check-only", action="store_true",
                    help="only the gold self-check (no perturbed answers, alternatives, agreement or overhead)")
    ap.add_argument("--json", type=Path, default=None, help="also write the self-check counts to this JSON file")
    ap.add_argument("--label", default="this version", help="name of this run in the --json file")
    ap.add_argument("--before", type=Path, default=None,
                    help="a --json file of an earlier verifier version: the report compares its counts with this run")
    ap.add_argument("--data_dir", type=Path, default=None,
                    help="folder holding the full benchmark files (math500.jsonl, aime24.jsonl, ...; required)")
    args = ap.parse_args(argv)
    todo = DATASETS + ([] if args.no_train else TRAIN)
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
        res = check(name, read(data_dir / fname), verifier, self_check_only=args.self_check_only,
                    agreement=not (args.self_check_only or args.no_agreement))
        print(
            f"{name:28s} n={res['n']:5d} distinct={res['unique']:5d} pairs={res['pairs']:6d} "
            f"failing golds={res['failing_golds']:4d} ({_kinds(res['by_kind'])}) "
            + (f"perturbed-rejected={res['perturbed_rejected']} " if "perturbed_rejected" in res else "")
            + (f"math-verify disagree={res['agreement']['disagree']}/{res['agreement']['both_grade']} "
               if "agreement" in res else "")
            + f"({res['seconds']:.1f} s)",
            flush=True,
        )
        results.append(res)
    overhead = None if (args.no_overhead or args.self_check_only) else measure_overhead(data_dir)
    if overhead:
        print("overhead:", {k: round(v, 4) if isinstance(v, float) else v for k, v in overhead.items()})
    before = json.loads(args.before.read_text(encoding="utf-8")) if args.before else None
    Path(args.out).write_text(render(results, data_dir, time.perf_counter() - t0, overhead, before),
                              encoding="utf-8")
    print(f"wrote {args.out}")
    if args.json:
        args.json.write_text(json.dumps(summary(results, args.label), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
