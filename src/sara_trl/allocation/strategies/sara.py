"""SARA (paper Alg. 1): probe fresh prompts with n0 rollouts, then commit / abandon / continue each round."""

from __future__ import annotations

import numpy as np

from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.refill import (
    continuation,
    expected_commits,
    feed_resolved,
    fresh_affordable,
    fresh_to_draw,
)
from sara_trl.allocation.strategies.base import Rounds, StepContext, StrategyResult
from sara_trl.allocation.types import ABANDON

__all__ = ["collect_sara"]


def collect_sara(ctx: StepContext) -> Rounds:
    """SARA's rounds until B groups are committed or a limit binds (a :data:`~sara_trl.allocation.strategies.Strategy`:
    it yields each round's request and returns how the step ended).

    Per round: mixed prompts below the commit floor are topped up to it in one go (they are certain to be
    effective, paper Prop. 2), at most as many as still needed; unmixed prompts get ``round_increment`` more
    rollouts (with ``continue_to_decision``, all the rollouts up to their next abandon point,
    :func:`~sara_trl.allocation.refill.steps_to_decision`);
    fresh prompts get ``n0`` each, drawn so that the expected number of commits covers the remaining need plus
    ``refill_margin`` standard deviations (1 per mixed prompt, the learned mix rate at its rollout count per unmixed
    one and per fresh one, ``ctx.mix_rate``), but never more than the remaining budget can complete at the learned
    cost per fresh prompt. When the budget cap or the per-round capacity binds, requests are served in decreasing
    p_eff order (mixed first), fresh prompts last. Then the rule (paper Eq. 3) decides every served prompt.
    """
    cfg, ledger = ctx.config, ctx.ledger
    floor_ = cfg.commit_floor
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
        um = ~mixed
        inc = np.zeros(len(act), np.int64)
        inc[um] = continuation(cfg, ctx.decide, ledger.pid[act[um]], n[um], ledger.nsc[act[um]], ledger.s[act[um]])
        counts = np.where(mixed, floor_ - n, inc)
        n_mixed = int(mixed.sum())
        serve = np.zeros(len(act), bool)
        serve[np.flatnonzero(mixed)[:need]] = True
        if n_mixed < need:
            serve[~mixed] = True
        rate = ctx.mix_rate()
        expected, var = expected_commits(n_mixed, need, rate[n[serve & ~mixed]])
        fresh_wanted = fresh_to_draw(need, expected, var, float(rate[0]), cfg.margin)
        # Budget and capacity: keep a prefix of the priority order, then fresh prompts with what is left; fresh
        # prompts only as many as the budget left after the pending top-ups can see through.
        left = budget - ledger.generated
        room = left if cfg.max_rollouts_per_round is None else min(left, cfg.max_rollouts_per_round)
        c_slots, c_counts = act[serve], counts[serve]
        fits = np.cumsum(c_counts) <= room
        c_slots, c_counts = c_slots[fits], c_counts[fits]
        room -= int(c_counts.sum())
        completable = fresh_affordable(left, int(counts[mixed].sum()), ctx.fresh_cost())
        fresh = max(0, min(fresh_wanted, room // cfg.n0, completable))
        pids = ctx.draw(fresh) if fresh > 0 else np.zeros(0, np.int64)
        if len(c_slots) == 0 and len(pids) == 0:
            # Nothing to generate: either the stream ran dry or the budget/capacity left no room.
            return StrategyResult("stream" if fresh > 0 else "budget", expected_lost)
        new = ledger.add(pids)
        slots = np.concatenate([c_slots, new])
        was_mixed = is_mixed(ledger.s[slots], ledger.nsc[slots])
        yield from ledger.round(slots, np.concatenate([c_counts, np.full(len(new), cfg.n0, np.int64)]))

        dec, p_new = ctx.decide(ledger.pid[slots], ledger.n[slots], ledger.nsc[slots], ledger.s[slots])
        ledger.p[slots] = p_new
        ledger.mark(slots, dec)
        expected_lost += float(p_new[dec == ABANDON].sum())
        # Refill model: prompts that mixed this round (certain to commit) and prompts abandoned this round.
        now_mixed = is_mixed(ledger.s[slots], ledger.nsc[slots]) & ~was_mixed
        feed_resolved(ctx.resolved, ledger.n_before[slots], ledger.n[slots], now_mixed, dec == ABANDON, floor_)
