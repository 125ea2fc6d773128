"""SARA's asynchronous rollout worker (TRL 1.16's ``RolloutWorkerProtocol``) on a scripted completions server: only
mixed groups pushed, of sizes commit_min..k, with TRL's advantages; abandoned prompts' requests cancelled; each
window's accounting exact; groups tagged with their oldest policy version; failures surfaced; nothing left running.

No sockets, no model: the server and the tokenizer are the stand-ins of ``tests/_fake_completions.py``."""

from __future__ import annotations

import math
import queue
import threading
import time
import typing

import numpy as np
import pytest

from sara_trl.allocation import AllocationConfig
from sara_trl.trainer.async_worker import AsyncWorkerConfig, SaraAsyncRolloutWorker
from tests._fake_completions import (
    FAILURE,
    GEN,
    SUCCESS,
    FakeCompletionsClient,
    FakeTokenizer,
    Reply,
    correct,
    dataset,
    logprob,
)


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def drain(q: queue.Queue) -> list:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


def make_worker(script, allocation, n_prompts=200, reward_funcs=(correct,), **config):
    client = FakeCompletionsClient(script)
    config = {"window_groups": 3, "window_seconds": 60.0, "max_inflight_tasks": 16, "poll_seconds": 0.01, **config}
    worker = SaraAsyncRolloutWorker(dataset=dataset(n_prompts), reward_funcs=list(reward_funcs),
                                    processing_class=FakeTokenizer(), allocation=allocation,
                                    config=AsyncWorkerConfig(**config), client=client)
    return worker, client


def no_worker_thread() -> bool:
    return not any(t.name == "sara-async-rollout" for t in threading.enumerate())


def u_shaped_script(seed=0, n=200, width=64):
    """Prompt i succeeds with probability gamma_i (u-shaped: many easy and many hard prompts), its j-th completion
    is ``4 + (5i + 3j) % 11`` tokens long."""
    rng = np.random.default_rng(seed)
    gammas = rng.beta(0.4, 0.4, size=n)
    outcomes = rng.random((n, width)) < gammas[:, None]

    def script(i, j):
        first = SUCCESS if outcomes[i, j % width] else FAILURE
        return Reply([first] + [10 + (i + j + t) % 50 for t in range(3 + (5 * i + 3 * j) % 11)])

    return script


# ---------------------------------------------------------------------------------------------------- the protocol
def test_the_worker_is_a_trl_rollout_worker():
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutWorkerProtocol

    @typing.runtime_checkable
    class Checked(RolloutWorkerProtocol, typing.Protocol):
        pass

    worker, _ = make_worker(u_shaped_script(), AllocationConfig(k=4, collection="streaming"))
    assert isinstance(worker, Checked)
    assert isinstance(worker.rollout_buffer, queue.Queue) and isinstance(worker.metrics_queue, queue.Queue)
    import inspect

    for name in ("start", "stop", "update_model_version", "check_health"):
        trl_params = list(inspect.signature(getattr(RolloutWorkerProtocol, name)).parameters)[1:]
        ours = inspect.signature(getattr(worker, name)).parameters
        assert all(p in ours for p in trl_params), (name, trl_params, list(ours))
    worker.check_health(1.0)  # not started: healthy
    worker.stop()  # not started: a no-op


# ------------------------------------------------------------------------------------ groups, accounting, windows
@pytest.mark.parametrize("allocator,commit_min,speculate", [("sara", None, False), ("sara", 4, True),
                                                             ("dynamic_sampling", None, False)])
