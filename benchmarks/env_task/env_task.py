# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
"""A deterministic text environment for ``environment_factory`` with a real model: guess a number in 1..``high``.

``reset(**row)`` takes the row's ``target`` and ``game`` and returns the observation appended to the prompt. The
model may call the environment's one tool, ``guess(n)`` (answered "correct", "higher" or "lower"; it never raises),
up to ``max_tool_calling_iterations`` times, and its final answer's first integer is a guess too; ``get_reward()`` is
1.0 when a guess hit. TRL 1.16 accepts ``environment_factory`` only with a chat template that renders tool calls,
which SmolLM2-135M-Instruct's own does not (``supports_tool_calling`` is False for it), so the model runs with
Qwen3's ChatML template (:func:`sara_trl.utils.use_tool_chat_template`); SmolLM2 was not trained on it and seldom
emits a well-formed tool call, so most games are decided by the final answer. TRL's ``get_reward`` takes no argument
and the environment sees no completion, so a reward function, :func:`hand_answer_to_environment`, hands each final
answer to its rollout's instance before TRL's ``get_reward`` column is computed (TRL appends that column after the
``reward_funcs`` and runs synchronous reward functions in order); it scores 0 itself.

Each instance counts what happened to it (resets, tool calls, answers, the games it was reset with) and refuses an
answer without a reset since its last one, or a reward before the answer; the factory (:class:`GuessFactory`) keeps
every instance it built and every reward handed out, so a run can check what SARA's ``sara/*`` accounting says
against what the environments saw.

The study (``python -m benchmarks.env_task.env_task --seed N``, one invocation per seed): SARA and dynamic sampling
(``allocator="dynamic_sampling"``) train SmolLM2-135M-Instruct on the same games (same dataset, same seed, so the
same prompt stream order; each allocator draws as many prompts as it needs), from the same weights, with the same
budget cap, round cap and generation settings. Per run it records rollouts, model and tool tokens, environment resets
and tool calls (the ``sara/*`` metrics, checked against the environments' own counters), the collection seconds and
the effective groups, and the load average at its start and end, in ``env_task_seedN.json``.
``--report`` pools every seed file of the folder: per seed each quantity per effective batch (its total over the
steps divided by effective groups / B) and the ratio SARA / DS, then the mean ratio with a 95% Student-t interval over
seeds (``benchmarks.common.mean_ci``), in ``ENV_TASK.md`` and ``env_task.json``. ``--quick``: one step of each on a
smaller budget, written to ``--out`` (default: a temporary folder), for a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import environment, environment_lines, fmt_ci, md_table, mean_ci

HERE = Path(__file__).resolve().parent
COMMAND = "python -m benchmarks.env_task.env_task"
ALLOCATORS = ("sara", "dynamic_sampling")
# Per-run totals reported per effective batch, and their labels.
QUANTITIES = (("rollouts", "rollouts"), ("model_tokens", "model tokens"), ("env_resets", "env resets"),
              ("tool_calls", "tool calls"), ("collect_seconds", "generation s"))
SETTINGS = {"steps": 2, "games": 64, "high": 2, "num_groups": 2, "k": 4, "max_completion_length": 32,
            "budget_cap": 2.0, "max_rounds": 3, "n0": 2, "commit_min": 2, "max_tool_calling_iterations": 2,
            "temperature": 1.0, "learning_rate": 1e-6, "torch_threads": 1}
QUICK = {"steps": 1, "games": 16, "budget_cap": 1.5, "max_rounds": 2}

OBSERVATION = " Guess it: reply with a single number."


def env_task_dataset(n: int, high: int = 4, seed: int = 0):
    """``n`` games: a conversational ``prompt``, the ``target`` (uniform in 1..``high``, from ``seed``) and ``game``
    (the row index).

    Returns
    -------
    datasets.Dataset
        Columns ``prompt`` (one user message), ``target`` (int), ``game`` (int).

    Raises
    ------
    ValueError
        ``n < 1`` or ``high < 1``.
    """
    from datasets import Dataset

    if n < 1 or high < 1:
        raise ValueError(f"need n >= 1 and high >= 1, got n={n}, high={high}")
    targets = np.random.default_rng(seed).integers(1, high + 1, size=n)
    prompts = [[{"role": "user", "content": f"Game {i}: I am thinking of a number from 1 to {high}."}]
               for i in range(n)]
    return Dataset.from_dict({"prompt": prompts, "target": targets.tolist(), "game": list(range(n))})


class GuessEnv:
    """One game at a time: guess the row's number in one answer.

    Attributes
    ----------
    resets, tool_calls, answers : int
        ``reset`` calls, ``guess`` tool calls and final answers received (:meth:`_answer`) since construction.
    games : list of int
        The ``game`` of each reset, in order.
    """

    def __init__(self, factory: GuessFactory | None = None):
        self.factory = factory
        self.resets, self.tool_calls, self.answers, self.games = 0, 0, 0, []
        self.target, self.solved, self.fresh, self.answered = None, False, False, False

    def reset(self, target, game, **kwargs) -> str:
        """Start the row's game: its ``target`` (int) and ``game`` (int); returns the observation appended to the
        prompt (:data:`OBSERVATION`)."""
        self.target, self.solved, self.fresh, self.answered = int(target), False, True, False
        self.resets += 1
        self.games.append(int(game))
        return OBSERVATION

    def guess(self, n: int) -> str:
        """Guess the number.

        Args:
            n: The guessed number.
        """
        self.tool_calls += 1
        try:
            value = int(n)
        except (TypeError, ValueError):
            return "not a number"
        self.solved = self.solved or value == self.target
        return "correct" if value == self.target else ("higher" if value < self.target else "lower")

    def _answer(self, text: str) -> None:
        """Parse the completion's final answer (its first integer is the guess) and set the reward (private: TRL
        would expose a public method as a tool).

        Raises
        ------
        RuntimeError
            No reset since the instance's last answer (an instance used without a reset).
        """
        if not self.fresh:
            raise RuntimeError(f"GuessEnv answered without a reset since its last answer (games {self.games})")
        self.fresh, self.answered = False, True
        self.answers += 1
        match = re.search(r"\d+", text)
        self.solved = self.solved or (match is not None and int(match.group()) == self.target)
        if self.factory is not None:
            self.factory.rewards.append(float(self.solved))

    def get_reward(self) -> float:
        """1.0 when a guess (a tool call or the final answer) hit the target, else 0.0.

        Raises
        ------
        RuntimeError
            The answer of the current game was not handed over yet.
        """
        if not self.answered:
            raise RuntimeError("GuessEnv.get_reward before the rollout's answer was handed over")
        return float(self.solved)


class GuessFactory:
    """The ``environment_factory``: builds :class:`GuessEnv` instances and keeps them (``instances``, in construction
    order; TRL builds one probe at init) and every reward they handed out (``rewards``, in answer order)."""

    def __init__(self):
        self.instances: list[GuessEnv] = []
        self.rewards: list[float] = []

    def __call__(self) -> GuessEnv:
        env = GuessEnv(self)
        self.instances.append(env)
        return env


def hand_answer_to_environment(completions, environments, **kwargs) -> list[float]:
    """A reward function that hands each rollout's final answer (its last message's text) to its environment
    instance (:meth:`GuessEnv._answer`); it scores 0.0 for every rollout (the reward is the environment's
    ``get_reward`` column).

    Parameters
    ----------
    completions : list of list of dict
        ``(N,)`` conversational completions.
    environments : list of GuessEnv
        ``(N,)`` the round's instances, as TRL hands them to reward functions.

    Returns
    -------
    list of float
        ``(N,)`` zeros.
    """
    for completion, env in zip(completions, environments, strict=True):
        content = completion[-1]["content"]
        env._answer(content if isinstance(content, str) else " ".join(part.get("text", "") for part in content))
    return [0.0] * len(completions)


def run_allocator(allocator: str, seed: int, settings: dict, workdir: str) -> dict:
    """Train SmolLM2-135M-Instruct on the games with one allocator for ``settings["steps"]`` steps (CPU, transformers
    generation) and return its totals.

    Returns
    -------
    dict
        Totals over the steps: ``rollouts``, ``model_tokens``, ``tool_tokens``, ``tool_calls`` (from the ``sara/*``
        metrics), ``env_resets`` (``sara/env_resets``), ``collect_seconds`` (``sara/collect_seconds``: generation and
        scoring), ``effective_groups`` (effective fraction x B, summed), ``unfilled`` groups, ``raw_success_rate``
        (over every generated rollout), ``env_counters`` (what the environments saw: resets, tool calls, answers,
        instances built), ``seconds`` (the whole run, model loading included) and ``load_average`` (1-minute, at the
        start and the end).

    Raises
    ------
    RuntimeError
        What SARA counted disagrees with what the environments saw (resets, answers, tool calls).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sara_trl import SaraConfig, SaraGRPOTrainer
    from sara_trl.utils import smollm2_checkpoint, use_tool_chat_template

    load_start, start = os.getloadavg()[0], time.perf_counter()
    torch.set_num_threads(settings["torch_threads"])  # 1: on a shared 2-core machine two threads stall under load
    path = smollm2_checkpoint()
    factory = GuessFactory()
    sara_only = {"n0": settings["n0"], "commit_min": settings["commit_min"]} if allocator == "sara" else {}
    args = SaraConfig(
        output_dir=os.path.join(workdir, allocator), use_cpu=True, bf16=False, report_to="none",
        gradient_checkpointing=False, use_vllm=False, max_steps=settings["steps"], num_generations=settings["k"],
        per_device_train_batch_size=settings["num_groups"] * settings["k"],
        max_completion_length=settings["max_completion_length"], temperature=settings["temperature"],
        learning_rate=settings["learning_rate"], logging_steps=1, save_strategy="no", seed=seed,
        disable_tqdm=True, allocator=allocator, budget_cap=settings["budget_cap"], max_rounds=settings["max_rounds"],
        success_reward_func="GuessEnv", max_tool_calling_iterations=settings["max_tool_calling_iterations"],
        **sara_only)
    trainer = SaraGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), args=args,
                              reward_funcs=hand_answer_to_environment,
                              train_dataset=env_task_dataset(settings["games"], high=settings["high"], seed=seed),
                              processing_class=use_tool_chat_template(AutoTokenizer.from_pretrained(path)),
                              environment_factory=factory)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "sara/rollouts_generated" in entry]

    def total(name: str) -> float:
        return float(sum(entry[f"sara/{name}"] for entry in logs))

    envs = factory.instances
    counters = {"resets": sum(e.resets for e in envs), "tool_calls": sum(e.tool_calls for e in envs),
                "answers": sum(e.answers for e in envs), "instances": len(envs)}
    rollouts = total("rollouts_generated")
    if not counters["resets"] == counters["answers"] == rollouts == total("env_resets"):
        raise RuntimeError(f"{allocator}: {rollouts} rollouts, {total('env_resets')} sara/env_resets, but the "
                           f"environments saw {counters['resets']} resets and {counters['answers']} answers")
    if counters["tool_calls"] > total("tool_calls_generated"):
        raise RuntimeError(f"{allocator}: the environments ran {counters['tool_calls']} tool calls, sara counted "
                           f"{total('tool_calls_generated')}")
    return {"rollouts": rollouts, "model_tokens": total("model_tokens_generated"),
            "tool_tokens": total("tool_tokens_generated"), "tool_calls": total("tool_calls_generated"),
            "env_resets": total("env_resets"), "collect_seconds": total("collect_seconds"),
            "effective_groups": total("effective_fraction") * settings["num_groups"], "unfilled": total("unfilled"),
            "raw_success_rate": float(np.mean(factory.rewards)) if factory.rewards else float("nan"),
            "env_counters": counters, "steps": len(logs), "seconds": time.perf_counter() - start,
            "load_average": [load_start, os.getloadavg()[0]]}


def per_effective_batch(run: dict, quantity: str, num_groups: int) -> float:
    """A run's total of ``quantity`` per effective batch: total / (effective groups / B); NaN with no effective
    group."""
    batches = run["effective_groups"] / num_groups
    return run[quantity] / batches if batches else float("nan")


def run_seed(seed: int, settings: dict, out: Path) -> Path:
    """One invocation: SARA then dynamic sampling on the same games and seed; writes ``env_task_seed<seed>.json``
    under ``out`` and returns its path."""
    doc = {"command": f"{COMMAND} --seed {seed}", "seed": seed, "settings": settings, "environment": environment()}
    with tempfile.TemporaryDirectory() as workdir:
        for allocator in ALLOCATORS:
            doc[allocator] = run_allocator(allocator, seed, settings, workdir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"env_task_seed{seed}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def pooled(docs: list[dict]) -> dict:
    """Per seed, each quantity per effective batch for both allocators and the ratio SARA / DS; the mean ratio with
    its 95% interval over the seeds that have effective groups under both (the others are listed, not dropped
    silently)."""
    per_seed, usable = [], []
    for doc in docs:
        B = doc["settings"]["num_groups"]
        row = {"seed": doc["seed"], "file": f"env_task_seed{doc['seed']}.json"}
        for key, _ in QUANTITIES:
            sara, ds = (per_effective_batch(doc[a], key, B) for a in ALLOCATORS)
            row[key] = {"sara": sara, "dynamic_sampling": ds, "ratio": sara / ds if ds else float("nan")}
        per_seed.append(row)
        if all(np.isfinite(row[key]["ratio"]) for key, _ in QUANTITIES if key != "tool_calls"):
            usable.append(row)
    summary = {}
    for key, _ in QUANTITIES:
        values = [row[key]["ratio"] for row in usable if np.isfinite(row[key]["ratio"])]
        if values:
            iv = mean_ci(values)
            summary[key] = {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "seeds": iv.n}
    return {"per_seed": per_seed, "ratios": summary,
            "seeds_without_effective_groups": [row["seed"] for row in per_seed if row not in usable]}


def render(docs: list[dict], pool: dict) -> str:
    """The Markdown report."""
    settings = docs[0]["settings"]
    runs = []
    for doc in docs:
        for allocator in ALLOCATORS:
            run = doc[allocator]
            runs.append([doc["seed"], allocator, run["steps"], f"{run['rollouts']:.0f}", f"{run['model_tokens']:.0f}",
                         f"{run['tool_tokens']:.0f}", f"{run['env_resets']:.0f}", f"{run['tool_calls']:.0f}",
                         f"{run['effective_groups']:.0f}", f"{run['unfilled']:.0f}",
                         f"{run['raw_success_rate']:.3f}", f"{run['collect_seconds']:.1f}", f"{run['seconds']:.0f}",
                         " -> ".join(f"{x:.1f}" for x in run["load_average"])])
    runs_table = md_table(["seed", "allocator", "steps", "rollouts", "model tokens", "tool tokens", "env resets",
                           "tool calls", "effective groups", "unfilled", "raw success", "generation s", "run s",
                           "load start -> end"], runs)
    rows = []
    for row in pool["per_seed"]:
        rows.append([row["seed"]] + [f"{row[key]['sara']:.1f} / {row[key]['dynamic_sampling']:.1f} = "
                                     f"{row[key]['ratio']:.3f}" for key, _ in QUANTITIES])
    per_seed_table = md_table(["seed"] + [f"{label} (SARA / DS)" for _, label in QUANTITIES], rows)
    summary_rows = []
    for key, label in QUANTITIES:
        r = pool["ratios"].get(key)
        summary_rows.append([label, "n/a (undefined on every seed: no effective group, or 0 under DS)" if r is None else
                             fmt_ci(mean_ci_from(r), digits=3)])
    effective = [doc[a]["effective_groups"] for doc in docs for a in ALLOCATORS]
    cap = settings["steps"] * settings["budget_cap"] * settings["num_groups"] * settings["k"]
    capped = {a: sum(doc[a]["rollouts"] >= cap for doc in docs) for a in ALLOCATORS}
    unfilled = {a: sum(doc[a]["unfilled"] for doc in docs) for a in ALLOCATORS}
    tool_calls = sum(doc[a]["tool_calls"] for doc in docs for a in ALLOCATORS)
    caveat = (f"Scale: a run has {min(effective):.0f}-{max(effective):.0f} effective groups over its "
              f"{settings['steps']} steps, so each per-seed ratio is a ratio of small counts, and the interval over "
              f"{len(docs)} seeds does not see that discreteness. {capped['sara']} of {len(docs)} SARA runs and "
              f"{capped['dynamic_sampling']} of {len(docs)} DS runs spent their whole budget cap ({cap:.0f} rollouts "
              f"per run); {unfilled['sara']:.0f} (SARA) and {unfilled['dynamic_sampling']:.0f} (DS) groups were left "
              "unfilled: at equal caps, the figure per effective batch counts what a run spent for the effective "
              "groups it got. Environment resets equal rollouts (one reset per generated rollout, none in the "
              "replay), so their ratio is the rollouts'. "
              + (f"{tool_calls:.0f} tool calls in all." if tool_calls else
                 "No run made a tool call (SmolLM2 emitted no well-formed one), so tool calls have no ratio."))
    missing = pool["seeds_without_effective_groups"]
    note = f" Seeds {missing} had no effective group under one allocator and are left out of the intervals." \
        if missing else ""
    seeds = ", ".join(str(doc["seed"]) for doc in docs)
    return f"""# SARA vs dynamic sampling with `environment_factory` (guess a number, SmolLM2-135M, CPU)

SmolLM2-135M-Instruct trains with `environment_factory` on `benchmarks/env_task/env_task.py`'s game: guess a number
in 1..{settings['high']}, through the environment's `guess` tool (up to {settings['max_tool_calling_iterations']}
tool-calling iterations) or the final answer; reward 1 (`get_reward`) on a hit. SmolLM2 fails most games (raw success
below) and seldom emits a well-formed tool call under the Qwen3 ChatML template TRL needs for environments. Per seed,
one invocation trains SARA and then dynamic sampling (`allocator="dynamic_sampling"`) from the same weights on the
same games and prompt stream: {settings['steps']} steps, B = {settings['num_groups']} groups of
k = {settings['k']}, `max_completion_length` {settings['max_completion_length']}, `budget_cap`
{settings['budget_cap']}, `max_rounds` {settings['max_rounds']}, temperature {settings['temperature']}, transformers
generation on the CPU with {settings.get('torch_threads', 2)} torch thread(s) (SARA: `n0` {settings['n0']},
`commit_min` {settings['commit_min']}; DS: full groups of k). Counts are the `sara/*`
metrics (resets, answers and tool calls checked against the environments' own counters); generation s is
`sara/collect_seconds` (generation, tool loop and scoring). Measured on a shared 2-core machine: the load average
(1 minute) at each run's start and end is listed; CPU seconds under load are noisy.

## Runs (totals over the steps)

{runs_table}

## Per effective batch (total / (effective groups / B)), SARA / DS per seed

{per_seed_table}

## Ratio SARA / DS per effective batch: mean [95% Student-t interval over seeds]

{md_table(["quantity", "SARA / DS"], summary_rows)}

{len(pool['per_seed'])} seeds, one number per seed (its own ratio).{note} With 3 seeds the interval spans 4.3 standard
errors either way.

{caveat}

{environment_lines(COMMAND + " --seed N (N = " + seeds + "), then " + COMMAND + " --report", seeds,
                   docs[0]["environment"])}
"""


def mean_ci_from(r: dict):
    """The :class:`benchmarks.common.Interval` of a saved ratio summary."""
    from benchmarks.common import Interval

    return Interval(r["mean"], r["lo"], r["hi"], r["seeds"])


def pool_seed_files(folder: Path, stem: str, pool_fn, render_fn, command: str) -> str:
    """Pool every ``<stem>_seed*.json`` of ``folder`` (``pool_fn(docs)``, ``render_fn(docs, pool)``) into
    ``<STEM>.md`` and ``<stem>.json`` there; returns the report.

    Raises
    ------
    FileNotFoundError
        No seed file in ``folder``.
    """
    docs = sorted((json.loads(p.read_text()) for p in folder.glob(f"{stem}_seed*.json")), key=lambda d: d["seed"])
    if not docs:
        raise FileNotFoundError(f"no {stem}_seed*.json in {folder}")
    pool = pool_fn(docs)
    text = render_fn(docs, pool)
    (folder / f"{stem.upper()}.md").write_text(text)
    (folder / f"{stem}.json").write_text(json.dumps({"command": f"{command} --report", **pool}, indent=1) + "\n")
    return text


def report(folder: Path) -> str:
    """Pool every ``env_task_seed*.json`` of ``folder`` into ``ENV_TASK.md`` and ``env_task.json`` there
    (:func:`pool_seed_files`)."""
    return pool_seed_files(folder, "env_task", pooled, render, COMMAND)


def study_main(argv: list[str] | None, description: str, stem: str, run_seed_fn, report_fn, settings: dict,
               quick: dict) -> None:
    """The command line of a per-seed study: ``--seed N`` runs one seed into ``<stem>_seed<N>.json``, ``--report``
    pools the folder's seed files, ``--quick`` uses ``quick`` over ``settings`` (a temporary folder by default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, help=f"run one seed and write {stem}_seed<N>.json")
    parser.add_argument("--report", action="store_true", help=f"pool the seed files of --out into {stem.upper()}.md")
    parser.add_argument("--quick", action="store_true", help="one step each on a smaller budget (smoke test)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder of the seed files and report (default: this folder; with --quick a temporary one)")
    args = parser.parse_args(argv)
    out = args.out or (Path(tempfile.mkdtemp(prefix=f"{stem}_")) if args.quick else HERE)
    settings = {**settings, **(quick if args.quick else {})}
    if args.seed is None and not args.report:
        parser.error("give --seed N and/or --report")
    if args.seed is not None:
        print(f"wrote {run_seed_fn(args.seed, settings, out)}")
    if args.report:
        print(report_fn(out))


def main(argv: list[str] | None = None) -> None:
    study_main(argv, "SARA vs dynamic sampling with environment_factory (SmolLM2, CPU)", "env_task", run_seed, report,
               SETTINGS, QUICK)


if __name__ == "__main__":
    main()
