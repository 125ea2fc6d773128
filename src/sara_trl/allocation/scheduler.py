"""Round-synchronous collection of one step's B groups (paper Alg. 1, App. D) for SARA and the two baselines.

All three allocators share one ledger (who was drawn, what each rollout returned, each prompt's fate) and one
result type, so their costs are compared like for like. Each round makes exactly ONE ``rollout_fn`` call.
"""

from __future__ import annotations

import math

import numpy as np

from sara_trl.allocation.config import ROUND_TO_DECISION, AllocationConfig
from sara_trl.allocation.extensions import Extensions, extensions_enabled
from sara_trl.allocation.predictor import p_eff_unchecked
from sara_trl.allocation.rules import decide
from sara_trl.allocation.stream import PromptStream
from sara_trl.allocation.types import (
    ABANDON,
    COMMIT,
    Group,
    RolloutCallable,
    RoundOutcome,
    StepResult,
    StepStats,
)

__all__ = ["Allocator"]

_ACTIVE, _KEPT, _ABANDONED = 0, 1, 2
_CARRY_DTYPES = {"pid": np.int64, "n": np.int64, "nsc": np.int64, "s": np.int64, "p": np.float64, "status": np.int8,
                 "r_slot": np.int64, "r_success": np.float64, "r_tokens": np.int64}


def _ceil(x: float) -> int:
    """Ceiling that ignores float noise (2.0000000004 -> 2), so refill sizes do not flicker."""
    return math.ceil(x - 1e-9)


