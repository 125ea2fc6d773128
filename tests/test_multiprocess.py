"""Multi-process SARA collection (issue 7): lock-step rounds, identical decisions, each process's share of the B*k
trained rows, no process ever generating zero rows, and a reward error on one process failing every process.

Two layers:

- In-process "fake world": W threads run the real batch engine and scorer (``RoundEngine``, ``TrainerScorer``; with
  the real allocator, on the core's event loop) against a fake trainer whose
  collectives meet at a thread barrier. Every collective checks that all ranks called the same operation with the
  same shape (a mismatch is what hangs or corrupts a real run), and the barrier has a timeout, so a deadlock fails
  the test instead of blocking it. Fast and exact: scripted uneven rounds, a single-prompt round, fewer requests
  than processes, errors on one or several ranks.
- Launched (``@pytest.mark.multiprocess``): ``accelerate launch`` with ``examples/accelerate_configs/multi_cpu.yaml``
  starts 2 CPU processes (gloo) running ``tests/_mp_train.py``: SaraGRPOTrainer on the tiny random Llama, 2 steps
  per allocator (plus SaraRLOOTrainer with SARA, and SARA with ``environment_factory``, ``rollout_func`` and
  ``tools=``); each process writes what it decided, generated, trained and logged (with environments, every reset it
  made), and the test compares them. Streaming collection with ``tools=`` and ``environment_factory`` runs the same
  way, each process on its own shard and its own scripted request engine (the model only trains), merged by one
  exchange per step. A reward function or an environment's ``reset`` raising on one process must fail both (rounds
  and streaming). A time limit kills the launch (whole process group) and fails the test rather than
  waiting.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import sara_trl.trainer.distributed as sara_distributed
import sara_trl.trainer.round_engine as sara_round_engine
import sara_trl.trainer.streaming as sara_streaming
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, RoundOutcome
from sara_trl.allocation.event_loop import drive_streaming_engine
from sara_trl.trainer.distributed import split_round
from sara_trl.trainer.rollout import RolloutCache
from sara_trl.trainer.round_engine import GenerateEngine, RoundEngine
from sara_trl.trainer.streaming import TrainerScorer

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "_mp_train.py"
CPU_CONFIG = REPO / "examples" / "accelerate_configs" / "multi_cpu.yaml"
BARRIER_TIMEOUT_S = 20.0


# ----------------------------------------------------------------------------------------------- split_round
@pytest.mark.parametrize("total", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_split_round_gives_every_process_an_equal_nonzero_share(total, world):
    requests = np.arange(100, 100 + total, dtype=np.int64)
    shares = [split_round(requests, world, rank) for rank in range(world)]
    per_rank = math.ceil(total / world)
    assert all(n == per_rank and len(local) == per_rank >= 1 for local, n in shares)
    # Contiguous chunks in global order, padded with copies of the last request.
    padded = np.concatenate([local for local, _ in shares])
    assert padded[:total].tolist() == requests.tolist()
    assert padded[total:].tolist() == [requests[-1]] * (per_rank * world - total)


def test_split_round_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one rollout"):
        split_round(np.zeros(0, np.int64), 2, 0)
    with pytest.raises(ValueError, match="rank 2 of world size 2"):
        split_round(np.arange(3), 2, 2)


# ----------------------------------------------------------------------------------------------- fake world
class FakeWorld:
    """W ranks as threads; collectives meet at a barrier and must agree on operation and shape."""

    def __init__(self, world: int):
        self.world = world
        self.barrier = threading.Barrier(world, timeout=BARRIER_TIMEOUT_S)
        self.slots: list = [None] * world
        self.ops: list[list] = [[] for _ in range(world)]
        self.generated: list[list[int]] = [[] for _ in range(world)]  # rows per generation call, per rank
        self.local = threading.local()

    def all_gather(self, rank: int, op: str, signature, payload) -> list:
        self.ops[rank].append((op, signature))
        self.slots[rank] = (op, signature, payload)
        self.barrier.wait()
        items = list(self.slots)
        self.barrier.wait()
        if any((o, s) != (op, signature) for o, s, _ in items):
            raise AssertionError(f"collective mismatch across ranks: {[(o, s) for o, s, _ in items]}")
        return [payload for _, _, payload in items]

    def gather_object(self, obj: list) -> list:  # stands in for accelerate.utils.gather_object
        return [x for part in self.all_gather(self.local.rank, "gather_object", None, obj) for x in part]

    def run(self, target) -> list:
        """Run ``target(rank)`` on every rank; returns per rank ``("ok", value)`` or ``("error", exception)``."""
        results: list = [None] * self.world

        def worker(rank):
            self.local.rank = rank
            try:
                results[rank] = ("ok", target(rank))
            except BaseException as err:  # noqa: BLE001 - reported to the test
                results[rank] = ("error", err)

        threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(self.world)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=3 * BARRIER_TIMEOUT_S)
        assert not any(t.is_alive() for t in threads), "a rank is still blocked: deadlock"
        return results


class FakeAccelerator:
    def __init__(self, world: FakeWorld, rank: int):
        self.world, self.num_processes, self.process_index = world, world.world, rank
        self.device = torch.device("cpu")

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        signature = (tuple(tensor.shape), str(tensor.dtype))
        return torch.cat(self.world.all_gather(self.process_index, "gather", signature, tensor))


class FakeTrainer:
    """What the batch engine and the scorer use of a SARA trainer. Prompt ``p`` is the text ``"prompt p"``; its
    completion is ``[p] + [rank] * (1 + p % 3)`` (so lengths are known and each completion shows which rank generated
    it); the reward is ``reward(pids, rank, call)`` per row, and the gather mirrors TRL's ``_calculate_rewards``."""

    def __init__(self, world: FakeWorld, rank: int, reward, fail_generation_on: tuple = ()):
        self.accelerator = FakeAccelerator(world, rank)
        self.args = SimpleNamespace(success_reward_func=None, success_threshold=0.5, success_threshold_explicit=True,
                                    allocator="sara", ds_filter="success")
        self.reward_funcs = [reward]
        self.reward_func_names = ["reward"]
        self.reward_weights = torch.ones(1)
        self._pending_extra_logs = defaultdict(list)
        self.world, self.rank, self.reward = world, rank, reward
        self.fail_generation_on = fail_generation_on
        self.calls = 0
        self.sara = SimpleNamespace(rollout_func=None, success_rule=None)

    def _sara_row(self, pid):
        return {"prompt": f"prompt {pid}"}

    def _tokenize_prompts(self, prompts):
        return [[int(p.split()[1])] for p in prompts], None, {}

    def _sara_generate_round(self, prompt_ids, images, multimodal_fields):
        self.calls += 1
        self.world.generated[self.rank].append(len(prompt_ids))
        if (self.rank, self.calls) in self.fail_generation_on:
            raise MemoryError(f"generation failed on rank {self.rank}")
        return [[ids[0]] + [self.rank] * (1 + ids[0] % 3) for ids in prompt_ids], None

    def _sara_decode(self, prompts, prompt_ids, completion_ids):
        return [str(ids) for ids in completion_ids]

    def _calculate_rewards(self, rows, prompts, completions, completion_ids):
        pids = [ids[0] for ids in completion_ids]
        local = torch.tensor(self.reward(pids, self.rank, self.calls), dtype=torch.float32).reshape(-1, 1)
        return self.accelerator.gather(local)