def test_only_mixed_groups_are_pushed_and_every_window_balances(allocator, commit_min, speculate):
    k = 8
    allocation = AllocationConfig(k=k, allocator=allocator, collection="streaming", commit_min=commit_min,
                                  streaming_speculate=speculate)
    worker, client = make_worker(u_shaped_script(), allocation)
    worker.start()
    wait_for(lambda: worker.metrics_queue.qsize() >= 10, what="10 windows")
    worker.stop()
    assert no_worker_thread() and client.closed
    windows = drain(worker.metrics_queue)
    samples = drain(worker.rollout_buffer)
    assert len(windows) >= 11  # 10 or more while running, one more at stop

    # every pushed group is mixed, of size commit_min..k, each row laid out as TRL's worker lays it out
    groups: dict[int, list] = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s)
    low = k if commit_min is None else commit_min
    for rows in groups.values():
        rewards = [s.metrics["reward"] for s in rows]
        assert 0.0 in rewards and 1.0 in rewards
        assert low <= len(rows) <= k and all(s.metrics["sara/group_size"] == len(rows) for s in rows)
        assert len({tuple(s.prompt[0]["content"]) for s in rows}) == 1
        for s in rows:
            p = len(s.prompt[0]["content"]) + 1
            assert s.input_ids[p - 1] == GEN and s.input_ids.dtype == np.int64
            assert s.completion_mask.tolist() == [0] * p + [1] * (len(s.input_ids) - p)
            c = len(s.input_ids) - p
            np.testing.assert_array_equal(s.old_log_probs, np.array([0.0] * p + [logprob(t) for t in range(c)],
                                                                     np.float32))
    if commit_min is not None:
        assert any(len(rows) < k for rows in groups.values())  # the commit floor is used
    assert sorted(groups) == list(range(len(groups)))  # group ids: 0, 1, 2, ... in push order

    # each window: generated == pushed + abandoned + aborted + change in undecided (rollouts and tokens), exactly
    # (nothing waits for room in the unbounded buffer)
    assert_windows_balance(windows)
    undecided = {"rollouts": 0.0, "tokens": 0.0}
    for w in windows:
        for unit in ("rollouts", "tokens"):
            now = w[f"sara/{unit}_undecided"]
            assert w[f"sara/{unit}_waiting"] == 0
            assert w[f"sara/{unit}_generated_total"] == (w[f"sara/{unit}_pushed_total"]
                                                         + w[f"sara/{unit}_abandoned_total"]
                                                         + w[f"sara/{unit}_aborted_total"] + now - undecided[unit])
            undecided[unit] = now
        assert w["sara/effective_yield"] == (w["sara/rollouts_pushed_total"], w["sara/rollouts_generated_total"])
    assert windows[-1]["sara/inflight"] == 0 and all(w["sara/inflight"] > 0 for w in windows[:-1])
    assert all(w["sara/groups_committed_total"] >= 3 for w in windows[:-1])

    # the totals agree with what the trainer received and with what the server served
    total = {key: sum(w[key] for w in windows) for key in windows[0] if key.endswith("_total")}
    assert total["sara/groups_committed_total"] == len(groups)
    assert total["sara/rollouts_pushed_total"] == len(samples)
    assert total["sara/tokens_pushed_total"] == sum(int(s.completion_mask.sum()) for s in samples)
    finished, cancelled = client.of("finished"), client.of("cancelled")
    assert len(finished) + len(cancelled) == len(client.served)  # nothing left running on the server
    assert total["sara/rollouts_generated_total"] == len(client.served)
    assert total["sara/tokens_generated_total"] == sum(s.tokens for s in client.served)
    # aborted: the requests cancelled on the server, plus those that finished after their prompt was decided
    assert total["sara/rollouts_aborted_total"] >= len(cancelled)
    assert total["sara/tokens_aborted_total"] >= sum(s.tokens for s in cancelled)
    assert total["sara/prompts_drawn_total"] >= len(groups) + total["sara/prompts_abandoned_total"]
    if allocator == "dynamic_sampling":
        assert all(len(rows) == k for rows in groups.values())
        assert sum(w["sara/rollouts_aborted_total"] for w in windows[:-1]) == 0  # DS never gives a request up
    assert total["sara/prompts_abandoned_total"] > 0 and total["sara/rollouts_abandoned_total"] > 0


