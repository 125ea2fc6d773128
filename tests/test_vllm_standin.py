"""The vLLM path on CPU: a stand-in with the interface of TRL's ``VLLMGeneration`` (colocate mode) is injected into a
trainer built with ``use_vllm=False`` and then flagged ``use_vllm``.

Checked without a GPU: each round is ONE ``generate`` call whose prompt list is every requested prompt's token ids
repeated ``count`` times (prompt-major) with ``num_generations=1``; the stand-in's sampling log-probs are replayed into
TRL's importance-sampling correction; weights are pushed once per optimizer step even with sleep mode on (TRL's own
``generate`` would re-push them after every sleeping call, i.e. every round).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _helpers_trainer import POSITION, scripted_reward
from datasets import Dataset

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer

MODES = ["always", "never", "coin", "coin"] * 6


def mode_reward(completions, completion_ids, mode, **kwargs):
    return [
        1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
        for ids, m in zip(completion_ids, mode)
    ]


class StandInLLM:
    """Records the engine's sleep/wake calls."""

    def __init__(self):
        self.events: list[tuple] = []

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags or ())))

    def sleep(self, level=1):
        self.events.append(("sleep", level))


class StandInVLLMGeneration:
    """Mimics ``trl.generation.vllm_generation.VLLMGeneration`` in colocate mode, sleep-mode bookkeeping included:
    ``generate`` re-syncs first if the weights sleep, and sleeps (level 2) after each call when sleep mode is on.

    Completions are random token ids (3 to ``max_len`` tokens, EOS-terminated when shorter than ``max_len``) with
    random per-token log-probs near the tiny model's (about -10.8 = -log 49152), remembered per completion.
    """

    def __init__(self, eos_token_id: int, max_len: int, enable_sleep_mode: bool, seed: int = 0):
        self.mode = "colocate"
        self.enable_sleep_mode = enable_sleep_mode
        self._llm_weights_sleeping = enable_sleep_mode  # TRL puts the engine to sleep right after creating it
        self.llm = StandInLLM()
        self.eos_token_id = eos_token_id
        self.max_len = max_len
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple] = []
        self.sync_count = 0
        self.samples: dict[tuple, list[float]] = {}

    def sync_weights(self):
        if self.mode == "colocate" and self.enable_sleep_mode:
            self.llm.wake_up(tags=["weights"])
            self._llm_weights_sleeping = False
        self.sync_count += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        if self.mode == "colocate" and self.enable_sleep_mode and self._llm_weights_sleeping:
            self.sync_weights()
        self.calls.append(([list(p) for p in prompts], images, num_generations))
        completion_ids, logprobs = [], []
        for _ in prompts:
            length = int(self.rng.integers(3, self.max_len + 1))
            ids = self.rng.integers(100, 5000, size=length).tolist()
            if length < self.max_len:
                ids[-1] = self.eos_token_id
            lps = self.rng.uniform(-11.2, -10.4, size=length).tolist()
            self.samples[tuple(ids)] = lps
            completion_ids.append(ids)
            logprobs.append([[lp] for lp in lps])  # top-1 (sampled token) log-prob per position, as vLLM returns
        if self.enable_sleep_mode:
            self.llm.sleep(level=2)
            self._llm_weights_sleeping = True
        return [list(p) for p in prompts], completion_ids, logprobs, [[[t] for t in ids] for ids in completion_ids]


def inject(trainer, engine):
    trainer.use_vllm = True
    trainer.vllm_generation = engine
    trainer._last_loaded_step = -1


