"""Two processes (torchrun, gloo on CPU): lock-step rounds over a replicated allocator.

Each round's global request list is padded to a multiple of the world size and split into equal contiguous chunks;
rewards come back gathered, so both processes take identical decisions, draw the same prompts and train on their
half of the same B*k rows. Launched as ``torchrun --nproc_per_node 2 tests/test_trainer_multiprocess.py ...``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MODES = ["always", "never", "coin", "coin"] * 6
CALLS = {"rollouts": 0}


def mode_reward(completions, completion_ids, mode, **kwargs):
    CALLS["rollouts"] += len(completions)
    return [
        1.0 if m == "always" else 0.0 if m == "never" else float(ids[0] % 2 == 0)
        for ids, m in zip(completion_ids, mode)
    ]


def _worker(model_dir: str, out_dir: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from sara_trl import SaraConfig, SaraGRPOTrainer

    torch.set_num_threads(1)
    data = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Question {i}?"}] for i in range(len(MODES))], "mode": MODES}
    )
    args = SaraConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to="none", max_steps=2, num_generations=4,
        per_device_train_batch_size=6, max_completion_length=6, logging_steps=1, save_strategy="no",
        learning_rate=1e-3, activation_checkpointing=False, ddp_find_unused_parameters=False, disable_tqdm=True,
        seed=0, budget_cap=12.0,
        # B = 12 / 4 = 3 groups; the first round probes ceil(3 / p_eff(0, 0)) = ceil(3 / 0.6) = 5 fresh prompts with
        # n0 = 1 rollout each: an odd request list, so the padding to a multiple of the world size is exercised.
        n0=1,
    )
    trainer = SaraGRPOTrainer(model=model_dir, reward_funcs=mode_reward, args=args, train_dataset=data,
                              processing_class=AutoTokenizer.from_pretrained(model_dir))
    rows = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: _record(original, inputs, rows)
    requests = []
    collect = trainer.sara_allocator.collect

    def recording_collect(rollout_fn, stream, num_groups):
        def recording(prompt_ids, counts):
            requests.append(int(sum(counts)))
            return rollout_fn(prompt_ids, counts)

        return collect(recording, stream, num_groups)

    trainer.sara_allocator.collect = recording_collect
    trainer.train()
    rank = trainer.accelerator.process_index
    result = {
        "rank": rank,
        "world": trainer.accelerator.num_processes,
        "allocator": trainer.sara_allocator.state_dict(),
        "stream": trainer.sara_stream.state_dict(),
        "records": [r.__dict__ for r in trainer.sara_last_step.records],
        "reward_rollouts": CALLS["rollouts"],
        "requests": requests,
        "rows": rows,
        "param_sum": float(sum(p.detach().double().sum() for p in trainer.model.parameters())),
        "logs": [e for e in trainer.state.log_history if "sara/rounds" in e],
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))


def _record(original, inputs, rows):
    output = original(inputs)
    rows.append(int(output["prompt_ids"].shape[0]))
    return output


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.multiprocess
def test_two_processes_lock_step(tmp_path, tiny_model_dir):
    torchrun = shutil.which("torchrun")
    if torchrun is None:  # pragma: no cover
        pytest.skip("torchrun not found")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(_free_port()), __file__, tiny_model_dir, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    # Identical decisions, prompts and outcomes on both processes ...
    assert ranks[0]["allocator"] == ranks[1]["allocator"] and ranks[0]["stream"] == ranks[1]["stream"]
    assert ranks[0]["records"] == ranks[1]["records"] and ranks[0]["requests"] == ranks[1]["requests"]
    # ... each trained on half of the B*k = 12 rows, and the replicas stayed in sync.
    assert ranks[0]["rows"] == ranks[1]["rows"] == [6, 6]
    assert ranks[0]["param_sum"] == pytest.approx(ranks[1]["param_sum"], rel=0, abs=1e-9)
    # Each round's requests were split into two equal chunks (odd totals padded by one discarded rollout), and each
    # process scored only its own chunk, once.
    requests = ranks[0]["requests"]
    assert requests[0] == 5
    assert ranks[0]["reward_rollouts"] == ranks[1]["reward_rollouts"] == sum((n + 1) // 2 for n in requests)
    assert sum(requests) == ranks[0]["allocator"]["total_rollouts"]
    logs = ranks[0]["logs"]
    assert len(logs) == 2 and sum(e["sara/rollouts_generated"] for e in logs) == sum(requests)


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
