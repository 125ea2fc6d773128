"""Allocation settings shared by the three allocators (defaults from paper App. D)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

ALLOCATORS = ("sara", "dynamic_sampling", "uniform")
SELECTIONS = ("thompson", "greedy")
COST_UNITS = ("rollouts", "tokens")
PRIOR_FAMILIES = ("mixture", "beta")
ROUND_TO_DECISION = "to_decision"


@dataclass(frozen=True)
class AllocationConfig:
    """How one step's rollouts are allocated.

    Attributes:
        allocator: ``"sara"`` (paper Alg. 1), ``"dynamic_sampling"`` (DAPO: full groups of k, keep the mixed ones
            until B are kept) or ``"uniform"`` (B prompts x k rollouts in one round, all kept: plain GRPO).
        k: group size (rollouts per prompt in a full group), >= 2.
        n0: probe size, rollouts generated for a fresh prompt in its first round (SARA), 1 <= n0 <= k.
        tau_low: abandon a prompt when p_eff < tau_low (paper Eq. 3), in [0, 1).
        commit_min: commit floor; a mixed group is committed once it has at least this many rollouts
            (2 <= commit_min <= k). None means k (the paper's default: every trained group has k rollouts).
        prior_alpha, prior_beta: Beta prior on the success rate gamma (paper §3.2), > 0.
        budget_cap: safety cap on rollouts generated in one step, in units of B*k (paper App. D: 6).
        max_rounds: cap on generation rounds (batched calls) in one step.
        round_increment: rollouts added per round to a continuing, still-unmixed prompt (paper: 1). Larger values
            trade a few extra rollouts for fewer rounds. ``"to_decision"``: in one round, give an unmixed prompt all
            the rollouts up to the point where the rule would abandon it if its run stayed unanimous (for the
            paper's rule: n_a = k - floor(tau_low (k + 1)) in all). With commit_min = k this costs exactly the same
            rollouts per prompt as one at a time (a prompt that mixes inside the jump is topped up to k either way;
            one that stays unanimous is abandoned at the same n), so it only removes rounds; with an early commit
            floor below n_a a prompt that mixes early is still grown to the jump's end.
        max_rollouts_per_round: optional capacity of one batched call, in rollouts; when it binds, continuing
            prompts are served in decreasing p_eff order and fresh prompts only with what is left. None = no cap.
        yield_decay: per-step decay of the refill model (learned mix rates and cost per fresh prompt, see
            :meth:`Allocator.mix_rate`) used to size refills (0 keeps only the current step, values near 1 keep a
            long memory).
        refill_margin: extra fresh prompts drawn per round, in standard deviations of the number of commits the
            round can expect (0 draws for the expected need only: fewest rollouts, most rounds; 0.5 trades about
            1% more rollouts for fewer rounds in simulation, see benchmarks/BEYOND_PAPER.md).
        carry_over: SARA only. Prompts still undecided when the step's B-th group commits, and groups committed
            beyond B, keep their rollouts and move into the next step (first in line) instead of being wasted, so
            the end-of-step waste of a finite batch disappears. Their earlier rollouts come from the previous
            policy (one step off-policy; with vLLM, TRL GRPO's importance-sampling correction reweights or masks
            them). Off by default (the paper drops them).

    Beyond the paper (all off by default; with the defaults the allocator is the paper's SARA, decision for
    decision; see :mod:`sara_trl.allocation.extensions`):
        tau_low: may also be ``"auto"``: the Bayes-optimal continue/abandon boundary for the objective "effective
            groups per unit cost", by backward induction at the self-consistent cost per effective group
            (Dinkelbach), under a prior fitted online (paper App. C.7, App. G future work). SARA only.
        auto_prior: family of the fitted prior for ``"auto"``: ``"mixture"`` (point masses at 0 and 1 plus a Beta)
            or ``"beta"``.
        auto_prior_decay: per-step decay in [0, 1] of the outcome counts (and token means) the prior is fitted on.
        auto_min_prompts: prompts (decayed count) observed before the fit is used; until then (burn-in) the paper's
            rule runs at tau_low=0.45 with Beta(prior_alpha, prior_beta).
        auto_loss_cap: optional cap in (0, 1] for ``"auto"``: abandon only where p_eff < cap, so the expected share of
            abandoned groups that would have mixed stays below it (paper Thm 1); None = unconstrained optimum.
        cost_unit: ``"rollouts"`` or ``"tokens"`` (each rollout costs its expected length, a success and a failure
            priced separately from running means; needs ``tau_low="auto"``).
        history_decay: None (off) or lambda in [0, 1]: warm-start each prompt's prior from its decayed past
            outcomes (paper App. D); data from d steps ago weighs lambda^d, so 0 reproduces the paper's SARA.
        selection: None (stream order), ``"thompson"`` or ``"greedy"``: draw fresh prompts from a candidate pool of
            ``selection_pool`` x the request, ranked by a Thompson draw / the posterior mean of the chance that a
            full group mixes under the prompt's history posterior (needs ``history_decay``).
        selection_pool: candidate pool size as a multiple (>= 1) of the prompts requested.
        selection_floor: epsilon in (0, 1]: that share of picks is uniform over the pool, so every candidate is
            drawn with probability >= epsilon * requested / pool (no prompt starves).
        selection_seed: seed of the selection generator (saved in the allocator state).
    """

    allocator: str = "sara"
    k: int = 8
    n0: int = 2
    tau_low: Union[float, str] = 0.45
    commit_min: Optional[int] = None
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    budget_cap: float = 6.0
    max_rounds: int = 64
    round_increment: Union[int, str] = 1
    max_rollouts_per_round: Optional[int] = None
    yield_decay: float = 0.5
    refill_margin: float = 0.5
    carry_over: bool = False
    auto_prior: str = "mixture"
    auto_prior_decay: float = 0.9
    auto_min_prompts: int = 64
    auto_loss_cap: Optional[float] = None
    cost_unit: str = "rollouts"
    history_decay: Optional[float] = None
    selection: Optional[str] = None
    selection_pool: float = 4.0
    selection_floor: float = 0.1
    selection_seed: int = 0

    def __post_init__(self):
        def bad(msg: str):
            raise ValueError(f"AllocationConfig: {msg}")

        if self.allocator not in ALLOCATORS:
            bad(f"allocator must be one of {ALLOCATORS}, got {self.allocator!r}")
        if not isinstance(self.k, int) or self.k < 2:
            bad(f"k={self.k!r}: a group needs at least 2 rollouts to have a non-zero advantage")
        if isinstance(self.n0, bool) or not isinstance(self.n0, int):
            bad(f"n0={self.n0!r} must be an integer number of rollouts (the probe size)")
        if not 1 <= self.n0 <= self.k:
            bad(f"n0={self.n0!r} must satisfy 1 <= n0 <= k={self.k}: the probe cannot exceed a full group")
        if self.tau_low != "auto" and not (isinstance(self.tau_low, (int, float)) and 0.0 <= self.tau_low < 1.0):
            bad(f"tau_low={self.tau_low!r} must lie in [0, 1) or be 'auto': it is a probability threshold, and 1 "
                "would abandon every unmixed prompt")
        cm = self.k if self.commit_min is None else self.commit_min
        if not isinstance(cm, int) or not 2 <= cm <= self.k:
            bad(f"commit_min={self.commit_min!r} must satisfy 2 <= commit_min <= k={self.k}: a committed group needs "
                "two outcomes to be mixed and cannot exceed k")
        for name in ("prior_alpha", "prior_beta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                bad(f"{name}={v!r} must be finite and > 0 (Beta prior parameter)")
        if not (isinstance(self.budget_cap, (int, float)) and self.budget_cap >= 1.0):
            bad(f"budget_cap={self.budget_cap!r} must be >= 1 (units of B*k): below that not even uniform sampling "
                "could fill a batch")
        if not isinstance(self.max_rounds, int) or self.max_rounds < 1:
            bad(f"max_rounds={self.max_rounds!r} must be an integer >= 1")
        if self.round_increment != ROUND_TO_DECISION and (
            isinstance(self.round_increment, bool) or not isinstance(self.round_increment, int)
            or self.round_increment < 1
        ):
            bad(f"round_increment={self.round_increment!r} must be an integer >= 1 or {ROUND_TO_DECISION!r}")
        if self.max_rollouts_per_round is not None and (
            not isinstance(self.max_rollouts_per_round, int) or self.max_rollouts_per_round < self.k
        ):
            bad(f"max_rollouts_per_round={self.max_rollouts_per_round!r} must be None or an integer >= k={self.k}, "
                "so that one full group fits in a round")
        if not 0.0 <= self.yield_decay <= 1.0:
            bad(f"yield_decay={self.yield_decay!r} must lie in [0, 1]")
        if not (isinstance(self.refill_margin, (int, float)) and math.isfinite(self.refill_margin)
                and self.refill_margin >= 0):
            bad(f"refill_margin={self.refill_margin!r} must be a finite number >= 0 (standard deviations)")
        if not isinstance(self.carry_over, bool):
            bad(f"carry_over={self.carry_over!r} must be True or False")
        if self.carry_over and self.allocator != "sara":
            bad(f"carry_over is a SARA option (it carries undecided prompts); allocator={self.allocator!r} decides "
                "every prompt within its step")
        self._check_beyond_paper(bad)

    def _check_beyond_paper(self, bad) -> None:
        """Validate the beyond-paper options (see the class docstring)."""
        def unit(name, lo_open=False, none_ok=False):
            v = getattr(self, name)
            if v is None and none_ok:
                return
            ok = isinstance(v, (int, float)) and math.isfinite(v) and (0.0 < v if lo_open else 0.0 <= v) and v <= 1
            if not ok:
                bad(f"{name}={v!r} must lie in {'(0' if lo_open else '[0'}, 1]" + (" or be None" if none_ok else ""))

        if self.auto_prior not in PRIOR_FAMILIES:
            bad(f"auto_prior={self.auto_prior!r} must be one of {PRIOR_FAMILIES}")
        unit("auto_prior_decay")
        if not isinstance(self.auto_min_prompts, int) or self.auto_min_prompts < 1:
            bad(f"auto_min_prompts={self.auto_min_prompts!r} must be an integer >= 1")
        unit("auto_loss_cap", lo_open=True, none_ok=True)
        if self.cost_unit not in COST_UNITS:
            bad(f"cost_unit={self.cost_unit!r} must be one of {COST_UNITS}")
        if self.cost_unit == "tokens" and self.tau_low != "auto":
            bad("cost_unit='tokens' needs tau_low='auto': the fixed threshold rule has no cost model")
        if self.allocator != "sara" and self.tau_low == "auto":
            bad(f"tau_low='auto' is a SARA stopping rule; allocator={self.allocator!r} never stops a group early")
        unit("history_decay", none_ok=True)
        if self.selection is not None:
            if self.selection not in SELECTIONS:
                bad(f"selection={self.selection!r} must be None or one of {SELECTIONS}")
            if self.history_decay is None:
                bad("selection needs history_decay: prompts are ranked by their history posterior")
        if not (isinstance(self.selection_pool, (int, float)) and math.isfinite(self.selection_pool)
                and self.selection_pool >= 1.0):
            bad(f"selection_pool={self.selection_pool!r} must be >= 1 (a multiple of the prompts requested)")
        unit("selection_floor", lo_open=True)
        if not isinstance(self.selection_seed, int):
            bad(f"selection_seed={self.selection_seed!r} must be an integer")

    @property
    def commit_floor(self) -> int:
        """commit_min with None resolved to k."""
        return self.k if self.commit_min is None else self.commit_min
