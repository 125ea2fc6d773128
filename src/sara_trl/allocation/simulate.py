"""A simulated rollout source: prompts with latent success rates and token lengths, no model needed.

Used by the tests and benchmarks to drive the allocators exactly as the trainer does (one call per round), and, with
:func:`run_streaming_step`, to drive a streaming collector through a simulated engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sara_trl.allocation.latency import DecodeEngine
from sara_trl.allocation.streaming import StreamActions, StreamingCollector
from sara_trl.allocation.types import RoundOutcome, StepResult

__all__ = ["SimulatedTask", "u_shaped_gammas", "phi", "psi", "run_streaming_step"]


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


def run_streaming_step(collector: StreamingCollector, rollout_fn, engine: DecodeEngine,
                       max_tokens: int | None = None) -> StepResult:
    """Drive ``collector`` through one step on a simulated continuous-batching engine.

    Each batch of submitted requests asks ``rollout_fn`` (the round contract, e.g. :class:`SimulatedTask`) for its
    outcomes and lengths at once; a request then runs on ``engine`` for its length in decode steps and is reported
    to the collector when it finishes, in finishing order (ties by request id). Aborts go to the engine at once and
    their decoded tokens back to the collector; a request that finished in the same decode step as its abort is
    delivered as a completion (the collector counts it as surplus).

    Parameters
    ----------
    collector : StreamingCollector
        A fresh collector (:meth:`StreamingCollector.start` not yet called).
    rollout_fn : RolloutFn
        ``rollout_fn(prompt_ids, counts) -> RoundOutcome``; called with counts of 1.
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
    pending: dict[int, tuple[float, int]] = {}  # rid -> (success, tokens) of a request on the engine
    finished_now: set[int] = set()

    def apply(actions: StreamActions) -> None:
        for rid in actions.abort:
            if rid in finished_now:
                continue  # finished in this decode step: delivered below as a (surplus) completion
            pending.pop(rid)
            collector.aborted(rid, engine.abort(rid))
        if actions.submit:
            pids = np.array([r.prompt_id for r in actions.submit], np.int64)
            out = RoundOutcome.coerce(rollout_fn(pids, np.ones(len(pids), np.int64)), len(pids))
            tokens = out.tokens if max_tokens is None else np.minimum(out.tokens, max_tokens)
            for req, succ, tok in zip(actions.submit, out.success.tolist(), tokens.tolist()):
                pending[req.rid] = (succ, int(tok))
                engine.submit(req.rid, max(1, int(tok)))

    apply(collector.start())
    while not collector.done:
        done = engine.run_to_next_finish()
        if not done:
            raise RuntimeError("the engine has nothing in flight but the streaming collector is not done")
        finished_now = {rid for rid, _ in done}
        for rid, _ in done:
            succ, tok = pending.pop(rid)
            finished_now.discard(rid)
            apply(collector.complete(rid, succ, tok))
        finished_now = set()
    # Requests the last completion aborted that had finished in the same decode step were delivered above.
    return collector.finish()
