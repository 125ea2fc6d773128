"""Real CPU training runs: uniform vs dynamic sampling (DS) vs SARA with SmolLM2-135M-Instruct on the same task, for
the same number of optimizer steps.

    python -m benchmarks.train_runs.train_runs [--steps 8] [--groups 4] [--k 8] [--out FILE]

(``--out`` default: ``train_results.json`` in this folder.)

Each allocator trains a fresh copy of the model, one after the other (never two model jobs at once; torch uses at
most ``--threads`` threads). Per optimizer step it records, from the trainer's ``sara/*`` metrics: rollouts and
completion tokens generated (cumulative), the effective fraction of the trained batch, the success rate over every
generated rollout, TRL's mean reward over the trained rows (biased towards 0.5 for DS and SARA, which train only
mixed groups), and wall-clock. Every ``--eval-every`` steps (and before the first and after the last) it measures
greedy accuracy on a fixed held-out set of prompts from the same generator, the allocator-independent measure of
learning progress. The JSON it writes is read by ``benchmarks/simulated/run.py`` (section 6 of RESULTS.md, plot
``plots/train_runs.png``).

Task: ``make_arithmetic_dataset`` (sum or difference of two numbers in [0, --max-operand], "Answer with only the
number"), rewarded by ``numeric_reward``: SmolLM2-135M solves some of these and not others, so uniform sampling
sees saturated and mixed groups alike. Expect minutes per step on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Run name -> SaraConfig allocation fields. "SARA + carry_over" keeps the prompts still undecided at the end of a
# step for the next one (beyond the paper; see SaraConfig.carry_over).
ALLOCATORS = {"uniform": {"allocator": "uniform"}, "DS": {"allocator": "dynamic_sampling"},
              "SARA": {"allocator": "sara"}, "SARA + carry_over": {"allocator": "sara", "carry_over": True}}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per allocator (same for all)")
    ap.add_argument("--groups", type=int, default=4, help="B: groups per step")
    ap.add_argument("--k", type=int, default=8, help="group size (num_generations)")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS),
                    help="comma-separated subset of " + ",".join(ALLOCATORS))
    ap.add_argument("--max-completion", type=int, default=24, help="max_completion_length in tokens")
    ap.add_argument("--max-operand", type=int, default=9)
    ap.add_argument("--ops", default="+")
    ap.add_argument("--prompts", type=int, default=2000, help="training prompts generated")
    ap.add_argument("--eval-prompts", type=int, default=48)
    ap.add_argument("--eval-every", type=int, default=4, help="0 = only before and after training")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--budget-cap", type=float, default=6.0, help="SARA/DS cap in units of B*k rollouts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the machine is shared: <= 2)")
    ap.add_argument("--out", type=Path, default=HERE / "train_results.json")
    return ap.parse_args(argv)


def _num(x) -> float:
    """A logged metric as float (TRL logs None for a mean over no rows)."""
    return float("nan") if x is None else float(x)


def greedy_accuracy(model, tokenizer, dataset, max_new_tokens: int, batch_size: int = 32) -> float:
    """Share of ``dataset`` prompts whose greedy completion has the right final number (numeric_success)."""
    import torch

    from sara_trl.rewards import numeric_success

    model.eval()
    correct = 0
    tokenizer.padding_side = "left"
    for i in range(0, len(dataset), batch_size):
        rows = dataset[i : i + batch_size]
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in rows["prompt"]]
        enc = tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        comps = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        correct += sum(bool(numeric_success(c, a).success) for c, a in zip(comps, rows["answer"]))
    model.train()
    return correct / len(dataset)


def run_one(name: str, args, model_dir: str, train_ds, eval_ds) -> dict:
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.rewards import numeric_reward

    torch.manual_seed(args.seed)
    rec = {"step": [], "reward": [], "raw_success": [], "cum_rollouts": [], "cum_tokens": [],
           "effective_fraction": [], "rounds": [], "wall_s": [], "eval_step": [], "eval_acc": []}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    t0 = time.perf_counter()

    class Recorder(TrainerCallback):
        def on_log(self, targs, state, control, logs=None, **kw):
            if logs and "sara/rollouts_generated" in logs:
                rec["step"].append(int(state.global_step))
                rec["reward"].append(_num(logs.get("reward")))
                rec["raw_success"].append(_num(logs.get("sara/raw_success_rate")))
                rec["cum_rollouts"].append(float(logs["sara/cumulative_rollouts"]))
                rec["cum_tokens"].append(float(logs["sara/cumulative_tokens"]))
                rec["effective_fraction"].append(float(logs["sara/effective_fraction"]))
                rec["rounds"].append(float(logs["sara/rounds"]))
                rec["wall_s"].append(time.perf_counter() - t0)
                print(f"[{name}] step {state.global_step}: rollouts {rec['cum_rollouts'][-1]:.0f}, eff. "
                      f"{rec['effective_fraction'][-1]:.2f}, raw success {rec['raw_success'][-1]:.3f}", flush=True)

        def on_step_end(self, targs, state, control, model=None, **kw):
            if args.eval_every and state.global_step % args.eval_every == 0 and state.global_step < args.steps:
                rec["eval_step"].append(int(state.global_step))
                rec["eval_acc"].append(greedy_accuracy(model, tokenizer, eval_ds, args.max_completion))

    cfg = SaraConfig(
        output_dir=tempfile.mkdtemp(prefix=f"sara_train_{name}_"), use_cpu=True, bf16=False, report_to="none",
        max_steps=args.steps, num_generations=args.k, per_device_train_batch_size=args.groups * args.k,
        max_completion_length=args.max_completion, logging_steps=1, save_strategy="no", learning_rate=args.lr,
        gradient_checkpointing=False, disable_tqdm=True, dataloader_num_workers=0, seed=args.seed,
        budget_cap=args.budget_cap, temperature=1.0, **ALLOCATORS[name],
    )
    trainer = SaraGRPOTrainer(model=model_dir, reward_funcs=numeric_reward, args=cfg, train_dataset=train_ds,
                              processing_class=tokenizer, callbacks=[Recorder()])
    rec["eval_step"].append(0)
    rec["eval_acc"].append(greedy_accuracy(trainer.model, tokenizer, eval_ds, args.max_completion))
    trainer.train()
    rec["eval_step"].append(args.steps)
    rec["eval_acc"].append(greedy_accuracy(trainer.model, tokenizer, eval_ds, args.max_completion))
    rec["train_wall_s"] = time.perf_counter() - t0
    return rec


def main(argv=None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.allocators.split(",") if n.strip()]
    bad = [n for n in names if n not in ALLOCATORS]
    if bad:
        raise ValueError(f"unknown allocator(s) {bad}; choose from {list(ALLOCATORS)}")
    if args.threads > 2:
        raise ValueError("the benchmark machine is shared: use --threads <= 2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    import trl

    from benchmarks.common import environment
    from sara_trl.data.generators import make_arithmetic_dataset
    from sara_trl.utils import smollm2_checkpoint

    torch.set_num_threads(args.threads)
    ops = tuple(o.strip() for o in args.ops.split(","))
    train_ds = make_arithmetic_dataset(args.prompts, seed=args.seed, max_operand=args.max_operand, ops=ops)
    eval_ds = make_arithmetic_dataset(args.eval_prompts, seed=args.seed + 10_000, max_operand=args.max_operand,
                                      ops=ops)
    model_dir = smollm2_checkpoint()
    env = environment() | {"torch": torch.__version__, "trl": trl.__version__,
                           "transformers": transformers.__version__, "torch_threads": args.threads}
    result = {"command": "python -m benchmarks.train_runs.train_runs" + "".join(" " + shlex.quote(a) for a in
                                                                     (argv if argv is not None else sys.argv[1:])),
              "environment": env, "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "task": f"arithmetic: two operands in [0, {args.max_operand}], ops {ops}; numeric_reward; "
                      f"{args.prompts} training prompts, {args.eval_prompts} held-out prompts (greedy accuracy)",
              "runs": {}}
    for name in names:
        print(f"[train_runs] {name}", flush=True)
        result["runs"][name] = run_one(name, args, model_dir, train_ds, eval_ds)
        args.out.write_text(json.dumps(result, indent=1))  # partial results survive an interrupted run
    print(f"[train_runs] wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