class _Ledger:
    """Per-step bookkeeping: one slot per drawn prompt, one entry per generated rollout."""

    def __init__(self, rollout_fn: RolloutCallable):
        self.rollout_fn = rollout_fn
        self.size = 0
        cap = 256
        self.pid = np.zeros(cap, np.int64)
        self.n = np.zeros(cap, np.int64)  # rollouts generated
        self.nsc = np.zeros(cap, np.int64)  # scorable rollouts
        self.s = np.zeros(cap, np.int64)  # successes
        self.status = np.zeros(cap, np.int8)
        self.p = np.ones(cap, np.float64)  # p_eff after the latest decision
        self.round_decided = np.zeros(cap, np.int64)
        self.n_before = np.zeros(cap, np.int64)  # rollouts before the latest round that served the slot
        self.kept_order: list[int] = []  # slots in the order they were committed / kept
        self.r_slot: list[np.ndarray] = []
        self.r_success: list[np.ndarray] = []
        self.r_tokens: list[np.ndarray] = []
        self.rounds = 0
        self.round_sizes: list[int] = []
        self.generated = 0
        self.carried_in = 0  # prompts carried in from the previous step (the first slots)
        self.carried_rollouts = 0
        self.carried_tokens = 0

    def seed(self, carry: dict) -> None:
        """Start the step with the prompts carried over from the previous one (see :meth:`finish`): their counts,
        p_eff and status (still undecided, or committed beyond that step's B), and their rollouts as this step's
        first ids. None of this is counted as generated or as a round."""
        slots = self.add(np.asarray(carry["pid"], np.int64))
        for name in ("n", "nsc", "s", "p", "status"):
            getattr(self, name)[slots] = carry[name]
        self.n_before[slots] = self.n[slots]
        self.kept_order.extend(slots[self.status[slots] == _KEPT].tolist())
        self.r_slot.append(np.asarray(carry["r_slot"], np.int64))
        self.r_success.append(np.asarray(carry["r_success"], np.float64))
        self.r_tokens.append(np.asarray(carry["r_tokens"], np.int64))
        self.carried_in = len(slots)
        self.carried_rollouts = len(carry["r_slot"])
        self.carried_tokens = int(np.sum(carry["r_tokens"], dtype=np.int64))

    def add(self, pids: np.ndarray) -> np.ndarray:
        need = self.size + len(pids)
        if need > len(self.pid):
            new = max(need, 2 * len(self.pid))
            for name in ("pid", "n", "nsc", "s", "status", "p", "round_decided", "n_before"):
                arr = getattr(self, name)
                grown = np.zeros(new, arr.dtype) if name != "p" else np.ones(new, arr.dtype)
                grown[: len(arr)] = arr
                setattr(self, name, grown)
        slots = np.arange(self.size, need, dtype=np.int64)
        self.pid[slots] = pids
        self.size = need
        return slots

    def generate(self, slots: np.ndarray, counts: np.ndarray) -> None:
        """ONE batched ``rollout_fn`` call for ``counts[i]`` new rollouts of each slot, then count updates."""
        total = int(counts.sum())
        out = RoundOutcome.coerce(self.rollout_fn(self.pid[slots].copy(), counts.copy()), total)
        rs = np.repeat(slots, counts)
        scored = ~np.isnan(out.success)
        self.n_before[slots] = self.n[slots]
        self.n[slots] += counts
        self.nsc[: self.size] += np.bincount(rs, weights=scored, minlength=self.size).astype(np.int64)
        self.s[: self.size] += np.bincount(rs, weights=scored & (out.success == 1.0), minlength=self.size).astype(
            np.int64
        )
        self.r_slot.append(rs)
        self.r_success.append(out.success)
        self.r_tokens.append(out.tokens)
        self.rounds += 1
        self.round_sizes.append(total)
        self.generated += total

    def active(self) -> np.ndarray:
        return np.flatnonzero(self.status[: self.size] == _ACTIVE)

    def finish(self, B: int, stop_reason: str, expected_lost: float, carry_over: bool = False):
        """Assign fates (first B kept groups are trained, later ones surplus), build groups, fill, and account.

        Returns:
            ``(StepResult, carry)``: ``carry`` is None, or (``carry_over``) the surplus and still-active prompts with
            their counts and rollouts, in the form :meth:`seed` takes; their rollout ids, in the order the next
            step numbers them, are ``StepResult.carry_rollout_ids``.
        """
        size = self.size
        fate = np.full(size, 3, np.int8)  # 0 trained, 1 surplus, 2 abandoned, 3 active
        kept = np.asarray(self.kept_order, np.int64)
        fate[kept[:B]] = 0
        fate[kept[B:]] = 1
        fate[self.status[:size] == _ABANDONED] = 2
        if self.r_slot:
            rs = np.concatenate(self.r_slot)
            succ = np.concatenate(self.r_success)
            tok = np.concatenate(self.r_tokens).astype(np.int64)
        else:
            rs, succ, tok = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        r_fate = fate[rs]
        n_by = np.bincount(r_fate, minlength=4)
        t_by = np.bincount(r_fate, weights=tok, minlength=4).astype(np.int64)
        tok_slot = np.bincount(rs, weights=tok, minlength=size).astype(np.int64)

        order = np.argsort(rs, kind="stable")  # rollout ids grouped by slot, generation order within a slot
        starts = np.searchsorted(rs[order], np.arange(size + 1))
        groups = []
        for slot in kept[:B]:
            ids = order[starts[slot] : starts[slot + 1]].astype(np.int64)
            groups.append(Group(prompt_id=int(self.pid[slot]), rollout_ids=ids, success=succ[ids]))
        unfilled = B - len(groups)
        if unfilled:
            fill_pid = groups[0].prompt_id if groups else (int(self.pid[size - 1]) if size else -1)
            groups.extend(
                Group(prompt_id=fill_pid, rollout_ids=np.zeros(0, np.int64), success=np.zeros(0), is_fill=True)
                for _ in range(unfilled)
            )

        table = {"prompt_id": self.pid[:size].copy(), "n": self.n[:size].copy(), "s": self.s[:size].copy(),
                 "fate": fate, "round": self.round_decided[:size].copy(), "p_eff": self.p[:size].copy(),
                 "tokens": tok_slot}
        stats = StepStats(
            rollouts_generated=int(len(rs)) - self.carried_rollouts, rollouts_trained=int(n_by[0]),
            rollouts_surplus=int(n_by[1]), rollouts_abandoned=int(n_by[2]), rollouts_active_left=int(n_by[3]),
            tokens_generated=int(tok.sum()) - self.carried_tokens, tokens_trained=int(t_by[0]),
            tokens_surplus=int(t_by[1]), tokens_abandoned=int(t_by[2]), tokens_active_left=int(t_by[3]),
            rounds=self.rounds, prompts_drawn=size - self.carried_in, committed=int(len(kept)),
            abandoned=int((fate == 2).sum()), surplus=int((fate == 1).sum()), active_left=int((fate == 3).sum()),
            unfilled=unfilled, effective_in_batch=sum(g.effective for g in groups), batch_groups=B,
            expected_lost=float(expected_lost), unscorable=int(np.isnan(succ).sum()), stop_reason=stop_reason,
            rollouts_carried_in=self.carried_rollouts, tokens_carried_in=self.carried_tokens,
            carried_in=self.carried_in,
        )
        stats.check()
        result = StepResult(groups=groups, stats=stats, prompt_table=table, round_sizes=list(self.round_sizes))
        if not carry_over:
            return result, None
        # Carry the surplus groups (in commit order, so they lead next step's batch) and the undecided prompts.
        surplus_slots = kept[B:]
        active_slots = np.flatnonzero(fate == 3)
        cslots = np.concatenate([surplus_slots, active_slots]).astype(np.int64)
        ids = np.concatenate([order[starts[c]: starts[c + 1]] for c in cslots]).astype(np.int64) if len(cslots) \
            else np.zeros(0, np.int64)
        rank = np.empty(size, np.int64)
        rank[cslots] = np.arange(len(cslots))
        carry = {
            "pid": self.pid[cslots].copy(), "n": self.n[cslots].copy(), "nsc": self.nsc[cslots].copy(),
            "s": self.s[cslots].copy(), "p": self.p[cslots].copy(),
            "status": np.where(fate[cslots] == 1, _KEPT, _ACTIVE).astype(np.int8),
            "r_slot": rank[rs[ids]], "r_success": succ[ids].copy(), "r_tokens": tok[ids].copy(),
        }
        result.carry_rollout_ids = ids
        return result, carry


