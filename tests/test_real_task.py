"""The real-training task (benchmarks/real_task.py), its bank (benchmarks/real_task_survey/real_task_report.py) and
its replay (benchmarks/real_replay/real_replay.py --quick): the bank reproduces the GPU survey exactly, the mixture's
shares are exact, and the replay's accounting holds step by step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import real_task, replay
from benchmarks.real_replay import loss_cap, real_replay
from benchmarks.real_task import REAL_TASK, mixture_copies, mixture_rows
from benchmarks.real_task_survey import real_task_report

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "real_task_survey" / "data"
SURVEY = DATA / "survey"
SURVEY_LARGE = DATA / "survey_large"
BANK = DATA / "real_task_bank.npz"


def _bank():
    success, tokens, meta = replay.load_bank(BANK)
    with np.load(BANK) as z:
        task = z["task"]
    return success, tokens, task, meta


def test_bank_is_the_large_survey_cell_family_major():
    success, tokens, task, meta = _bank()
    with np.load(SURVEY_LARGE / f"survey_{REAL_TASK.cell}.npz") as z:
        s, t = z["success"], z["tokens"]
    survey = json.loads((SURVEY_LARGE / "survey.json").read_text())
    F, P, M = s.shape
    assert success.shape == (F * P, M) == (2048, 32) and meta["task_names"] == list(survey["families"])
    assert set(meta["task_names"]) == set(REAL_TASK.weights)
    for f, name in enumerate(meta["task_names"]):
        rows = task == f
        assert rows.sum() == P
        np.testing.assert_array_equal(success[rows], s[f])
        np.testing.assert_array_equal(tokens[rows], t[f])
        # The per-family success rate the survey itself recorded (rounded to 4 places there).
        assert round(float(success[rows].mean()), 4) == survey["cells"][REAL_TASK.cell][name]["success"]
        assert meta["distinct_expressions"][name] == len(set(survey["expressions"][name]))
    assert sum(meta["distinct_expressions"].values()) >= 1000
    assert "NOT through vLLM" in meta["generation"] and meta["sampling"]["temperature"] == 0.6
    assert meta["replay_copies"] == {"mul_10_99": 11, "add_10_99": 3, "sub_0_20": 3, "add_0_2": 3}


def test_large_survey_reproduces_the_8_family_survey_on_its_first_prompts():
    """Same family seeds and sampling seeds: the first 128 prompts of each family are the 8-family survey's, with
    the same completion token ids (generated in two separate GPU sessions)."""
    small, large = (json.loads((d / "survey.json").read_text()) for d in (SURVEY, SURVEY_LARGE))
    cell = f"survey_{REAL_TASK.cell}.npz"
    with np.load(SURVEY / cell) as a, np.load(SURVEY_LARGE / cell) as b:
        for i, name in enumerate(large["families"]):
            g = list(small["families"]).index(name)
            assert large["family_seeds"][name] == g
            assert large["expressions"][name][:128] == small["expressions"][name]
            for key in ("success", "tokens", "ids"):
                np.testing.assert_array_equal(b[key][i, :128], a[key][g])


def test_bank_split_regenerates_the_survey_expressions():
    survey = json.loads((SURVEY / "survey.json").read_text())
    for name in ("mul_10_99", "sub_0_20"):
        bank = real_task.family_expressions(name, 128, "bank")
        assert list(bank["expression"]) == survey["expressions"][name]
        assert list(bank["answer"]) == survey["answers"][name]
        train = set(real_task.family_expressions(name, 128, "train")["expression"])
        assert train != set(bank["expression"])
    large = json.loads((SURVEY_LARGE / "survey.json").read_text())
    for name in large["families"]:
        bank = real_task.family_expressions(name, large["prompts_per_family"], "bank")
        assert list(bank["expression"]) == large["expressions"][name]


def test_mixture_copies_make_shares_exact():
    assert mixture_copies(REAL_TASK.weights, {f: 128 for f in REAL_TASK.weights}) == \
        {"mul_10_99": 11, "add_10_99": 3, "sub_0_20": 3, "add_0_2": 3}
    # Unequal row counts: 2 rows of a, 4 of b at 50/50 -> a's rows twice, b's once (4 ids each).
    assert mixture_copies({"a": 0.5, "b": 0.5}, {"a": 2, "b": 4}) == {"a": 2, "b": 1}
    with pytest.raises(ValueError, match="no rows"):
        mixture_copies({"a": 0.5, "b": 0.5}, {"a": 2})
    _, _, task, meta = _bank()
    rows = mixture_rows(task, meta["task_names"], REAL_TASK.weights)
    fam = task[rows]
    assert len(rows) == 512 * 20  # 512 rows per family, copies 11 + 3 + 3 + 3
    for f, w in REAL_TASK.weights.items():
        assert np.mean(fam == meta["task_names"].index(f)) == pytest.approx(w, abs=1e-12)


def test_task_phi_is_the_weighted_family_phi_and_in_range():
    success, _, task, meta = _bank()
    rows = mixture_rows(task, meta["task_names"], REAL_TASK.weights)
    for k in (4, 8, 16):
        weighted = sum(w * real_task_report.group_shares(success[task == meta["task_names"].index(f)], k)["phi"].mean()
                       for f, w in REAL_TASK.weights.items())
        assert replay.bank_summary(success[rows], k)["phi"] == pytest.approx(weighted, rel=1e-12)
    phi8 = replay.bank_summary(success[rows], 8)["phi"]
    assert 0.2 <= phi8 <= 0.35  # the regime
    # Failed completions are longer than successful ones in every family of the task.
    _, tokens, _, _ = _bank()
    for f in REAL_TASK.weights:
        sel = task == meta["task_names"].index(f)
        assert tokens[sel][success[sel] == 0].mean() > tokens[sel][success[sel] == 1].mean()


def test_group_shares_closed_form():
    # 2 successes of 4: k=2 -> all fail C(2,2)/C(4,2) = 1/6, all pass 1/6, mixed 2/3.
    g = real_task_report.group_shares(np.array([[1, 1, 0, 0]]), 2)
    assert g["all_fail"][0] == pytest.approx(1 / 6) and g["phi"][0] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        real_task_report.group_shares(np.array([[1, 0]]), 3)


def test_make_real_task_counts_splits_and_answers():
    train = real_task.make_real_task(40, "train")
    held = real_task.make_real_task(40, "heldout")
    counts = {f: train["task"].count(f) for f in REAL_TASK.weights}
    assert counts == {"mul_10_99": 22, "add_10_99": 6, "sub_0_20": 6, "add_0_2": 6}
    assert set(train["expression"]) != set(held["expression"])
    row = train[0]
    assert row["prompt"][-1]["content"] == f"What is {row['expression']}? Answer with only the number."
    for e, a in zip(train["expression"], train["answer"]):
        x, op, y = e.split()
        assert int(a) == {"+": int(x) + int(y), "-": int(x) - int(y), "*": int(x) * int(y)}[op]
    with pytest.raises(ValueError, match="split"):
        real_task.make_real_task(40, "test")


def test_replay_rows_share_a_shuffle():
    success = np.array([[1, 0, 1, 0, 1, 0, 1, 0], [1] * 8])
    tokens = np.tile(np.arange(8), (2, 1))  # token count = sample index: identifies the sample drawn
    src = replay.ReplaySource(success, tokens, seed=3, rows=np.array([0, 0, 1]))
    assert len(src) == 3
    src.start_step()
    out = src(np.array([0, 1]), np.array([4, 4]))  # ids 0 and 1 are both row 0
    assert sorted(out.tokens.tolist()) == list(range(8))  # 8 distinct samples: no sample drawn twice
    assert src.would_mix(np.array([2]), np.array([2]), np.array([2]), k=4)[0] == 0.0  # row 1 always passes
    with pytest.raises(ValueError, match="rows"):
        replay.ReplaySource(success, tokens, rows=np.array([0, 2]))


def test_quick_replay_values_and_accounting(tmp_path):
    doc = real_replay.main(["--quick", "--out", str(tmp_path)])
    success, tokens, task, meta = _bank()
    for f in REAL_TASK.weights:
        assert doc["family_success"][f] == float(success[task == meta["task_names"].index(f)].mean())
    assert doc["replayed_rows"] == 512 * 20 and doc["distinct_prompts"] == 4 * 512
    rows = mixture_rows(task, meta["task_names"], REAL_TASK.weights)
    cell = doc["cells"]["k=8,B=16"]
    uni = cell["summary"]["uniform"]
    assert uni["rollouts"][0] == 16 * 8 and uni["rollouts_ratio"][0] < 1.0
    assert cell["summary"]["DS"]["effective_fraction"][0] == 1.0
    assert cell["bank"]["phi"] == pytest.approx(real_task_report.describe(
        success[rows], tokens[rows], 96)["phi_k8"])
    md = (tmp_path / "REAL_REPLAY.md").read_text()
    assert "## k=8, B=16" in md and "not run in this mode" in md
    # Every generated rollout has one fate, step by step, for round and streaming collection.
    settings = real_replay.QUICK
    for label in ("uniform", "DS", "SARA (paper)", "SARA (streaming)"):
        steps = real_replay.run_cell(success, tokens, rows, label, 8, 16, settings)
        assert len(steps) == len(settings.seeds) * settings.steps
        for r in steps:
            assert r["rollouts"] == (r["rollouts_trained"] + r["rollouts_abandoned"] + r["rollouts_surplus"]
                                     + r["rollouts_active_left"])
            assert r["rollouts_trained"] == 16 * 8 and r["filled"] == 1
            if label != "uniform":
                assert r["effective_in_batch"] == 16


def test_loss_cap_quick_run_orders_the_caps_and_accounts_every_rollout(tmp_path):
    """benchmarks/real_replay/loss_cap.py --quick: a looser cap abandons at least as often and never spends more,
    an uncapped boundary is the loosest, and every generated rollout (aborted ones included) has one fate."""
    doc = loss_cap.main(["--quick", "--out", str(tmp_path)])
    cell = doc["cells"]["B=8"]["summary"]
    assert list(cell) == list(loss_cap.CONFIGS) and cell[loss_cap.REFERENCE]["rollouts_ratio"][0] == 1.0
    caps = ["best, loss cap 0.1", "best, loss cap 0.2", "best, loss cap 0.45", "best, no loss cap"]
    abandoned = [cell[c]["abandoned"][0] for c in caps]
    assert abandoned == sorted(abandoned) and abandoned[0] < abandoned[-1]
    for c in caps + ["paper SARA (streaming)"]:
        assert cell[c]["steps_filled"] == cell[c]["steps"] == 2 * 2
    md = (tmp_path / "LOSS_CAP.md").read_text()
    assert "## k = 8, B=8" in md and "| best, loss cap 0.45 |" in md
    success, tokens, task, meta = _bank()
    rows = mixture_rows(task, meta["task_names"], REAL_TASK.weights)
    from benchmarks import sim
    from sara_trl.allocation import AllocationConfig

    cfg = AllocationConfig(k=8, **loss_cap.CONFIGS["best, loss cap 0.45"])
    steps, _ = sim.run_steps(replay.ReplaySource(success, tokens, seed=0, rows=rows), cfg, 8, 3, 0)
    # carry_over: what a step leaves active is carried into the next, so over the run every generated rollout is
    # trained, abandoned or surplus, or still active after the last step
    fates = sum(r["rollouts_trained"] + r["rollouts_abandoned"] + r["rollouts_surplus"] for r in steps)
    assert sum(r["rollouts"] for r in steps) == fates + steps[-1]["rollouts_active_left"]
    assert any(r["rollouts_active_left"] for r in steps[:-1])  # something was carried over
    for r in steps:
        assert r["rollouts_trained"] == 8 * 8 and r["effective_in_batch"] == 8


def test_report_regenerates_the_committed_bank(tmp_path):
    doc = real_task_report.main(["--out", str(tmp_path), "--bank", str(tmp_path / "bank.npz")])
    with np.load(tmp_path / "bank.npz") as a, np.load(BANK) as b:
        for key in ("success", "tokens", "task"):
            np.testing.assert_array_equal(a[key], b[key])
    assert json.loads((tmp_path / "bank.json").read_text())["task_weights"] == REAL_TASK.weights
    md = (tmp_path / "REAL_TASK.md").read_text()
    assert f"| 8 | {doc['chosen']['phi_k8']:.3f} |" in md
    assert (tmp_path / "plots" / "real_task_success.png").stat().st_size > 0
    assert doc["histogram"][0] == pytest.approx(doc["chosen"]["all_fail_M"])


def test_vllm_comparison_statistics_without_vllm():
    from benchmarks.real_task_survey import vllm_vs_survey as vs

    s, t, _ = real_task.load_survey_cell(REAL_TASK.cell)
    f = list(real_task.FAMILIES).index("add_0_2")
    same = {"add_0_2": (s[f, :6], t[f, :6].astype(np.int64))}
    c = vs.compare(["add_0_2"], same, 6)["add_0_2"]  # the survey against itself: no difference
    assert c["success_vllm"] == c["success_survey"] == float(s[f, :6].mean())
    assert c["success_diff"]["mean"] == 0.0 and c["success_diff"]["p"] == 1.0
    assert c["success_two_proportion_p"] == pytest.approx(1.0)
    # 30/100 vs 50/100: z = 0.2 / sqrt(0.4 * 0.6 * 0.02) = 2.8868, two-sided p = 0.003892
    assert vs.two_proportion(30, 100, 50, 100) == pytest.approx(0.0038924, rel=1e-4)
    d = vs.paired(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 0.0]))
    assert d["mean"] == 2.0 and d["hi"] - d["mean"] == pytest.approx(4.302652729911275 / np.sqrt(3))


def test_streaming_small_batch_quick_run(tmp_path):
    from benchmarks.simulator.latency import call_cost
    from benchmarks.streaming_small_batch import streaming_small_batch as ssb

    # one call of lengths 2, 10, 3: 10 decode steps for 15 tokens; spread over 3 slots: 5, over 2 slots: 7.5
    call = np.array([2, 10, 3])
    assert ssb.wait_steps(call, call_cost(call, 64), 64) == 5.0
    assert ssb.wait_steps(call, call_cost(call, 2), 2) == 2.5  # the 3 waits for a slot, starts at step 2, ends at 5
    doc = ssb.main(["--quick", "--out", str(tmp_path)])
    cell = doc["cells"]["B=8"]
    assert cell["widths"] == {"SARA streaming, Bk in flight": 64, "SARA streaming, 256 in flight": 256,
                              "SARA streaming defaults, Bk in flight": 64,
                              "SARA best setting with margin 0.5, Bk in flight": 64,
                              "SARA best setting with streaming defaults, Bk in flight": 64}
    summary = cell["summary"]
    assert summary[ssb.REFERENCE]["rollouts_ratio"][:3] == [1.0, 1.0, 1.0]  # round SARA against itself
    assert summary[ssb.TIME_REFERENCE]["seconds_vs_ds"][:3] == [1.0, 1.0, 1.0]
    for label, s in summary.items():
        # 2 steps per seed: the per-step mean is the mean of step 1 and the later step
        assert s["rollouts"][0] == pytest.approx((s["rollouts_first_step"][0] + s["rollouts_later_steps"][0]) / 2)
        assert s["steps"] == 4 and s["filled"] == 4
        assert 0.0 < s["wait_seconds"][0] < s["seconds"][0]
        if label in cell["widths"]:  # a streaming configuration
            assert s["calls"][0] == 1.0  # one continuous engine per step
            if "best setting" in label:  # carry_over: held requests run on, so a step may abort nothing
                assert s["completed_ratio"][0] <= s["rollouts_ratio"][0]
            else:
                assert s["completed_ratio"][0] < s["rollouts_ratio"][0]  # aborted partial requests count as generated
        else:
            assert s["completed_ratio"] == s["rollouts_ratio"]  # a round call runs every request to its end
    md = (tmp_path / "STREAMING_SMALL_BATCH.md").read_text()
    assert ("## B = 8 (streaming widths: Bk in flight = 64, 256 in flight = 256, Bk in flight = 64, Bk in flight = 64, "
            "Bk in flight = 64)") in md


def test_streaming_engine_ratios_over_seeds():
    """The evidence table of a pooled real-engine run: per-seed ratios to ds_rounds, their mean with a Student-t
    interval over the seeds, and the leave-one-seed-out time ratio that moves most."""
    from scipy import stats

    from benchmarks.streaming_engine import streaming_engine as se

    def rows(seed, seconds, rollouts, wait=None):
        return [{"seed": seed, "seconds": s, "rollouts": r, "tokens": 10 * r, **({} if wait is None else
                 {"reward_seconds": 2 * wait, "reward_wait_seconds": wait, "mean_in_flight": r / 4})}
                for s, r in zip(seconds, rollouts)]

    ds = rows(0, [100.0], [200]) + rows(1, [100.0], [200]) + rows(2, [200.0], [400])
    sara = rows(0, [60.0], [100], 1.0) + rows(1, [80.0], [120], 3.0) + rows(2, [140.0], [200], 2.0)
    lines = se.seed_ratio_table([{"config": "ds_rounds", "steps": ds}, {"config": "sara_streaming", "steps": sara}])
    def cell(per_seed):  # mean [95% t-interval over the 3 seeds]
        m, half = np.mean(per_seed), stats.t.ppf(0.975, 2) * float(np.std(per_seed, ddof=1)) / np.sqrt(3)
        return f"{m:.2f} [{m - half:.2f}, {m + half:.2f}]"

    assert lines[2] == "| ds_rounds | 3 | 1.00 | 1.00 | 1.00 | - | - | - | - |"
    # seconds per seed 60/100, 80/100, 140/200; rollouts (and tokens) 100/200, 120/200, 200/400; dropping seed 0
    # (ratio 0.6) moves the time ratio from 0.70 to 0.75, as far as dropping seed 1, and comes first
    assert lines[3] == (f"| sara_streaming | 3 | {cell([0.6, 0.8, 0.7])} | {cell([0.5, 0.6, 0.5])} | "
                        f"{cell([0.5, 0.6, 0.5])} | without seed 0: 0.75 | 4.00 | 2.00 | 35.00 |")  # (25+30+50)/3
    assert se.seed_ratio_table([{"config": "sara_streaming", "steps": sara}]) == []  # no reference, no table


def test_streaming_engine_summary_from_its_json(tmp_path):
    """The real-engine table is rebuilt from its JSON (``--render``): means, completed = rollouts - aborted, ratios,
    and a bootstrap interval of the time ratio that brackets the point estimate and stays within the ratio's bounds."""
    from benchmarks.streaming_engine import streaming_engine as se

    def run(config, seconds, rollouts, aborted):
        return {"config": config, "steps": [
            {"seconds": s, "rollouts": r, "tokens": 10 * r, "engine_calls": 1, "surplus_rollouts": a,
             "aborted_rollouts": a, "effective_in_batch": 8} for s, r, a in zip(seconds, rollouts, aborted)]}

    assert se.ratio_interval([2.0, 2.0, 2.0], [4.0, 4.0, 4.0]) == pytest.approx((0.5, 0.5))
    lo, hi = se.ratio_interval([1.0, 3.0, 2.0, 2.0], [4.0, 4.0, 6.0, 2.0])
    assert 1.0 / 6.0 <= lo < 0.5 < hi <= 3.0 / 2.0  # point estimate 2 / 4
    result = {"date": "d", "machine": "m", "command": "c", "runs": [
        run("ds_rounds", [40.0, 60.0], [200, 300], [0, 0]), run("sara_rounds", [50.0, 70.0], [100, 200], [0, 0]),
        run("sara_streaming", [30.0, 50.0], [110, 210], [6, 4])],
        "settings": {"groups": 8, "k": 8, "max_num_seqs": 64, "max_in_flight": None, "steps": 2}}
    out = tmp_path / "streaming_engine.json"
    out.write_text(json.dumps(result))
    assert se.main(["--render", "--out", str(out)]) == result
    md = out.with_suffix(".md").read_text()
    lo, hi = se.ratio_interval([30.0, 50.0], [40.0, 60.0])
    # means 40 s, 160 rollouts (155 completed), 1,600 tokens; 40/50 x DS, 40/60 x round SARA, 160/150, 155/150
    assert (f"| sara_streaming | 2 | 40.0 | 160 | 155 | 1600 | 0.80 [{lo:.2f}, {hi:.2f}] | 0.67 [" in md
            and md.rstrip().endswith("| 1.07 | 1.03 | 1.07 |"))
    assert "| sara_streaming | 1 | 30.0 | 110 | 1100 | 1 | 6 | 6 | 8 |" in md

    # a second seed pools with the first: steps concatenated, per-seed means, ratios over the pooled steps
    second = json.loads(json.dumps(result))
    second["settings"]["seed"], result["settings"]["seed"] = 1, 0
    for config_run in second["runs"]:
        for row in config_run["steps"]:
            row["seconds"] *= 2
    out.write_text(json.dumps(result))
    (tmp_path / "seed1.json").write_text(json.dumps(second))
    pooled_out = tmp_path / "pooled.json"
    pooled = se.main(["--pool", str(out), str(tmp_path / "seed1.json"), "--out", str(pooled_out)])
    assert pooled["settings"]["seed"] == [0, 1] and [row["seed"] for row in pooled["runs"][2]["steps"]] == [0, 0, 1, 1]
    md = pooled_out.with_suffix(".md").read_text()
    lo, hi = se.ratio_interval([30.0, 50.0, 60.0, 100.0], [40.0, 60.0, 80.0, 120.0])
    assert "| sara_streaming | 40.0 (160) | 80.0 (160) |" in md  # per seed: mean s (rollouts)
    assert f"| sara_streaming | 4 | 60.0 | 160 | 155 | 1600 | 0.80 [{lo:.2f}, {hi:.2f}] |" in md
    assert se.main(["--render", "--out", str(pooled_out)]) == pooled
    assert pooled_out.with_suffix(".md").read_text() == md
    with pytest.raises(SystemExit):  # the same configurations at the same seed twice
        se.main(["--pool", str(out), str(out), "--out", str(pooled_out)])
    # a configuration run at one seed only pools that seed's steps; '-' where it did not run
    extra = {"date": "d", "machine": "m", "command": "c", "settings": dict(result["settings"], seed=1),
             "runs": [run("sara_auto_streaming", [20.0, 40.0], [90, 110], [2, 2])]}
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    pooled = se.main(["--pool", str(out), str(tmp_path / "seed1.json"), str(tmp_path / "extra.json"),
                      "--out", str(pooled_out)])
    md = pooled_out.with_suffix(".md").read_text()
    assert [r["config"] for r in pooled["runs"]][-1] == "sara_auto_streaming"
    assert "| sara_auto_streaming | - | 30.0 (100) |" in md
    # against DS on the seed both ran (seed 1: 80 and 120 s), not DS pooled over both seeds
    assert "| sara_auto_streaming | 2 | 30.0 | 100 | 98 | 1000 | 0.30 [" in md
    with pytest.raises(SystemExit):  # --pool without --out would overwrite the seed-0 file
        se.main(["--pool", str(out), str(tmp_path / "seed1.json")])
    with pytest.raises(ValueError, match="is itself pooled"):
        se.pool([str(out), str(pooled_out)])
    (tmp_path / "other_cpu.json").write_text(json.dumps(dict(extra, machine="other cpu (x86_64), 2 CPUs")))
    with pytest.raises(ValueError, match="on another CPU"):
        se.pool([str(out), str(tmp_path / "other_cpu.json")])
    second["settings"]["k"] = 4
    (tmp_path / "seed1.json").write_text(json.dumps(second))
    with pytest.raises(ValueError, match="has settings"):
        se.pool([str(out), str(tmp_path / "seed1.json")])
