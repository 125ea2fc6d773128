"""SARA (paper Alg. 1): probe fresh prompts with n0 rollouts, then commit / abandon / continue each round
(:func:`collect_sara`), or after each completion on a running engine (:class:`SaraStreaming`)."""

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
from sara_trl.allocation.registry import AllocatorSpec, register
from sara_trl.allocation.strategies.base import Rounds, StepContext, StrategyResult, StreamingPolicy
from sara_trl.allocation.types import ABANDON, COMMIT, Fate

__all__ = ["SaraStreaming", "collect_sara"]


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


class SaraStreaming(StreamingPolicy):
    """SARA per completion: each finished completion updates its prompt's counts and the rule (paper Eq. 3, or the
    beyond-paper rule the collector was given) decides it at once. An undecided mixed prompt is topped up to the
    commit floor (certain to be effective, paper Prop. 2) unless the prompts being topped up already complete the
    batch (then it is *spare*: with ``carry_over`` it is carried); an unmixed one whose requests are all in is
    continued (:func:`~sara_trl.allocation.refill.continuation`). Once the undecided mixed prompts alone complete the
    batch, the unmixed prompts are held (:meth:`held`; beyond the paper, measured in
    benchmarks/streaming_small_batch/STREAMING_SMALL_BATCH.md). ``speculate`` (``streaming_speculate``) gives the
    slots the rule leaves free to speculative continuations (:meth:`fill`)."""

    def __init__(self, collector, speculate: bool = False):
        super().__init__(collector)
        self.probe = collector.config.n0
        self.speculate = bool(speculate)
        self.spare: set[int] = set()  # mixed slots not topped up: the others complete the batch (carried)

    def outcome(self, slot, was_mixed, score, actions, queue: bool = True) -> None:
        """Commit, abandon, or keep ``slot`` undecided and, with ``queue``, queue its top-up (a mixed prompt, unless
        spare) or its continuation (an unmixed one). :meth:`seed` decides the carried prompts with ``queue=False``
        and queues them itself."""
        c, cfg = self.c, self.c.config
        led, sl = c.ledger, np.array([slot])
        dec, p = c._decide(led.pid[sl], led.n[sl], led.nsc[sl], led.s[sl])
        led.p[slot] = p[0]
        n = int(led.n[slot])
        mixed = bool(is_mixed(led.s[slot], led.nsc[slot]))
        feed_resolved(c._resolved, np.array([n - 1]), np.array([n]), np.array([mixed and not was_mixed]),
                      dec == ABANDON, cfg.commit_floor)
        if dec[0] == COMMIT:
            c.close(slot, actions, Fate.COMMITTED)
        elif dec[0] == ABANDON:
            c.expected_lost += float(p[0])
            c.close(slot, actions, Fate.ABANDONED)
        elif not queue:
            return
        elif mixed:
            if slot in self.spare or (not was_mixed and self._topped_up(excluding=slot) >= c.need):
                # the mixed prompts being topped up already complete the batch (rounds top up at most the groups still
                # needed): this one is not topped up in this step, now or at a later completion; with carry_over it
                # is carried
                self.spare.add(slot)
            else:  # top up to the commit floor (certain to be effective, paper Prop. 2)
                c.enqueue(slot, cfg.commit_floor - n - c.outstanding(slot))
        elif c.outstanding(slot) == 0 and not self._covered():
            # unmixed, all its requests are in, and the batch still needs prompts that are not yet mixed
            self._continue(slot)

    def seed(self, slots, actions) -> None:
        """Decide the carried prompts again (the rule may have changed between steps, e.g. a refitted boundary), then
        top up at most as many mixed prompts as the groups still needed, chosen as a round serves them (most rollouts
        first, then in slot order; the others are spare, carried on), and continue the unmixed ones unless the mixed
        ones alone complete the batch. Requests are queued in slot order."""
        c, led = self.c, self.c.ledger
        for slot in slots:
            if led.status[slot] == Fate.ACTIVE and not c.done:
                self.outcome(slot, bool(is_mixed(led.s[slot], led.nsc[slot])), None, actions, queue=False)
        if c.done:
            return
        act = led.active()
        is_mix = is_mixed(led.s[act], led.nsc[act])
        mixed = act[is_mix][np.lexsort((act[is_mix], -led.n[act[is_mix]]))]
        self.spare.update(mixed[c.need:].tolist())
        covered = self._covered()
        for slot, mix in zip(act.tolist(), is_mix.tolist()):
            if mix and slot not in self.spare:
                c.enqueue(slot, c.config.commit_floor - int(led.n[slot]))
            elif not mix and not covered:
                self._continue(slot)

    def remap(self, new) -> None:
        self.spare = {int(new[slot]) for slot in self.spare if new[slot] >= 0}

    def _continue(self, slot: int) -> None:
        """Queue an unmixed prompt's continuation (:func:`~sara_trl.allocation.refill.continuation`)."""
        c, sl = self.c, np.array([slot])
        led = c.ledger
        c.enqueue(slot, int(continuation(c.config, c._decide, led.pid[sl], led.n[sl], led.nsc[sl], led.s[sl])[0]))

    def _covered(self) -> bool:
        """The undecided mixed prompts alone complete the batch (each commits once topped up to the commit floor,
        paper Prop. 2; a mixed prompt is never abandoned). Once true, it stays true for the step."""
        led = self.c.ledger
        act = led.active()
        return int(is_mixed(led.s[act], led.nsc[act]).sum()) >= self.c.need

    def held(self) -> list[int] | None:
        """Once covered: the unmixed prompts (not continued, no fresh prompts drawn; their requests in flight aborted,
        with ``carry_over`` only when a top-up needs the slot or at the fill) and the spare mixed ones. A held prompt
        stays undecided: its recorded rollouts end the step as ``active_left``."""
        if not self._covered():
            return None
        led = self.c.ledger
        act = led.active()
        held = act[~is_mixed(led.s[act], led.nsc[act])].tolist()
        return held + [slot for slot in act.tolist() if slot in self.spare]

    def _topped_up(self, excluding: int) -> int:
        """Undecided mixed prompts other than ``excluding`` that are being topped up (not spare); each commits at the
        floor (paper Prop. 2), so once they number ``B - committed`` no other prompt is needed."""
        led = self.c.ledger
        act = led.active()
        act = act[act != excluding]
        mixed = act[is_mixed(led.s[act], led.nsc[act])]
        return sum(int(slot) not in self.spare for slot in mixed)

    def reserved(self) -> float:
        """A mixed prompt's top-up to the commit floor (exact); an unmixed one's expected fresh-prompt cost minus what
        it has already been given (recorded, in flight or queued)."""
        c = self.c
        led = c.ledger
        act = led.active()
        if len(act) == 0:
            return 0.0
        given = led.n[act] + np.array([c.outstanding(int(s)) for s in act])
        mixed = is_mixed(led.s[act], led.nsc[act])
        target = np.where(mixed, c.config.commit_floor, c.fresh_cost())
        return float(np.maximum(target - given, 0.0).sum())

    def affordable(self, left: int, wanted: int) -> int:
        """As :meth:`StreamingPolicy.affordable`, without the per-prompt sum of :meth:`reserved` where it cannot bind:
        the reserve is at most each undecided prompt's whole target (the commit floor, or the fresh cost, > 0) and
        :func:`fresh_affordable` does not increase with the reserve, so when that bound affords ``wanted`` the exact
        reserve does too."""
        if wanted > 0:
            cost, led = self.c.fresh_cost(), self.c.ledger
            act = led.active()
            mixed = int(is_mixed(led.s[act], led.nsc[act]).sum())
            if fresh_affordable(left, mixed * self.c.config.commit_floor + (len(act) - mixed) * cost, cost) >= wanted:
                return wanted
        return super().affordable(left, wanted)

    def fill(self, actions) -> None:
        """``streaming_speculate``: each undecided, unmixed prompt, oldest first, gets one more request per pass (up
        to the commit floor, counting what is recorded and in flight) while slots and spare budget (beyond
        :meth:`reserved`) last. A prompt that mixes then has its top-up already running; one that is abandoned or
        held has its speculative requests aborted (surplus), as any request of a decided prompt."""
        if not self.speculate:
            return
        c, led = self.c, self.c.ledger
        act = led.active()
        if len(act) == 0:
            return
        free = c.free
        spare = int(c.budget - c.submitted - self.reserved())
        unmixed = act[~is_mixed(led.s[act], led.nsc[act])]
        room = {int(slot): c.config.commit_floor - int(led.n[slot]) - c.outstanding(int(slot)) for slot in unmixed}
        while free > 0 and spare > 0:
            open_slots = [slot for slot in room if room[slot] > 0]
            if not open_slots:
                return
            for slot in open_slots[:min(free, spare)]:
                c.submit(slot, actions)
                room[slot] -= 1
                free, spare = free - 1, spare - 1


register(AllocatorSpec(
    name="sara", rounds=collect_sara, streaming=SaraStreaming, auto_streams=True,
    owns={"carry_over": ("carry_over is a SARA option (it carries undecided prompts)", "decides every prompt within "
                         "its step"),
          "stopping_rule": ("stopping_rule={value!r} is a SARA stopping rule", "never stops a group early"),
          "streaming_speculate": ("streaming_speculate=True fills a streaming engine's free slots with SARA's "
                                  "continuations", "has no continuations")}))
