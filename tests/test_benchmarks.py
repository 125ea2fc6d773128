"""The benchmark harness (benchmarks/): its closed forms, the replay source, the report templates, and quick
end-to-end runs of ``python -m benchmarks.simulated.run --quick`` and ``python -m benchmarks.beyond_paper.beyond_paper
--quick`` (seconds, no warning allowed) so the harness cannot rot. Timing targets are judged in RESULTS.md, not here.
The repository root is on the path through pytest's ``pythonpath`` (pyproject.toml)."""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from benchmarks import replay, sim
from benchmarks.common import TextBlocks, current_command, current_path, md_table, mean_ci
from benchmarks.simulated import overhead, run
from sara_trl.allocation import AllocationConfig

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


# ------------------------------------------------------------------------------------------------ statistics
def test_mean_ci_matches_student_t():
    iv = mean_ci([1.0, 2.0, 3.0])
    # t_{0.975, 2} = 4.302652729911275; sd = 1; half width = 4.3027 / sqrt(3)
    assert iv.mean == 2.0 and iv.n == 3
    assert iv.hi - iv.mean == pytest.approx(4.302652729911275 / np.sqrt(3), rel=1e-9)
    assert mean_ci([5.0]).lo == mean_ci([5.0]).hi == 5.0
    with pytest.raises(ValueError, match="NaN"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError):
        mean_ci([])


def test_md_table_layout():
    assert md_table(["a", "b"], [[1, 2]]).splitlines() == ["| a | b |", "| :--- | ---: |", "| 1 | 2 |"]


# ------------------------------------------------------------------------------------------------ simulation
def test_would_mix_closed_forms():
    src = sim.SimSource(np.array([0.5, 0.0, 1.0, 0.25]), seed=0)
    p = src.would_mix(np.array([0, 1, 2, 3, 0]), np.array([4, 4, 3, 2, 8]), np.array([0, 0, 3, 2, 0]), k=8)
    # gamma=0.5 after 4 failures: 1 - 0.5^4; gamma=0: never mixes; gamma=1 after 3 successes: never;
    # gamma=0.25 after 2 successes: 1 - 0.25^6; a complete group cannot mix any more.
    assert p == pytest.approx([1 - 0.5**4, 0.0, 0.0, 1 - 0.25**6, 0.0])
    with pytest.raises(ValueError, match="unmixed"):
        src.would_mix(np.array([0]), np.array([3]), np.array([1]), k=8)


def test_theory_closed_forms_for_a_point_mass():
    g = np.full(100, 0.5)
    t = sim.theory(g, k=8, tau_low=0.45, B=64)
    # n_a = 8 - floor(0.45 * 9) = 4; E[min(Tmix, 4)] = 1 + (0.5 + 0.5) + (0.25 + 0.25) + (0.125 + 0.125) = 2.75
    assert t["n_a"] == 4
    assert t["phi"] == pytest.approx(1 - 2 / 256)
    assert t["psi"] == pytest.approx(1 - 2 / 16)
    assert t["e_stop"] == pytest.approx(2.75)
    assert t["ds"] == pytest.approx(64 * 8 / (1 - 2 / 256))
    assert t["eq6"] == pytest.approx(64 / (1 - 2 / 256) * 2.75)
    assert t["corrected"] == pytest.approx(64 / 0.875 * 2.75)
    assert t["corrected_full"] == pytest.approx(64 / 0.875 * (0.875 * 8 + 0.125 * 4))


def test_early_commit_cost_matches_the_corrected_formula():
    """SARA with commit_min=2 on a point-mass pool: the measured cost of decided prompts is (B/Psi) E[min(Tmix,n_a)]
    (Wald's identity), not the paper's (B/Phi) E[...]. Deterministic seeds; 5% tolerance over 6 x 5 steps."""
    dist = sim.Distribution("half", "gamma = 0.3", lambda num, seed: np.full(num, 0.3))
    cfg = AllocationConfig(allocator="sara", k=8, commit_min=2)
    rows, _ = sim.run_setting(dist, cfg, 64, range(6), 5, pool=3000)
    t = sim.theory(np.full(10, 0.3), 8, 0.45, 64)
    useful = np.mean([r["rollouts_useful"] for r in rows])
    assert useful == pytest.approx(t["corrected"], rel=0.05)
    assert abs(useful - t["eq6"]) / t["eq6"] > 0.05  # Eq. 6 under-predicts by Phi/Psi
    assert all(r["effective_fraction"] == 1.0 for r in rows)


def test_run_steps_counts_every_step_and_pairs_seeds():
    dist = sim.DISTRIBUTIONS["u_shaped"]
    rows_u, _ = sim.run_setting(dist, AllocationConfig(allocator="uniform"), 16, range(2), 3, pool=500)
    assert len(rows_u) == 6 and [r["seed"] for r in rows_u] == [0, 0, 0, 1, 1, 1]
    assert all(r["rollouts"] == 16 * 8 and r["rounds"] == 1 and r["abandoned"] == 0 for r in rows_u)
    rows_d, traces = sim.run_setting(dist, AllocationConfig(allocator="dynamic_sampling"), 16, range(2), 3, pool=500,
                                     trace=True)
    assert all(r["effective_fraction"] == 1.0 and r["wrong_exact"] == 0.0 for r in rows_d)
    assert len(traces) == 6
    for (cum_r, cum_e), r in zip(traces, rows_d):
        assert cum_r[-1] == r["rollouts"] and cum_e[-1] == r["committed"]
    assert sim.per_seed(rows_u, "rollouts").tolist() == [128.0, 128.0]


