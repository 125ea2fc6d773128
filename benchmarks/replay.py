"""Replay of real rollout outcomes: every allocator is driven by a bank of real completions, not a model.

The bank (``benchmarks/quickstart_task/data/smollm2_bank.npz``, written by
``benchmarks/quickstart_task/make_replay_bank.py``) holds, for each of P prompts, M real completions of
SmolLM2-135M-Instruct: ``success`` ``(P, M)`` int8 (1 correct, 0 wrong, any other value = unscorable) and ``tokens``
``(P, M)`` int16 completion lengths, with a JSON sidecar describing them.

:class:`ReplaySource` answers a round's request for ``counts[i]`` rollouts of prompt ``prompt_ids[i]`` by drawing
that prompt's completions without replacement from its own bank, in a fresh random order each step; if a step asks a
prompt for more than M completions the bank is reshuffled and drawing continues (wrap).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.special import comb

from sara_trl.allocation import RoundOutcome

__all__ = ["ReplaySource", "load_bank", "bank_summary", "DEFAULT_BANK"]

#: the quickstart task's bank of real SmolLM2-135M outcomes (``python -m benchmarks.quickstart_task.make_replay_bank``)
DEFAULT_BANK = Path(__file__).resolve().parent / "quickstart_task" / "data" / "smollm2_bank.npz"


def load_bank(path: str | Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """Read a replay bank.

    Args:
        path: the ``.npz`` file; its sidecar ``<stem>.json`` (if present) is returned as metadata.

    Returns:
        ``(success (P, M) int8, tokens (P, M) int64, meta dict)``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: missing arrays, shapes that differ, or negative token counts.
    """
    path = Path(path)
    with np.load(path) as z:
        if "success" not in z or "tokens" not in z:
            raise ValueError(f"{path} must hold arrays 'success' and 'tokens', has {sorted(z.files)}")
        success, tokens = np.asarray(z["success"]), np.asarray(z["tokens"]).astype(np.int64)
    if success.ndim != 2 or success.shape != tokens.shape or success.shape[1] < 2:
        raise ValueError(f"success {success.shape} and tokens {tokens.shape} must be equal (P, M) arrays, M >= 2")
    if (tokens < 0).any():
        raise ValueError("token counts in the bank must be >= 0")
    sidecar = path.with_suffix(".json")
    meta = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    return success.astype(np.int8), tokens, meta


def _hyper_all_same(pool: np.ndarray, same: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """P(all ``draws`` taken without replacement from ``pool`` items are among the ``same`` marked ones)."""
    num = comb(same, draws, exact=False)
    den = comb(pool, draws, exact=False)
    return np.where(draws <= 0, 1.0, np.where(den > 0, num / np.maximum(den, 1e-300), 0.0))


def bank_summary(success: np.ndarray, k: int) -> dict:
    """Shape of a bank at group size ``k``.

    Returns:
        dict: ``prompts``, ``completions`` (per prompt), ``mean_success``, ``all_fail`` / ``all_pass`` (share of
        prompts whose M completions all fail / all pass), ``unscorable`` (share of completions), and ``phi`` (share of
        k-groups drawn without replacement from a prompt's bank that are mixed, averaged over prompts; exact
        hypergeometric, k <= M).
    """
    P, M = success.shape
    scor = (success == 0) | (success == 1)
    c1 = ((success == 1) & scor).sum(1)
    c0 = ((success == 0) & scor).sum(1)
    out = {"prompts": int(P), "completions": int(M), "mean_success": float(c1.sum() / max(scor.sum(), 1)),
           "all_fail": float(np.mean(c1 == 0)), "all_pass": float(np.mean(c0 == 0)),
           "unscorable": float(1.0 - scor.mean())}
    if k <= M:
        kk = np.full(P, k)
        pm = np.full(P, M)
        p_sat = _hyper_all_same(pm, c1, kk) + _hyper_all_same(pm, c0, kk)
        out["phi"] = float(np.mean(1.0 - p_sat))
    return out


class ReplaySource:
    """A rollout source that replays a bank of real outcomes (``rollout_fn`` contract).

    Args:
        success: ``(P, M)`` int outcomes per prompt (1 correct, 0 wrong, other = unscorable -> NaN).
        tokens: ``(P, M)`` completion lengths in tokens.
        seed: seed of the shuffles.
        rows: optional ``(V,)`` bank row of each prompt id the source serves (default: prompt id ``i`` is row
            ``i``). Repeating a row weights a mixture (e.g. a family's rows twice as often as another's); all ids
            of one row share that row's shuffle.

    A prompt (or a row) drawn twice within one step keeps drawing from the same shuffle, so its two groups share
    no completion until the bank wraps.

    Raises:
        ValueError: shapes differ or are not 2-D, or ``rows`` is not a 1-D array of rows of the bank.
    """

    def __init__(self, success: np.ndarray, tokens: np.ndarray, seed: int = 0, rows: np.ndarray | None = None):
        success = np.asarray(success)
        tokens = np.asarray(tokens, np.int64)
        if success.ndim != 2 or success.shape != tokens.shape:
            raise ValueError(f"success {success.shape} and tokens {tokens.shape} must be equal (P, M) arrays")
        self.rows = np.arange(success.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
        if self.rows.ndim != 1 or len(self.rows) == 0 or self.rows.min() < 0 or self.rows.max() >= success.shape[0]:
            raise ValueError(f"rows must be a non-empty 1-D array of bank rows in [0, {success.shape[0]})")
        self.success = np.where((success == 0) | (success == 1), success, np.nan).astype(np.float64)
        self.tokens = tokens
        self.P, self.M = success.shape
        self.rng = np.random.default_rng(seed)
        self.perm = np.tile(np.arange(self.M), (self.P, 1))
        self.cursor = np.full(self.P, self.M, np.int64)  # M = "reshuffle before the next draw"
        self.c1 = np.nansum(self.success == 1.0, axis=1)
        self.c0 = np.nansum(self.success == 0.0, axis=1)
        self.gamma_hat = self.c1 / np.maximum(self.c1 + self.c0, 1)

    def __len__(self) -> int:
        return len(self.rows)

    def start_step(self) -> None:
        """Each step draws every prompt's completions in a fresh random order (lazy reshuffle on first use)."""
        self.cursor[:] = self.M

    def _draw(self, p: int, c: int) -> np.ndarray:
        cols = []
        while c > 0:
            if self.cursor[p] >= self.M:
                self.perm[p] = self.rng.permutation(self.M)
                self.cursor[p] = 0
            take = min(c, self.M - int(self.cursor[p]))
            cols.append(self.perm[p, self.cursor[p] : self.cursor[p] + take])
            self.cursor[p] += take
            c -= take
        return np.concatenate(cols) if cols else np.zeros(0, np.int64)

    def __call__(self, prompt_ids: np.ndarray, counts: np.ndarray) -> RoundOutcome:
        """Prompt-major outcomes: ``counts[i]`` completions of ``prompt_ids[i]`` from its bank.

        Raises:
            ValueError: a prompt id outside the bank or a negative count.
        """
        prompt_ids = np.asarray(prompt_ids, np.int64)
        counts = np.asarray(counts, np.int64)
        if len(prompt_ids) and (prompt_ids.min() < 0 or prompt_ids.max() >= len(self.rows)):
            raise ValueError(f"prompt id outside the {len(self.rows)} prompts of the source")
        if (counts < 0).any():
            raise ValueError("counts must be >= 0")
        prompt_ids = self.rows[prompt_ids]
        rows = np.repeat(prompt_ids, counts)
        cols = np.concatenate([self._draw(int(p), int(c)) for p, c in zip(prompt_ids, counts)]) if len(rows) else \
            np.zeros(0, np.int64)
        return RoundOutcome(success=self.success[rows, cols], tokens=self.tokens[rows, cols])

    def would_mix(self, prompt_ids: np.ndarray, n: np.ndarray, s: np.ndarray, k: int) -> np.ndarray:
        """Probability that an abandoned unmixed prefix would have become mixed had its group been completed to k.

        Exact for the replay when k <= M and the prefix was the prompt's only draw this step: the remaining
        ``k - n`` completions come without replacement from the ``M - n`` left, of which ``c_v - n`` share the
        prefix's outcome v. For k > M (the bank wraps) the plug-in binomial ``1 - gamma_hat^(k-n)`` (or
        ``1 - (1 - gamma_hat)^(k-n)``) is used. Unscorable completions are ignored (treated as absent).

        Returns:
            ``(A,)`` float64 in [0, 1].
        """
        prompt_ids, n, s = (np.asarray(x, np.int64) for x in (prompt_ids, n, s))
        if ((s > 0) & (s < n)).any():
            raise ValueError("would_mix is defined for unmixed prefixes only (s == 0 or s == n)")
        prompt_ids = self.rows[prompt_ids]
        passed = (s == n) & (n > 0)
        r = k - n
        if k <= self.M:
            same = np.where(passed, self.c1[prompt_ids], self.c0[prompt_ids]) - n
            pool = (self.c1 + self.c0)[prompt_ids] - n
            stay = np.where(same >= r, _hyper_all_same(np.maximum(pool, 0), np.maximum(same, 0), r), 0.0)
        else:
            g = self.gamma_hat[prompt_ids]
            stay = np.where(passed, g**r, (1.0 - g) ** r)
        return 1.0 - stay
