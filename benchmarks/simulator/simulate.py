"""A simulated rollout source: prompts with latent success rates and token lengths, no model needed.

Used by the tests and benchmarks to drive the allocators exactly as the trainer does (one call per round), and, with
:func:`run_streaming_step`, to drive a streaming collector through a simulated engine on the trainer's own event
loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from benchmarks.simulator.latency import DecodeEngine
from sara_trl.allocation.event_loop import Finished, drive_streaming_engine
from sara_trl.allocation.rounds import RoundCollector
from sara_trl.allocation.streaming import StreamingCollector
from sara_trl.allocation.types import RoundOutcome, StepResult

__all__ = ["SimulatedEngine", "SimulatedTask", "u_shaped_gammas", "phi", "psi", "run_streaming_step"]


def phi(gammas: np.ndarray, k: int) -> float:
    """Phi = E[1 - gamma^k - (1 - gamma)^k]: the share of full k-groups that are effective (paper §2, App. C.4).

    Parameters
    ----------
    gammas : array_like of float, shape (P,)
        Success rates in [0, 1].
    k : int
        Group size.
    """
    g = np.asarray(gammas, dtype=np.float64)
    return float(np.mean(1.0 - g**k - (1.0 - g) ** k))


def psi(gammas: np.ndarray, n_a: int) -> float:
    """Psi = E[1 - gamma^n_a - (1 - gamma)^n_a]: share of prompts that mix within the first ``n_a`` rollouts.

    Under the uniform prior SARA abandons an unmixed prefix at ``n_a = k - floor(tau_low (k + 1))`` rollouts
    (:func:`~sara_trl.allocation.predictor.abandon_point_uniform`), so a prompt is kept only if it mixes within its
    first ``n_a`` rollouts: Psi, not Phi, is SARA's per-prompt effectiveness (a prompt mixing later is lost).
    """
    return phi(gammas, n_a)


def u_shaped_gammas(num_prompts: int, seed: int = 0, p_zero: float = 0.42, p_one: float = 0.24,
                    a: float = 1.0, b: float = 1.0) -> np.ndarray:
    """Success rates from a U-shaped mixture: point masses at 0 (never solved) and 1 (always solved) plus
    Beta(a, b) for the rest, which is how real per-prompt success rates look during RLVR.

    With the defaults Phi at k = 8 is about 0.26 (paper §4.2: uniform sampling yields about 26% effective groups):
    0.34 * (1 - 2 / 9) = 0.264.

    Returns
    -------
    ndarray of float64, shape (num_prompts,)
        Success rates in [0, 1].

    Raises
    ------
    ValueError
        the masses are negative or sum above 1.
    """
    if p_zero < 0 or p_one < 0 or p_zero + p_one > 1:
        raise ValueError(f"point masses must be >= 0 and sum to <= 1, got p_zero={p_zero}, p_one={p_one}")
    rng = np.random.default_rng(seed)
    u = rng.random(num_prompts)
    g = rng.beta(a, b, size=num_prompts)
    g[u < p_zero] = 0.0
    g[(u >= p_zero) & (u < p_zero + p_one)] = 1.0
    return g


@dataclass
class SimulatedTask:
    """Prompts with latent success rates; each call draws Bernoulli outcomes and token lengths.

    Token lengths are Gamma-distributed with mean ``tokens_pass`` for a success and ``tokens_fail`` for a failure
    (paper Fig. 7b: failed traces are the longest), shape ``tokens_shape``, at least 1 token.

    Attributes
    ----------
    gammas
        ``(P,)`` success rates in [0, 1].
    tokens_pass, tokens_fail
        mean completion length in tokens.
    p_unscorable
        probability that a rollout is unscorable (success NaN).
    seed
        seed of the outcome RNG (the sequence of calls determines the outcomes).
    calls
        ``(prompt_ids, counts)`` of every call made, for tests.
    """

    gammas: np.ndarray
    tokens_pass: float = 400.0
    tokens_fail: float = 700.0
    tokens_shape: float = 4.0
    p_unscorable: float = 0.0
    seed: int = 0
    calls: list = field(default_factory=list)

    def __post_init__(self):
        self.gammas = np.asarray(self.gammas, dtype=np.float64)
        if self.gammas.ndim != 1 or len(self.gammas) == 0:
            raise ValueError("gammas must be a non-empty 1-D array of success rates")
        if np.isnan(self.gammas).any() or (self.gammas < 0).any() or (self.gammas > 1).any():
            raise ValueError("success rates must lie in [0, 1]")
        self.rng = np.random.default_rng(self.seed)

    def __len__(self) -> int:
        return len(self.gammas)

    def __call__(self, prompt_ids: np.ndarray, counts: np.ndarray) -> RoundOutcome:
        """Rollout source with the ``rollout_fn`` contract: prompt-major outcomes for ``counts[i]`` rollouts each."""
        prompt_ids = np.asarray(prompt_ids, np.int64)
        counts = np.asarray(counts, np.int64)
        self.calls.append((prompt_ids.copy(), counts.copy()))
        g = np.repeat(self.gammas[prompt_ids], counts)
        success = (self.rng.random(len(g)) < g).astype(np.float64)
        mean = np.where(success == 1.0, self.tokens_pass, self.tokens_fail)
        tokens = np.maximum(1, np.round(self.rng.gamma(self.tokens_shape, mean / self.tokens_shape))).astype(np.int64)
        if self.p_unscorable > 0:
            success[self.rng.random(len(g)) < self.p_unscorable] = np.nan
        return RoundOutcome(success=success, tokens=tokens)


class SimulatedEngine:
    """A :class:`~sara_trl.allocation.event_loop.StreamingEngine` over a :class:`DecodeEngine` and a rollout source.

    The requests added since the last :meth:`step` (or :meth:`abort`) get their outcomes and lengths from ONE
    ``rollout_fn`` call (counts of 1 each, in the order they were added), so every request the collector submitted
    is one rollout the source was asked for; each then runs on ``engine`` for its length in decode steps.
    One :meth:`step` decodes up to the next decode step at which some request finishes (not one decode step), and
    returns those requests, in id order. A finished request's ``completion_ids`` is ``range(tokens)``: only its
    length is simulated.

    Parameters
    ----------
    rollout_fn : RolloutFn
        ``rollout_fn(prompt_ids, counts) -> RoundOutcome`` (e.g. :class:`SimulatedTask`); prompt ids arrive as the
        one-element token list that :func:`run_streaming_step` passes as ``prompt_tokens``.
    engine : DecodeEngine
        Its :attr:`DecodeEngine.tally` accumulates the decode steps (the caller adds the call overhead).
    max_tokens : int, optional
        Completion length cap: longer completions are cut to it (outcome unchanged).

    Attributes
    ----------
    success : dict of int to float
        Request id -> its simulated success label, for the scorer.

    Raises
    ------
    ValueError
        :meth:`add` of a request id already added (queued, running or finished): an id names one rollout.
    KeyError
        :meth:`abort` of a request that is not in flight (:meth:`DecodeEngine.abort`).
    """

    def __init__(self, rollout_fn, engine: DecodeEngine, max_tokens: int | None = None):
        self._rollout_fn = rollout_fn
        self._engine = engine
        self._max_tokens = max_tokens
        self._added: list[tuple[int, int]] = []  # (rid, prompt id) not yet given outcomes
        self._ids: set[int] = set()  # every request id added
        self.success: dict[int, float] = {}

    @property
    def pending(self) -> int:
        return len(self._added) + self._engine.in_flight

    def add(self, rid: int, prompt_ids: list[int]) -> None:
        if rid in self._ids:  # a collector bug: a request id names one rollout
            raise ValueError(f"request {rid} was already added")
        self._ids.add(rid)
        self._added.append((rid, int(prompt_ids[0])))

    def _start_added(self) -> None:
        if not self._added:
            return
        pids = np.array([pid for _, pid in self._added], np.int64)
        out = RoundOutcome.coerce(self._rollout_fn(pids, np.ones(len(pids), np.int64)), len(pids))
        tokens = out.tokens if self._max_tokens is None else np.minimum(out.tokens, self._max_tokens)
        for (rid, _), succ, tok in zip(self._added, out.success.tolist(), tokens.tolist()):
            self.success[rid] = succ
            self._engine.submit(rid, max(1, int(tok)))
        self._added = []

    def step(self) -> list[Finished]:
        self._start_added()
        return [Finished(rid, range(tokens)) for rid, tokens in self._engine.run_to_next_finish()]

    def abort(self, rids: list[int]) -> list[int]:
        self._start_added()  # every request the collector submitted gets its outcome drawn, aborted or not
        return [self._engine.abort(rid) for rid in rids]


class _OutcomeScorer:
    """The :class:`~sara_trl.allocation.event_loop.Scorer` of a simulation: each completion's simulated label."""

    def __init__(self, engine: SimulatedEngine):
        self._engine = engine

    def score(self, prompt_ids: list[int], batch: list[Finished]) -> tuple[np.ndarray, np.ndarray]:
        labels = np.array([self._engine.success.pop(f.rid) for f in batch], np.float64)
        return labels, labels  # a simulated score is its label (for ds_filter="score")

    def keep(self, positions: list[int]) -> None:
        pass