def test_decidability_on_never_solved_prompts():
    d = sim.decidability(np.zeros(10), k=8, tau_low=0.45, num=200)
    # gamma = 0: never mixed; p_eff(n, 0) = (8 - n) / 9 < 0.45 first at n = 4.
    assert d["decided_effective"].tolist() == [0.0] * 8
    assert d["decided_saturated"].tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert d["agree"][3:].tolist() == [1.0] * 5


# ------------------------------------------------------------------------------------------------ replay
def synthetic_bank(P: int = 60, M: int = 16, seed: int = 0):
    """A third of the prompts never solved, a sixth always solved, the rest with a random number of successes."""
    rng = np.random.default_rng(seed)
    success = np.zeros((P, M), np.int8)
    for p in range(P):
        kind = p % 6
        c = 0 if kind < 2 else M if kind == 2 else int(rng.integers(1, M))
        success[p, rng.permutation(M)[:c]] = 1
    tokens = rng.integers(20, 300, size=(P, M)).astype(np.int16)
    return success, tokens


def test_replay_draws_without_replacement_and_wraps():
    success, tokens = synthetic_bank(P=6)
    src = replay.ReplaySource(success, tokens, seed=1)
    src.start_step()
    out = src(np.array([3, 5]), np.array([16, 20]))
    # Prompt 3: its 16 completions exactly once (a permutation of its bank).
    assert sorted(zip(out.success[:16], out.tokens[:16])) == sorted(zip(success[3].astype(float), tokens[3]))
    # Prompt 5: 16 without replacement, then 4 more after a reshuffle.
    first = sorted(zip(out.success[16:32], out.tokens[16:32]))
    assert first == sorted(zip(success[5].astype(float), tokens[5]))
    assert len(out.success) == 36 and set(out.tokens[32:]) <= set(tokens[5])
    # Continuing within the step never repeats a completion before the bank is used up.
    src.start_step()
    a = src(np.array([4]), np.array([5]))
    b = src(np.array([4]), np.array([11]))
    assert sorted(np.concatenate([a.tokens, b.tokens])) == sorted(tokens[4])


def test_replay_would_mix_is_hypergeometric():
    success = np.zeros((1, 16), np.int8)
    success[0, :3] = 1  # 3 successes, 13 failures
    src = replay.ReplaySource(success, np.ones((1, 16)), seed=0)
    # After 4 failures, 4 more from the remaining 12 (3 successes, 9 failures): P(all fail) = C(9,4)/C(12,4).
    stay = (sum(1 for c in combinations(range(12), 4) if all(i >= 3 for i in c))
            / sum(1 for _ in combinations(range(12), 4)))
    assert src.would_mix(np.array([0]), np.array([4]), np.array([0]), k=8)[0] == pytest.approx(1 - stay)
    # After 2 successes, 6 more from 14 holding only 1 success: cannot stay all-pass.
    assert src.would_mix(np.array([0]), np.array([2]), np.array([2]), k=8)[0] == pytest.approx(1.0)
    s = replay.bank_summary(np.array([[1] * 8 + [0] * 8], np.int8), k=2)
    assert s["phi"] == pytest.approx(1 - 2 * 28 / 120) and s["mean_success"] == 0.5


def test_replay_drives_every_allocator():
    success, tokens = synthetic_bank()
    for alloc in ("uniform", "dynamic_sampling", "sara"):
        src = replay.ReplaySource(success, tokens, seed=0)
        rows, _ = sim.run_steps(src, AllocationConfig(allocator=alloc), 8, 2, seed=0)
        assert len(rows) == 2
        if alloc != "uniform":
            assert all(r["effective_fraction"] == 1.0 for r in rows)
        assert all(0.0 <= r["wrong_exact"] <= r["abandoned"] for r in rows)


def test_load_bank_round_trip_and_errors(tmp_path):
    success, tokens = synthetic_bank(P=4)
    np.savez_compressed(tmp_path / "b.npz", success=success, tokens=tokens)
    (tmp_path / "b.json").write_text(json.dumps({"model": "synthetic"}))
    s, t, meta = replay.load_bank(tmp_path / "b.npz")
    assert (s == success).all() and (t == tokens).all() and meta == {"model": "synthetic"}
    np.savez_compressed(tmp_path / "bad.npz", success=success, tokens=tokens[:, :8])
    with pytest.raises(ValueError, match="equal"):
        replay.load_bank(tmp_path / "bad.npz")


