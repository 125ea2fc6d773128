"""Allocation settings shared by the three allocators (defaults from paper App. D)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

ALLOCATORS = ("sara", "dynamic_sampling", "uniform")


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
            trade a few extra rollouts for fewer rounds.
        max_rollouts_per_round: optional capacity of one batched call, in rollouts; when it binds, continuing
            prompts are served in decreasing p_eff order and fresh prompts only with what is left. None = no cap.
        yield_decay: per-step decay of the running estimate of the share of fresh prompts that commit, used to size
            refills (0 keeps only the current step, values near 1 keep a long memory).
    """

    allocator: str = "sara"
    k: int = 8
    n0: int = 2
    tau_low: float = 0.45
    commit_min: Optional[int] = None
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    budget_cap: float = 6.0
    max_rounds: int = 64
    round_increment: int = 1
    max_rollouts_per_round: Optional[int] = None
    yield_decay: float = 0.5

    def __post_init__(self):
        def bad(msg: str):
            raise ValueError(f"AllocationConfig: {msg}")

        if self.allocator not in ALLOCATORS:
            bad(f"allocator must be one of {ALLOCATORS}, got {self.allocator!r}")
        if not isinstance(self.k, int) or self.k < 2:
            bad(f"k={self.k!r}: a group needs at least 2 rollouts to have a non-zero advantage")
        if not isinstance(self.n0, int) or not 1 <= self.n0 <= self.k:
            bad(f"n0={self.n0!r} must satisfy 1 <= n0 <= k={self.k}: the probe cannot exceed a full group")
        if not (isinstance(self.tau_low, (int, float)) and 0.0 <= self.tau_low < 1.0):
            bad(f"tau_low={self.tau_low!r} must lie in [0, 1): it is a probability threshold, and 1 would abandon "
                "every unmixed prompt")
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
        if not isinstance(self.round_increment, int) or self.round_increment < 1:
            bad(f"round_increment={self.round_increment!r} must be an integer >= 1")
        if self.max_rollouts_per_round is not None and (
            not isinstance(self.max_rollouts_per_round, int) or self.max_rollouts_per_round < self.k
        ):
            bad(f"max_rollouts_per_round={self.max_rollouts_per_round!r} must be None or an integer >= k={self.k}, "
                "so that one full group fits in a round")
        if not 0.0 <= self.yield_decay <= 1.0:
            bad(f"yield_decay={self.yield_decay!r} must lie in [0, 1]")

    @property
    def commit_floor(self) -> int:
        """commit_min with None resolved to k."""
        return self.k if self.commit_min is None else self.commit_min
