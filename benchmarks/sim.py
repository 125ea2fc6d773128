"""Simulated allocation at scale: uniform vs dynamic sampling (DS) vs SARA on latent success-rate distributions.

Every allocator of a comparison sees the same prompt pool (the same success rates gamma), the same prompt-stream
seed and the same outcome-RNG seed, and runs ``steps`` consecutive steps per seed with one
:class:`~sara_trl.allocation.Allocator` (so its cross-step yield estimate warms up exactly as in training). No step is
dropped: the first, cold step is part of every mean.

Units: *rollouts* are completions; *tokens* are completion tokens from the simulator (Gamma-distributed, mean
``tokens_pass`` for a success and ``tokens_fail`` for a failure, paper Fig. 7b: failed traces are the longest).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from benchmarks.simulator import SimulatedTask, phi, psi, u_shaped_gammas
from benchmarks.simulator.latency import DecodeEngine
from benchmarks.simulator.simulate import run_streaming_step
from sara_trl.allocation import AllocationConfig, Allocator, PromptStream, abandon_point_uniform, p_eff
from sara_trl.allocation.types import FATE_ABANDONED, FATE_SURPLUS, FATE_TRAINED

__all__ = [
    "DISTRIBUTIONS", "Distribution", "SimSource", "run_steps", "run_setting", "per_seed", "theory",
    "decidability", "fixed_budget_yield", "STEP_KEYS",
]


# --------------------------------------------------------------------------------------------- distributions
@dataclass(frozen=True)
class Distribution:
    """A named success-rate distribution: ``sample(num_prompts, seed) -> (num_prompts,) gammas in [0, 1]``."""

    name: str
    description: str
    sample: Callable[[int, int], np.ndarray]


def _beta(a: float, b: float) -> Callable[[int, int], np.ndarray]:
    return lambda num, seed: np.random.default_rng(seed).beta(a, b, size=num)


DISTRIBUTIONS: dict[str, Distribution] = {
    d.name: d
    for d in (
        Distribution(
            "u_shaped",
            "realistic U-shape: 42% never solved (gamma=0), 24% always solved (gamma=1), 34% gamma~Beta(1,1) "
            "(`u_shaped_gammas` defaults; Phi(k=8)=0.264, paper §4.2)",
            lambda num, seed: u_shaped_gammas(num, seed=seed),
        ),
        Distribution(
            "hard",
            "hard pool: 70% gamma=0, 10% gamma=1, 20% Beta(1,1) (Phi(k=8)=0.156)",
            lambda num, seed: u_shaped_gammas(num, seed=seed, p_zero=0.70, p_one=0.10),
        ),
        Distribution(
            "beta_0.3",
            "continuous U-shape Beta(0.3, 0.3), no exact 0/1 (abandoned prompts can still mix; Phi(k=8)=0.55)",
            _beta(0.3, 0.3),
        ),
        Distribution(
            "beta_1_1",
            "gamma~Beta(1,1): the SARA prior is exactly right, so Thm 1's summed p_eff is the true expected loss "
            "(Phi(k=8)=0.78)",
            _beta(1.0, 1.0),
        ),
    )
}


# --------------------------------------------------------------------------------------------- source
class SimSource:
    """A simulated rollout source with the ``rollout_fn`` contract plus the oracle the benchmark needs.

    Args:
        gammas: ``(P,)`` latent success rates.
        seed: seed of the outcome RNG.
        tokens_pass, tokens_fail: mean completion length in tokens of a success / a failure.
    """

    def __init__(self, gammas: np.ndarray, seed: int, tokens_pass: float = 400.0, tokens_fail: float = 700.0):
        self.task = SimulatedTask(np.asarray(gammas, np.float64), tokens_pass=tokens_pass, tokens_fail=tokens_fail,
                                  seed=seed)
        self.gammas = self.task.gammas

    def __len__(self) -> int:
        return len(self.gammas)

    def __call__(self, prompt_ids: np.ndarray, counts: np.ndarray):
        return self.task(prompt_ids, counts)

    def start_step(self) -> None:
        """Called before each step (a no-op here; the replay source reshuffles its banks)."""
        self.task.calls.clear()  # the simulator logs every call; the benchmark does not need the log

    def would_mix(self, prompt_ids: np.ndarray, n: np.ndarray, s: np.ndarray, k: int) -> np.ndarray:
        """Probability that an unmixed prefix of ``n`` rollouts (``s`` successes, so s == 0 or s == n) would have
        become mixed had its group been completed to ``k``: ``1 - (1 - gamma)^(k - n)`` after all failures,
        ``1 - gamma^(k - n)`` after all successes (exact, the simulator knows gamma).

        Args:
            prompt_ids, n, s: ``(A,)`` int arrays for the abandoned prompts.

        Returns:
            ``(A,)`` float64 probabilities in [0, 1] (0 when n == k).

        Raises:
            ValueError: a prefix is already mixed, or n exceeds k.
        """
        prompt_ids, n, s = (np.asarray(x, np.int64) for x in (prompt_ids, n, s))
        if ((s > 0) & (s < n)).any():
            raise ValueError("would_mix is defined for unmixed prefixes only (s == 0 or s == n)")
        if (n > k).any():
            raise ValueError(f"prefix longer than the group size k={k}")
        g = self.gammas[prompt_ids]
        r = k - n
        stay = np.where((s == n) & (n > 0), g**r, (1.0 - g) ** r)
        return 1.0 - stay


# --------------------------------------------------------------------------------------------- one run
STEP_KEYS = (
    "rollouts", "tokens", "rollouts_useful", "tokens_useful", "rollouts_trained", "tokens_trained", "rounds",
    "effective_fraction", "effective_in_batch", "prompts_drawn", "committed", "abandoned", "surplus",
    "active_left", "unfilled", "rollouts_abandoned", "rollouts_surplus", "rollouts_active_left",
    "tokens_abandoned", "sum_p_eff", "wrong_exact", "wrong_sampled", "filled",
)


def _step_metrics(res, source, k: int, rng: np.random.Generator) -> dict:
    st = res.stats
    ab = [r for r in res.records if r.fate == FATE_ABANDONED]
    if ab:
        pid = np.array([r.prompt_id for r in ab], np.int64)
        n = np.array([r.n for r in ab], np.int64)
        s = np.array([r.s for r in ab], np.int64)
        prob = source.would_mix(pid, n, s, k)
        wrong_exact = float(prob.sum())
        wrong_sampled = int((rng.random(len(prob)) < prob).sum())
    else:
        wrong_exact, wrong_sampled = 0.0, 0
    return {
        "rollouts": st.rollouts_generated,
        "tokens": st.tokens_generated,
        "rollouts_useful": st.rollouts_generated - st.rollouts_surplus - st.rollouts_active_left,
        "tokens_useful": st.tokens_generated - st.tokens_surplus - st.tokens_active_left,
        "rollouts_trained": st.rollouts_trained,
        "tokens_trained": st.tokens_trained,
        "rounds": st.rounds,
        "effective_fraction": st.effective_fraction,
        "effective_in_batch": st.effective_in_batch,
        "prompts_drawn": st.prompts_drawn,
        "committed": st.committed,
        "abandoned": st.abandoned,
        "surplus": st.surplus,
        "active_left": st.active_left,
        "unfilled": st.unfilled,
        "rollouts_abandoned": st.rollouts_abandoned,
        "rollouts_surplus": st.rollouts_surplus,
        "rollouts_active_left": st.rollouts_active_left,
        "tokens_abandoned": st.tokens_abandoned,
        "sum_p_eff": st.expected_lost,
        "wrong_exact": wrong_exact,
        "wrong_sampled": wrong_sampled,
        "filled": int(st.stop_reason == "filled"),
        "stop_reason": st.stop_reason,
    }


def _trace(res) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative rollouts after each round and cumulative effective groups kept by then (Fig. 3c)."""
    cum_r = np.cumsum(np.asarray(res.round_sizes, np.int64))
    eff = np.zeros(len(cum_r), np.int64)
    for r in res.records:
        if r.fate in (FATE_TRAINED, FATE_SURPLUS) and 0 < r.s < r.n and r.round >= 1:
            eff[r.round - 1] += 1
    return cum_r, np.cumsum(eff)


