"""SARA (paper Alg. 1): probe fresh prompts with n0 rollouts, then commit / abandon / continue each round."""

from __future__ import annotations

import math

import numpy as np

from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.strategies.base import StepContext, StrategyResult, ceil_count
from sara_trl.allocation.types import ABANDON

__all__ = ["ROUND_TO_DECISION", "collect_sara", "steps_to_decision"]

ROUND_TO_DECISION = "to_decision"  # the round_increment that jumps an unmixed prompt to its next abandon point


def steps_to_decision(ctx: StepContext, pids: np.ndarray, n: np.ndarray, n_scored: np.ndarray,
                      s: np.ndarray) -> np.ndarray:
    """Rollouts that take each unmixed prompt to its next abandon point if its run stays unanimous.

    Evaluates the rule (``ctx.decide``) on a ``(P, k)`` grid of hypothetical counts.

    Parameters
    ----------
    ctx : StepContext
        Supplies the rule and k.
    pids, n, n_scored, s : ndarray of int64, shape (P,)
        Unmixed prompts (``s == 0`` or ``s == n_scored``) and their counts.

    Returns
    -------
    ndarray of int64, shape (P,)
        In ``[1, k - n]``: the smallest j such that the rule abandons at ``n + j`` rollouts when the j new
        rollouts repeat the run (all fail if ``s == 0``, all pass if ``s == n_scored``; with no scored rollout
        yet, the nearer of the two).
    """
    k = ctx.config.k
    P = len(n)
    if P == 0:
        return np.zeros(0, np.int64)
    j = np.arange(1, k + 1)[None, :]
    N = np.minimum(n[:, None] + j, k)  # (P, k), capped at a full group
    added = N - n[:, None]
    NSC = n_scored[:, None] + added
    rep = np.repeat(pids, k)
    steps = np.full(P, k, np.int64)
    for side_fail in (True, False):
        side = (s == 0) if side_fail else (s == n_scored)
        if not side.any():
            continue
        S = np.broadcast_to(s[:, None], N.shape) if side_fail else s[:, None] + added
        dec, _ = ctx.decide(rep, N.ravel(), NSC.ravel(), S.ravel())
        stop = (dec.reshape(N.shape) == ABANDON) | (N >= k)
        first = np.argmax(stop, axis=1) + 1  # stop[:, -1] is always True (N = k there)
        steps = np.where(side, np.minimum(steps, first), steps)
    return np.minimum(steps, k - n)


def collect_sara(ctx: StepContext) -> StrategyResult:
    """SARA's rounds until B groups are committed or a limit binds.

    Per round: mixed prompts below the commit floor are topped up to it in one go (they are certain to be
    effective, paper Prop. 2), at most as many as still needed; unmixed prompts get ``round_increment`` more
    rollouts (with ``"to_decision"``, all the rollouts up to their next abandon point, :func:`steps_to_decision`);
    fresh prompts get ``n0`` each, drawn so that the expected number of commits covers the remaining need plus
    ``refill_margin`` standard deviations (1 per mixed prompt, the learned mix rate at its rollout count per unmixed
    one and per fresh one, ``ctx.mix_rate``), but never more than the remaining budget can complete at the learned
    cost per fresh prompt. When the budget cap or the per-round capacity binds, requests are served in decreasing
    p_eff order (mixed first), fresh prompts last. Then the rule (paper Eq. 3) decides every served prompt.
    """
    cfg, ledger, k = ctx.config, ctx.ledger, ctx.config.k
    floor_ = cfg.commit_floor
    to_decision = cfg.round_increment == ROUND_TO_DECISION
    budget = ctx.budget
    expected_lost = 0.0
    while True:
        need = ctx.need
        if need <= 0:
            return StrategyResult("filled", expected_lost)
        if ledger.rounds >= cfg.max_rounds:
            return StrategyResult("max_rounds", expected_lost)
        act = ledger.active()
        n, nsc, s, p = ledger.n[act], ledger.nsc[act], ledger.s[act], ledger.p[act]
        mixed = is_mixed(s, nsc)
        # Priority: mixed first (most rollouts first), then unmixed by decreasing p_eff; ties by draw order.
        prio = np.lexsort((act, -np.where(mixed, n, 0), -np.where(mixed, 2.0, p)))
        act, n, mixed = act[prio], n[prio], mixed[prio]
        if to_decision:
            um = ~mixed
            inc = np.zeros(len(act), np.int64)
            inc[um] = steps_to_decision(ctx, ledger.pid[act[um]], n[um], ledger.nsc[act[um]], ledger.s[act[um]])
        else:
            inc = np.minimum(cfg.round_increment, k - n)
        counts = np.where(mixed, floor_ - n, inc)
        n_mixed = int(mixed.sum())
        serve = np.zeros(len(act), bool)
        serve[np.flatnonzero(mixed)[:need]] = True
        if n_mixed < need:
            serve[~mixed] = True
        rate = ctx.mix_rate()
        expected = min(n_mixed, need) + float(rate[n[serve & ~mixed]].sum())
        # Safety margin of `refill_margin` standard deviations of the number of commits (Bernoulli sum), so that
        # one wave usually fills the batch instead of ending in a tail of small rounds.
        q = rate[n[serve & ~mixed]]
        margin = cfg.refill_margin * math.sqrt(float((q * (1 - q)).sum()) + need * (1 - rate[0]))
        fresh_wanted = ceil_count(max(0.0, need - expected + margin) / rate[0])
        # Budget and capacity: keep a prefix of the priority order, then fresh prompts with what is left; fresh
        # prompts only as many as the budget left after the pending top-ups can see through.
        left = budget - ledger.generated
        room = left if cfg.max_rollouts_per_round is None else min(left, cfg.max_rollouts_per_round)
        c_slots, c_counts = act[serve], counts[serve]
        fits = np.cumsum(c_counts) <= room
        c_slots, c_counts = c_slots[fits], c_counts[fits]
        room -= int(c_counts.sum())
        completable = int((left - int(counts[mixed].sum())) // ctx.fresh_cost())
        fresh = max(0, min(fresh_wanted, room // cfg.n0, completable))
        pids = ctx.draw(fresh) if fresh > 0 else np.zeros(0, np.int64)
        if len(c_slots) == 0 and len(pids) == 0:
            # Nothing to generate: either the stream ran dry or the budget/capacity left no room.
            return StrategyResult("stream" if fresh > 0 else "budget", expected_lost)
        new = ledger.add(pids)
        slots = np.concatenate([c_slots, new])
        was_mixed = is_mixed(ledger.s[slots], ledger.nsc[slots])
        ledger.generate(slots, np.concatenate([c_counts, np.full(len(new), cfg.n0, np.int64)]))

        dec, p_new = ctx.decide(ledger.pid[slots], ledger.n[slots], ledger.nsc[slots], ledger.s[slots])
        ledger.p[slots] = p_new
        ledger.mark_decisions(slots, dec)
        expected_lost += float(p_new[dec == ABANDON].sum())
        # Refill model: prompts that mixed this round (certain to commit) and prompts abandoned this round.
        now_mixed = is_mixed(ledger.s[slots], ledger.nsc[slots]) & ~was_mixed
        resolved = now_mixed | (dec == ABANDON)
        r = slots[resolved]
        ctx.resolved(
            np.where(now_mixed[resolved], ledger.n_before[r], ledger.n[r]),
            now_mixed[resolved],
            np.where(now_mixed[resolved], np.maximum(ledger.n[r], floor_), ledger.n[r]),
        )
