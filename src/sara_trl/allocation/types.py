"""Data types shared by every allocator: what a round returns, what a step returns, how rollouts are accounted.

Everything here is plain numpy; no torch, no TRL. Units: *rollouts* are single completions, *tokens* are
completion tokens as reported by the rollout source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

# Per-prompt decisions of paper Eq. 3, as small integers so rounds can be vectorized.
CONTINUE, COMMIT, ABANDON = 0, 1, 2
DECISION_NAMES = {CONTINUE: "continue", COMMIT: "commit", ABANDON: "abandon"}

# Fates of a prompt within one step (a prompt's rollouts all share its fate).
FATE_TRAINED = "trained"  # committed and placed in the returned batch
FATE_SURPLUS = "surplus"  # committed/kept, but the batch was already full
FATE_ABANDONED = "abandoned"  # dropped by the rule (or, for DS, a saturated full group)
FATE_ACTIVE = "active"  # still undecided when the step stopped


@dataclass
class RoundOutcome:
    """What a rollout source returns for one round.

    Rollouts are laid out prompt-major: the ``counts[0]`` rollouts of the first requested prompt, then those of the
    second, and so on, so ``len(success) == counts.sum()``.

    Attributes:
        success: ``(R,)`` float64; 1.0 success, 0.0 failure, NaN for an unscorable rollout (it costs a rollout but
            does not move the posterior, see :func:`sara_trl.allocation.rules.update_counts`).
        tokens: ``(R,)`` int64 completion lengths in tokens.
    """

    success: np.ndarray
    tokens: np.ndarray

    @classmethod
    def coerce(cls, out: "RoundOutcome | tuple", expected: int) -> "RoundOutcome":
        """Validate a rollout source's answer (a ``RoundOutcome`` or a ``(success, tokens)`` pair).

        Raises:
            ValueError: wrong length, a success value other than 0, 1 or NaN, or a negative token count.
        """
        if not isinstance(out, RoundOutcome):
            try:
                success, tokens = out
            except (TypeError, ValueError) as err:
                raise ValueError(
                    "rollout_fn must return a RoundOutcome or a (success, tokens) pair, got "
                    f"{type(out).__name__}"
                ) from err
            out = cls(success, tokens)
        success = np.asarray(
            [np.nan if v is None else v for v in out.success] if not isinstance(out.success, np.ndarray) else out.success,
            dtype=np.float64,
        ).reshape(-1)
        tokens = np.asarray(out.tokens, dtype=np.int64).reshape(-1)
        if success.shape != (expected,) or tokens.shape != (expected,):
            raise ValueError(
                f"rollout_fn returned {success.shape[0]} successes and {tokens.shape[0]} token counts for a round "
                f"that requested {expected} rollouts"
            )
        finite = success[~np.isnan(success)]
        if not np.all((finite == 0.0) | (finite == 1.0)):
            bad = finite[(finite != 0.0) & (finite != 1.0)][0]
            raise ValueError(
                f"success must be 0, 1 or NaN (unscorable), got {bad!r}; binarize continuous rewards with a "
                "threshold before they reach the allocator"
            )
        if np.any(tokens < 0):
            raise ValueError(f"token counts must be >= 0, got {int(tokens.min())}")
        return cls(success, tokens)


class RolloutFn(Protocol):
    """``rollout_fn(prompt_ids, counts) -> RoundOutcome``: ONE batched generation call for a whole round.

    Args:
        prompt_ids: ``(P,)`` int64 dataset indices drawn from the prompt stream.
        counts: ``(P,)`` int64 number of new rollouts per prompt (>= 1).
    """

    def __call__(self, prompt_ids: np.ndarray, counts: np.ndarray) -> RoundOutcome | tuple: ...


@dataclass
class Group:
    """One group handed to the trainer.

    Attributes:
        prompt_id: dataset index of the prompt.
        rollout_ids: ``(m,)`` int64 step-local ids of the group's rollouts, in generation order (ids count up from 0
            over the step: first the rollouts carried in from the previous step, in the order of its
            ``carry_rollout_ids``, then in the order rollouts were returned by ``rollout_fn``). ``m <= k``; the
            trainer pads to k with masked rows. Empty for a fill group.
        success: ``(m,)`` float64 outcomes of those rollouts (NaN = unscorable).
        is_fill: True for a placeholder group added because the step ended short of B (see
            :func:`sara_trl.allocation.scheduler.collect`); the trainer masks it out of the loss.
    """

    prompt_id: int
    rollout_ids: np.ndarray
    success: np.ndarray
    is_fill: bool = False

    @property
    def size(self) -> int:
        return int(self.rollout_ids.shape[0])

    @property
    def effective(self) -> bool:
        """Mixed outcomes (at least one success and one failure): non-zero GRPO advantage (paper Def. 1)."""
        s = self.success[~np.isnan(self.success)]
        return bool(s.size and s.max() == 1.0 and s.min() == 0.0)


@dataclass
class StepStats:
    """Accounting for one step. Invariant (asserted by :meth:`check`), for rollouts and for tokens:
    ``generated + carried_in == trained + abandoned + surplus + active_left``.

    ``generated`` counts only rollouts generated in this step. With ``carry_over`` the rollouts of prompts still
    undecided (``active_left``) or committed beyond B (``surplus``) at the end of a step are carried into the next
    step, where they are counted again as ``carried_in`` (never as generated) and end as trained, abandoned, surplus
    or active there; without it ``carried_in`` is 0 and those fates are final.

    Groups: ``committed`` counts groups kept by the rule (trained + surplus); ``unfilled`` is B minus the real groups
    in the batch; ``expected_lost`` is the summed p_eff at abandonment, the expected number of abandoned groups that
    would have been effective (paper Thm 1).
    """

    rollouts_generated: int = 0
    rollouts_trained: int = 0
    rollouts_abandoned: int = 0
    rollouts_surplus: int = 0
    rollouts_active_left: int = 0
    tokens_generated: int = 0
    tokens_trained: int = 0
    tokens_abandoned: int = 0
    tokens_surplus: int = 0
    tokens_active_left: int = 0
    rounds: int = 0
    prompts_drawn: int = 0
    committed: int = 0
    abandoned: int = 0
    surplus: int = 0
    active_left: int = 0
    unfilled: int = 0
    effective_in_batch: int = 0
    batch_groups: int = 0
    expected_lost: float = 0.0
    unscorable: int = 0
    stop_reason: str = ""
    rollouts_carried_in: int = 0
    tokens_carried_in: int = 0
    carried_in: int = 0

    @property
    def effective_fraction(self) -> float:
        """Share of the B groups in the batch that are effective (fill groups count as not effective)."""
        return self.effective_in_batch / self.batch_groups if self.batch_groups else 0.0

    def check(self) -> None:
        """Raise ``AssertionError`` if any generated rollout or token is unaccounted for."""
        r = self.rollouts_trained + self.rollouts_abandoned + self.rollouts_surplus + self.rollouts_active_left
        t = self.tokens_trained + self.tokens_abandoned + self.tokens_surplus + self.tokens_active_left
        if (r != self.rollouts_generated + self.rollouts_carried_in
                or t != self.tokens_generated + self.tokens_carried_in):
            raise AssertionError(
                f"accounting broken: generated {self.rollouts_generated} rollouts/{self.tokens_generated} tokens "
                f"(+ carried in {self.rollouts_carried_in}/{self.tokens_carried_in}) but fates sum to {r}/{t}"
            )

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["effective_fraction"] = self.effective_fraction
        return d


@dataclass
class PromptRecord:
    """Trace of one prompt within a step (for benchmarks, Fig. 3a, Thm 1 checks).

    ``n``/``s``: rollouts and successes at the decision; ``p_eff``: predictor value when decided (1 for mixed);
    ``fate``: one of the ``FATE_*`` names; ``round``: the round (1-based) whose outcomes decided it.
    """

    prompt_id: int
    n: int
    s: int
    fate: str
    round: int
    p_eff: float
    tokens: int


_FATES = (FATE_TRAINED, FATE_SURPLUS, FATE_ABANDONED, FATE_ACTIVE)


@dataclass
class StepResult:
    """What one call of an allocator returns: exactly B groups (real ones first, then fill), plus accounting.

    ``prompt_table`` holds one entry per drawn prompt, as ``(P,)`` arrays: ``prompt_id``, ``n``, ``s``, ``fate``
    (0 trained, 1 surplus, 2 abandoned, 3 active), ``round``, ``p_eff``, ``tokens``; :attr:`records` gives the same
    as :class:`PromptRecord` objects (built on first access).
    """

    groups: list[Group]
    stats: StepStats
    prompt_table: dict = field(default_factory=dict)
    round_sizes: list[int] = field(default_factory=list)  # rollouts requested per round
    carry_rollout_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """With ``carry_over``: ``(C,)`` step-local ids of the rollouts carried into the next step, in the order they
    take the next step's ids ``0 .. C-1`` (a trainer keeps these rollouts' completions for the next step)."""

    @property
    def records(self) -> list[PromptRecord]:
        cached = self.__dict__.get("_records")
        if cached is None:
            t = self.prompt_table
            cached = [
                PromptRecord(prompt_id=int(pid), n=int(n), s=int(s), fate=_FATES[int(f)], round=int(r),
                             p_eff=float(p), tokens=int(tok))
                for pid, n, s, f, r, p, tok in zip(t.get("prompt_id", ()), t.get("n", ()), t.get("s", ()),
                                                   t.get("fate", ()), t.get("round", ()), t.get("p_eff", ()),
                                                   t.get("tokens", ()))
            ]
            self.__dict__["_records"] = cached
        return cached


RolloutCallable = Callable[[np.ndarray, np.ndarray], "RoundOutcome | tuple"]