def run_steps(source, config: AllocationConfig, B: int, steps: int, seed: int, trace: bool = False,
              stream: PromptStream | None = None, max_in_flight: int = 256,
              on_result: Callable | None = None) -> tuple[list[dict], list]:
    """Run ``steps`` consecutive steps of one allocator against ``source``.

    Round collection (``config.collection == "rounds"``) calls :meth:`Allocator.collect`; streaming collection
    runs the allocator's :class:`~sara_trl.allocation.streaming.StreamingCollector` on a simulated
    continuous-batching engine of ``max_in_flight`` concurrent requests
    (:func:`benchmarks.simulator.simulate.run_streaming_step`; only rollouts and tokens matter here, not time).

    Args:
        source: a rollout source with ``__call__``, ``start_step()`` and ``would_mix(...)`` (see :class:`SimSource`).
        config: the allocator's settings.
        B: groups per step.
        steps: number of consecutive steps (>= 1), all reported.
        seed: seeds the prompt stream (``PromptStream(len(source), seed)``) and the RNG that samples whether an
            abandoned prompt would have mixed.
        trace: also return each step's ``(cumulative rollouts, cumulative effective groups)`` per round.
        stream: use this stream instead of a fresh seeded one (e.g. a finite stream for the no-reallocation
            ablation).
        max_in_flight: concurrent requests of the simulated engine (streaming collection only), >= k.
        on_result: called as ``on_result(step, result)`` with each step's
            :class:`~sara_trl.allocation.StepResult` (e.g. to read its ``prompt_table``); it must not change it.

    Returns:
        ``(rows, traces)``: one dict per step with the keys of :data:`STEP_KEYS` plus ``step``; ``traces`` is empty
        unless ``trace``.

    Raises:
        ValueError: ``steps < 1``.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    alloc = Allocator(config)
    stream = stream if stream is not None else PromptStream(len(source), seed=seed)
    rng = np.random.default_rng([seed, 7919])
    rows, traces = [], []
    for step in range(steps):
        source.start_step()
        if config.collection == "streaming":
            res = run_streaming_step(alloc.streaming(stream, B, max_in_flight), source, DecodeEngine(max_in_flight))
        else:
            res = alloc.collect(source, stream, B)
        row = _step_metrics(res, source, config.k, rng)
        row["step"] = step
        if on_result is not None:
            on_result(step, res)
        rows.append(row)
        if trace:
            traces.append(_trace(res))
    return rows, traces


def run_setting(dist: Distribution, config: AllocationConfig, B: int, seeds: Iterable[int], steps: int,
                pool: int = 20_000, trace: bool = False, tokens_pass: float = 400.0,
                tokens_fail: float = 700.0) -> tuple[list[dict], list]:
    """:func:`run_steps` for every seed; seed ``s`` draws its pool of ``pool`` success rates with ``s``.

    Returns:
        ``(rows, traces)``: rows carry ``seed`` and ``step``; traces are per (seed, step) when ``trace``.
    """
    rows, traces = [], []
    for seed in seeds:
        gammas = dist.sample(pool, seed)
        src = SimSource(gammas, seed=seed, tokens_pass=tokens_pass, tokens_fail=tokens_fail)
        r, t = run_steps(src, config, B, steps, seed, trace=trace)
        for row in r:
            row["seed"] = seed
        rows.extend(r)
        traces.extend(t)
    return rows, traces


def per_seed(rows: list[dict], key: str | Callable[[dict], float], reduce: str = "mean") -> np.ndarray:
    """One value per seed (in seed order): the mean (or median, or sum) over that seed's steps of ``key``.

    ``key`` is a row key or a function of a row.
    """
    seeds = sorted({r["seed"] for r in rows})
    f = (lambda r: r[key]) if isinstance(key, str) else key
    red = {"mean": np.mean, "median": np.median, "sum": np.sum}[reduce]
    return np.array([red([f(r) for r in rows if r["seed"] == s]) for s in seeds], np.float64)


# --------------------------------------------------------------------------------------------- theory (Thm 2)
def expected_stop(gammas: np.ndarray, n_a: int) -> float:
    """E[min(Tmix, n_a)] over the pool (paper Eq. 5): ``1 + sum_{n=1}^{n_a-1} (gamma^n + (1-gamma)^n)``, rollouts."""
    g = np.asarray(gammas, np.float64)
    n = np.arange(1, n_a, dtype=np.float64)[:, None]
    return float(np.mean(1.0 + (g[None, :] ** n + (1.0 - g[None, :]) ** n).sum(axis=0)))


def theory(gammas: np.ndarray, k: int, tau_low: float, B: int) -> dict:
    """The savings-theorem predictions for one setting (uniform prior, n0 <= 2), all in rollouts per step.

    * ``ds``: B k / Phi (paper §2; exact in expectation for DS without overshoot).
    * ``eq6``: (B / Phi) E[min(Tmix, n_a)], the paper's Eq. 6.
    * ``corrected``: (B / Psi) E[min(Tmix, n_a)], the review's correction. It is exact (Wald's identity: prompts are
      evaluated until the B-th success, E[#prompts] = B / Psi) for SARA with early commit at the first mix
      (``commit_min = 2``).
    * ``corrected_full``: (B / Psi) (Psi k + (1 - Psi) n_a), the same argument with the paper's default
      ``commit_min = k``: a prompt that mixes by n_a is topped up to k, one that does not is abandoned at n_a.

    Returns:
        dict with ``phi``, ``psi``, ``n_a``, ``e_stop`` and the four predictions.
    """
    n_a = abandon_point_uniform(k, tau_low)
    ph, ps = phi(gammas, k), psi(gammas, n_a)
    en = expected_stop(gammas, n_a)
    return {
        "phi": ph, "psi": ps, "n_a": n_a, "e_stop": en,
        "ds": B * k / ph,
        "eq6": B / ph * en,
        "corrected": B / ps * en,
        "corrected_full": B / ps * (ps * k + (1.0 - ps) * n_a),
    }


# --------------------------------------------------------------------------------------------- Fig. 3a
def decidability(gammas: np.ndarray, k: int, tau_low: float, alpha0: float = 1.0, beta0: float = 1.0,
                 num: int = 20_000, seed: int = 0) -> dict:
    """Share of groups whose verdict is decided after n observed rollouts, n = 1..k (paper Fig. 3a).

    Draws ``num`` prompts from ``gammas`` and k outcomes each; after n rollouts a group is *decided effective* if
    its prefix is mixed (exact, Prop. 2) and *decided saturated* if it is unmixed with p_eff(n, s) < tau_low (Eq. 3,
    the core's :func:`~sara_trl.allocation.p_eff`). ``agree`` is the share of decided groups whose verdict matches
    the oracle label of the completed k-group.

    Returns:
        dict of ``(k,)`` arrays ``n``, ``decided``, ``decided_effective``, ``decided_saturated``, ``agree``.
    """
    rng = np.random.default_rng(seed)
    g = rng.choice(np.asarray(gammas, np.float64), size=num)
    out = (rng.random((num, k)) < g[:, None]).astype(np.int64)
    cum = np.cumsum(out, axis=1)
    full_mixed = (cum[:, -1] > 0) & (cum[:, -1] < k)
    res = {key: np.zeros(k) for key in ("decided", "decided_effective", "decided_saturated", "agree")}
    res["n"] = np.arange(1, k + 1)
    for i in range(k):
        n = i + 1
        s = cum[:, i]
        mixed = (s > 0) & (s < n)
        pe = np.asarray(p_eff(np.full(num, n), s, np.full(num, k), alpha0, beta0))
        sat = ~mixed & (pe < tau_low)
        decided = mixed | sat
        res["decided"][i] = decided.mean()
        res["decided_effective"][i] = mixed.mean()
        res["decided_saturated"][i] = sat.mean()
        correct = (mixed & full_mixed) | (sat & ~full_mixed)
        res["agree"][i] = correct.sum() / decided.sum() if decided.any() else np.nan
    return res


# --------------------------------------------------------------------------------------------- Fig. 6c
def fixed_budget_yield(dist: Distribution, k: int, B: int, seeds: Iterable[int], steps: int,
                       budget: dict[int, float], targets=(1.25, 2.0), pool: int = 20_000,
                       base: AllocationConfig | None = None) -> dict[str, np.ndarray]:
    """Effective groups per step when every allocator gets the same rollout budget (paper Thm 3, Fig. 6c).

    ``budget[seed]`` is the per-step budget in rollouts (the benchmark passes DS's measured mean cost for that
    seed). DS and SARA run with ``budget_cap = budget / (target * B * k)`` and a target of ``target * B`` groups,
    so that the budget, not the target, ends the step (a target of exactly B would let both stop at B). Uniform
    spends the budget on ``floor(budget / k)`` full groups. "SARA, no reallocation" sees a finite stream of B
    prompts (no fresh prompts after abandonment). "SARA, commit_min=4" is the paper's early-commit ablation.

    Returns:
        name -> ``(len(seeds),)`` mean effective groups per step for each seed.
    """
    base = base or AllocationConfig(k=k)
    seeds = list(seeds)
    out: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        out.setdefault(name, []).append(float(value))

    for seed in seeds:
        gammas = dist.sample(pool, seed)
        N = float(budget[seed])
        # Uniform: floor(N / k) prompts, one full group each, all kept; count the effective ones.
        rows, _ = run_steps(SimSource(gammas, seed), dataclasses.replace(base, allocator="uniform"), int(N // k),
                            steps, seed)
        add("uniform", np.mean([r["effective_in_batch"] for r in rows]))
        for target in targets:
            Bt = int(round(target * B))
            cap = N / (Bt * k)
            if cap < 1.0:
                raise ValueError(f"budget {N:.0f} is below one full batch of {Bt} x {k}; lower the target")
            for name, cfg in (("DS", dataclasses.replace(base, allocator="dynamic_sampling", budget_cap=cap)),
                              ("SARA", dataclasses.replace(base, allocator="sara", budget_cap=cap)),
                              ("SARA commit_min=4", dataclasses.replace(base, allocator="sara", budget_cap=cap,
                                                                        commit_min=min(4, k)))):
                rows, _ = run_steps(SimSource(gammas, seed), cfg, Bt, steps, seed)
                # Every group DS or SARA keeps is mixed, so kept groups (trained + surplus) are effective groups.
                add(f"{name} (target {target:g}B)", np.mean([r["committed"] for r in rows]))
        # No reallocation: each step sees only B fresh prompts (a finite stream), the rule still abandons.
        stream = PromptStream(len(gammas), seed=seed)
        sub_rng = np.random.default_rng([seed, 31])
        alloc = Allocator(dataclasses.replace(base, allocator="sara", budget_cap=max(1.0, N / (B * k))))
        vals = []
        for _ in range(steps):
            ids = stream.take(B)
            sub = SimSource(gammas[ids], seed=int(sub_rng.integers(2**31)))
            vals.append(alloc.collect(sub, PromptStream(B, seed=seed, wrap=False), B).stats.committed)
        add("SARA, no reallocation", np.mean(vals))
    return {k_: np.asarray(v) for k_, v in out.items()}