# ------------------------------------------------------------------------------------------------ overhead
def test_precomputed_source_returns_its_table_prompt_major():
    src = overhead.PrecomputedSource(np.array([0.0, 1.0, 0.5]), width=4, seed=0)
    out = src(np.array([2, 0]), np.array([3, 2]))
    assert out.success.tolist() == src.success[2, :3].tolist() + [0.0, 0.0]
    out2 = src(np.array([2]), np.array([2]))  # continues at position 3, wraps to 0
    assert out2.success.tolist() == [src.success[2, 3], src.success[2, 0]]
    assert len(src.enter) == len(src.exit) == 2


def test_overhead_finish_summary_per_batch_size():
    meas = {"finish": [(16, 80, 0.001), (16, 90, 0.003), (16, 100, 0.002), (64, 300, 0.004)]}
    assert overhead.summarize_finish(meas) == [
        {"batch_size": 16, "steps": 3, "median_ms": pytest.approx(2.0), "mean_prompts_drawn": 90.0},
        {"batch_size": 64, "steps": 1, "median_ms": pytest.approx(4.0), "mean_prompts_drawn": 300.0}]


# ------------------------------------------------------------------------------------------------ report text
def test_text_blocks_parse_fill_and_reject(tmp_path):
    path = tmp_path / "t.md"
    path.write_text("header, ignored\n<!-- block: a -->\nx=${x}, $$5\n\n<!-- block: b -->\nplain\n")
    text = TextBlocks(path)
    assert text("a", x="1") == "x=1, $5" and text("b") == "plain"
    with pytest.raises(KeyError):
        text("a")  # placeholder x not given
    path.write_text("<!-- block: a -->\n1\n<!-- block: a -->\n2\n")
    with pytest.raises(ValueError, match="uniquely"):
        TextBlocks(path)


@pytest.mark.parametrize("study, template, module", [("simulated", "results.md", "report.py"),
                                                     ("beyond_paper", "beyond_paper.md", "beyond_paper.py")])
def test_every_template_block_is_used(study, template, module):
    """No dead prose: each block of a template is named by the module that renders it."""
    source = (BENCH / study / module).read_text()
    blocks = TextBlocks(BENCH / study / "templates" / template).blocks
    assert "document" in blocks and len(blocks) >= 5
    assert [name for name in blocks if f'"{name}"' not in source] == []


@pytest.mark.filterwarnings("error")
def test_beyond_paper_hit_rate_without_history_is_a_dash_not_a_warning():
    from benchmarks.beyond_paper import beyond_paper

    runs = [beyond_paper.RunTotals(rollouts=100, tokens=1000, effective=10, groups=10, rounds=2, steps=1)
            for _ in range(2)]
    assert math.isnan(runs[0].history_hit_rate)
    with_history = [beyond_paper.RunTotals(rollouts=50, tokens=500, effective=10, groups=10, rounds=2, steps=1,
                                           history_hit_rate=h) for h in (0.5, float("nan"))]
    md = beyond_paper.table({"DS": runs, "history": with_history}, with_diag=False, with_hits=True)
    # DS: no seed reports a hit rate -> "-"; history: the mean over the seeds that report one.
    assert md.splitlines()[2].endswith("| 2.0 | - |") and md.splitlines()[3].endswith("| 2.0 | 0.50 |")
    assert "| history | 0.500 | 0.500 | 5.00 |" in md


def test_library_does_not_import_matplotlib():
    """matplotlib is the optional "plots" extra: no module under src/ imports it at module level, and the one
    function that draws (the quickstart's summary plot) imports it when called, so the library works without it."""
    offenders, lazy = [], []
    for path in (REPO / "src").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                if n.split(".")[0] == "matplotlib":
                    (offenders if id(node) in top else lazy).append(f"{path.relative_to(REPO)}: {n}")
    assert offenders == []
    assert {entry.split(":")[0] for entry in lazy} <= {"src/sara_trl/quickstart.py"}
    deps = re.search(r"^dependencies = \[(.*?)\]", (REPO / "pyproject.toml").read_text(), re.S | re.M).group(1)
    assert "matplotlib" not in deps