def record_requests(trainer) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every round's request (prompt ids, counts), as the allocator's strategy yields it to the round collector."""
    requests = []
    round_steps = trainer.sara_allocator.round_steps

    def recording(stream, num_groups):
        steps = round_steps(stream, num_groups)
        try:
            request = next(steps)
            while True:
                requests.append((request.prompt_ids.copy(), request.counts.copy()))
                request = steps.send((yield request))
        except StopIteration as stop:
            return stop.value

    trainer.sara_allocator.round_steps = recording
    return requests


def check_requests(trainer, data, engine, requests):
    assert len(engine.calls) == len(requests) > 0
    for (prompt_ids, counts), (prompts, images, num_generations) in zip(requests, engine.calls):
        expected = []
        for pid, count in zip(prompt_ids, counts):
            token_ids = trainer._tokenize_prompts([data[int(pid)]["prompt"]])[0][0]
            expected.extend([list(token_ids)] * int(count))
        assert prompts == expected  # prompt-major, each prompt repeated `count` times
        assert num_generations == 1 and images is None


@pytest.fixture
def data():
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Question {i}?"}] for i in range(len(MODES))], "mode": MODES}
    )


def test_grpo_vllm_standin_sleep_mode(data, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    args = SaraConfig(**cpu_trainer_kwargs(budget_cap=12.0))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                              processing_class=tokenizer)
    engine = StandInVLLMGeneration(tokenizer.eos_token_id, args.max_completion_length, enable_sleep_mode=True)
    inject(trainer, engine)
    requests = record_requests(trainer)
    outputs = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(original(inputs)) or outputs[-1]

    trainer.train()

    check_requests(trainer, data, engine, requests)
    rounds = [entry["sara/rounds"] for entry in trainer.state.log_history if "sara/rounds" in entry]
    assert sum(rounds) == len(requests) > args.max_steps  # several rounds per step ...
    assert engine.sync_count == args.max_steps  # ... but one weight push per optimizer step
    assert engine.enable_sleep_mode and engine._llm_weights_sleeping  # sleep mode restored, engine asleep
    assert engine.llm.events[-1] == ("sleep", 2)

    for out in outputs:
        # vLLM's sampling log-probs are replayed row by row into TRL's importance-sampling correction.
        assert {"sampling_per_token_logps", "importance_sampling_ratio", "old_per_token_logps"} <= set(out)
        mask = out["completion_mask"].bool()
        for row in range(mask.shape[0]):
            length = int(mask[row].sum())
            ids = tuple(out["completion_ids"][row, :length].tolist())
            np.testing.assert_allclose(out["sampling_per_token_logps"][row, :length].numpy(), engine.samples[ids],
                                       rtol=1e-6)
        # TRL's sequence_mask IS ratio, from the replayed log-probs: exp(sum(old - sampling)), 0 above clip_max.
        diff = ((out["old_per_token_logps"] - out["sampling_per_token_logps"]) * mask).sum(-1, keepdim=True)
        ratio = torch.exp(diff)
        ratio = torch.where(ratio > args.vllm_importance_sampling_clip_max, torch.zeros_like(ratio), ratio)
        torch.testing.assert_close(out["importance_sampling_ratio"], ratio, rtol=1e-5, atol=1e-8)


def test_rloo_vllm_standin(data, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    args = SaraRLOOConfig(**cpu_trainer_kwargs(budget_cap=12.0, beta=0.0))
    trainer = SaraRLOOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                              processing_class=tokenizer)
    engine = StandInVLLMGeneration(tokenizer.eos_token_id, args.max_completion_length, enable_sleep_mode=False)
    inject(trainer, engine)
    requests = record_requests(trainer)
    outputs = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(original(inputs)) or outputs[-1]

    trainer.train()

    check_requests(trainer, data, engine, requests)
    assert len(requests) > args.max_steps and engine.sync_count == args.max_steps
    assert trainer.num_generations == 4  # the temporary stride of 1 (server-mode dedup) was restored
    # Every trained row is a completion the engine generated (replayed, not regenerated): generate was called once
    # per round and never during TRL's scoring pass.
    assert len(outputs) == args.max_steps
    for out in outputs:
        assert out["completion_ids"].shape[0] == args.generation_batch_size
        for row, length in enumerate(out["completion_mask"].sum(dim=1).tolist()):
            assert tuple(out["completion_ids"][row, :length].tolist()) in engine.samples


@pytest.mark.parametrize("scripts", [["10"] + ["0"] * 7, ["0"] * 8], ids=["some_fill", "all_fill"])
def test_grpo_vllm_sampling_metrics_skip_padding_rows(scripts, tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    """TRL's vLLM importance-sampling metrics over real rows only: a padding row has no sampling log-prob, so TRL
    would count its ratio of exactly 1 into min/mean/max."""
    data = Dataset.from_dict({"prompt": [f"Question {i}?" for i in range(8)], "script": scripts,
                              "pid": list(range(8))})
    args = SaraConfig(**cpu_trainer_kwargs(max_steps=1, max_rounds=1, commit_min=2, shuffle_dataset=False))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=scripted_reward, args=args, train_dataset=data,
                              processing_class=tokenizer)
    inject(trainer, StandInVLLMGeneration(tokenizer.eos_token_id, args.max_completion_length, enable_sleep_mode=False))
    outputs = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(original(inputs)) or outputs[-1]
    POSITION.clear()

    trainer.train()

    out = outputs[0]
    log = next(entry for entry in trainer.state.log_history if "sara/unfilled" in entry)
    names = ["sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
             "sampling/importance_sampling_ratio/max", "sampling/sampling_logp_difference/mean",
             "sampling/sampling_logp_difference/max"]
    if log["sara/unfilled"] == 2:
        assert all(math.isnan(log[name]) for name in names)  # numeric NaN, never None (see trainer/metrics.py)
        return
    real = ~out["sara_padding"]
    assert int(real.sum()) == 2 and args.vllm_importance_sampling_mode == "sequence_mask"
    ratio = out["importance_sampling_ratio"][real].flatten()  # one ratio per real sequence
    mask = out["completion_mask"].bool()
    delta = (out["old_per_token_logps"] - out["sampling_per_token_logps"]).abs()[mask]
    expected = [ratio.min(), ratio.mean(), ratio.max(), delta.mean(), delta.max()]
    for name, value in zip(names, expected):
        assert log[name] == pytest.approx(float(value), rel=1e-5), name
    assert float(ratio.max()) != 1.0  # a padding row's ratio (exactly 1) would be visible in min or max
