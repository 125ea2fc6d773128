"""The rules both collection schedules share, each written once.

Rounds (:mod:`~sara_trl.allocation.strategies`, paper Alg. 1) and streaming
(:class:`~sara_trl.allocation.streaming.StreamingCollector`, beyond the paper) differ only in *when* they decide:
after a whole round, or after each completion. What they decide with lives here:

- :func:`step_budget`: the rollouts a step may generate (the budget cap, paper App. D);
- :func:`config_rule`: the decision rule of a config (paper Eq. 3 through :func:`~sara_trl.allocation.rules.decide`);
- :func:`continuation`: how many more rollouts an unmixed prompt gets (``round_increment``, or up to its next abandon
  point, :func:`steps_to_decision`);
- :class:`RefillModel`: the learned share of unmixed prompts that go on to mix and the cost of a fresh prompt;
- :func:`expected_commits`, :func:`fresh_to_draw` and :func:`fresh_affordable`: how many fresh prompts cover the
  remaining need, and how many the budget can see through;
- :func:`judge_full_groups` and :func:`feed_resolved`: what a decision teaches the refill model (and, for the
  baselines, the decision itself: a full group of k is kept when it is mixed).

Torch-free (numpy only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sara_trl.allocation.labels import is_mixed
from sara_trl.allocation.predictor import p_eff_unchecked
from sara_trl.allocation.rules import decide as paper_decide
from sara_trl.allocation.types import ABANDON, Fate

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.allocation.config import AllocationConfig
    from sara_trl.allocation.ledger import Ledger

__all__ = ["MIX_RATE_FLOOR", "RefillModel", "ceil_count", "config_rule", "continuation", "expected_commits",
           "feed_resolved", "fresh_affordable", "fresh_to_draw", "judge_full_groups", "step_budget",
           "steps_to_decision"]

Decide = Callable[..., tuple[np.ndarray, np.ndarray]]
"""``decide(pids, n, n_scored, s) -> (decision (P,) int8, p_eff (P,) float64)``, all inputs ``(P,)`` int64."""

MIX_RATE_FLOOR = 1.0 / 64
"""Lower clip of every learned mix rate, so that a refill never divides by zero."""


def ceil_count(x: float) -> int:
    """Ceiling that ignores float noise (``2.0000000004 -> 2``), so refill sizes do not flicker."""
    return math.ceil(x - 1e-9)


def step_budget(config: AllocationConfig, B: int) -> int:
    """Rollouts one step may generate: ``floor(budget_cap * B * k)`` (paper App. D), in rollouts."""
    return int(math.floor(config.budget_cap * B * config.k))


def config_rule(config: AllocationConfig) -> Decide:
    """The paper's rule (Eq. 3) with ``config``'s ``k``, ``tau_low``, commit floor and Beta prior, as a
    :data:`Decide` callable (the prompt ids are not used).

    Raises
    ------
    ValueError
        ``stopping_rule="bayes_optimal"``: that boundary is fitted across steps, by the
        :class:`~sara_trl.allocation.Allocator`.
    """
    if config.stopping_rule == "bayes_optimal":
        raise ValueError("stopping_rule='bayes_optimal' decides on a boundary fitted across steps: collect through "
                         "the Allocator (Allocator.collect / Allocator.streaming), or pass a decide callable")
    cfg = config

    def decide(pids, n, n_scored, s):
        return paper_decide(n, n_scored, s, k=cfg.k, tau_low=cfg.tau_low, commit_min=cfg.commit_floor,
                            alpha0=cfg.prior_alpha, beta0=cfg.prior_beta)

    return decide


# ---------------------------------------------------------------------------------------------- continuing a prompt
def steps_to_decision(decide: Decide, k: int, pids: np.ndarray, n: np.ndarray, n_scored: np.ndarray,
                      s: np.ndarray) -> np.ndarray:
    """Rollouts that take each unmixed prompt to its next abandon point if its run stays unanimous.

    Evaluates ``decide`` on a ``(P, k)`` grid of hypothetical counts.

    Parameters
    ----------
    decide : Decide
        The rule in use.
    k : int
        Group size.
    pids, n, n_scored, s : ndarray of int64, shape (P,)
        Unmixed prompts (``s == 0`` or ``s == n_scored``) and their counts.

    Returns
    -------
    ndarray of int64, shape (P,)
        In ``[1, k - n]``: the smallest j such that the rule abandons at ``n + j`` rollouts when the j new
        rollouts repeat the run (all fail if ``s == 0``, all pass if ``s == n_scored``; with no scored rollout
        yet, the nearer of the two).
    """
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
        dec, _ = decide(rep, N.ravel(), NSC.ravel(), S.ravel())
        stop = (dec.reshape(N.shape) == ABANDON) | (N >= k)
        first = np.argmax(stop, axis=1) + 1  # stop[:, -1] is always True (N = k there)
        steps = np.where(side, np.minimum(steps, first), steps)
    return np.minimum(steps, k - n)


def continuation(config: AllocationConfig, decide: Decide, pids: np.ndarray, n: np.ndarray, n_scored: np.ndarray,
                 s: np.ndarray) -> np.ndarray:
    """Rollouts to give each unmixed, undecided prompt next: ``min(round_increment, k - n)``, or with
    ``continue_to_decision`` all of them up to its next abandon point (:func:`steps_to_decision`).

    Parameters
    ----------
    config : AllocationConfig
        Supplies ``k``, ``round_increment`` and ``continue_to_decision``.
    decide : Decide
        The rule in use (read only with ``continue_to_decision``).
    pids, n, n_scored, s : ndarray of int64, shape (P,)
        Unmixed, undecided prompts: dataset ids, rollouts, scorable rollouts, successes.

    Returns
    -------
    ndarray of int64, shape (P,)
        Rollouts, in ``[1, k - n]`` for prompts below k.
    """
    n = np.asarray(n, np.int64)
    if config.to_decision:
        return steps_to_decision(decide, config.k, np.asarray(pids, np.int64), n, np.asarray(n_scored, np.int64),
                                 np.asarray(s, np.int64))
    return np.minimum(config.round_increment, config.k - n)


# ---------------------------------------------------------------------------------------------- the refill model
class RefillModel:
    """What the allocator has learned about fresh and unmixed prompts, used to size refills.

    Per rollout count n (n = 0: a fresh prompt), the share of still-unmixed prompts that went on to mix ("mix
    rate"), and the rollouts a fresh prompt costs until it is committed or abandoned. Each is a running ratio with
    one pseudo-prompt of prior: the Beta-prior predictive p_eff(n, 0) (paper Eq. 2) for the mix rate, and a probe
    of ``n0`` plus a top-up to the commit floor for the p_eff(0, 0) share that mixes for the cost. Both decay by
    ``yield_decay`` per step (:meth:`decay`).

    Parameters
    ----------
    config : AllocationConfig

    Attributes
    ----------
    mix_num, mix_den : ndarray of float64, shape (k + 1,)
        Decayed counts of prompts seen unmixed at n rollouts that mixed later / that were resolved.
    cost_num, cost_den : float
        Decayed rollouts spent on resolved prompts / their number.
    checkpoints : ndarray of int64
        The rollout counts at which a still-unmixed prompt is observed (0, n0, n0 + round_increment, ..., k), the
        entries of ``mix_num`` / ``mix_den`` that :meth:`resolve` feeds.
    """

    def __init__(self, config: AllocationConfig):
        self.config = cfg = config
        k = cfg.k
        self.mix_prior = p_eff_unchecked(np.arange(k + 1), 0, k, cfg.prior_alpha, cfg.prior_beta)
        self.cost_prior = float(cfg.n0 + self.mix_prior[0] * (cfg.commit_floor - cfg.n0))
        self.mix_num = np.zeros(k + 1)
        self.mix_den = np.zeros(k + 1)
        self.cost_num = 0.0
        self.cost_den = 0.0
        # every count from n0 on when the increment runs to the next decision point (it varies per prompt)
        inc = 1 if cfg.to_decision else cfg.round_increment
        self.checkpoints = np.unique(np.minimum(np.r_[0, np.arange(cfg.n0, k + inc, inc)], k))

    def mix_rate(self) -> np.ndarray:
        """``(k + 1,)`` float64: the estimated share of unmixed prompts with n rollouts that go on to mix, floored
        at :data:`MIX_RATE_FLOOR`."""
        return np.clip((self.mix_num + self.mix_prior) / (self.mix_den + 1.0), MIX_RATE_FLOOR, 1.0)

    def fresh_cost(self) -> float:
        """Estimated rollouts a fresh prompt costs until it is committed or abandoned."""
        return (self.cost_num + self.cost_prior) / (self.cost_den + 1.0)

    def resolve(self, last_unmixed: np.ndarray, mixed: np.ndarray, cost: np.ndarray) -> None:
        """Learn from prompts whose fate became known.

        Parameters
        ----------
        last_unmixed : ndarray of int64, shape (P,)
            The largest rollout count at which each prompt was still unmixed.
        mixed : ndarray of bool, shape (P,)
            Whether it mixed (committed or certain to commit) or was abandoned.
        cost : ndarray, shape (P,)
            Rollouts it costs in all (a mixed prompt: topped up to the commit floor).
        """
        if len(mixed) == 0:
            return
        seen = self.checkpoints[:, None] <= np.asarray(last_unmixed)[None, :]  # (checkpoints, P)
        self.mix_den[self.checkpoints] += seen.sum(axis=1)
        self.mix_num[self.checkpoints] += (seen & np.asarray(mixed)[None, :]).sum(axis=1)
        self.cost_num += float(np.sum(cost))
        self.cost_den += len(cost)

    def decay(self) -> None:
        """Multiply every count by ``yield_decay`` (once per step, before it starts)."""
        d = self.config.yield_decay
        self.mix_num, self.mix_den = self.mix_num * d, self.mix_den * d
        self.cost_num, self.cost_den = self.cost_num * d, self.cost_den * d

    def state_dict(self) -> dict:
        """The counts as plain Python values."""
        return {"mix_num": self.mix_num.tolist(), "mix_den": self.mix_den.tolist(), "cost_num": self.cost_num,
                "cost_den": self.cost_den}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`.

        Raises
        ------
        ValueError
            The state was saved for another group size k.
        """
        if len(state["mix_num"]) != self.config.k + 1:
            raise ValueError(f"allocator state was saved for k={len(state['mix_num']) - 1}, this allocator has "
                             f"k={self.config.k}")
        self.mix_num = np.asarray(state["mix_num"], dtype=np.float64)
        self.mix_den = np.asarray(state["mix_den"], dtype=np.float64)
        self.cost_num = float(state["cost_num"])
        self.cost_den = float(state["cost_den"])


# ---------------------------------------------------------------------------------------------- refill sizing
def expected_commits(n_mixed: int, need: int, q: np.ndarray) -> tuple[float, float]:
    """Expected commits among undecided prompts, and their variance (a Bernoulli sum).

    Parameters
    ----------
    n_mixed : int
        Undecided mixed prompts: each commits once topped up to the commit floor (paper Prop. 2); at most ``need``
        of them count.
    need : int
        Groups still missing.
    q : ndarray of float64, shape (U,)
        The learned mix rate of each undecided unmixed prompt at its rollout count.
    """
    q = np.asarray(q, np.float64)
    return min(int(n_mixed), int(need)) + float(q.sum()), float((q * (1 - q)).sum())


def fresh_to_draw(need: int, expected: float, var: float, rate0: float, refill_margin: float) -> int:
    """Fresh prompts to draw so that the expected commits cover ``need`` with a margin.

    ``ceil(max(0, need - expected + m) / rate0)`` with ``m = refill_margin * sqrt(var + need (1 - rate0))``:
    ``refill_margin`` standard deviations of the number of commits, so that one wave usually fills the batch
    instead of ending in a tail of small ones (beyond the paper; 0 sizes on the mean alone).

    Parameters
    ----------
    need : int
        Groups still missing.
    expected, var : float
        :func:`expected_commits` of the undecided prompts that will get rollouts.
    rate0 : float
        The learned share of fresh prompts that mix (``RefillModel.mix_rate()[0]``), > 0.
    refill_margin : float
        Standard deviations of margin (>= 0).

    Returns
    -------
    int
        Prompts (>= 0), before the budget and capacity limits.
    """
    margin = refill_margin * math.sqrt(var + need * (1 - rate0))
    return ceil_count(max(0.0, need - expected + margin) / rate0)


def fresh_affordable(left: int, reserved: float, fresh_cost: float) -> int:
    """Fresh prompts the budget can see through: ``floor(max(0, left - reserved) / fresh_cost)``.

    Without this reserve a wide engine (or a large round) fills the budget with probes whose mixed groups then cannot
    be topped up to the commit floor.

    Parameters
    ----------
    left : int
        Rollouts left in the step's budget (:func:`step_budget` minus those generated or submitted).
    reserved : float
        Rollouts the undecided prompts still need (at least the mixed prompts' top-ups to the commit floor).
    fresh_cost : float
        Learned rollouts a fresh prompt costs until decided (``RefillModel.fresh_cost``), > 0.
    """
    return int(max(0.0, left - reserved) // fresh_cost)


# ---------------------------------------------------------------------------------------------- what a decision teaches
def feed_resolved(resolved: Callable | None, last_unmixed: np.ndarray, n: np.ndarray, now_mixed: np.ndarray,
                  abandoned: np.ndarray, commit_floor: int) -> None:
    """Feed the refill model with SARA prompts resolved by a decision: those that just mixed (certain to commit,
    costing ``max(n, commit_floor)`` rollouts) and those just abandoned (costing ``n``).

    Parameters
    ----------
    resolved : callable or None
        ``RefillModel.resolve`` (None: nothing is fed).
    last_unmixed : ndarray of int64, shape (P,)
        For each prompt, its rollout count before the outcomes that mixed it.
    n : ndarray of int64, shape (P,)
        Its rollout count now.
    now_mixed, abandoned : ndarray of bool, shape (P,)
        It mixed with these outcomes / the rule abandoned it.
    """
    if resolved is None:
        return
    r = np.asarray(now_mixed) | np.asarray(abandoned)
    if not r.any():
        return
    mixed = np.asarray(now_mixed)[r]
    n = np.asarray(n)[r]
    resolved(np.where(mixed, np.asarray(last_unmixed)[r], n), mixed, np.where(mixed, np.maximum(n, commit_floor), n))


def judge_full_groups(ledger: Ledger, slots: np.ndarray, k: int, resolved: Callable | None, *,
                      keep_all: bool) -> np.ndarray:
    """The baselines' decision on full groups of k: dynamic sampling (DAPO) commits the mixed ones and abandons the
    saturated ones; uniform sampling (``keep_all``) commits every group. Sets each slot's ``p`` to 1.0 / 0.0 (mixed
    or not) and feeds the refill model (a fresh prompt mixed or not at a cost of k).

    Parameters
    ----------
    ledger : Ledger
    slots : ndarray of int64, shape (P,)
        Slots whose groups hold k rollouts.
    k : int
        Group size (the rollouts each prompt cost).
    resolved : callable or None
        ``RefillModel.resolve``.
    keep_all : bool
        Uniform sampling.

    Returns
    -------
    ndarray of bool, shape (P,)
        Whether each group is mixed.
    """
    slots = np.asarray(slots, np.int64)
    mixed = is_mixed(ledger.s[slots], ledger.nsc[slots])
    ledger.mark(slots, Fate.COMMITTED if keep_all else np.where(mixed, Fate.COMMITTED, Fate.ABANDONED))
    ledger.p[slots] = mixed.astype(np.float64)
    if resolved is not None:
        resolved(np.zeros(len(slots), np.int64), mixed, np.full(len(slots), k))
    return mixed