def run_streaming_step(collector: StreamingCollector | RoundCollector, rollout_fn, engine: DecodeEngine,
                       max_tokens: int | None = None) -> StepResult:
    """Drive ``collector`` through one step on a simulated continuous-batching engine, through the same event loop
    as the trainer (:func:`~sara_trl.allocation.event_loop.drive_streaming_engine`, blocking scoring: each finish
    event's completions are decided before the engine decodes on).

    Parameters
    ----------
    collector : StreamingCollector or RoundCollector
        A fresh collector (``start()`` not yet called): streaming (:meth:`Allocator.streaming`) or rounds
        (:meth:`Allocator.rounds`, whose decisions then equal :meth:`Allocator.collect`'s on the same outcomes).
    rollout_fn : RolloutFn
        ``rollout_fn(prompt_ids, counts) -> RoundOutcome``; called with counts of 1, once per finish event for the
        requests submitted since the last one (:class:`SimulatedEngine`).
    engine : DecodeEngine
        Its :attr:`DecodeEngine.tally` accumulates the decode steps (the caller adds the call overhead).
    max_tokens : int, optional
        Completion length cap: longer completions are cut to it (outcome unchanged).

    Returns
    -------
    StepResult
        ``collector.finish()``.

    Raises
    ------
    RuntimeError
        The engine ran dry while the collector still waited (a collector bug).
    """
    sim = SimulatedEngine(rollout_fn, engine, max_tokens)
    drive_streaming_engine(collector, sim, lambda pid: [pid], _OutcomeScorer(sim), reward_lag=0)
    return collector.finish()
