"""SARA in TRL's asynchronous trainer, without a server: ``SaraAsyncGRPOConfig`` (fields, checks), the trainer's
argument checks, the CPU stand-in for TRL's packed FlashAttention-3 attention (against unpacked forwards), and the
worker's checkpointed state (a resumed worker continues the same prompt stream).

The real training run is in tests/test_async_worker_vllm.py (slow, vLLM)."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

from sara_trl.allocation import AllocationConfig, PromptStream
from tests._fake_completions import Reply
from tests.test_async_worker import drain, make_worker, u_shaped_script, wait_for


def config(**kw):
    from sara_trl import SaraAsyncGRPOConfig

    base = {"output_dir": "unused", "max_steps": 2, "num_generations": 4, "use_cpu": True, "bf16": False,
            "report_to": []}
    return SaraAsyncGRPOConfig(**{**base, **kw})


# ---------------------------------------------------------------------------------------------------- the config
def test_the_config_carries_the_allocation_options_and_trls_worker_arguments():
    from trl.experimental.async_grpo import AsyncGRPOConfig

    c = config(n0=2, tau_low=0.3, commit_min=3, max_completion_length=64, temperature=0.7, top_k=5,
               vllm_server_base_url="http://h:1", success_reward_func="f", stream_seed=11, sara_window_groups=2)
    assert isinstance(c, AsyncGRPOConfig) and c.collection == "streaming"
    a = c.to_allocation_config()
    assert (a.k, a.n0, a.tau_low, a.commit_min, a.collection) == (4, 2, 0.3, 3, "streaming")
    w = c.to_worker_config(model_name="m", lora_name="trl-policy", max_inflight_tasks=12)
    assert (w.model_name, w.lora_name, w.max_inflight_tasks, w.max_tokens, w.temperature, w.top_k) == \
        ("m", "trl-policy", 12, 64, 0.7, 5)
    assert (w.vllm_server_url, w.success_reward_func, w.seed, w.window_groups, w.success_threshold) == \
        ("http://h:1", "f", 11, 2, None)
    assert config(seed=5).to_worker_config(model_name="m", lora_name=None, max_inflight_tasks=4).seed == 5


@pytest.mark.parametrize("kw,match", [
    ({"max_steps": -1}, "set max_steps > 0 .* assumes every drawn prompt is trained"),
    ({"carry_over": True}, "carry_over does not apply"),
    ({"collection": "rounds"}, "always decides per completion"),
    ({"allocator": "uniform"}, "allocator=.uniform. has nothing to decide"),
    ({"n0": 9}, r"n0=9 must satisfy .*\(here k is num_generations\)"),
    ({"max_inflight_tasks": 3}, "max_inflight_tasks=3 must be >= num_generations=4"),
    ({"sara_window_seconds": 0.0}, "window_seconds must be a positive number"),
    ({"success_threshold": float("nan")}, "success_threshold"),
])
def test_the_config_rejects_what_the_asynchronous_worker_cannot_do(kw, match):
    with pytest.raises(ValueError, match=match):
        config(**kw)


def test_the_trainer_checks_its_arguments_before_building_anything():
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from sara_trl import SaraAsyncGRPOTrainer

    with pytest.raises(TypeError, match="SaraAsyncGRPOConfig"):
        SaraAsyncGRPOTrainer(model="m", reward_funcs=[len], args=AsyncGRPOConfig(output_dir="unused", max_steps=1,
                                                                                    use_cpu=True, bf16=False))
    rows = [{"prompt": [{"role": "user", "content": "x"}]}]
    for kw, match in [({"tools": [len]}, "tools and environment_factory"),
                      ({"rollout_worker": object()}, "builds its own rollout worker"),
                      ({"reward_funcs": []}, "at least one reward function"),
                      ({"train_dataset": None}, "map-style train_dataset")]:
        with pytest.raises(ValueError, match=match):
            SaraAsyncGRPOTrainer(**{"model": "m", "reward_funcs": [len], "args": config(), "train_dataset": rows,
                                    **kw})


# ---------------------------------------------------------------------------------------------- the CPU stand-in
def test_the_sdpa_stand_in_matches_unpacked_forwards():
    """Three completions of one prompt packed as TRL packs a group (a tree: the shared prompt once, two completions
    sharing a prefix), forwarded through TRL's tree attention with the SDPA stand-in: every trained token's log-prob
    equals the one of an ordinary forward of that sample alone (grouped-query attention: 4 query, 2 KV heads). A
    stand-in without the causal mask is far off (the comparison can fail)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.experimental.async_grpo.packing import TREE_ATTENTION, TreeRow, register_tree_attention

    import sara_trl.trainer.async_worker.cpu as cpu

    cpu.install_cpu_stand_ins()
    assert cpu.stand_ins_installed()
    register_tree_attention()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).eval()
    prompt, completions = [5, 6, 7, 8, 9], [[10, 11, 12], [10, 11, 40, 41], [20, 21]]
    row, samples = TreeRow(), []
    for c in completions:
        s = {"input_ids": np.array(prompt + c), "completion_mask": np.array([0] * len(prompt) + [1] * len(c)),
             "old_log_probs": np.zeros(len(prompt) + len(c), np.float32), "advantage": 1.0, "group_id": 0}
        row.add(s)
        samples.append(s)
    b = row.pack()
    assert len(b["input_ids"]) == 14 < 8 + 9 + 7  # a tree: the shared prompt once (TRL repeats a branch point)

    def packed_logps():
        model.set_attn_implementation(TREE_ATTENTION)
        with torch.no_grad():
            logits = model(input_ids=b["input_ids"][None], position_ids=b["position_ids"][None],
                           tree_kv_index=b["tree_kv_index"], tree_cu_seqlens_q=b["tree_cu_seqlens_q"],
                           tree_cu_seqlens_k=b["tree_cu_seqlens_k"], tree_max_seqlen_q=int(b["tree_max_seqlens"][0]),
                           tree_max_seqlen_k=int(b["tree_max_seqlens"][1])).logits[0]
        lp = torch.log_softmax(logits, -1)
        return lp[b["token_index"], b["shift_labels"][b["token_index"]]]

    model.set_attn_implementation("sdpa")
    ref = []
    with torch.no_grad():
        for s in samples:
            lp = torch.log_softmax(model(input_ids=torch.tensor(s["input_ids"])[None]).logits[0], -1)
            ref += [lp[p - 1, s["input_ids"][p]] for p in range(1, len(s["input_ids"])) if s["completion_mask"][p]]
    ref = torch.stack(ref)
    got = packed_logps()
    assert got.shape == ref.shape == (9,)
    assert (got - ref).abs().max().item() < 1e-5

    calls = []

    def not_causal(*args, **kwargs):
        calls.append(1)
        return cpu.sdpa_varlen(*args, **{**kwargs, "causal": False})

    kernel = cpu._KERNEL.flash_attn_varlen_func
    cpu._KERNEL.flash_attn_varlen_func = not_causal
    try:
        assert (packed_logps() - ref).abs().max().item() > 1e-2 and len(calls) == 2  # one call per layer
    finally:
        cpu._KERNEL.flash_attn_varlen_func = kernel