@pytest.fixture
def fake_world(monkeypatch):
    def make(world: int) -> FakeWorld:
        fake = FakeWorld(world)
        for module in (sara_round_engine, sara_streaming, sara_distributed):
            monkeypatch.setattr(module, "gather_object", fake.gather_object)
        return fake

    return make


def round_engine(trainer: FakeTrainer, cache: RolloutCache, round_of=None) -> tuple[RoundEngine, TrainerScorer]:
    """The batch engine of one process in lock-step, and the scorer filling ``cache`` (as ``collect_on_engine``);
    ``round_of`` the collector's (default: the engine's current round)."""
    engine = RoundEngine(trainer, GenerateEngine(trainer))
    return engine, TrainerScorer(trainer, cache, None, round_of=round_of or (lambda rid: engine.rounds),
                                 lockstep=engine)


def scripted_round_fn(trainer: FakeTrainer, cache: RolloutCache):
    """``rollout_fn(prompt_ids, counts)``: one scripted round as the event loop runs it on the batch engine (the
    requests prompt-major, one engine step, one reward pass, every completion kept in request order)."""
    engine, scorer = round_engine(trainer, cache)
    next_rid = iter(range(10**6))

    def rollout_fn(prompt_ids, counts):
        requests = np.repeat(prompt_ids, counts).tolist()
        for pid in requests:
            engine.add_prompt(next(next_rid), pid)
        batch = engine.step()
        labels = scorer.score(requests, batch)
        scorer.keep(list(range(len(batch))))
        return RoundOutcome(success=labels, tokens=np.array([len(done.completion_ids) for done in batch]))

    return rollout_fn


def even_pid_reward(pids, rank, call):
    return [1.0 if p % 2 == 0 else 0.0 for p in pids]


# (prompt_ids, counts) per round: 3 requests on 2 ranks (uneven), a single prompt with one rollout (fewer requests
# than processes), a single prompt with several rollouts, and an even round.
SCRIPTED_ROUNDS = [([4, 7], [2, 1]), ([9], [1]), ([6], [3]), ([1, 2, 3, 5], [2, 2, 2, 2])]


