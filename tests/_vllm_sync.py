"""Subprocess body of ``tests/test_vllm_cpu.py::test_load_weights_then_repack_is_exact``: the weight-sync mechanism of
:mod:`sara_trl.trainer.vllm_cpu` without a trainer. Builds the CPU engine as the trainers do, perturbs a copy of the
HF model, loads every parameter into the engine with ``load_weights`` (what TRL's ``sync_weights`` does) and
compares the engine's log-probs of a fixed text with the HF model's at each stage (mean and max absolute difference,
nats per token). Prints one line ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process, as in TRL's colocate mode


def main() -> None:
    import torch
    import trl.generation.vllm_generation as trl_vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import SamplingParams, TokensPrompt

    from sara_trl.trainer.vllm_cpu import _repack, colocated_engine_on_cpu
    from sara_trl.utils import smollm2_checkpoint

    path = smollm2_checkpoint()
    with colocated_engine_on_cpu(torch.float32):
        llm = trl_vllm.LLM(model=path, max_model_len=256, seed=0)  # the name TRL's colocate mode calls
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ids = AutoTokenizer.from_pretrained(path)("What is 37 * 84? The answer is 3108, I think.")["input_ids"]

    def difference() -> tuple[float, float]:
        params = SamplingParams(max_tokens=1, prompt_logprobs=0)
        out = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0]
        engine = torch.tensor([next(iter(d.values())).logprob for d in out.prompt_logprobs[1:]])
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
        reference = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        gap = (reference - engine).abs()
        return float(gap.mean()), float(gap.max())

    stages = {"initial": difference()}
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.01)
    stages["perturbed"] = difference()
    engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    for name, param in model.named_parameters():
        engine_model.load_weights([(name, param.data)])
    stages["loaded_not_repacked"] = difference()
    stages["rebuilt_kernels"] = _repack(engine_model)
    stages["loaded_and_repacked"] = difference()
    print("RESULT " + json.dumps(stages))


if __name__ == "__main__":
    main()