def test_the_sdpa_stand_in_refuses_a_sliding_window():
    from sara_trl.trainer.async_worker.cpu import sdpa_varlen

    q = torch.zeros(2, 1, 4)
    cu = torch.tensor([0, 2], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="sliding window"):
        sdpa_varlen(q, q, q, cu, cu, 2, 2, window_size=(1, 0))


# ---------------------------------------------------------------------------------------------- resume
def test_a_resumed_worker_continues_the_same_prompt_stream():
    """Worker A runs, its state is taken while it runs, it stops. Worker B loads that state: the prompts it asks the
    server for are, in order, those A left undecided (drawn again first) and then A's stream where it stood; its
    sampling seeds continue A's generator and its group ids continue A's."""
    allocation = AllocationConfig(k=4, collection="streaming")
    a, _ = make_worker(u_shaped_script(), allocation, seed=7)
    a.start()
    wait_for(lambda: a.metrics_queue.qsize() >= 3, what="three windows")
    state = a.state_dict()
    a.stop()
    assert state["stream"]["cursor"] > 0 and state["next_group_id"] >= 3 and len(state["refill"]["mix_num"]) == 5

    expected_stream = PromptStream(200, seed=7)
    expected_stream.load_state_dict(state["stream"])
    expected = expected_stream.take(12).tolist()
    assert expected != PromptStream(200, seed=7).take(12).tolist()  # not where a fresh worker starts
    rng = random.Random()
    rng.setstate((state["rng"][0], tuple(state["rng"][1]), state["rng"][2]))

    b, client = make_worker(u_shaped_script(), allocation, seed=7)
    b.load_state_dict(state)
    assert b.state_dict() == state  # before start: the loaded state
    b.start()
    wait_for(lambda: len({s.prompt for s in client.served}) >= 12 and b.rollout_buffer.qsize() > 0, what="prompts")
    b.stop()
    first_seen = []
    for s in client.served:
        if s.prompt not in first_seen:
            first_seen.append(s.prompt)
    assert first_seen[:12] == expected
    assert client.served[0].payload["seed"] == rng.getrandbits(63)
    assert min(s.group_id for s in drain(b.rollout_buffer)) == state["next_group_id"]


def test_the_refill_model_is_restored():
    """A resumed worker whose requests never finish (nothing decided, nothing learned): its refill model is the
    saved one."""
    allocation = AllocationConfig(k=4, collection="streaming")
    a, _ = make_worker(u_shaped_script(), allocation)
    a.start()
    wait_for(lambda: a.metrics_queue.qsize() >= 3, what="three windows")
    state = a.state_dict()
    a.stop()
    from sara_trl.allocation.refill import RefillModel

    assert state["refill"] != RefillModel(allocation).state_dict()  # A learned something
    gate = threading.Event()
    b, _ = make_worker(lambda i, j: Reply([1], gate=gate), allocation)
    b.load_state_dict(state)
    b.start()
    try:
        assert b.state_dict()["refill"] == state["refill"]
    finally:
        b.stop()