def assert_windows_balance(windows):
    """Every window, rollouts and tokens: generated == pushed + dropped + abandoned + aborted + change in undecided
    + change in waiting (rows of committed groups waiting for room in the buffer)."""
    before = {"undecided": {"rollouts": 0.0, "tokens": 0.0}, "waiting": {"rollouts": 0.0, "tokens": 0.0}}
    for w in windows:
        for unit in ("rollouts", "tokens"):
            out = sum(w.get(f"sara/{unit}_{what}_total", 0.0) for what in ("pushed", "dropped", "abandoned", "aborted"))
            change = sum(w[f"sara/{unit}_{gauge}"] - before[gauge][unit] for gauge in ("undecided", "waiting"))
            assert w[f"sara/{unit}_generated_total"] == out + change, (unit, w)
            for gauge in ("undecided", "waiting"):
                before[gauge][unit] = w[f"sara/{unit}_{gauge}"]


def test_a_full_buffer_holds_the_worker_back_and_every_window_still_balances():
    """Backpressure: a buffer of one group (k = 4 rows) that the "trainer" empties slowly, so the worker waits for
    room most of the time. Every window balances, the worker stays healthy, the rows pushed are the rows taken, and
    at stop the rows of committed groups never pushed are counted as dropped."""
    worker, client = make_worker(u_shaped_script(), AllocationConfig(k=4, collection="streaming"),
                                 queue_maxsize=4, window_groups=1, max_inflight_tasks=8)
    worker.start()
    taken = []
    deadline = time.monotonic() + 20
    while len(taken) < 24:
        assert time.monotonic() < deadline, "24 rows not delivered within 20 s"
        worker.check_health(10.0)
        time.sleep(0.05)  # a slow consumer: the worker is held back most of the time
        try:
            taken.append(worker.rollout_buffer.get_nowait())
        except queue.Empty:
            pass
    worker.check_health(10.0)
    worker.stop()
    assert worker._error is None
    windows = drain(worker.metrics_queue)
    taken += drain(worker.rollout_buffer)
    assert_windows_balance(windows)
    total = {key: sum(w[key] for w in windows) for key in windows[-1] if key.endswith("_total")}
    assert total["sara/rollouts_pushed_total"] == len(taken)
    assert total["sara/tokens_pushed_total"] == sum(int(s.completion_mask.sum()) for s in taken)
    assert windows[-1]["sara/rollouts_waiting"] == 0  # at stop, what still waited is dropped
    assert total.get("sara/rollouts_dropped_total", 0.0) + total["sara/rollouts_pushed_total"] == \
        4 * total["sara/groups_committed_total"]


# ------------------------------------------------------------------------------------------------------ advantages
def shaped(completions, completion_ids, index, **kwargs):
    """A second reward function: None (cannot judge) on prompt 1's 4th completion, 0.0 elsewhere."""
    return [None if i == 1 and ids[1] == 99 else 0.0 for i, ids in zip(index, completion_ids)]


def correct_or_none(completions, completion_ids, index, **kwargs):
    """``correct``, but None on prompt 1's 4th completion (so that completion is unscorable: both functions None)."""
    return [None if i == 1 and ids[1] == 99 else v
            for i, ids, v in zip(index, completion_ids, correct(completions, completion_ids))]