def test_committed_results_render_to_the_committed_report(tmp_path):
    """benchmarks/simulated/RESULTS.md is exactly what the renderer makes of its results.json (+ the train_runs
    study's train_results.json): the text is regenerable without rerunning the benchmarks, and a template edit that
    changes it shows here."""
    assert run.main(["--render-only", str(BENCH / "simulated" / "results.json"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "RESULTS.md").read_text() == (BENCH / "simulated" / "RESULTS.md").read_text()


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.filterwarnings("error")
def test_quick_run_end_to_end(tmp_path):
    success, tokens = synthetic_bank(P=120)
    bank = tmp_path / "bank.npz"
    np.savez_compressed(bank, success=success, tokens=tokens)
    # A minimal train_results.json in the shape benchmarks/train_runs/train_runs.py writes (section 6 and its plot).
    fake = {"uniform": (64, 0.25), "DS": (250, 1.0), "SARA": (190, 1.0)}
    train = {"command": "python -m benchmarks.train_runs.train_runs --steps 2", "task": "arithmetic",
             "config": {"seed": 0},
             "environment": {"cpu": "test", "cores": 2, "torch": "x"},
             "runs": {n: {"step": [1, 2], "reward": [0.5, 0.5], "raw_success": [0.2, 0.3],
                          "cum_rollouts": [r, 2 * r], "cum_tokens": [10 * r, 20 * r], "effective_fraction": [f, f],
                          "rounds": [1, 1], "wall_s": [1.0, 2.0], "eval_step": [0, 2], "eval_acc": [0.1, 0.2],
                          "train_wall_s": 3.0} for n, (r, f) in fake.items()}}
    (tmp_path / "train.json").write_text(json.dumps(train))
    out = tmp_path / "out"
    assert run.main(["--quick", "--out", str(out), "--bank", str(bank),
                     "--train-results", str(tmp_path / "train.json")]) == 0
    md = (out / "RESULTS.md").read_text()
    for heading in ("## Headline", "### Targets", "## 1. Simulated", "## 2. The savings theorem", "## 3. Mechanism",
                    "## 4. Replay", "## 5. Allocator overhead", "## 6. Real CPU training runs"):
        assert heading in md
    assert "QUICK MODE" in md and "120 prompts x 16 completions" in md
    # Section 6: SARA's 2 * 190 rollouts are 380 / 500 = 0.76 of DS's, its tokens 3800 / 5000.
    assert "| SARA | 2 | 380 | 0.76 | 3800 | 0.76 | 1.0 | 1.000 | 0.200 -> 0.300 | 0.100 -> 0.200 | 3 |" in md
    assert "Measured: SARA spent 0.76 of DS's rollouts and 0.76 of its tokens" in md
    assert "uniform trained 75.0% zero-advantage groups" in md
    assert "Command: `python -m benchmarks.simulated.run --quick" in md
    for png in ("fig3a_decidability", "fig3c_effective_vs_rollouts", "fig6a_tau_sweep", "fig6b_n0_sweep",
                "fig6c_fixed_budget", "fig6d_savings_vs_k", "overhead", "replay_cost", "train_runs"):
        assert (out / "plots" / f"{png}.png").stat().st_size > 1000
    res = json.loads((out / "results.json").read_text())
    head = res["grid"]["u_shaped/k=8"]["summary"]
    assert head["uniform"]["rollouts"][0] == 512.0  # B x k, exactly
    assert head["DS"]["effective_fraction"][0] == 1.0
    assert head["DS"]["rollouts_ratio"][0] == 1.0
    assert res["replay"]["bank"]["prompts"] == 120
    # The saved results.json renders the same RESULTS.md again, without simulating.
    again = tmp_path / "again"
    assert run.main(["--render-only", str(out / "results.json"), "--out", str(again), "--bank", str(bank),
                     "--train-results", str(tmp_path / "train.json")]) == 0
    assert (again / "RESULTS.md").read_text() == md and not (again / "plots").exists()


@pytest.mark.filterwarnings("error")
def test_quick_run_skips_replay_without_bank(tmp_path):
    out = tmp_path / "out"
    assert run.main(["--quick", "--out", str(out), "--bank", str(tmp_path / "none.npz"), "--skip-overhead",
                     "--train-results", str(tmp_path / "none.json")]) == 0
    md = (out / "RESULTS.md").read_text()
    assert "**Skipped: no replay bank" in md and "**Not run.**" in md
    assert json.loads((out / "results.json").read_text())["replay"] is None


@pytest.mark.filterwarnings("error")
def test_beyond_paper_quick_run(tmp_path):
    from benchmarks.beyond_paper import beyond_paper

    success, tokens = synthetic_bank(P=120)
    bank = tmp_path / "bank.npz"
    np.savez_compressed(bank, success=success, tokens=tokens)
    assert beyond_paper.main(["--quick", "--out", str(tmp_path), "--bank", str(bank)]) == 0
    md = (tmp_path / "BEYOND_PAPER.md").read_text()
    for heading in ("## 1. In-step only", "## 2. Multi-epoch", "## 3. Drift", "## 4. Replay", "## Targets (issue 8)"):
        assert heading in md
    assert "| auto + loss cap 0.12 + carry_over |" in md and "Bank: 120 prompts x 16 completions" in md
    res = json.loads((tmp_path / "beyond_paper.json").read_text())
    assert res["in_step"]["DS"]["rollouts_vs_ds"]["mean"] == 1.0
    assert res["in_step"]["SARA + carry_over"]["min_effective_fraction"] == 1.0


# ------------------------------------------------------------------------------------------------ GPU projection
@pytest.mark.filterwarnings("error")
def test_streaming_projection_quick_run_and_render_only(tmp_path):
    from benchmarks.streaming_projection import streaming_projection as sp

    out = tmp_path / "out"
    assert sp.main(["--quick", "--out", str(out)]) == 0
    md = (out / "STREAMING_PROJECTION.md").read_text()
    for heading in ("## Time model", "## Per-step overhead: what the CPU engine's measurements say",
                    "## k = 8: the candidate collections at TRL's concurrency (512 sequences)", "## Target",
                    "## Sensitivity, k = 8", "## Scoring time, streaming SARA", "## Kernel-time rows"):
        assert heading in md
    doc = json.loads((out / "streaming_projection.json").read_text())
    ms = doc["model"]["settings"]
    assert ms["concurrency"] == {"8": [512, 256]} and ms["trl_max_num_seqs"] == {"8": 512}
    assert set(ms["rewards"]) == {"none", "15ms", "55ms", "measured"}
    # 3 overheads x (1 + 3 rewards x 2 scorings) scenarios per seed
    seed0 = doc["model"]["runs"]["SARA (streaming)|k=8|seqs=512"]["0"]
    assert len(ms["scenarios"]) == 21 and all(len(v) == 21 for v in seed0["scenarios"].values())
    # the reference over itself is 1 in every scenario; overlapped scoring never costs more than blocking here
    summary = sp.summarize_model(doc["model"])["8|512"]
    assert summary["DS (rounds)"][sp.scenario_name(2, "measured", "blocking")]["ratio"][0] == pytest.approx(1.0)
    for f in (0, 1, 2):
        for r in ("15ms", "55ms", "measured"):
            blocking = summary["SARA (streaming)"][sp.scenario_name(f, r, "blocking")]["seconds"]
            assert summary["SARA (streaming)"][sp.scenario_name(f, r, "overlapped")]["seconds"] <= blocking + 1e-9
    assert doc["target"]["max_num_seqs"] == 512 and doc["target"]["overhead_factor"] == 2
    # the saved JSON renders the same report again, without simulating
    again = tmp_path / "again"
    assert sp.main(["--render-only", str(out / "streaming_projection.json"), "--out", str(again)]) == 0
    assert (again / "STREAMING_PROJECTION.md").read_text() == md


def test_committed_projection_renders_to_the_committed_report(tmp_path):
    from benchmarks.streaming_projection import streaming_projection as sp

    assert sp.main(["--render-only", str(BENCH / "streaming_projection" / "streaming_projection.json"), "--out",
                    str(tmp_path)]) == 0
    assert (tmp_path / "STREAMING_PROJECTION.md").read_text() == \
        (BENCH / "streaming_projection" / "STREAMING_PROJECTION.md").read_text()


def test_projection_kernel_time_rows_are_reproducible():
    """The kernel-time rows (the earlier projection) come out of the simulation as committed: first step of seed 0
    for a round allocator and a streaming one."""
    from benchmarks.streaming_projection import streaming_projection as sp

    doc = json.loads((BENCH / "streaming_projection" / "streaming_projection.json").read_text())
    for label in ("SARA (rounds, paper)", "SARA (streaming)"):
        committed = dict(doc["legacy"]["runs"][f"{label}|k=8"]["0"][0])
        fresh = sp.run_one(label, 8, 0, 1)[0]
        assert fresh.pop("seconds") == pytest.approx(committed.pop("seconds"))
        assert fresh == pytest.approx(committed)


def test_projection_full_model_seed_is_reproducible():
    from benchmarks.streaming_projection import streaming_projection as sp

    doc = json.loads((BENCH / "streaming_projection" / "streaming_projection.json").read_text())
    steps = doc["model"]["settings"]["steps"]
    committed = doc["model"]["runs"]["SARA (rounds)|k=8|seqs=512"]["3"]
    fresh = sp.model_seed("SARA (rounds)", 8, 3, steps, 512, sp.reward_costs())
    assert fresh["rollouts"] == committed["rollouts"]
    for field, values in committed["scenarios"].items():
        assert fresh["scenarios"][field] == pytest.approx(values, rel=1e-5, abs=1e-6)


def test_projection_settings_follow_their_sources():
    """The overlapped lag is the trainer's streaming_reward_lag default; the measured reward cost is the committed
    reward_cost.json fit; the CPU calibration reads the committed engine measurements."""
    from benchmarks.streaming_projection import streaming_projection as sp

    config = (REPO / "src" / "sara_trl" / "trainer" / "config.py").read_text()
    assert re.search(r'\("streaming_reward_lag", int, field\(default=(\d+)', config).group(1) == str(sp.LAG)
    fit = json.loads((BENCH / "reward_cost" / "reward_cost.json").read_text())["fit"]
    measured = sp.measured_reward_cost()
    assert (measured.per_call, measured.per_item) == (fit["per_call"], fit["per_item"])
    rows = sp.calibrate_cpu_step_overhead()
    xeon = [r for r in rows if r["fit"] == "cpu_latency_intel_xeon.json"]
    assert [r["prefill"] for r in xeon] == ["one-token calls", "zero", "free"]
    assert all(r["steps"] == 50 and r["o_lo"] <= r["o"] <= r["o_hi"] for r in xeon)
    assert sp.concurrency(8) == 512 and sp.concurrency(16) == 1024


def test_reward_cost_fit_and_completions():
    from benchmarks.reward_cost import reward_cost

    fit = reward_cost.fit_call_cost([1, 1, 8, 8, 64], [0.011, 0.013, 0.026, 0.026, 0.14])
    assert fit["per_call"] == pytest.approx(0.01, abs=2e-3) and fit["per_item"] == pytest.approx(0.002, abs=2e-4)
    assert reward_cost.fit_call_cost([1, 8, 64], [0.01, 0.05, 0.5])["per_call"] >= 0.0  # never negative
    rows = [{"problem": "p", "answer": "5", "solution": "so \\boxed{5}"}, {"problem": "q", "answer": "7"}]
    texts, golds, ok = reward_cost.build_completions(rows, chars=40)
    assert golds == ["5", "5", "7", "7"] and ok == [True, False, True, False]
    assert texts[0].endswith("The final answer is $\\boxed{5}$.") and texts[1].endswith("$\\boxed{7}$.")
    assert all(t.startswith("<think>\n") and "</think>" in t for t in texts)


# ------------------------------------------------------------------------------------------------ layout
#: every study's scripts, as modules (``python -m benchmarks.<study>.<script>`` from the repository root)
SCRIPTS = sorted(p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
                 for p in BENCH.glob("*/*.py") if "__main__" in p.read_text(encoding="utf-8"))


def test_each_study_is_a_package_and_no_script_patches_sys_path():
    """One folder per study, each a package; a script imports the shared modules (``benchmarks.common``, ``sim``,
    ``replay``, ``real_task``) and the other studies as ``benchmarks.<study>.<module>``, never through a
    ``sys.path`` entry of its own."""
    studies = sorted(p.parent.name for p in BENCH.glob("*/__init__.py"))
    assert {"simulated", "beyond_paper", "real_training", "streaming_engine", "headline", "gpu"} <= set(studies)
    assert [p.name for p in BENCH.glob("*.py") if "__main__" in p.read_text(encoding="utf-8")] == []  # shared only
    patched = [str(p.relative_to(REPO)) for p in BENCH.rglob("*.py") if "sys.path" in p.read_text(encoding="utf-8")]
    assert patched == []
    assert len(SCRIPTS) >= 20 and "benchmarks.simulated.run" in SCRIPTS


def test_recorded_commands_read_in_their_current_form():
    """Result files saved before the studies had their own folders record ``python benchmarks/<script>.py``; the
    reports show the command that runs the same script now, with the result files at their current paths."""
    assert current_command("python benchmarks/run.py --quick") == "python -m benchmarks.simulated.run --quick"
    assert current_command("python benchmarks/streaming_engine.py --steps 3 --out benchmarks/streaming_engine_seed1"
                           ".json") == ("python -m benchmarks.streaming_engine.streaming_engine --steps 3 --out "
                                        "benchmarks/streaming_engine/streaming_engine_seed1.json")
    assert current_command("python benchmarks/gpu/task_survey.py") == \
        "python -m benchmarks.real_task_survey.task_survey"
    assert current_command("python -m benchmarks.simulated.run") == "python -m benchmarks.simulated.run"
    assert current_path("benchmarks/cpu_latency_intel_xeon.json") == \
        "benchmarks/cpu_latency/cpu_latency_intel_xeon.json"
    assert current_path("/tmp/x/benchmarks/results.json") == "/tmp/x/benchmarks/results.json"
    for old in re.findall(r'"command": "python benchmarks/([a-z0-9_/]+)\.py', "\n".join(
            p.read_text(encoding="utf-8") for p in BENCH.rglob("*.json"))):
        module = current_command(f"python benchmarks/{old}.py").removeprefix("python -m ")
        assert module in SCRIPTS, old  # every recorded script maps to a module that exists


def test_a_script_runs_as_a_module_from_the_repository_root():
    """``python -m`` from the root needs no installed ``benchmarks`` and no path setup (its ``--help`` only)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.simulated.run", "--help"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "--render-only" in out.stdout


# ------------------------------------------------------------------------------------------------ schedule parity
def test_schedule_parity_quick_run_and_the_committed_report(tmp_path):
    """The study's ratios are the per-seed streaming / rounds ratios of its own per-seed rollouts, its "met" is the
    3% rule on the interval, and the committed report is what its committed JSON renders to."""
    from benchmarks.schedule_parity import schedule_parity as sp

    result = sp.main(["--quick", "--out", str(tmp_path)])
    assert list(result["settings"]) == list(sp.SETTINGS)[:3]
    for r in result["settings"].values():
        rounds, streaming = (np.array(r["per_seed"][c]["rollouts"]) for c in ("rounds", "streaming"))
        assert r["rollouts_ratio"]["per_seed"] == pytest.approx((streaming / rounds).tolist())
        assert r["met"] == (r["rollouts_ratio"]["lo"] >= 0.97 and r["rollouts_ratio"]["hi"] <= 1.03)
    committed = BENCH / "schedule_parity"
    sp.main(["--render-only", str(committed / "schedule_parity.json"), "--out", str(tmp_path / "again")])
    assert (tmp_path / "again" / "SCHEDULE_PARITY.md").read_text() == (committed / "SCHEDULE_PARITY.md").read_text()
    doc = json.loads((committed / "schedule_parity.json").read_text())
    assert doc["meta"]["seeds"] == 20 and len(doc["settings"]) == len(sp.SETTINGS)


def test_quickstart_seeds_report_is_what_the_saved_runs_render_to():
    """The README's quickstart figures come from the saved per-seed summaries: SARA / DS of their own totals over the
    timed steps, after each pass's warm-up, and the committed report is their rendering; runs on a busy machine are
    listed but not pooled for time."""
    from benchmarks.quickstart_task import quickstart_seeds as qs

    runs, cold = qs.load_runs(), qs.load_runs(pattern=qs.COLD_PATTERN)
    assert len(cold) == 3  # the runs before the warm-up, listed apart
    for doc in (*runs, *cold):
        ratio = qs.ratios(doc)
        assert ratio["rollouts"] == doc["rollouts"] / doc["dynamic_sampling"]["rollouts"]
        assert doc["collection"] == "streaming" and doc["dynamic_sampling"]["collection"] == "rounds"
    for doc in runs:  # the warm-up and the order alternating with the seed
        assert doc["warmup"]["requests"] == doc["dynamic_sampling"]["warmup"]["requests"] == 4 * (8 + 1)
        assert doc["first_pass"] == ("sara" if doc["settings"]["seed"] % 2 == 0 else "dynamic_sampling")
    assert qs.idle({"load_average": [1.9, 4.0], "peak_load_average": 3.5, "cpus": 2})
    assert not qs.idle({"load_average": [2.5, 2.0], "cpus": 2}) and not qs.idle({"load_average": [1.0, 4.5]})
    assert qs.render(runs, cold) == (BENCH / "quickstart_task" / "QUICKSTART_SEEDS.md").read_text()


# ------------------------------------------------------------------------------------------------ env task
def test_env_task_pools_seeds_per_effective_batch(tmp_path):
    """The environment study's pooling: per seed, totals per effective batch (total / (effective groups / B)) and
    the ratio SARA / DS; intervals over the seeds that have effective groups under both (the others are named); a
    quantity that is 0 under DS on every seed has no ratio."""
    from benchmarks.env_task import env_task

    def run(rollouts, effective, seconds):
        return {"rollouts": rollouts, "model_tokens": 10.0 * rollouts, "tool_tokens": 0.0, "tool_calls": 0.0,
                "env_resets": rollouts, "collect_seconds": seconds, "effective_groups": effective, "unfilled": 0.0,
                "raw_success_rate": 0.25, "env_counters": {}, "steps": 2, "seconds": seconds + 5.0,
                "load_average": [1.0, 2.0]}

    settings = dict(env_task.SETTINGS, num_groups=2)
    docs = [{"seed": 0, "settings": settings, "sara": run(16.0, 4.0, 8.0), "dynamic_sampling": run(32.0, 2.0, 16.0)},
            {"seed": 1, "settings": settings, "sara": run(24.0, 4.0, 12.0), "dynamic_sampling": run(32.0, 4.0, 8.0)},
            {"seed": 2, "settings": settings, "sara": run(8.0, 2.0, 4.0), "dynamic_sampling": run(32.0, 0.0, 9.0)}]
    pool = env_task.pooled(docs)
    first = pool["per_seed"][0]["rollouts"]
    assert (first["sara"], first["dynamic_sampling"], first["ratio"]) == (8.0, 32.0, 0.25)
    assert pool["per_seed"][1]["collect_seconds"]["ratio"] == 1.5
    assert pool["seeds_without_effective_groups"] == [2]
    ratios = pool["ratios"]
    assert ratios["rollouts"]["seeds"] == 2 and ratios["rollouts"]["mean"] == pytest.approx((0.25 + 0.75) / 2)
    assert ratios["model_tokens"]["mean"] == pytest.approx(0.5) and "tool_calls" not in ratios
    for i, doc in enumerate(docs):
        doc["environment"] = {"cpu": "x", "cores": 2, "platform": "p", "python": "3", "numpy": "2", "scipy": "1",
                              "sara_trl": "0"}
        (tmp_path / f"env_task_seed{i}.json").write_text(json.dumps(doc))
    text = env_task.report(tmp_path)
    assert "| rollouts | 0.500 [" in text and "Seeds [2] had no effective group" in text
    assert json.loads((tmp_path / "env_task.json").read_text())["ratios"] == ratios


def test_env_engine_pools_each_configuration_against_ds_in_rounds(tmp_path):
    """The engine environment study's pooling: per seed and configuration, totals per effective batch and the ratio
    to DS in rounds; per configuration a mean ratio over seeds; the report names every configuration."""
    from benchmarks.env_task import env_engine

    def run(rollouts, effective, seconds, collection="rounds"):
        return {"collection": collection, "rollouts": rollouts, "model_tokens": 10.0 * rollouts, "tool_tokens": 0.0,
                "tool_calls": 0.0, "env_resets": rollouts, "collect_seconds": seconds, "aborted": 0.0,
                "effective_groups": effective, "unfilled": 0.0, "raw_success_rate": 0.25, "env_counters": {},
                "steps": 2, "seconds": seconds + 5.0, "load_average": [1.0, 2.0]}

    settings = dict(env_engine.SETTINGS)
    docs = [{"seed": s, "settings": settings, "ds_rounds": run(32.0, 4.0, 20.0), "sara_rounds": run(24.0, 4.0, d),
             "sara_streaming": run(16.0, 2.0, 5.0, "streaming")} for s, d in ((0, 30.0), (1, 10.0))]
    pool = env_engine.pooled(docs)
    first = pool["per_seed"][0]
    assert first["rollouts"]["ds_rounds"] == 16.0 and first["rollouts"]["sara_streaming"] == 16.0
    assert first["rollouts"]["ratio"] == {"sara_rounds": 0.75, "sara_streaming": 1.0}
    assert pool["per_seed"][1]["collect_seconds"]["ratio"]["sara_rounds"] == 0.5
    seconds = pool["ratios"]["sara_rounds"]["collect_seconds"]
    assert seconds["seeds"] == 2 and seconds["mean"] == pytest.approx((1.5 + 0.5) / 2)
    assert "tool_calls" not in pool["ratios"]["sara_streaming"]  # 0 under DS: no ratio
    for doc in docs:
        doc["environment"] = {"cpu": "x", "cores": 2, "platform": "p", "python": "3", "numpy": "2", "scipy": "1",
                              "sara_trl": "0"}
        (tmp_path / f"env_engine_seed{doc['seed']}.json").write_text(json.dumps(doc))
    text = env_engine.report(tmp_path)
    assert "| sara_streaming | 1.000 | 1.000 |" in text and "| sara_rounds | 0.750 |" in text
    assert "| sara_rounds | 0.750 | 0.750 | 0.750 | n/a | 1.000 [" in text  # seconds: 1.5 and 0.5
    assert json.loads((tmp_path / "env_engine.json").read_text())["ratios"] == pool["ratios"]


def test_env_engine_constrained_variant_has_its_own_files_and_settings(tmp_path):
    """``--constrained``: the engine environment study with vLLM's structured outputs (a ``guess`` call or a number in
    1..4 per turn) on games of 1..4, pooled from its own seed files into ENV_ENGINE_CONSTRAINED.md; the unconstrained
    study's files in the same folder are not mixed in."""
    import re

    from benchmarks.env_task import env_engine

    settings = {**env_engine.SETTINGS, **env_engine.CONSTRAINED}
    assert settings["high"] == 4 and settings["regex"] == env_engine.GUESS_REGEX
    pattern = re.compile(env_engine.GUESS_REGEX)
    assert pattern.fullmatch('<tool_call>\n{"name": "guess", "arguments": {"n": 3}}\n</tool_call>')
    assert pattern.fullmatch("4") and not pattern.fullmatch("5") and not pattern.fullmatch("I guess 3")
    assert env_engine._variant(settings) == ("env_engine_constrained", f"{env_engine.COMMAND} --constrained")
    assert env_engine._variant(env_engine.SETTINGS) == ("env_engine", env_engine.COMMAND)

    def run(rollouts, effective, tool_calls):
        return {"collection": "rounds", "rollouts": rollouts, "model_tokens": 10.0 * rollouts, "tool_tokens": 5.0,
                "tool_calls": tool_calls, "env_resets": rollouts, "collect_seconds": 10.0, "aborted": 0.0,
                "effective_groups": effective, "unfilled": 0.0, "raw_success_rate": 0.25, "env_counters": {},
                "steps": 3, "seconds": 15.0, "load_average": [1.0, 2.0]}

    env = {"cpu": "x", "cores": 2, "platform": "p", "python": "3", "numpy": "2", "scipy": "1", "sara_trl": "0"}
    doc = {"seed": 0, "settings": settings, "environment": env, "ds_rounds": run(32.0, 4.0, 8.0),
           "sara_rounds": run(24.0, 4.0, 6.0), "sara_streaming": run(16.0, 2.0, 2.0)}
    (tmp_path / "env_engine_constrained_seed0.json").write_text(json.dumps(doc))
    (tmp_path / "env_engine_seed0.json").write_text("not read")
    text = env_engine.report(tmp_path, constrained=True)
    assert text.startswith("# The guess-a-number environment on the vLLM engine (every turn a `guess` call or a "
                           "number):")
    assert "1..4 through the `guess` tool" in text and "16 tool calls in all." in text
    assert f"{env_engine.COMMAND} --constrained --seed N (N = 0)" in text
    pool = json.loads((tmp_path / "env_engine_constrained.json").read_text())
    assert pool["per_seed"][0]["file"] == "env_engine_constrained_seed0.json"
    assert pool["per_seed"][0]["tool_calls"]["ratio"] == {"sara_rounds": 0.75, "sara_streaming": 0.5}
    assert (tmp_path / "ENV_ENGINE_CONSTRAINED.md").read_text() == text
