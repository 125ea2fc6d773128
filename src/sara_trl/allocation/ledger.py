"""The per-step ledger every allocator writes to: who was drawn, what each rollout returned, each prompt's fate.

All strategies share it, so their costs are accounted identically (:meth:`Ledger.finish` builds the groups and the
:class:`~sara_trl.allocation.types.StepStats`). A strategy changes a prompt's fate only through :meth:`Ledger.mark`.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.types import (
    Fate,
    Group,
    RoundOutcome,
    RoundRequest,
    StepResult,
    StepStats,
)

__all__ = ["CARRY_DTYPES", "Ledger"]

CARRY_DTYPES = {"pid": np.int64, "n": np.int64, "nsc": np.int64, "s": np.int64, "p": np.float64,
                "committed": np.bool_, "truncated": np.bool_, "r_slot": np.int64, "r_success": np.float64,
                "r_tokens": np.int64}
"""Fields of a carry (prompts handed from one step to the next, see :meth:`Ledger.finish`) and their dtypes.
``truncated`` may be absent (a carry saved before it existed): no prompt truncated."""

_SLOT_ARRAYS = ("pid", "n", "nsc", "s", "status", "p", "round_decided", "n_before", "truncated")


class Ledger:
    """Bookkeeping of one step: one slot per prompt in the step, one entry per rollout.

    Rounds are answered through :meth:`round` (one ``rollout_fn`` call, :func:`~sara_trl.allocation.rounds.run_rounds`,
    or one batch of engine requests); streaming records rollouts one by one through :meth:`record`.

    Attributes
    ----------
    size : int
        Slots in use (prompts in the step: carried in first, then drawn).
    pid, n, nsc, s : ndarray of int64, shape (>= size,)
        Per slot: dataset index, rollouts generated, scorable rollouts, successes.
    status : ndarray of int8
        Per slot, a :class:`~sara_trl.allocation.types.Fate` (``ACTIVE``, ``COMMITTED`` or ``ABANDONED`` during
        the step).
    p : ndarray of float64
        Per slot, p_eff after its latest decision (1 before any).
    round_decided : ndarray of int64
        Per slot, the round whose outcomes decided it (0: undecided in this step).
    n_before : ndarray of int64
        Per slot, rollouts before the latest round that served it.
    truncated : ndarray of bool
        Per slot, whether a request of the prompt was aborted, in this step or a step it was carried from
        (streaming): its recorded outcomes are then the completions that finished first.
    kept_order : list of int
        Committed slots in commit order (the first B are trained).
    rounds, generated : int
        Rounds (:meth:`round`, each one ``rollout_fn`` call or one batch of engine requests) and rollouts generated
        in this step.
    round_sizes : list of int
        Rollouts requested per round.
    """

    def __init__(self):
        self.size = 0
        cap = 256
        self.pid = np.zeros(cap, np.int64)
        self.n = np.zeros(cap, np.int64)
        self.nsc = np.zeros(cap, np.int64)
        self.s = np.zeros(cap, np.int64)
        self.status = np.full(cap, Fate.ACTIVE, np.int8)
        self.p = np.ones(cap, np.float64)
        self.round_decided = np.zeros(cap, np.int64)
        self.n_before = np.zeros(cap, np.int64)
        self.truncated = np.zeros(cap, np.bool_)
        self.kept_order: list[int] = []
        self.r_slot: list[np.ndarray] = []
        self.r_success: list[np.ndarray] = []
        self.r_tokens: list[np.ndarray] = []
        self.rounds = 0
        self.round_sizes: list[int] = []
        self.generated = 0
        self.carried_in = 0
        self.carried_rollouts = 0
        self.carried_tokens = 0

    # ------------------------------------------------------------------------------------------- slots
    def seed(self, carry: dict) -> None:
        """Start the step with the prompts carried over from the previous one.

        Parameters
        ----------
        carry : dict
            What :meth:`finish` returned with ``carry_over`` (fields :data:`CARRY_DTYPES`): the prompts' counts,
            p_eff and whether they were committed, and their rollouts, which become this step's first ids. None of
            this counts as generated or as a round.
        """
        slots = self.add(np.asarray(carry["pid"], np.int64))
        for name in ("n", "nsc", "s", "p"):
            getattr(self, name)[slots] = carry[name]
        self.n_before[slots] = self.n[slots]
        if "truncated" in carry:
            self.truncated[slots] = carry["truncated"]
        committed = np.asarray(carry["committed"], bool)
        self.status[slots[committed]] = Fate.COMMITTED
        self.kept_order.extend(slots[committed].tolist())
        self.r_slot.append(np.asarray(carry["r_slot"], np.int64))
        self.r_success.append(np.asarray(carry["r_success"], np.float64))
        self.r_tokens.append(np.asarray(carry["r_tokens"], np.int64))
        self.carried_in = len(slots)
        self.carried_rollouts = len(carry["r_slot"])
        self.carried_tokens = int(np.sum(carry["r_tokens"], dtype=np.int64))

    def add(self, pids: np.ndarray) -> np.ndarray:
        """New ``ACTIVE`` slots for the prompts ``pids`` (shape ``(P,)``); returns their slot indices ``(P,)``."""
        need = self.size + len(pids)
        if need > len(self.pid):
            new = max(need, 2 * len(self.pid))
            for name in _SLOT_ARRAYS:
                arr = getattr(self, name)
                grown = np.full(new, 1.0 if name == "p" else Fate.ACTIVE if name == "status" else 0, arr.dtype)
                grown[: len(arr)] = arr
                setattr(self, name, grown)
        slots = np.arange(self.size, need, dtype=np.int64)
        self.pid[slots] = pids
        self.size = need
        return slots

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """Forget the decided slots (a continuous collector's window, which keeps no batch): the undecided ones are
        renumbered ``0 .. A - 1`` in slot order and keep their rollouts, in id order; the commit order is emptied.

        Returns
        -------
        new : ndarray of int64, shape (size before,)
            Each old slot's new number, -1 for a forgotten one.
        kept : ndarray of int64, shape (R',)
            The old ids of the rollouts kept (they become ids ``0 .. R' - 1``).
        """
        keep = self.active()
        new = np.full(self.size, -1, np.int64)
        new[keep] = np.arange(len(keep))
        rs, success, tokens = self.rollouts()
        kept = np.flatnonzero(new[rs] >= 0)
        for name in _SLOT_ARRAYS:
            arr = getattr(self, name)
            moved = arr[keep]
            arr[: self.size] = 1.0 if name == "p" else Fate.ACTIVE if name == "status" else 0
            arr[: len(keep)] = moved
        self.size = len(keep)
        self.r_slot, self.r_success, self.r_tokens = [new[rs[kept]]], [success[kept]], [tokens[kept]]
        self.kept_order = []
        return new, kept

    def prompt_ids(self) -> np.ndarray:
        """Dataset indices of every prompt in the step so far, ``(size,)`` int64 (a copy)."""
        return self.pid[: self.size].copy()

    def active(self) -> np.ndarray:
        """Slots still undecided (``Fate.ACTIVE``), in slot order."""
        return np.flatnonzero(self.status[: self.size] == Fate.ACTIVE)

    def mark(self, slots: np.ndarray, fate) -> None:
        """Record a decision for ``slots`` in the current round: the one way a prompt's fate changes.

        Parameters
        ----------
        slots : ndarray of int64, shape (P,)
            Slots decided by the latest round's outcomes.
        fate : Fate or ndarray of int8, shape (P,)
            ``Fate.COMMITTED``, ``Fate.ABANDONED`` or ``Fate.ACTIVE`` (no change) per slot; the rule's decisions
            (``COMMIT``, ``ABANDON``, ``CONTINUE``) are these values. Committed slots join
            :attr:`kept_order` in the order given; decided slots record the round.
        """
        slots = np.asarray(slots, np.int64)
        fate = np.broadcast_to(np.asarray(fate, np.int8), slots.shape)
        decided = fate != Fate.ACTIVE
        self.status[slots[decided]] = fate[decided]
        self.round_decided[slots[decided]] = self.rounds
        self.kept_order.extend(slots[fate == Fate.COMMITTED].tolist())

    # ------------------------------------------------------------------------------------------- rounds
    def round(self, slots: np.ndarray, counts: np.ndarray) -> Generator[RoundRequest, object, None]:
        """ONE round for ``counts[i]`` new rollouts of each slot: yields the :class:`RoundRequest`, receives its
        outcomes (a :class:`RoundOutcome` or a ``(success, tokens)`` pair), then updates the counts. A strategy
        runs it with ``yield from ledger.round(slots, counts)``; whoever drives the strategy answers the request
        (:func:`~sara_trl.allocation.rounds.run_rounds` with a ``rollout_fn``, or the event loop through
        :class:`~sara_trl.allocation.rounds.RoundCollector`).

        Parameters
        ----------
        slots, counts : ndarray of int64, shape (P,)
            Slots served this round and the new rollouts each gets (>= 1); P may be 0 (a round of nothing, answered
            by an empty outcome).

        Raises
        ------
        ValueError
            Malformed outcomes (:meth:`RoundOutcome.coerce`).
        """
        total = int(counts.sum())
        out = RoundOutcome.coerce((yield RoundRequest(self.pid[slots].copy(), counts.copy())), total)
        rs = np.repeat(slots, counts)
        if out.order is not None:  # the rollouts take their ids in the order they were recorded
            rs = rs[out.order]
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

    def record(self, slot: int, success: float, tokens: int) -> None:
        """One finished rollout of ``slot``, outside any round (streaming collection): the counts grow by one.

        Parameters
        ----------
        slot : int
            The prompt's slot.
        success : float
            1.0, 0.0 or NaN (unscorable; validated by the caller).
        tokens : int
            Its completion tokens.
        """
        self.n_before[slot] = self.n[slot]
        self.n[slot] += 1
        if not np.isnan(success):
            self.nsc[slot] += 1
            self.s[slot] += int(success == 1.0)
        self.r_slot.append(np.array([slot], np.int64))
        self.r_success.append(np.array([success], np.float64))
        self.r_tokens.append(np.array([tokens], np.int64))
        self.generated += 1

    def relabel(self, slot: int, labels: np.ndarray) -> None:
        """Replace the success labels of ``slot``'s rollouts (in rollout-id order) and its counts: dynamic sampling's
        ``ds_filter="score"`` in streaming, which can label a group from its scores only once all of them are in.

        Parameters
        ----------
        slot : int
        labels : ndarray of float64, shape (n[slot],)
            1.0, 0.0 or NaN; NaN exactly where the recorded label is NaN (an unscorable rollout stays unscorable).

        Raises
        ------
        ValueError
            ``labels`` has the wrong length or moves a NaN.
        """
        rs, success, tokens = self.rollouts()
        mine = np.flatnonzero(rs == slot)
        labels = np.asarray(labels, np.float64)
        if labels.shape != mine.shape or not np.array_equal(np.isnan(labels), np.isnan(success[mine])):
            raise ValueError(f"relabel of slot {slot}: {labels.shape[0]} labels for {len(mine)} rollouts, or an "
                             "unscorable rollout made scorable")
        success[mine] = labels
        self.r_slot, self.r_success, self.r_tokens = [rs], [success], [tokens]
        self.s[slot] = int(np.sum(labels == 1.0))

    def rollouts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every rollout of the step by id: ``(slot, success, tokens)``, each ``(R,)`` (int64, float64, int64)."""
        if not self.r_slot:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        return (np.concatenate(self.r_slot), np.concatenate(self.r_success),
                np.concatenate(self.r_tokens).astype(np.int64))

    # ------------------------------------------------------------------------------------------- end of step
    def finish(self, B: int, stop_reason: str, expected_lost: float,
               carry_over: bool = False) -> tuple[StepResult, dict | None]:
        """Assign final fates, build the B groups (fill groups if short) and the accounting.

        The first B committed slots (in commit order) are ``TRAINED``, later ones ``SURPLUS``.

        Parameters
        ----------
        B : int
            Groups in the batch.
        stop_reason : str
            Why the strategy stopped (``StepStats.stop_reason``).
        expected_lost : float
            Summed p_eff at abandonment (``StepStats.expected_lost``).
        carry_over : bool
            Hand the surplus and still-active prompts to the next step.

        Returns
        -------
        result : StepResult
            The batch and its accounting.
        carry : dict or None
            None, or (``carry_over``) the surplus and still-active prompts with their counts and rollouts, in the
            form :meth:`seed` takes (fields :data:`CARRY_DTYPES`); their rollout ids, in the order the next step
            numbers them, are ``result.carry_rollout_ids``.
        """
        size = self.size
        fate = self.status[:size].copy()
        kept = np.asarray(self.kept_order, np.int64)
        fate[kept[:B]] = Fate.TRAINED
        fate[kept[B:]] = Fate.SURPLUS
        rs, succ, tok = self.rollouts()
        r_fate = fate[rs]
        n_by = np.bincount(r_fate, minlength=4)
        t_by = np.bincount(r_fate, weights=tok, minlength=4).astype(np.int64)
        tok_slot = np.bincount(rs, weights=tok, minlength=size).astype(np.int64)

        # Per slot, over all its rollouts in the step: scorable ones and successes among them, so the effective
        # groups of the batch (Group.effective, paper Def. 1) are counted in one vectorized pass.
        scored = ~np.isnan(succ)
        nsc_slot = np.bincount(rs, weights=scored, minlength=size)
        s_slot = np.bincount(rs, weights=scored & (succ == 1.0), minlength=size)
        trained = kept[:B]
        effective_in_batch = int(np.count_nonzero(is_mixed(s_slot[trained], nsc_slot[trained])))

        order = np.argsort(rs, kind="stable")  # rollout ids grouped by slot, generation order within a slot
        starts = np.searchsorted(rs[order], np.arange(size + 1))
        lo, hi = starts[trained].tolist(), starts[trained + 1].tolist()
        groups = []
        for pid, a, b in zip(self.pid[trained].tolist(), lo, hi):
            ids = order[a:b].astype(np.int64)
            groups.append(Group(prompt_id=pid, rollout_ids=ids, success=succ[ids]))
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
            rollouts_generated=int(len(rs)) - self.carried_rollouts, rollouts_trained=int(n_by[Fate.TRAINED]),
            rollouts_surplus=int(n_by[Fate.SURPLUS]), rollouts_abandoned=int(n_by[Fate.ABANDONED]),
            rollouts_active_left=int(n_by[Fate.ACTIVE]),
            tokens_generated=int(tok.sum()) - self.carried_tokens, tokens_trained=int(t_by[Fate.TRAINED]),
            tokens_surplus=int(t_by[Fate.SURPLUS]), tokens_abandoned=int(t_by[Fate.ABANDONED]),
            tokens_active_left=int(t_by[Fate.ACTIVE]),
            rounds=self.rounds, prompts_drawn=size - self.carried_in, committed=int(len(kept)),
            abandoned=int((fate == Fate.ABANDONED).sum()), surplus=int((fate == Fate.SURPLUS).sum()),
            active_left=int((fate == Fate.ACTIVE).sum()),
            unfilled=unfilled, effective_in_batch=effective_in_batch, batch_groups=B,
            expected_lost=float(expected_lost), unscorable=int(len(succ) - np.count_nonzero(scored)),
            stop_reason=stop_reason,
            rollouts_carried_in=self.carried_rollouts, tokens_carried_in=self.carried_tokens,
            carried_in=self.carried_in,
        )
        stats.check()
        result = StepResult(groups=groups, stats=stats, prompt_table=table, round_sizes=list(self.round_sizes),
                            rollout_fates=r_fate.astype(np.int8))
        if not carry_over:
            return result, None
        # Carry the surplus groups (in commit order, so they lead next step's batch) and the undecided prompts.
        cslots = np.concatenate([kept[B:], np.flatnonzero(fate == Fate.ACTIVE)]).astype(np.int64)
        ids = np.concatenate([order[starts[c]: starts[c + 1]] for c in cslots]).astype(np.int64) if len(cslots) \
            else np.zeros(0, np.int64)
        rank = np.empty(size, np.int64)
        rank[cslots] = np.arange(len(cslots))
        carry = {
            "pid": self.pid[cslots].copy(), "n": self.n[cslots].copy(), "nsc": self.nsc[cslots].copy(),
            "s": self.s[cslots].copy(), "p": self.p[cslots].copy(), "committed": fate[cslots] == Fate.SURPLUS,
            "truncated": self.truncated[cslots].copy(),
            "r_slot": rank[rs[ids]], "r_success": succ[ids].copy(), "r_tokens": tok[ids].copy(),
        }
        result.carry_rollout_ids = ids
        return result, carry
