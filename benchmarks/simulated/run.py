"""One command for every benchmark: ``python -m benchmarks.simulated.run [--quick] [--out DIR] [--bank PATH]``.

Regenerates ``RESULTS.md``, ``results.json`` and the PNG plots under ``plots/`` in ``--out`` (default: this
folder). The full run takes a few minutes on 2 CPU cores; ``--quick`` runs a reduced grid in seconds (the test
suite uses it so the harness cannot rot; its numbers are smoke-test numbers, not results). ``--render-only
results.json`` writes ``RESULTS.md`` again from a saved run without simulating (no plots).

Sections: (1) simulated allocation, uniform vs dynamic sampling (DS) vs SARA, over success-rate distributions and
group sizes; (2) the savings theorem (paper Eq. 6 vs the review's correction) against measured costs; (3) mechanism
plots (paper Fig. 3a, 3c) and ablations (Fig. 6a-d); (4) replay of real SmolLM2 outcomes; (5) allocator overhead;
(6) real CPU training runs (read from ``train_results.json`` written by ``benchmarks/train_runs/train_runs.py``).

The work is split in three, all in this folder: ``suite.py`` computes (-> ``SuiteResults``), ``report.py`` renders
the Markdown (prose in ``templates/results.md``), ``plots.py`` draws.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from benchmarks import replay
from benchmarks.common import environment
from benchmarks.simulated.report import render_results
from benchmarks.simulated.suite import FULL, QUICK, SuiteResults, run_suite

HERE = Path(__file__).resolve().parent
#: section 6 reads the JSON of the first real CPU training runs (``python -m benchmarks.train_runs.train_runs``)
TRAIN_RESULTS = HERE.parent / "train_runs" / "train_results.json"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced grid (seconds); smoke-test numbers only")
    ap.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md, results.json and plots/ go")
    ap.add_argument("--bank", type=Path, default=replay.DEFAULT_BANK, help="replay bank (.npz)")
    ap.add_argument("--train-results", type=Path, default=TRAIN_RESULTS,
                    help="JSON written by benchmarks/train_runs/train_runs.py (section 6)")
    ap.add_argument("--skip-overhead", action="store_true", help="skip the timing section")
    ap.add_argument("--render-only", type=Path, metavar="RESULTS_JSON",
                    help="write --out/RESULTS.md from this saved results.json (and --train-results) without running "
                         "anything; plots are not redrawn")
    return ap


def _read_train(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.render_only is not None:
        results = SuiteResults.from_json(json.loads(args.render_only.read_text()))
        md = render_results(results, _read_train(args.train_results), args.bank, args.train_results)
        (out / "RESULTS.md").write_text(md)
        print(f"[run] rendered {out / 'RESULTS.md'} from {args.render_only}", flush=True)
        return 0

    try:
        from benchmarks.simulated import plots  # matplotlib (the "plots" extra) is needed only here
    except ImportError as err:
        raise SystemExit(f"benchmarks.simulated.run draws its figures with matplotlib ({err}); install it with "
                         "pip install -e '.[plots]', or re-render the text only with --render-only results.json")

    settings = QUICK if args.quick else FULL
    plot_dir = out / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.simulated.run" + "".join(
        " " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(msg, flush=True)

    log(f"[run] mode={'quick' if args.quick else 'full'} out={out}")
    results = run_suite(settings, command, environment(), args.bank, not args.skip_overhead, log)
    train = _read_train(args.train_results)
    plots.suite_plots(results, train, plot_dir)
    results.elapsed_s = time.perf_counter() - t_start
    (out / "RESULTS.md").write_text(render_results(results, train, args.bank, args.train_results))
    (out / "results.json").write_text(json.dumps(results.to_json(), indent=1, default=float))
    log(f"[run] wrote {out / 'RESULTS.md'} in {results.elapsed_s:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