def test_advantages_are_trls_asynchronous_formula_on_known_rewards():
    """Dynamic sampling, k = 4, two prompts. Prompt 0's group has rewards {1, 0, 0, 0}: mean 1/4, population std
    sqrt(3)/4, so the right completion's advantage is (3/4) / (sqrt(3)/4) = sqrt(3) and each wrong one's
    -1/sqrt(3). Prompt 1's has {1, 1, 0, unscorable}: over the three scorable ones mean 2/3, std sqrt(2)/3, so
    1/sqrt(2) and -sqrt(2), and 0 for the unscorable one."""
    rewards = {0: [SUCCESS, FAILURE, FAILURE, FAILURE], 1: [SUCCESS, SUCCESS, FAILURE, FAILURE]}

    def script(i, j):
        return Reply([rewards[i][j % 4], 99 if j % 4 == 3 else 50, 51])

    worker, client = make_worker(script, AllocationConfig(k=4, allocator="dynamic_sampling", collection="streaming"),
                                 n_prompts=2, reward_funcs=(correct_or_none, shaped), max_inflight_tasks=8,
                                 window_groups=2)
    worker.start()
    wait_for(lambda: worker.rollout_buffer.qsize() >= 8, what="two groups")
    worker.stop()
    samples = drain(worker.rollout_buffer)
    first = {}
    for s in samples:
        first.setdefault(s.group_id, []).append(s)
    seen = set()
    for gid in sorted(first)[:2]:
        rows = first[gid]
        prompt = int(rows[0].prompt[0]["content"][1:])
        seen.add(prompt)
        assert len(rows) == 4
        for s in rows:
            r = s.metrics["reward"]
            if prompt == 0:
                expected = math.sqrt(3) if r == 1.0 else -1 / math.sqrt(3)
                assert s.metrics["reward_std"] == pytest.approx(math.sqrt(3) / 4, rel=1e-12)
            elif math.isnan(r):
                expected = 0.0
                assert math.isnan(s.metrics["rewards/correct_or_none"]) and math.isnan(s.metrics["rewards/shaped"])
            else:
                expected = 1 / math.sqrt(2) if r == 1.0 else -math.sqrt(2)
                assert s.metrics["reward_std"] == pytest.approx(math.sqrt(2) / 3, rel=1e-12)
            assert s.advantage == pytest.approx(expected, rel=1e-6)
            if not math.isnan(r):
                assert s.metrics["rewards/shaped"] == 0.0 and s.metrics["rewards/correct_or_none"] == r
        assert sum(s.advantage for s in rows) == pytest.approx(0.0, abs=1e-6)
    assert seen == {0, 1}


def test_port_advantages_equal_trls_own_score_group():
    """The port's mirror against TRL 1.16's ``_AsyncRolloutLoop._score_group`` itself, on the same rewards (two
    functions, None entries, one all-None row)."""
    import asyncio
    from types import SimpleNamespace

    from accelerate import PartialState
    from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, _AsyncRolloutLoop

    from sara_trl.trainer.trl import port

    PartialState()  # TRL's worker logs through accelerate's logger, which needs the state

    columns = [[1.0, 0.0, None, 0.5, None], [0.25, None, 0.0, 0.0, None]]
    funcs = [lambda col=col, **kw: list(col) for col in columns]
    stub = SimpleNamespace(reward_funcs=funcs, reward_func_names=["a", "b"], _env_reward_types=[],
                           _provides_rollout_reward=False)
    m = 5
    group = RolloutGroup(prompts=[[]] * m, reward_kwargs={}, completions=[[]] * m, completions_ids=[[1]] * m,
                         completions_sequences=[[SimpleNamespace(input_ids=[1], completion_mask=[1],
                                                                 old_log_probs=[0.0])]] * m,
                         tool_call_counts=[0] * m, tool_failure_counts=[0] * m, model_version=0, group_id=0,
                         env_rewards=[None] * m, rollout_rewards=[None] * m)
    trl_samples = asyncio.run(_AsyncRolloutLoop._score_group(stub, group))
    rewards = port.async_group_rewards(columns)
    ours, _, std = port.async_group_advantages(rewards)
    np.testing.assert_array_equal(ours, [s.advantage for s in trl_samples])
    np.testing.assert_array_equal(np.isnan(rewards), [math.isnan(s.metrics["reward"]) for s in trl_samples])
    assert std == trl_samples[0].metrics["reward_std"]