@pytest.mark.parametrize("world", [2, 3])
def test_round_engine_lockstep_on_uneven_and_single_prompt_rounds(world, fake_world):
    fake = fake_world(world)
    caches = [RolloutCache() for _ in range(world)]

    def rank_main(rank):
        fn = scripted_round_fn(FakeTrainer(fake, rank, even_pid_reward), caches[rank])
        return [fn(np.array(pids), np.array(counts)) for pids, counts in SCRIPTED_ROUNDS]

    results = fake.run(rank_main)
    assert all(status == "ok" for status, _ in results), results

    # Every rank generated, in every round, ceil(total / W) >= 1 rows: same count everywhere, never zero.
    totals = [sum(counts) for _, counts in SCRIPTED_ROUNDS]
    assert all(fake.generated[rank] == [math.ceil(t / world) for t in totals] for rank in range(world))
    # Identical collectives (operation, shape) in the same order on every rank.
    assert all(fake.ops[rank] == fake.ops[0] for rank in range(world))

    requests = np.concatenate([np.repeat(pids, counts) for pids, counts in SCRIPTED_ROUNDS])
    for rank in range(world):
        outcomes = results[rank][1]
        # The allocator sees the global outcomes in global request order, identical on every rank.
        assert np.array_equal(np.concatenate([o.success for o in outcomes]), (requests % 2 == 0).astype(float))
        assert np.array_equal(np.concatenate([o.tokens for o in outcomes]), 2 + requests % 3)
        # The cache holds each global request's completion from the rank that generated it (padding dropped).
        expected_ids = []
        for (pids, counts), total in zip(SCRIPTED_ROUNDS, totals):
            per_rank = math.ceil(total / world)
            expected_ids += [[int(p)] + [i // per_rank] * (1 + int(p) % 3)
                             for i, p in enumerate(np.repeat(pids, counts))]
        assert caches[rank].completion_ids == expected_ids
        assert caches[rank].round_index == [r + 1 for r, t in enumerate(totals) for _ in range(t)]


@pytest.mark.parametrize("allocator, carry_over",
                         [("sara", False), ("sara", True), ("dynamic_sampling", False), ("uniform", False)])
def test_allocator_decisions_identical_across_ranks(allocator, carry_over, fake_world):
    """The real allocator in lock-step on 2 ranks whose local outcomes differ (each rank its own random rewards, as
    each process samples its own completions): the gathered outcomes make every decision identical, and with
    carry_over every rank carries the same completions into the next step."""
    fake = fake_world(2)
    rngs = [np.random.default_rng(100 + rank) for rank in range(2)]

    def random_reward(pids, rank, call):
        return rngs[rank].integers(0, 2, size=len(pids)).astype(float).tolist()

    def rank_main(rank):
        cfg = AllocationConfig(allocator=allocator, k=4, budget_cap=8.0, carry_over=carry_over,
                               refill_margin=2.0 if carry_over else 0.5)
        allocator_, stream = Allocator(cfg), PromptStream(num_prompts=40, seed=3)
        steps, carried, cache = [], [], RolloutCache()
        for _ in range(3 if carry_over else 2):
            collector = allocator_.rounds(stream, 3)
            engine, scorer = round_engine(FakeTrainer(fake, rank, random_reward), cache, collector.round_of)
            drive_streaming_engine(collector, engine, None, scorer)
            steps.append(collector.finish())
            cache = cache.carry(steps[-1].carry_rollout_ids) if carry_over else RolloutCache()
            carried.append(cache.completion_ids)
        return steps, allocator_.state_dict(), stream.state_dict(), carried

    results = fake.run(rank_main)
    assert all(status == "ok" for status, _ in results), results
    (steps0, alloc0, stream0, carried0), (steps1, alloc1, stream1, carried1) = results[0][1], results[1][1]
    assert alloc0 == alloc1 and stream0 == stream1 and carried0 == carried1
    if carry_over:
        assert sum(s.stats.carried_in for s in steps0) > 0
    for a, b in zip(steps0, steps1):
        assert a.stats.as_dict() == b.stats.as_dict() and a.round_sizes == b.round_sizes
        assert [(g.prompt_id, g.rollout_ids.tolist(), g.success.tolist(), g.is_fill) for g in a.groups] == [
            (g.prompt_id, g.rollout_ids.tolist(), g.success.tolist(), g.is_fill) for g in b.groups
        ]
    # Each round: one generation call per rank with the same number of rows.
    assert fake.generated[0] == fake.generated[1] and min(fake.generated[0]) >= 1
    assert sum(fake.generated[0]) == sum(math.ceil(t / 2) for s in steps0 for t in s.round_sizes)


def test_reward_error_on_one_rank_fails_every_rank(fake_world):
    fake = fake_world(2)

    def failing_reward(pids, rank, call):
        if rank == 1 and call == 2:
            raise ValueError("bad reward on rank 1")
        return even_pid_reward(pids, rank, call)

    def rank_main(rank):
        fn = scripted_round_fn(FakeTrainer(fake, rank, failing_reward), RolloutCache())
        for pids, counts in SCRIPTED_ROUNDS:
            fn(np.array(pids), np.array(counts))

    (status0, err0), (status1, err1) = fake.run(rank_main)
    assert status1 == "error" and type(err1) is ValueError and str(err1) == "bad reward on rank 1"
    assert status0 == "error" and type(err0) is RuntimeError
    assert str(err0) == "SARA round 2 (rewards) failed on process 1: ValueError: bad reward on rank 1"
    # Both stopped in round 2, after the same collectives: rank 1 joined the reward gather with a dummy tensor.
    assert fake.generated == [[2, 1], [2, 1]] and fake.ops[0] == fake.ops[1]


def test_generation_errors_on_several_ranks(fake_world):
    """Generation fails on ranks 0 and 2 of 3 in round 1: each failing rank raises its own error, rank 1 names the
    first failing process and mentions the other."""
    fake = fake_world(3)

    def rank_main(rank):
        trainer = FakeTrainer(fake, rank, even_pid_reward, fail_generation_on=((0, 1), (2, 1)))
        scripted_round_fn(trainer, RolloutCache())(np.array([4, 7]), np.array([2, 1]))

    results = fake.run(rank_main)
    assert [(s, type(e)) for s, e in results] == [
        ("error", MemoryError), ("error", RuntimeError), ("error", MemoryError)
    ]
    assert str(results[0][1]) == "generation failed on rank 0" and str(results[2][1]) == "generation failed on rank 2"
    assert str(results[1][1]) == (
        "SARA round 1 (generation) failed on process 0 (and on processes [2]): "
        "MemoryError: generation failed on rank 0"
    )


def test_single_process_errors_propagate_unchanged(fake_world):
    fake = fake_world(1)

    def failing_reward(pids, rank, call):
        raise KeyError("no such column")

    def rank_main(rank):
        scripted_round_fn(FakeTrainer(fake, rank, failing_reward), RolloutCache())(np.array([3]), np.array([2]))

    [(status, err)] = fake.run(rank_main)
    assert status == "error" and type(err) is KeyError and fake.ops == [[]]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists a process's threads through /proc (Linux)")
def test_end_distributed_frees_a_gloo_group_that_a_reference_cycle_holds(tmp_path):
    """``end_distributed`` joins the gloo group's threads even while a reference cycle (as the trainer, its accelerator
    and the DDP wrapper form) holds the group: ``destroy_process_group()`` alone would leave all three running until
    the cycle is collected. With no group initialized it only collects."""
    import gc
    import time

    import torch.distributed as dist
    from _distributed import gloo_threads

    from sara_trl.trainer.distributed import end_distributed

    assert not dist.is_initialized()
    end_distributed()  # nothing to destroy
    gc.disable()  # no automatic collection between the del and end_distributed
    try:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        holder = {"group": dist.distributed_c10d._get_default_group()}
        holder["self"] = holder
        del holder
        started = ["gloo_tcp_loop", "pt_gloo_runloop", "pt_gloo_runloop"]
        for _ in range(50):  # a new thread names itself shortly after it starts
            if gloo_threads() == started:
                break
            time.sleep(0.1)
        assert gloo_threads() == started
        end_distributed()
        assert not dist.is_initialized() and gloo_threads() == []
    finally:
        gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------- launched runs
def launch(script_args: list[str], timeout_s: float) -> tuple[int, str]:
    """``accelerate launch --config_file multi_cpu.yaml tests/_mp_train.py ...``; kills the whole process group and
    fails the test when it runs past ``timeout_s`` (a hang)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join(
                   [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_CONFIG), str(SCRIPT),
           *script_args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=REPO)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"2-process run did not finish within {timeout_s} s (hang?); output tail:\n{output[-4000:]}")
    return proc.returncode, output


@pytest.fixture(scope="module")
def two_process_runs(tiny_model_dir, tmp_path_factory):
    """One launch, 2 processes, 5 runs of 2 steps each (see tests/_mp_train.py); per rank the recorded JSON."""
    out = tmp_path_factory.mktemp("mp_train")
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(out)], timeout_s=420)
    assert rc == 0, output[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)], "the launcher did not start 2 processes"
    return ranks


def group_view(batch: dict) -> list:
    return [(g["prompt_id"], g["rollout_ids"], g["success"], g["is_fill"]) for g in batch["groups"]]


def assert_lockstep(rank0: dict, rank1: dict, uniform: bool = False) -> None:
    """The two processes' records of one run (tests/_mp_train.py): same rounds and requests, each process its
    contiguous share of every round, identical decisions, accounting and logged ``sara/*`` metrics, and the trained
    rows split in TRL's group order with group-relative advantages over both processes' rows."""
    k, rows_total = rank0["num_generations"], rank0["generation_batch_size"]
    # Same rounds, same requests on both processes; each generated its contiguous ceil(total/2) >= 1 share.
    assert [(r["prompt_ids"], r["counts"]) for r in rank0["rounds"]] == [
        (r["prompt_ids"], r["counts"]) for r in rank1["rounds"]
    ]
    for r0, r1 in zip(rank0["rounds"], rank1["rounds"]):
        requests = np.repeat(r0["prompt_ids"], r0["counts"]).tolist()
        per_rank = math.ceil(len(requests) / 2)
        assert len(r0["local"]) == len(r1["local"]) == per_rank >= 1
        assert r0["local"] + r1["local"] == requests + [requests[-1]] * (2 * per_rank - len(requests))

    # Identical decisions, accounting and logged sara/* metrics.
    assert len(rank0["batches"]) == len(rank1["batches"]) == 2
    for b0, b1 in zip(rank0["batches"], rank1["batches"]):
        assert group_view(b0) == group_view(b1)
        assert b0["stats"] == b1["stats"] and b0["records"] == b1["records"] and b0["round_sizes"] == b1["round_sizes"]
    assert len(rank0["logs"]) == 2 and rank0["logs"] == rank1["logs"]
    for step, (batch, log) in enumerate(zip(rank0["batches"], rank0["logs"]), start=1):
        assert batch["round_sizes"] == [sum(r["counts"]) for r in rank0["rounds"] if r["step"] == step]
        assert log["sara/rollouts_generated"] == sum(batch["round_sizes"]) == batch["stats"]["rollouts_generated"]
        assert log["sara/rounds"] == len(batch["round_sizes"])

    # Trained rows: generation_batch_size in total, half per process, in TRL's group order (groups may straddle).
    for b0, b1 in zip(rank0["batches"], rank1["batches"]):
        assert len(b0["rows"]) == len(b1["rows"]) == rows_total // 2
        assert b0["rows"] + b1["rows"] == [g["prompt_id"] for g in b0["groups"] for _ in range(k)]
        advantages = np.asarray(b0["advantages"] + b1["advantages"]).reshape(-1, k)
        for group, adv in zip(b0["groups"], advantages):
            success = np.asarray(group["success"], dtype=float)
            assert len(success) == k and not group["is_fill"]  # commit_min = k and enough budget: full groups
            # Group-relative advantages (GRPO: normalized; RLOO: leave-one-out) over the rows of both processes:
            # zero-sum and signed like the reward, so each process trained its rows with the full group's statistics.
            assert adv.sum() == pytest.approx(0.0, abs=1e-5)
            assert np.array_equal(np.sign(np.round(adv, 6)), np.sign(success - success.mean()))
        assert b0["stats"]["rollouts_trained"] == rows_total
    if uniform:
        assert [len(b["round_sizes"]) for b in rank0["batches"]] == [1, 1]
    else:  # SARA and dynamic sampling train only mixed groups
        assert all(0 < np.mean(g["success"]) < 1 for b in rank0["batches"] for g in b["groups"])


@pytest.mark.multiprocess
@pytest.mark.parametrize("run", ["uniform", "dynamic_sampling", "sara", "sara_small", "rloo_sara"])
def test_two_processes_lockstep(run, two_process_runs):
    rank0, rank1 = (r["runs"][run] for r in two_process_runs)
    assert rank0["generation_batch_size"] == 2 * {"sara_small": 3}.get(run, 6)
    assert_lockstep(rank0, rank1, uniform=run == "uniform")


@pytest.mark.multiprocess
def test_two_processes_small_rounds_cover_uneven_and_single_prompt(two_process_runs):
    """``max_rollouts_per_round = 3`` with n0 = 2 admits one fresh prompt per round (k = 3): rounds with a single
    active prompt, rounds of 3 rollouts on 2 processes, and final top-up rounds of 1 rollout (fewer than processes)."""
    rounds = two_process_runs[0]["runs"]["sara_small"]["rounds"]
    totals = [sum(r["counts"]) for r in rounds]
    assert any(len(r["prompt_ids"]) == 1 for r in rounds), "no round with a single active prompt"
    assert any(t % 2 == 1 and t > 1 for t in totals), f"no uneven round in {totals}"
    assert 1 in totals, f"no round with fewer requests than processes in {totals}"


def assert_process_1_failed_both(rc: int, output: str, out: Path, message: str, what: str) -> None:
    """A launch whose process 1 raised ``ValueError(message)``: both processes exited non-zero, process 1 with that
    error, process 0 with ``RuntimeError("<what> failed on process 1: ValueError: <message>")``, neither wrote a
    result."""
    assert rc != 0 and message in output
    errors = [json.loads((out / f"rank{r}_error.json").read_text()) for r in range(2)]
    assert errors[1] == {"type": "ValueError", "message": message}
    assert errors[0] == {"type": "RuntimeError", "message": f"{what} failed on process 1: ValueError: {message}"}
    assert not any((out / f"rank{r}.json").exists() for r in range(2))


@pytest.mark.multiprocess
def test_two_processes_reward_error_fails_both(tiny_model_dir, tmp_path):
    """The reward function raises on process 1 only: both processes exit non-zero within the time limit, process 1
    with the original error, process 0 with a RuntimeError naming process 1 and the original message."""
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(tmp_path), "--runs", "sara", "--fail-rank", "1"],
                        timeout_s=300)
    assert_process_1_failed_both(rc, output, tmp_path, "reward function exploded on purpose on process 1",
                                 "SARA round 1 (rewards)")


@pytest.mark.multiprocess
def test_two_processes_iterable_dataset_lockstep_like_map_style(tiny_model_dir, tmp_path):
    """Both processes read the same iterable dataset (``to_iterable_dataset()``, source order): the same rounds and
    decisions on both, and the same run, row for row, as the map-style dataset in source order."""
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(tmp_path), "--runs", "sara_ordered,sara_iterable"],
                        timeout_s=300)
    assert rc == 0, output[-6000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    (ordered0, iterable0), (ordered1, iterable1) = ((r["runs"]["sara_ordered"], r["runs"]["sara_iterable"])
                                                    for r in ranks)
    assert [(r["prompt_ids"], r["counts"]) for r in iterable0["rounds"]] == [
        (r["prompt_ids"], r["counts"]) for r in iterable1["rounds"]]
    assert iterable0["rounds"][0]["prompt_ids"][:2] == [0, 1]  # source order: rows 0, 1, ... (n0 = 2 probes each)
    assert len(iterable0["batches"]) == 2 and iterable0["logs"] == iterable1["logs"]
    for b0, b1 in zip(iterable0["batches"], iterable1["batches"]):
        assert group_view(b0) == group_view(b1) and b0["records"] == b1["records"]
    for iterable, ordered in ((iterable0, ordered0), (iterable1, ordered1)):
        assert iterable["rounds"] == ordered["rounds"] and iterable["logs"] == ordered["logs"]
        for b_it, b_map in zip(iterable["batches"], ordered["batches"]):
            assert group_view(b_it) == group_view(b_map) and b_it["records"] == b_map["records"]
            assert b_it["rows"] == b_map["rows"]
            np.testing.assert_allclose(b_it["advantages"], b_map["advantages"], rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------------- environments, rollout_func
ENV_FAIL_MESSAGE = "environment reset exploded on purpose on process 1"


@pytest.fixture(scope="module")
def two_process_custom_runs(tiny_model_dir, tmp_path_factory):
    """One launch, 2 processes: sara_env (``environment_factory``), sara_rollout_func (a ``rollout_func`` sampling
    with the trainer's model) and sara_tools (``tools=``), 2 steps each (see tests/_mp_train.py); per rank the
    recorded JSON."""
    out = tmp_path_factory.mktemp("mp_custom")
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(out), "--runs",
                         "sara_env,sara_rollout_func,sara_tools"], timeout_s=300)
    assert rc == 0, output[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)], "the launcher did not start 2 processes"
    return ranks


@pytest.mark.multiprocess
def test_two_processes_environment_lockstep(two_process_custom_runs):
    """``environment_factory`` on 2 processes: identical rounds, decisions and sara/* metrics on both; each process
    resets exactly its own share of every round's rows (one instance per row, in its order: the padding copy of an
    uneven round included), ``sara/env_resets`` counts the resets of both, and every trained prompt (the replay's,
    rebuilt without resetting) carries the observation."""
    rank0, rank1 = (r["runs"]["sara_env"] for r in two_process_custom_runs)
    assert_lockstep(rank0, rank1)
    for rank in (rank0, rank1):
        assert rank["env_resets"] == [q for r in rank["rounds"] for q in r["local"]]
        assert all(all(b["observed"]) for b in rank["batches"])
    assert len(rank0["env_resets"]) == len(rank1["env_resets"]) > 0
    for step, log in enumerate(rank0["logs"], start=1):
        shares = [len(r["local"]) for r in rank0["rounds"] if r["step"] == step]
        assert log["sara/env_resets"] == 2 * sum(shares) >= log["sara/rollouts_generated"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("run", ["sara_rollout_func", "sara_tools"])
def test_two_processes_rollout_func_and_tools_lockstep(run, two_process_custom_runs):
    """A ``rollout_func`` (its own templating, transformers' ``generate`` on each process's own share), and
    ``tools=`` (TRL's tool loop in every round), on 2 processes: the same lock-step rounds and identical decisions as
    TRL's plain generation path."""
    rank0, rank1 = (r["runs"][run] for r in two_process_custom_runs)
    assert_lockstep(rank0, rank1)


@pytest.mark.multiprocess
@pytest.mark.parametrize("fail_after, round_number", [(0, 1), (6, 2)])
def test_two_processes_environment_error_fails_both(fail_after, round_number, tiny_model_dir, tmp_path):
    """``environment.reset`` raises on process 1 only, in the first round (no reset made yet) or in the second (after
    its 6 resets of round 1, whose 12 rollouts are split 6 + 6): both processes exit non-zero within the time limit,
    process 1 with the original error, process 0 with a RuntimeError naming process 1, the round and the message,
    as for a raising reward function."""
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(tmp_path), "--runs", "sara_env",
                         "--fail-env-rank", "1", "--fail-env-after", str(fail_after)], timeout_s=240)
    assert_process_1_failed_both(rc, output, tmp_path, ENV_FAIL_MESSAGE,
                                 f"SARA round {round_number} (generation)")


# ------------------------------------------------------------------------------ streaming with tools, environments
STREAM_RUNS = ("sara_env_stream", "sara_tools_stream")
# What tests/_mp_train.py scripts (its GUESS_CALL, LOOKUP_CALL; ModeEnv's target 7) and TRL's tool suffix around a
# tool's answer with Qwen3's tool chat template.
GUESS_CALL = '<tool_call>\n{"name": "guess", "arguments": {"n": %d}}\n</tool_call><|im_end|>'
LOOKUP_CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": %d}}\n</tool_call><|im_end|>'
TOOL_RESPONSE = "\n<|im_start|>user\n<tool_response>\n%s\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
STREAM_IN_FLIGHT = 8  # streaming_max_in_flight by default: a process's share of the batch, 2 groups x k = 4


@pytest.fixture(scope="module")
def two_process_stream_runs(tiny_model_dir, tmp_path_factory):
    """One launch, 2 processes: sara_env_stream and sara_tools_stream (``collection="streaming"`` on scripted
    request engines, see tests/_mp_train.py), 2 steps each; per rank the recorded JSON."""
    out = tmp_path_factory.mktemp("mp_stream")
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(out), "--runs", ",".join(STREAM_RUNS)],
                        timeout_s=420)
    assert rc == 0, output[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)], "the launcher did not start 2 processes"
    return ranks


@pytest.mark.multiprocess
@pytest.mark.parametrize("run", STREAM_RUNS)
def test_two_processes_stream_multi_turn(run, two_process_stream_runs):
    """Streaming with ``environment_factory`` / ``tools=`` on 2 processes: both end each step with the identical
    merged batch (groups, stats, per-prompt records) and ``sara/*`` logs; process p started rollouts only on its shard
    (questions = p mod 2) and trained exactly its own 2 groups (groups 2p, 2p + 1 of the merged batch), whole, with
    group-relative advantages; only "coin" prompts committed; every trained row is the scripted tool call, the tool's
    answer (masked: tool_mask 0) and the scripted answer; rollouts and tool executions of both processes add up to
    the merged ``sara/rollouts_generated`` and ``sara/tool_calls_generated``."""
    rank0, rank1 = (r["runs"][run] for r in two_process_stream_runs)
    k, groups = 4, 2  # per process: B / 2 = 2 groups of k rows
    assert (rank0["num_generations"], rank0["generation_batch_size"]) == (k, 2 * groups * k)
    assert rank0["rounds"] == rank1["rounds"] == []  # streaming: no round on the batch engine
    assert len(rank0["batches"]) == len(rank1["batches"]) == 2
    for b0, b1 in zip(rank0["batches"], rank1["batches"]):
        assert group_view(b0) == group_view(b1)
        assert b0["stats"] == b1["stats"] and b0["records"] == b1["records"] and b0["round_sizes"] == []
        assert b0["stats"]["rounds"] == 0 and b0["stats"]["batch_groups"] == 2 * groups
    assert len(rank0["logs"]) == 2 and rank0["logs"] == rank1["logs"]  # sara/collect_seconds left out (wall-clock)

    for p, rank in enumerate((rank0, rank1)):
        assert [len(started) > 0 for started in rank["started"]] == [True, True]
        assert {q % 2 for started in rank["started"] for q in started} == {p}  # its own shard only
        for batch, started in zip(rank["batches"], rank["started"]):
            mine = batch["groups"][groups * p: groups * (p + 1)]
            assert batch["rows"] == [g["prompt_id"] for g in mine for _ in range(k)]
            assert set(batch["rows"]) <= set(started)
            success = [s for g in mine for s in g["success"]]
            for g, adv in zip(mine, np.asarray(batch["advantages"]).reshape(-1, k)):
                assert g["prompt_id"] % 4 in (2, 3) and not g["is_fill"]  # "coin" prompts only
                outcome = np.asarray(g["success"], dtype=float)
                assert len(outcome) == k and 0 < outcome.mean() < 1
                assert adv.sum() == pytest.approx(0.0, abs=1e-5)
                assert np.array_equal(np.sign(np.round(adv, 6)), np.sign(outcome - outcome.mean()))
            if run == "sara_env_stream":
                assert batch["model_text"] == [GUESS_CALL % (7 if s else 8) + "done<|im_end|>" for s in success]
                assert batch["tool_text"] == [TOOL_RESPONSE % ("right" if s else "lower") for s in success]
                assert all(batch["observed"])  # the replay's prompts carry the reset's observation
            else:
                assert batch["model_text"] == [LOOKUP_CALL % q + ("yes" if s else "no") + "<|im_end|>"
                                               for q, s in zip(batch["rows"], success)]
                assert batch["tool_text"] == [TOOL_RESPONSE % f"value {q}" for q in batch["rows"]]

    for step, log in enumerate(rank0["logs"]):
        assert len(rank0["started"][step]) + len(rank1["started"][step]) == log["sara/rollouts_generated"]
        assert log["sara/rollouts_trained"] == log["sara/tool_calls_trained"] == 2 * groups * k
        assert log["sara/rounds"] == 0 and log["sara/effective_fraction"] == 1.0
    assert rank0["tool_runs"] + rank1["tool_runs"] == sum(log["sara/tool_calls_generated"] for log in rank0["logs"])


@pytest.mark.multiprocess
def test_two_processes_stream_environment_resets(two_process_stream_runs):
    """Streaming with ``environment_factory`` on 2 processes: every reset on a process is one rollout that process
    started (same questions, same order), each step's ``sara/env_resets`` is the resets of both processes and equals
    ``sara/rollouts_generated``; every instance went back to TRL's pool (instances are reused: none created beyond
    the probe and one per rollout in flight, all of them in the pool)."""
    rank0, rank1 = (r["runs"]["sara_env_stream"] for r in two_process_stream_runs)
    for rank in (rank0, rank1):
        assert rank["env_resets"] == [q for started in rank["started"] for q in started]
        assert rank["step_resets"] == [len(started) for started in rank["started"]]
        assert rank["env_pool"] == rank["env_instances"] <= 1 + STREAM_IN_FLIGHT < len(rank["env_resets"])
        assert 0 < rank["tool_runs"] <= len(rank["env_resets"])  # a rollout aborted in its first turn never guessed
    for step, log in enumerate(rank0["logs"]):
        resets = rank0["step_resets"][step] + rank1["step_resets"][step]
        assert log["sara/env_resets"] == log["sara/rollouts_generated"] == resets


@pytest.mark.multiprocess
def test_two_processes_stream_environment_error_fails_both(tiny_model_dir, tmp_path):
    """Streaming with ``environment_factory``: ``reset`` raises on process 1 at its 6th reset, with rollouts of the
    first step in flight: both processes exit non-zero within the time limit (no hang at the step's one exchange),
    process 1 with the original error, process 0 with a RuntimeError naming process 1 and the message."""
    rc, output = launch(["--model-dir", tiny_model_dir, "--out", str(tmp_path), "--runs", "sara_env_stream",
                         "--fail-env-rank", "1", "--fail-env-after", "5"], timeout_s=240)
    assert_process_1_failed_both(rc, output, tmp_path, ENV_FAIL_MESSAGE, "SARA streaming collection")


@pytest.mark.multiprocess
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists a process's threads through /proc (Linux)")
def test_two_processes_end_with_every_gloo_thread_joined(two_process_runs, two_process_custom_runs,
                                                         two_process_stream_runs):
    """The processes of each shared launch end with no gloo thread left once tests/_mp_train.py has destroyed the
    process group with ``sara_trl.trainer.distributed.end_distributed``. Without its ``gc.collect()`` the trainers'
    reference cycles keep the group alive, its threads (``gloo_tcp_loop``, 2 ``pt_gloo_runloop``) outlive
    ``destroy_process_group()`` and are torn down only at interpreter exit, where they once aborted a CI run with
    SIGABRT."""
    for runs in (two_process_runs, two_process_custom_runs, two_process_stream_runs):
        assert [rank["gloo_threads_after_teardown"] for rank in runs] == [[], []]