class Allocator:
    """Collects B groups per step with SARA, dynamic sampling or uniform allocation (``config.allocator``).

    The allocator is deterministic: given the same config, stream state, cross-step state and outcomes, every
    decision and every drawn prompt is identical, so several processes can run it in lock-step.

    Cross-step state (saved by :meth:`state_dict`): the refill model, decayed by ``yield_decay`` each step (per
    rollout count n, the share of still-unmixed prompts that went on to mix, :meth:`mix_rate`; and the rollouts a
    fresh prompt costs until resolved, :meth:`fresh_cost_estimate`), used to size refills so that a step needs few
    rounds; cumulative rollout/token totals; and, with ``carry_over``, the prompts handed to the next step (their
    counts and rollout outcomes; the trainer keeps their completions, see ``StepResult.carry_rollout_ids``).
    """

    def __init__(self, config: AllocationConfig | None = None):
        self.config = config or AllocationConfig()
        k = self.config.k
        cfg = self.config
        # Refill model (cross-step, decayed by yield_decay each step): for an unmixed prompt with n rollouts, the
        # share that went on to mix ("mix rate"; n = 0 is a fresh prompt), and the rollouts a fresh prompt costs
        # until it is resolved. Priors (weight one prompt): the Beta-prior predictive p_eff(n, 0), and a probe
        # plus a top-up to the commit floor for the p_eff(0, 0) share that mixes.
        n = np.arange(k + 1)
        self._mix_prior = p_eff_unchecked(n, 0, k, cfg.prior_alpha, cfg.prior_beta)
        self._mix_num = np.zeros(k + 1)
        self._mix_den = np.zeros(k + 1)
        self._cost_prior = float(cfg.n0 + self._mix_prior[0] * (cfg.commit_floor - cfg.n0))
        self._cost_num = 0.0
        self._cost_den = 0.0
        # Rollout counts at which a still-unmixed prompt is observed: 0, n0, n0 + inc, ... (capped at k); every
        # count from n0 on when the increment runs to the next decision point (it varies per prompt).
        self._to_decision = cfg.round_increment == ROUND_TO_DECISION
        inc = 1 if self._to_decision else cfg.round_increment
        self._checkpoints = np.unique(np.minimum(np.r_[0, np.arange(cfg.n0, k + inc, inc)], k))
        self.total_rollouts = 0
        self.total_tokens = 0
        self.steps = 0
        self._carry: dict | None = None  # carry_over: prompts handed from one step to the next (Ledger.seed)
        # Beyond-paper options (history, selection, tau_low="auto"); None keeps the paper's SARA untouched.
        self._ext = Extensions(self.config) if extensions_enabled(self.config) else None

    # ----------------------------------------------------------------------------------------------- state
    def mix_rate(self) -> np.ndarray:
        """Estimated share of unmixed prompts with n rollouts that go on to mix, ``(k + 1,)`` indexed by n
        (n = 0: a fresh prompt, i.e. the kept share for SARA and Phi for dynamic sampling). Floored at 1/64."""
        est = (self._mix_num + self._mix_prior) / (self._mix_den + 1.0)
        return np.clip(est, 1.0 / 64, 1.0)

    def yield_estimate(self) -> float:
        """Estimated share of freshly drawn prompts that will be kept: ``mix_rate()[0]``."""
        return float(self.mix_rate()[0])

    def fresh_cost_estimate(self) -> float:
        """Estimated rollouts a fresh prompt costs until it is committed or abandoned (one pseudo-prompt of prior)."""
        return (self._cost_num + self._cost_prior) / (self._cost_den + 1.0)

    def state_dict(self) -> dict:
        state = {"mix_num": self._mix_num.tolist(), "mix_den": self._mix_den.tolist(), "cost_num": self._cost_num,
                 "cost_den": self._cost_den, "total_rollouts": self.total_rollouts,
                 "total_tokens": self.total_tokens, "steps": self.steps}
        if self._ext is not None:
            state["extensions"] = self._ext.state_dict()
        if self._carry is not None:
            state["carry"] = {name: np.asarray(v).tolist() for name, v in self._carry.items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`. Raises ``ValueError`` if it was saved for another group size k."""
        if len(state["mix_num"]) != self.config.k + 1:
            raise ValueError(f"allocator state was saved for k={len(state['mix_num']) - 1}, this allocator has "
                             f"k={self.config.k}")
        self._mix_num = np.asarray(state["mix_num"], dtype=np.float64)
        self._mix_den = np.asarray(state["mix_den"], dtype=np.float64)
        self._cost_num = float(state["cost_num"])
        self._cost_den = float(state["cost_den"])
        self.total_rollouts = int(state["total_rollouts"])
        self.total_tokens = int(state["total_tokens"])
        self.steps = int(state["steps"])
        if self._ext is not None and "extensions" in state:
            self._ext.load_state_dict(state["extensions"])
        carry = state.get("carry")
        self._carry = None if carry is None else {name: np.asarray(v, dtype=_CARRY_DTYPES[name])
                                                  for name, v in carry.items()}

    @property
    def carried_prompts(self) -> int:
        """Prompts waiting to be carried into the next step (``carry_over``; 0 otherwise)."""
        return 0 if self._carry is None else len(self._carry["pid"])

    @property
    def carried_rollouts(self) -> int:
        """Their rollouts, which take ids ``0 .. carried_rollouts - 1`` in the next step."""
        return 0 if self._carry is None else len(self._carry["r_slot"])

    def diagnostics(self) -> dict:
        """Beyond-paper metrics (fitted prior, boundary in use, cost per effective group, history hit rate, ...);
        empty when every option is off. See :meth:`sara_trl.allocation.extensions.Extensions.diagnostics`."""
        return {} if self._ext is None else self._ext.diagnostics()

    def _take(self, stream: PromptStream, count: int) -> np.ndarray:
        """Fresh prompts: the stream's next ``count``, or the predictive selector's pick when enabled."""
        return stream.take(count) if self._ext is None else self._ext.take_fresh(stream, count)

    def _resolve(self, last_unmixed: np.ndarray, mixed: np.ndarray, cost: np.ndarray) -> None:
        """Feed the refill model with prompts whose fate became known this round.

        Args:
            last_unmixed: ``(P,)`` the largest rollout count at which each prompt was still unmixed.
            mixed: ``(P,)`` bool, whether it mixed (committed or certain to commit) or was abandoned.
            cost: ``(P,)`` rollouts it costs in all (a mixed prompt: topped up to the commit floor).
        """
        if len(mixed) == 0:
            return
        seen = self._checkpoints[:, None] <= last_unmixed[None, :]  # (checkpoints, P)
        self._mix_den[self._checkpoints] += seen.sum(axis=1)
        self._mix_num[self._checkpoints] += (seen & mixed[None, :]).sum(axis=1)
        self._cost_num += float(cost.sum())
        self._cost_den += len(cost)

    def _decide(self, pids, n, n_scored, s):
        """commit / abandon / continue and p_eff (Eq. 3), through the beyond-paper extensions when enabled."""
        cfg = self.config
        if self._ext is None:
            return decide(n, n_scored, s, k=cfg.k, tau_low=cfg.tau_low, commit_min=cfg.commit_floor,
                          alpha0=cfg.prior_alpha, beta0=cfg.prior_beta)
        return self._ext.decide(pids, n, n_scored, s)  # per-prompt history priors and/or the Bayes-optimal boundary

    def _steps_to_decision(self, pids: np.ndarray, n: np.ndarray, n_scored: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Rollouts that take each unmixed prompt to its next abandon point if its run stays unanimous.

        Args:
            pids, n, n_scored, s: ``(P,)`` unmixed prompts (``s == 0`` or ``s == n_scored``) and their counts.

        Returns:
            ``(P,)`` int64 in [1, k - n]: the smallest j such that the rule abandons at ``n + j`` rollouts when the
            j new rollouts repeat the run (all fail if ``s == 0``, all pass if ``s == n_scored``; with no scored
            rollout yet, the nearer of the two). Evaluates the rule on a ``(P, k)`` grid of hypothetical counts.
        """
        k = self.config.k
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
            dec, _ = self._decide(rep, N.ravel(), NSC.ravel(), S.ravel())
            stop = (dec.reshape(N.shape) == ABANDON) | (N >= k)
            first = np.argmax(stop, axis=1) + 1  # stop[:, -1] is always True (N = k there)
            steps = np.where(side, np.minimum(steps, first), steps)
        return np.minimum(steps, k - n)

    # ----------------------------------------------------------------------------------------------- collect
    def collect(self, rollout_fn: RolloutCallable, stream: PromptStream, B: int) -> StepResult:
        """Assemble one step's batch of B groups.

        Args:
            rollout_fn: ``rollout_fn(prompt_ids (P,) int64, counts (P,) int64) -> RoundOutcome`` making ONE batched
                generation call per round (see :class:`sara_trl.allocation.types.RolloutFn`).
            stream: where fresh prompts come from.
            B: number of groups the trainer expects (effective groups for SARA and DS).

        Returns:
            :class:`StepResult` with exactly B groups (fill groups flagged ``is_fill`` when the budget cap, the
            stream or ``max_rounds`` ended the step short) and the step's accounting.

        Raises:
            ValueError: ``B < 1``, or ``rollout_fn`` returned malformed outcomes.
        """
        if not isinstance(B, (int, np.integer)) or B < 1:
            raise ValueError(f"B must be a positive integer number of groups, got {B!r}")
        B = int(B)
        for name in ("_mix_num", "_mix_den", "_cost_num", "_cost_den"):
            setattr(self, name, getattr(self, name) * self.config.yield_decay)
        ledger = _Ledger(rollout_fn)
        if self._carry is not None:
            ledger.seed(self._carry)
            self._carry = None
        if self._ext is not None:
            self._ext.begin_step(stream)
        run = {"sara": self._sara, "dynamic_sampling": self._dynamic_sampling, "uniform": self._uniform}
        stop_reason, expected_lost = run[self.config.allocator](ledger, stream, B)
        result, self._carry = ledger.finish(B, stop_reason, expected_lost, carry_over=self.config.carry_over)
        if self._ext is not None:
            # Feed every prompt whose step is over; a carried prompt is fed once, in the step that decides it.
            size = ledger.size
            fed = np.ones(size, bool)
            if self.config.carry_over:
                fed[(result.prompt_table["fate"] == 1) | (result.prompt_table["fate"] == 3)] = False
            rs = np.concatenate(ledger.r_slot) if ledger.r_slot else np.zeros(0, np.int64)
            r_fed = fed[rs]
            self._ext.end_step(ledger.pid[:size][fed], ledger.nsc[:size][fed], ledger.s[:size][fed],
                               (np.concatenate(ledger.r_success) if ledger.r_slot else np.zeros(0))[r_fed],
                               (np.concatenate(ledger.r_tokens) if ledger.r_slot else np.zeros(0, np.int64))[r_fed])
        self.total_rollouts += result.stats.rollouts_generated
        self.total_tokens += result.stats.tokens_generated
        self.steps += 1
        return result

    def _budget(self, B: int) -> int:
        return int(math.floor(self.config.budget_cap * B * self.config.k))

    def _uniform(self, ledger: _Ledger, stream: PromptStream, B: int):
        """B prompts x k rollouts, every group kept (plain GRPO). Split into several calls only if a capacity binds."""
        k = self.config.k
        slots = ledger.add(self._take(stream, B))
        per_call = max(1, (self.config.max_rollouts_per_round or B * k) // k)
        for i in range(0, len(slots), per_call):
            chunk = slots[i : i + per_call]
            ledger.generate(chunk, np.full(len(chunk), k, np.int64))
        ledger.status[slots] = _KEPT
        ledger.round_decided[slots] = ledger.rounds
        ledger.kept_order.extend(slots.tolist())
        mixed = (ledger.s[slots] > 0) & (ledger.s[slots] < ledger.nsc[slots])
        ledger.p[slots] = mixed.astype(np.float64)
        self._resolve(np.zeros(len(slots), np.int64), mixed, np.full(len(slots), k))
        return ("filled" if len(slots) == B else "stream"), 0.0

    def _dynamic_sampling(self, ledger: _Ledger, stream: PromptStream, B: int):
        """DAPO dynamic sampling: rounds of full k-groups from fresh prompts; keep the mixed ones until B are kept."""
        cfg, k = self.config, self.config.k
        budget = self._budget(B)
        while True:
            need = B - len(ledger.kept_order)
            if need <= 0:
                return "filled", 0.0
            if ledger.rounds >= cfg.max_rounds:
                return "max_rounds", 0.0
            room = budget - ledger.generated
            if cfg.max_rollouts_per_round is not None:
                room = min(room, cfg.max_rollouts_per_round)
            want = min(_ceil(need / self.yield_estimate()), room // k)
            if want <= 0:
                return "budget", 0.0
            pids = self._take(stream, want)
            if len(pids) == 0:
                return "stream", 0.0
            slots = ledger.add(pids)
            ledger.generate(slots, np.full(len(slots), k, np.int64))
            mixed = (ledger.s[slots] > 0) & (ledger.s[slots] < ledger.nsc[slots])
            ledger.status[slots] = np.where(mixed, _KEPT, _ABANDONED)
            ledger.p[slots] = mixed.astype(np.float64)
            ledger.round_decided[slots] = ledger.rounds
            ledger.kept_order.extend(slots[mixed].tolist())
            self._resolve(np.zeros(len(slots), np.int64), mixed, np.full(len(slots), k))

    def _sara(self, ledger: _Ledger, stream: PromptStream, B: int):
        """SARA (paper Alg. 1): probe fresh prompts with n0 rollouts, then commit / abandon / continue each round.

        Per round: mixed prompts below the commit floor are topped up to it in one go (they are certain to be
        effective, Prop. 2), at most as many as still needed; unmixed prompts get ``round_increment`` more rollouts
        (or, with ``"to_decision"``, all the rollouts up to their next abandon point, :meth:`_steps_to_decision`);
        fresh prompts are drawn so that the expected number of commits covers the remaining need plus
        ``refill_margin`` standard deviations (1 per mixed prompt, the learned mix rate at its rollout count per
        unmixed one and per fresh one, see :meth:`mix_rate`),
        but never more than the remaining budget can complete at the learned cost per fresh prompt. When the budget
        cap or the per-round capacity binds, requests are served in decreasing p_eff order, fresh prompts last.
        """
        cfg, k = self.config, self.config.k
        floor_ = cfg.commit_floor
        budget = self._budget(B)
        expected_lost = 0.0
        while True:
            need = B - len(ledger.kept_order)
            if need <= 0:
                return "filled", expected_lost
            if ledger.rounds >= cfg.max_rounds:
                return "max_rounds", expected_lost
            act = ledger.active()
            n, nsc, s, p = ledger.n[act], ledger.nsc[act], ledger.s[act], ledger.p[act]
            mixed = (s > 0) & (s < nsc)
            # Priority: mixed first (most rollouts first), then unmixed by decreasing p_eff; ties by draw order.
            prio = np.lexsort((act, -np.where(mixed, n, 0), -np.where(mixed, 2.0, p)))
            act, n, mixed = act[prio], n[prio], mixed[prio]
            if self._to_decision:
                um = ~mixed
                inc = np.zeros(len(act), np.int64)
                inc[um] = self._steps_to_decision(ledger.pid[act[um]], n[um], ledger.nsc[act[um]], ledger.s[act[um]])
            else:
                inc = np.minimum(cfg.round_increment, k - n)
            counts = np.where(mixed, floor_ - n, inc)
            n_mixed = int(mixed.sum())
            serve = np.zeros(len(act), bool)
            serve[np.flatnonzero(mixed)[:need]] = True
            if n_mixed < need:
                serve[~mixed] = True
            rate = self.mix_rate()
            expected = min(n_mixed, need) + float(rate[n[serve & ~mixed]].sum())
            # Safety margin of `refill_margin` standard deviations of the number of commits (Bernoulli sum), so that
            # one wave usually fills the batch instead of ending in a tail of small rounds.
            q = rate[n[serve & ~mixed]]
            margin = cfg.refill_margin * math.sqrt(float((q * (1 - q)).sum()) + need * (1 - rate[0]))
            fresh_wanted = _ceil(max(0.0, need - expected + margin) / rate[0])
            # Budget and capacity: keep a prefix of the priority order, then fresh prompts with what is left; fresh
            # prompts only as many as the budget left after the pending top-ups can see through.
            left = budget - ledger.generated
            room = left if cfg.max_rollouts_per_round is None else min(left, cfg.max_rollouts_per_round)
            c_slots, c_counts = act[serve], counts[serve]
            fits = np.cumsum(c_counts) <= room
            c_slots, c_counts = c_slots[fits], c_counts[fits]
            room -= int(c_counts.sum())
            completable = int((left - int(counts[mixed].sum())) // self.fresh_cost_estimate())
            fresh = max(0, min(fresh_wanted, room // cfg.n0, completable))
            pids = self._take(stream, fresh) if fresh > 0 else np.zeros(0, np.int64)
            if len(c_slots) == 0 and len(pids) == 0:
                # Nothing to generate: either the stream ran dry or the budget/capacity left no room.
                return ("stream" if fresh > 0 else "budget"), expected_lost
            new = ledger.add(pids)
            slots = np.concatenate([c_slots, new])
            was_mixed = (ledger.s[slots] > 0) & (ledger.s[slots] < ledger.nsc[slots])
            ledger.generate(slots, np.concatenate([c_counts, np.full(len(new), cfg.n0, np.int64)]))

            dec, p_new = self._decide(ledger.pid[slots], ledger.n[slots], ledger.nsc[slots], ledger.s[slots])
            ledger.p[slots] = p_new
            committed = slots[dec == COMMIT]
            abandoned = slots[dec == ABANDON]
            ledger.status[committed] = _KEPT
            ledger.status[abandoned] = _ABANDONED
            ledger.round_decided[committed] = ledger.rounds
            ledger.round_decided[abandoned] = ledger.rounds
            ledger.kept_order.extend(committed.tolist())
            expected_lost += float(p_new[dec == ABANDON].sum())
            # Refill model: prompts that mixed this round (certain to commit) and prompts abandoned this round.
            now_mixed = (ledger.s[slots] > 0) & (ledger.s[slots] < ledger.nsc[slots]) & ~was_mixed
            resolved = now_mixed | (dec == ABANDON)
            r = slots[resolved]
            self._resolve(
                last_unmixed=np.where(now_mixed[resolved], ledger.n_before[r], ledger.n[r]),
                mixed=now_mixed[resolved],
                cost=np.where(now_mixed[resolved], np.maximum(ledger.n[r], floor_), ledger.n[r]),
            )