# ------------------------------------------------------------------------------------------ cancelling, versions
def test_an_abandoned_prompts_requests_in_flight_are_cancelled():
    """SARA, k = 4, n0 = 2, speculation on. Even prompts always fail: after two failures p_eff = 0.4 < tau_low =
    0.45 (Beta(1, 3): 1 - E[(1 - g)^2] = 1 - 0.6), so they are abandoned; their probes are quick, every later
    request (a speculative one) streams 3 tokens and then runs until cancelled. Odd prompts mix at once."""

    def script(i, j):
        if i % 2 == 0:
            return Reply([FAILURE, 60]) if j < 2 else Reply([FAILURE, 61, 62], gate=threading.Event())
        return Reply([SUCCESS if j == 0 else FAILURE, 63])

    allocation = AllocationConfig(k=4, n0=2, collection="streaming", streaming_speculate=True)
    worker, client = make_worker(script, allocation, max_inflight_tasks=8)
    worker.start()
    wait_for(lambda: len(client.of("cancelled")) >= 5 and worker.metrics_queue.qsize() >= 3, what="cancellations")
    time.sleep(1.2)  # the cancellations seen so far are then more than 1 s before stop (checked below)
    t_stop = time.monotonic()
    before_stop = {s.request_id for s in client.of("cancelled")}
    worker.stop()
    windows = drain(worker.metrics_queue)
    cancelled = client.of("cancelled")
    # only the long-running speculative requests of the always-failing prompts were cancelled while running (had
    # streamed tokens): a speculative request of a mixed prompt may be cancelled the moment it starts, when its group
    # has just reached k (0 tokens: surplus, never trained; seen in 2 of 6 runs here, both beside other test files) ...
    for s in cancelled:
        if s.request_id in before_stop and s.tokens > 0:
            assert s.prompt % 2 == 0 and s.j >= 2
    # ... and each of them within a short time of its prompt's abandonment (its second probe's end), before stop
    probes_done: dict[int, float] = {}
    for s in client.served:
        if s.prompt % 2 == 0 and s.j < 2 and s.state == "finished":
            probes_done[s.prompt] = max(probes_done.get(s.prompt, 0.0), s.ended)
    n_checked = 0
    for s in client.served:
        abandoned_at = probes_done.get(s.prompt)
        if s.prompt % 2 == 0 and s.j >= 2 and abandoned_at is not None and sum(
                1 for t in client.served if t.prompt == s.prompt and t.j < 2 and t.state == "finished") == 2 \
                and abandoned_at < t_stop - 1.0 and s.started < abandoned_at:
            assert s.state == "cancelled" and s.request_id in before_stop and s.ended - abandoned_at < 1.0
            n_checked += 1
    assert n_checked >= 1
    total = {key: sum(w[key] for w in windows) for key in windows[0] if key.endswith("_total")}
    assert total["sara/rollouts_aborted_total"] >= len(cancelled) >= 5
    assert total["sara/prompts_abandoned_total"] >= n_checked
    assert all(s.state != "running" for s in client.served)


def test_a_group_is_tagged_with_its_oldest_policy_version():
    """SARA, k = 4, n0 = 2, LoRA naming: the two probes of the first prompts are sent under version 0 and held until
    the policy moves to version 3; their top-ups are sent under version 3. Each such group's rows are all tagged 0
    (the oldest), its version spread is 3, and it was pushed 3 versions stale."""
    release = threading.Event()

    def script(i, j):
        gate = release if j < 2 else None
        return Reply([SUCCESS if j == 0 else FAILURE, 70], gate=gate)

    allocation = AllocationConfig(k=4, n0=2, collection="streaming")
    worker, client = make_worker(script, allocation, max_inflight_tasks=4, lora_name="pol", window_groups=2)
    worker.start()
    wait_for(lambda: len(client.served) == 4, what="the first probes")
    first_prompts = {s.prompt for s in client.served}
    assert [s.payload["model"] for s in client.served] == ["pol-v0"] * 4
    worker.update_model_version(3)
    release.set()
    wait_for(lambda: worker.rollout_buffer.qsize() >= 12, what="three groups")
    worker.stop()
    samples = drain(worker.rollout_buffer)
    by_prompt = {}
    for s in samples:
        by_prompt.setdefault(int(s.prompt[0]["content"][1:]), []).append(s)
    for p in first_prompts:
        assert [s.model_version for s in by_prompt[p]] == [0] * 4
        models = [s.payload["model"] for s in client.served if s.prompt == p]
        assert models == ["pol-v0", "pol-v0", "pol-v3", "pol-v3"]
    later = [p for p in by_prompt if p not in first_prompts]
    assert later and all(s.model_version == 3 for p in later for s in by_prompt[p])
    first_window = worker.metrics_queue.get_nowait()
    assert first_window["sara/group_staleness_max"] == 3.0
    assert first_window["sara/group_version_spread_mean"] == (6.0, 2.0)  # the first two groups: spread 3 each


