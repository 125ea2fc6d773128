"""Issue 56 (benchmarks/selection_training): the per-prompt draw accounting, its identity with the allocator's own
accounting on replayed streaming steps with carry_over and selection, the report's figures on a hand-made run folder,
the driver's defaults and the wall-time estimate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import replay, sim
from benchmarks.selection_training import draws
from benchmarks.selection_training.estimate import estimate, evaluations
from benchmarks.selection_training.selection_training import CONFIGS, DEFAULTS, QUICK
from benchmarks.selection_training.selection_training_report import leave_one_out, render, run_metrics
from sara_trl.allocation import AllocationConfig

# Two steps of a 4-prompt pool: prompt 2 is left active in step 1 and carried into step 2 (3 outcomes, all successes,
# then 5 more of which 3 succeed); prompt 3 is drawn twice in step 2 (a repeat in the step).
STEP1 = {"prompt_id": [0, 1, 2], "n": [8, 2, 3], "s": [4, 0, 3], "fate": [0, 2, 3], "carried_in": 0}
STEP2 = {"prompt_id": [2, 3, 1, 3], "n": [8, 8, 1, 2], "s": [6, 8, 0, 2], "fate": [0, 2, 2, 2], "carried_in": 1}
TASKS = ["mul_10_99", "mul_10_99", "add_10_99", "add_0_2"]


def test_new_outcomes_subtract_what_a_carried_prompt_brought_in():
    rows = draws.new_outcomes([STEP1, STEP2])
    assert rows[0] == [(0, 8, 4, 0, True), (1, 2, 0, 2, True), (2, 3, 3, 3, True)]
    assert rows[1] == [(2, 5, 3, 0, False), (3, 8, 8, 2, True), (1, 1, 0, 2, True), (3, 2, 2, 2, True)]
    pooled = draws.pooled_outcomes([STEP1, STEP2])
    assert pooled == {0: (8, 4), 1: (3, 0), 2: (8, 6), 3: (10, 10)}
    assert draws.never_mixed(pooled) == {1, 3}
    shares = draws.draw_shares([STEP1, STEP2], {1, 3})
    assert (shares["draws"], shares["draws_never"], shares["outcomes"], shares["outcomes_never"]) == (6, 4, 29, 13)
    assert shares["draw_share"] == pytest.approx(4 / 6) and shares["outcome_share"] == pytest.approx(13 / 29)
    assert draws.trained_success([STEP1, STEP2]) == {"groups": 2, "success": 0.625}
    assert draws.draws_per_prompt([STEP1, STEP2], 4).tolist() == [1, 2, 1, 2]


def test_new_outcomes_refuse_tables_that_are_not_consecutive_steps():
    with pytest.raises(ValueError, match="not the previous step's surplus and active"):
        draws.new_outcomes([STEP1, {**STEP2, "prompt_id": [1, 3, 1, 3]}])  # prompt 1 was abandoned, not carried
    with pytest.raises(ValueError, match="carried in with 3 outcomes"):
        draws.new_outcomes([STEP1, {**STEP2, "n": [2, 8, 1, 2], "s": [2, 8, 0, 2]}])
    with pytest.raises(ValueError, match="carried_in=5"):
        draws.step_table({"prompt_id": np.arange(2), "n": np.ones(2), "s": np.zeros(2), "fate": np.zeros(2)}, 5)
    with pytest.raises(ValueError, match="outside the 2 prompts"):
        draws.draws_per_prompt([STEP1], 2)


@pytest.mark.parametrize("extra", [{}, {"history_decay": 0.9, "selection": "greedy"},
                                   {"history_decay": 0.9, "selection": "thompson"}])
def test_new_outcomes_count_every_scored_rollout_once_in_replayed_streaming_with_carry_over(extra):
    """On a 12-prompt replay pool (repeats within a step included), the new outcomes of each step are its generated
    rollouts less the aborted ones, and its draws are the fresh prompts it drew."""
    rng = np.random.default_rng(3)
    success = (rng.random((12, 32)) < rng.random((12, 1))).astype(np.int8)
    success[:4] = 0  # never solved
    tokens = rng.integers(5, 60, size=(12, 32))
    cfg = AllocationConfig(k=8, allocator="sara", stopping_rule="bayes_optimal", auto_loss_cap=0.45, carry_over=True,
                           auto_min_prompts=4, collection="streaming", budget_cap=8.0, **extra)
    tables, stats = [], []

    def keep(step, res):
        tables.append(draws.step_table(res.prompt_table, res.stats.carried_in))
        stats.append(res.stats)

    sim.run_steps(replay.ReplaySource(success, tokens, seed=1), cfg, 2, 6, 1, max_in_flight=16, on_result=keep)
    rows = draws.new_outcomes(tables)
    assert sum(st.carried_in for st in stats) > 0  # carry_over carried prompts across steps
    for r, st in zip(rows, stats):
        assert sum(x[1] for x in r) == st.rollouts_generated - st.rollouts_aborted
        assert sum(x[4] for x in r) == st.prompts_drawn


def _run(name, seed, rollouts, eff, accs, machine="AMD EPYC"):
    steps = [{"step": i + 1, "rollouts": r, "tokens": 20.0 * r, "rounds": 1.0, "generation_seconds": r / 10.0,
              "training_seconds": 20.0, "effective_fraction": e, "raw_success": 0.3, "reward": 0.5,
              "prompts": t, "sara": {"history_hit_rate": 0.5 * i} if "sel" in name else {},
              "table_is_this_step": True}
             for i, (r, e, t) in enumerate(zip(rollouts, eff, (STEP1, STEP2)))]
    evals = [{"step": s, "pass_at_1": a, "by_family": [a, a, a, a], "seconds": 1.0} for s, a in zip((0, 2), accs)]
    return {"allocator": name, "seed": seed, "steps": steps, "evals": evals, "train_tasks": TASKS,
            "machine": {"cpu": machine}, "finished": "2026-12-08T01:00:00+00:00", "load_average_start": 0.4,
            "load_average_after": 1.9, "commit": "abcdef0123"}


def _folder(tmp_path):
    settings = {"steps": 2, "groups": 4, "k": 8, "lr": 2e-5, "budget-cap": 8.0, "prompts": 4, "eval-every": 2,
                "eval-prompts": 64, "eval-samples": 4, "engine": "vllm", "threads": 2}
    (tmp_path / "settings.json").write_text(json.dumps({
        "settings": settings, "allocators": {n: CONFIGS[n] for n in ("DS", "SARA-auto45-sel")},
        "environment": {"cpu": "AMD EPYC"}, "command": "python -m benchmarks.selection_training.selection_training"}))
    ds_acc = {0: 0.20, 1: 0.30, 2: 0.25}
    sel = {0: ([40.0, 40.0], [1.0, 0.6], 0.25), 1: ([40.0, 50.0], [1.0, 1.0], 0.30),
           2: ([60.0, 60.0], [1.0, 1.0], 0.20)}
    for seed in range(3):
        (tmp_path / f"DS_seed{seed}.json").write_text(json.dumps(
            _run("DS", seed, [100.0, 100.0], [1.0, 1.0], [0.10, ds_acc[seed]])))
        r, e, a = sel[seed]
        (tmp_path / f"SARA-auto45-sel_seed{seed}.json").write_text(json.dumps(
            _run("SARA-auto45-sel", seed, r, e, [0.10, a], machine="Intel" if seed == 2 else "AMD EPYC")))
    return tmp_path


def test_run_metrics_read_costs_per_effective_batch_and_draws_from_the_tables():
    m = run_metrics(_run("SARA-auto45-sel", 0, [40.0, 40.0], [1.0, 0.6], [0.1, 0.25]), never_study={1})
    assert m["effective_batches"] == pytest.approx(1.6) and m["rollouts_per_batch"] == pytest.approx(50.0)
    assert m["step_seconds_per_batch"] == pytest.approx((8.0 + 40.0) / 1.6)
    assert m["pass_at_1"] == {0: 0.1, 2: 0.25}
    assert (m["draws"], m["draws_per_step"], m["draws_per_prompt"]) == (6, 3.0, 1.5)
    assert (m["draws_per_prompt_min"], m["draws_per_prompt_max"], m["never_prompts"]) == (1, 2, 0.5)
    assert m["never_draw_share"] == pytest.approx(4 / 6) and m["never_outcome_share"] == pytest.approx(13 / 29)
    assert m["never_draw_share_study"] == pytest.approx(2 / 6)  # only prompt 1's two draws
    assert m["repeats_in_step"] == pytest.approx(1 / 6) and m["trained_success"] == 0.625
    assert m["trained_families"] == {"mul_10_99": 0.5, "add_10_99": 0.5, "sub_0_20": 0.0, "add_0_2": 0.0}
    assert m["history_hit_rate"] == 0.25 and m["tables_match"]


def test_leave_one_out_names_a_seed_only_when_it_moves_the_mean_by_003():
    assert leave_one_out({0: 0.5, 1: 0.45, 2: 0.6}) == (2, pytest.approx(0.475), pytest.approx(1.55 / 3))
    assert leave_one_out({0: 0.5, 1: 0.51, 2: 0.52}) is None
    assert leave_one_out({0: 0.5, 1: 0.9}) is None  # fewer than 3 seeds


def test_report_renders_exact_figures_from_a_run_folder(tmp_path):
    from benchmarks.real_training.real_training_report import load_runs

    meta, runs = load_runs(_folder(tmp_path))
    text = render(meta, runs)
    # rollouts per effective batch over DS's (100): 50, 45, 60 -> 0.517; seconds only on the same machine (0, 1)
    assert "| SARA-auto45-sel | 3 | 97 | 1933 | 0.933 [0.646, 1.220] | 0.517 [0.327, 0.706] |" in text
    assert "(target <= 0.50, upper end < 0.60): missed" in text
    assert "| SARA-auto45-sel | rollouts per effective batch x DS | 0.517 (3) | seed 2: 0.475 |" in text
    # pass@1 at steps 0 and 2; final - DS per seed: +0.05, 0, -0.05
    assert "| DS | 0.100 | 0.250 [0.126, 0.374] | - |" in text
    assert "| SARA-auto45-sel | 0.100 | 0.250 [0.126, 0.374] | 0.000 [-0.124, 0.124] |" in text
    assert "not below DS's: not shown: the interval spans 0; mean >= 0" in text
    # the draw table: 3 draws a step, 1.5 per prompt (1-2), half the pool never mixed, 66.7% of draws on it
    assert ("| SARA-auto45-sel | 3.0 | 1.50 | 1-2 | 50.0% | 66.7% | 44.8% | 66.7% | 16.7% | 0.625 | 0.25 |"
            in text)
    assert "Study-wide never-mixing prompts: 2 of 4." in text
    assert "| SARA-auto45-sel | 2 | Intel | 2026-12-08 | no | 0.4 | 1.9 | abcdef0 | yes |" in text
    assert "| SARA-auto45-sel | 1 | AMD EPYC | 2026-12-08 | yes | 0.4 | 1.9 | abcdef0 | yes |" in text


def test_targets_are_not_judged_on_fewer_seeds_than_the_issue_asks_for(tmp_path):
    from benchmarks.real_training.real_training_report import load_runs

    folder = _folder(tmp_path)
    for name in ("DS_seed2.json", "SARA-auto45-sel_seed2.json"):
        (folder / name).unlink()
    text = render(*load_runs(folder))
    # seeds 0-1: 80 rollouts / 1.6 effective batches and 90 / 2.0 -> 0.50 and 0.45 of DS's 100 per effective batch
    from scipy import stats

    half = stats.t.ppf(0.975, 1) * np.std([0.50, 0.45], ddof=1) / np.sqrt(2)
    assert (f"{0.475:.3f} [{0.475 - half:.3f}, {0.475 + half:.3f}] over 2 seeds (target <= 0.50, upper end < 0.60): "
            "not judged: 2 of the 3 seeds the issue asks for.") in text
    assert "(not below DS's: not judged: 2 of the 3 seeds the issue asks for; mean >= 0)" in text


def test_driver_defaults_are_the_studys_and_the_selection_config_adds_history_and_a_rule():
    from benchmarks.real_training import real_training

    args = real_training.parse_args([], CONFIGS, DEFAULTS)
    assert (args.groups, args.k, args.steps, args.prompts, args.eval_every) == (4, 8, 8, 32, 4)
    assert args.allocators == "DS,SARA-auto45,SARA-auto45-sel" and args.engine == "vllm"
    sel = CONFIGS["SARA-auto45-sel"]
    assert {key: sel[key] for key in ("history_decay", "selection")} == {"history_decay": 0.9, "selection": "greedy"}
    assert {key: value for key, value in sel.items() if key not in ("history_decay", "selection")} \
        == real_training.ALLOCATORS["SARA-auto45"]
    quick = real_training.parse_args(QUICK, CONFIGS, DEFAULTS)
    assert (quick.steps, quick.groups, quick.k, quick.engine) == (3, 2, 4, "vllm")


def test_estimate_adds_process_build_steps_and_evaluations():
    assert [evaluations(8, 4), evaluations(7, 4), evaluations(6, 3), evaluations(8, 8)] == [3, 3, 3, 2]
    m = {"DS": {"generation": 60.0, "training": 140.0, "eval": 100.0, "build": 5.0, "groups": 8}}
    est = estimate(m, ["DS"], seeds=3, steps=8, groups=4, every=4, eval_prompts=32, eval_samples=4,
                   process_seconds=60.0)
    assert est["per_run"]["DS"] == pytest.approx(60.0 + 5.0 + 8 * 100.0 + 3 * 50.0)
    assert est["total"] == pytest.approx(3 * 1015.0)


def test_replay_pool_has_the_task_shares_and_distinct_rows_of_each_family():
    from benchmarks.real_task import REAL_TASK
    from benchmarks.selection_training.selection_replay import pool_rows

    names = list(REAL_TASK.weights)
    task_index = np.repeat(np.arange(4), 50)  # 50 bank rows per family, in weights order
    rows = pool_rows(task_index, names, 32, seed=3)
    counts = np.bincount(task_index[rows], minlength=4).tolist()
    assert counts == [17, 5, 5, 5] and len(set(rows.tolist())) == 32  # 17.6, 4.8, 4.8, 4.8 by largest remainder
    assert rows.tolist() == pool_rows(task_index, names, 32, seed=3).tolist()
    with pytest.raises(ValueError, match="family mul_10_99 has 50 bank rows, the pool needs 55"):
        pool_rows(task_index, names, 100, seed=0)


def test_selection_replay_quick_run_and_the_committed_report(tmp_path):
    """DS is its own reference, a run's draws per prompt are its fresh draws over the pool, and the committed report
    is what its committed JSON renders to."""
    from benchmarks.selection_training import selection_replay as sr

    assert sr.main(["--quick", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "selection_replay.json").read_text())
    cell = doc["cells"]["B=4,P=32,steps=2"]
    assert cell["summary"]["DS"]["rollouts_ratio"] == [1.0, 1.0, 1.0, 2]
    for by_seed in cell["per_seed"].values():
        for run in by_seed.values():
            assert run["draws_per_prompt"] == pytest.approx(run["prompts_drawn"] / 32)
            assert 0.0 <= run["draw_share_bank"] <= 1.0 and run["steps"] == 2
    committed = sr.HERE
    (tmp_path / "again").mkdir()
    sr.main(["--render-only", str(committed / "selection_replay.json"), "--out", str(tmp_path / "again")])
    assert (tmp_path / "again" / "SELECTION_REPLAY.md").read_text() == (committed / "SELECTION_REPLAY.md").read_text()
