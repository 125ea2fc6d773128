"""One prepared check on a lent GPU (NVIDIA H200): run by the project's device tool, results recorded in
benchmarks/gpu/H200_CHECK.md.

Part 1, decode latency (calibrates the round/streaming latency model): a Qwen2.5-1.5B-shaped model with RANDOM
weights (no download; same shapes and FLOPs as the real one) in bfloat16, transformers eager forward with SDPA
attention and a DynamicCache pre-filled to a context length L, timed per decode step for n concurrent sequences.
This is transformers, not vLLM: no CUDA graphs and no paged attention, so the fixed part of a step (kernel launches)
is an upper bound for what vLLM pays. Part 2: SaraGRPOTrainer / SaraRLOOTrainer train 2 steps on CUDA in bf16
(tiny random Llama, transformers generation), allocator in {sara, dynamic_sampling}: the trainer on a GPU device.

Usage: python -m benchmarks.gpu.h200_check OUT_DIR TOKENIZER_DIR [--tiny]   (--tiny: CPU dry run of the script)
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch


def decode_latency(tiny: bool) -> list[dict]:
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    if tiny:
        config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=1000)
        device, dtype, grid_n, grid_l, steps = "cpu", torch.float32, [1, 4], [16, 64], 3
    else:  # Qwen2.5-1.5B shapes (config.json of Qwen/Qwen2.5-1.5B)
        config = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                             num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                             max_position_embeddings=32768)
        device, dtype, grid_n, grid_l, steps = (
            "cuda", torch.bfloat16, [1, 8, 32, 64, 128, 256, 512], [512, 2048, 4096], 6
        )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype).eval()
    head_dim = config.hidden_size // config.num_attention_heads
    rows = []
    for length in grid_l:
        for n in grid_n:
            if not tiny and n * length > 1_200_000:  # KV ~ 28 KiB/token in bf16: stay well inside GPU memory
                continue
            cache = DynamicCache(config=config)
            for layer in range(config.num_hidden_layers):
                shape = (n, config.num_key_value_heads, length, head_dim)
                cache.update(torch.randn(shape, device=device, dtype=dtype),
                             torch.randn(shape, device=device, dtype=dtype), layer)
            ids = torch.randint(0, config.vocab_size, (n, 1), device=device)
            times = []
            with torch.inference_mode():
                for step in range(steps + 3):
                    pos = torch.full((n, 1), length + step, device=device, dtype=torch.long)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    out = model(input_ids=ids, past_key_values=cache, position_ids=pos, use_cache=True,
                                logits_to_keep=1)
                    ids = out.logits[:, -1].argmax(-1, keepdim=True)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    if step >= 3:
                        times.append(time.perf_counter() - start)
                # GPU busy time of one step: the sum of its CUDA kernels (what a CUDA-graph engine such as vLLM
                # pays per step, without transformers' per-kernel launch overhead). Cache-append copies
                # (DynamicCache concatenates the whole cache each step; vLLM's paged cache does not) are split out.
                from torch.profiler import ProfilerActivity, profile
                activities = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
                with profile(activities=activities) as prof:
                    pos = pos + 1
                    model(input_ids=ids, past_key_values=cache, position_ids=pos, use_cache=True, logits_to_keep=1)
                    if device == "cuda":
                        torch.cuda.synchronize()
                kernel_us = copy_us = 0.0
                for event in prof.key_averages():
                    t = getattr(event, "self_device_time_total", 0.0) or 0.0
                    if any(word in event.key.lower() for word in ("copy", "cat", "memcpy", "memset")):
                        copy_us += t
                    else:
                        kernel_us += t
            row = {"n": n, "context": length, "step_ms_median": 1e3 * sorted(times)[len(times) // 2],
                   "step_ms_min": 1e3 * min(times), "gpu_compute_ms": kernel_us / 1e3,
                   "gpu_copy_ms": copy_us / 1e3}
            rows.append(row)
            print(json.dumps(row), flush=True)
            del cache, out
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows


MODES = ["always", "never", "coin", "coin"] * 6


def mode_reward(completions, completion_ids, mode, **kwargs):
    return [1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
            for ids, m in zip(completion_ids, mode)]


def trainer_on_gpu(tokenizer_dir: str, out_dir: str, tiny: bool) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model_dir = os.path.join(out_dir, "tiny_llama")
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Question {i}: say something."}]
                                         for i in range(len(MODES))], "mode": MODES})
    rows = []
    for kind, (trainer_cls, config_cls) in {"grpo": (SaraGRPOTrainer, SaraConfig),
                                            "rloo": (SaraRLOOTrainer, SaraRLOOConfig)}.items():
        for allocator in ("sara", "dynamic_sampling"):
            args = config_cls(output_dir=os.path.join(out_dir, f"run_{kind}_{allocator}"), use_cpu=tiny,
                              bf16=not tiny, report_to="none", max_steps=2, num_generations=4,
                              per_device_train_batch_size=8, max_completion_length=6, logging_steps=1,
                              save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False,
                              disable_tqdm=True, seed=0, allocator=allocator, budget_cap=12.0)
            trainer = trainer_cls(model=model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                                  processing_class=tokenizer)
            start = time.perf_counter()
            trainer.train()
            logs = [e for e in trainer.state.log_history if "sara/rollouts_generated" in e]
            row = {"trainer": kind, "allocator": allocator, "device": str(trainer.model.device),
                   "dtype": str(next(trainer.model.parameters()).dtype), "seconds": time.perf_counter() - start,
                   "steps": len(logs),
                   "invariant_ok": all(e["sara/rollouts_generated"] == sum(
                       e[f"sara/rollouts_{f}"] for f in ("trained", "abandoned", "surplus", "active_left"))
                       for e in logs),
                   "effective_fraction": [e["sara/effective_fraction"] for e in logs],
                   "rollouts": [e["sara/rollouts_generated"] for e in logs],
                   "rounds": [e["sara/rounds"] for e in logs],
                   "loss": [e.get("loss") for e in trainer.state.log_history if "loss" in e]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--tiny"]
    if len(args) != 2 or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr if len(args) != 2 else sys.stdout)
        sys.exit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    out_dir, tokenizer_dir = args
    tiny = "--tiny" in sys.argv
    os.makedirs(out_dir, exist_ok=True)
    result = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    print(json.dumps(result), flush=True)
    for name, fn in (("trainer_on_gpu", lambda: trainer_on_gpu(tokenizer_dir, out_dir, tiny)),
                     ("decode_latency", lambda: decode_latency(tiny))):
        start = time.perf_counter()
        try:
            result[name] = fn()
        except Exception:  # noqa: BLE001 - one part failing must not lose the other's numbers
            result[name] = {"error": traceback.format_exc()[-3000:]}
            print(result[name]["error"], flush=True)
        result[name + "_seconds"] = time.perf_counter() - start
        with open(os.path.join(out_dir, "h200_check.json"), "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