# ------------------------------------------------------------------------------------------------ health, stopping
def exploding(completions, completion_ids, **kwargs):
    if len(exploding.calls) >= 3:
        raise ValueError("boom on purpose")
    exploding.calls.append(len(completions))
    return correct(completions, completion_ids)


exploding.calls = []


def test_check_health_reraises_the_threads_failure_and_nothing_is_left_running():
    exploding.calls.clear()
    worker, client = make_worker(u_shaped_script(), AllocationConfig(k=4, collection="streaming"),
                                 reward_funcs=(exploding,))
    worker.start()
    wait_for(lambda: not worker._thread.is_alive(), what="the worker to fail")
    with pytest.raises(RuntimeError, match="boom on purpose") as info:
        worker.check_health(60.0)
    assert isinstance(info.value.__cause__, ValueError)
    assert all(s.state != "running" for s in client.served) and client.closed
    worker.stop()
    assert no_worker_thread()


def test_rewards_that_are_not_success_labels_stop_the_worker_with_the_fix():
    def three(completions, **kwargs):
        return [3.0] * len(completions)

    worker, _ = make_worker(u_shaped_script(), AllocationConfig(k=4, collection="streaming"), reward_funcs=(three,))
    worker.start()
    wait_for(lambda: not worker._thread.is_alive(), what="the worker to fail")
    with pytest.raises(RuntimeError) as info:
        worker.check_health(60.0)
    assert isinstance(info.value.__cause__, ValueError) and "success_threshold" in str(info.value.__cause__)
    worker.stop()


def test_a_stale_heartbeat_is_reported():
    gate = threading.Event()

    def slow(completions, completion_ids, **kwargs):
        gate.wait(30)
        return correct(completions, completion_ids)

    worker, _ = make_worker(u_shaped_script(), AllocationConfig(k=4, collection="streaming"), reward_funcs=(slow,))
    worker.start()
    time.sleep(0.6)
    with pytest.raises(RuntimeError, match="heartbeat is stale"):
        worker.check_health(0.3)
    gate.set()
    worker.stop()
    assert no_worker_thread()


def test_stop_cancels_every_request_and_ends_the_thread():
    hold = threading.Event()  # never set: requests after the first 20 run until cancelled

    def script(i, j):
        return Reply([SUCCESS if (i + j) % 2 else FAILURE, 80], gate=hold if i >= 10 else None)

    worker, client = make_worker(script, AllocationConfig(k=4, collection="streaming"), max_inflight_tasks=8)
    worker.start()
    wait_for(lambda: sum(s.state == "running" and s.prompt >= 10 and s.tokens == 2 for s in client.served) == 8,
             what="8 requests held")
    worker.stop()
    assert no_worker_thread() and client.closed
    running_at_stop = client.of("cancelled")
    assert len(running_at_stop) == 8 and all(s.state != "running" for s in client.served)
    last = drain(worker.metrics_queue)[-1]
    assert last["sara/inflight"] == 0.0 and last["sara/rollouts_aborted_total"] == 8.0
    assert last["sara/tokens_aborted_total"] == 2.0 * 8
    with pytest.raises(RuntimeError, match="already"):
        worker.start()


# ----------------------------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("allocation,config,match", [
    (dict(allocator="uniform"), {}, "runs"),
    (dict(collection="rounds"), {}, "collection='streaming'"),
    (dict(collection="streaming", carry_over=True), {}, "carry_over"),
    (dict(collection="streaming", stopping_rule="bayes_optimal"), {}, "beyond-paper"),
    (dict(collection="streaming", k=8), {"max_inflight_tasks": 4}, "max_inflight_tasks=4"),
    (dict(collection="streaming"), {"success_reward_func": "nope"}, "success_reward_func"),
])
def test_bad_arguments_raise_a_clear_value_error(allocation, config, match):
    with pytest.raises(ValueError, match=match):
        SaraAsyncRolloutWorker(dataset=dataset(3), reward_funcs=[correct], processing_class=FakeTokenizer(),
                               allocation=AllocationConfig(**allocation), config=AsyncWorkerConfig(**config),
                               client=FakeCompletionsClient(u_shaped_script()))


@pytest.mark.parametrize("field,value", [("max_inflight_tasks", 0), ("window_groups", 0), ("queue_maxsize", -1),
                                         ("window_seconds", 0.0), ("top_p", 0.0), ("min_p", 2.0),
                                         ("success_threshold", float("nan"))])
def test_worker_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        AsyncWorkerConfig(**{field: value})


def test_an_empty_dataset_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        SaraAsyncRolloutWorker(dataset=[], reward_funcs=[correct], processing_class=FakeTokenizer(),
                               allocation=AllocationConfig(collection="streaming"),
                               client=FakeCompletionsClient(u_shaped_script()))


# ------------------------------------------------------------------------------------------------ the HTTP client
class _Body:
    def __init__(self, lines):
        self.content = self._lines(lines)

    @staticmethod
    async def _lines(lines):
        for line in lines:
            yield line


def test_the_http_client_reads_vllms_stream_chunk_by_chunk():
    import asyncio
    import json

    from sara_trl.trainer.async_worker.client import Completion, _read_events

    def chunk(ids, lps, finish=None):
        choice = {"index": 0, "text": "x", "token_ids": ids, "logprobs": {"token_logprobs": lps},
                  "finish_reason": finish}
        return f"data: {json.dumps({'choices': [choice]})}\n".encode()

    out = Completion()
    lines = [chunk([5, 6], [-0.5, -1.0]), b"\n", b'data: {"choices": [], "usage": {}}\n', chunk([7], [-2.0], "stop"),
             b"data: [DONE]\n", chunk([8], [-3.0])]
    asyncio.run(_read_events(_Body(lines), out, "r1"))
    assert out.token_ids == [5, 6, 7] and out.logprobs == [-0.5, -1.0, -2.0] and out.finish_reason == "stop"
    with pytest.raises(ValueError, match="logprobs=0"):
        asyncio.run(_read_events(_Body([chunk([5, 6], [-0.5])]), Completion(), "r2"))
    with pytest.raises(RuntimeError, match="failed on the server"):
        asyncio.run(_read_events(_Body([b'data: {"error": {"message": "bad"}}\n']), Completion(), "r3"))


def test_the_payload_is_trls_plus_streaming():
    from sara_trl.trainer.trl import port

    payload = port.async_completion_payload(model="m", prompt_ids=[1, 2], max_tokens=16, temperature=0.7,
                                            top_p=0.9, top_k=5, min_p=None, repetition_penalty=1.1, seed=42)
    assert payload == {"model": "m", "prompt": [1, 2], "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
                       "top_k": 5, "repetition_penalty": 1.1, "n": 1, "return_token_ids": True, "logprobs": 0,
                       "seed": 42, "stream": True}
    assert port.async_completion_payload(model="m", prompt_ids=[1], max_tokens=1, temperature=1.0, top_p=1.0,
                                         top_k=0, min_p=0.1, repetition_penalty=1.0, seed=1)["min_p"] == 0.1
    assert port.async_request_model("base", None, 3) == "base" and port.async_request_model("base", "pol", 3) == \
        "pol-v3"
