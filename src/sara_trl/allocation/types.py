"""Data types shared by every allocator: what a round returns, what a step returns, how rollouts are accounted.

Everything here is plain numpy; no torch, no TRL. Units: *rollouts* are single completions, *tokens* are
completion tokens as reported by the rollout source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

import numpy as np

from sara_trl.allocation.labels import is_mixed


class Fate(IntEnum):
    """Where a drawn prompt (and every rollout of it) stands within one step.

    During a step a prompt is ``ACTIVE`` (undecided), ``COMMITTED`` (kept by the rule; for dynamic sampling a mixed
    full group, for uniform sampling every group) or ``ABANDONED`` (dropped by the rule, or for dynamic sampling a
    saturated full group). When the step ends, the first B committed prompts (in commit order) become ``TRAINED``
    and later ones ``SURPLUS`` (the batch was already full); ``ACTIVE`` ones stay active (with ``carry_over`` they
    move into the next step). The values 0-3 are the codes of ``StepResult.prompt_table["fate"]``.
    """

    TRAINED = 0
    SURPLUS = 1
    ABANDONED = 2
    ACTIVE = 3
    COMMITTED = 4

    @property
    def label(self) -> str:
        """The lower-case name (``"trained"``, ...): what :attr:`PromptRecord.fate` holds."""
        return self.name.lower()


# The rule's decisions (paper Eq. 3) are the fates they give a prompt, as small integers so rounds are vectorized:
# one encoding, so a decision array is marked on the ledger as it is (Ledger.mark).
CONTINUE, COMMIT, ABANDON = int(Fate.ACTIVE), int(Fate.COMMITTED), int(Fate.ABANDONED)

# Labels of the four final fates, for code that compares ``PromptRecord.fate`` (e.g. ``benchmarks/sim.py``).
FATE_TRAINED = Fate.TRAINED.label
FATE_SURPLUS = Fate.SURPLUS.label
FATE_ABANDONED = Fate.ABANDONED.label
FATE_ACTIVE = Fate.ACTIVE.label


@dataclass
class RoundOutcome:
    """What a rollout source returns for one round.

    Rollouts are laid out prompt-major: the ``counts[0]`` rollouts of the first requested prompt, then those of the
    second, and so on, so ``len(success) == counts.sum()``.

    Attributes
    ----------
    success : ndarray of float64, shape (R,)
        1.0 success, 0.0 failure, NaN for an unscorable rollout (it costs a rollout but does not move the
        posterior: :func:`sara_trl.allocation.rules.decide` counts only scorable rollouts).
    tokens : ndarray of int64, shape (R,)
        Completion lengths in tokens.
    order : ndarray of int64, shape (R,), optional
        When the outcomes are not prompt-major: ``order[j]`` is the prompt-major position (the request) of the
        j-th outcome, a permutation of ``0 .. R-1``. The rollouts take their ids in this order, e.g. the order in
        which an engine finished a round's requests (:class:`~sara_trl.allocation.rounds.RoundCollector`; a
        ``rollout_fn`` may set it too). None: prompt-major.
    """

    success: np.ndarray
    tokens: np.ndarray
    order: np.ndarray | None = None

    @classmethod
    def coerce(cls, out: "RoundOutcome | tuple", expected: int) -> "RoundOutcome":
        """Validate a rollout source's answer.

        Parameters
        ----------
        out : RoundOutcome or tuple
            A ``RoundOutcome`` or a ``(success, tokens)`` pair (``None`` in ``success`` means unscorable).
        expected : int
            Rollouts the round requested.

        Returns
        -------
        RoundOutcome
            With float64 ``success`` and int64 ``tokens``, both of shape ``(expected,)``, and ``order`` (int64, the
            same shape) or None.

        Raises
        ------
        ValueError
            Not a pair, a wrong length, a success value other than 0, 1 or NaN, a negative token count, or an
            ``order`` that is not a permutation of the round's request positions.
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
        raw = out.success if isinstance(out.success, np.ndarray) else [np.nan if v is None else v for v in out.success]
        success = np.asarray(raw, dtype=np.float64).reshape(-1)
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
                "threshold before they reach the allocator (sara_trl.allocation.labels.allocator_labels)"
            )
        if np.any(tokens < 0):
            raise ValueError(f"token counts must be >= 0, got {int(tokens.min())}")
        order = getattr(out, "order", None)
        if order is not None:
            order = np.asarray(order).reshape(-1)
            if order.size and not np.issubdtype(order.dtype, np.integer):
                raise ValueError(f"order must hold integer request positions, got dtype {order.dtype}")
            order = order.astype(np.int64)
            if order.shape != (expected,) or not np.array_equal(np.sort(order), np.arange(expected)):
                raise ValueError(f"order must be a permutation of the round's {expected} request positions")
        return cls(success, tokens, order)


@dataclass(frozen=True)
class RoundRequest:
    """One round a strategy asks for: ``counts[i]`` new rollouts of prompt ``prompt_ids[i]``, answered by ONE
    :class:`RoundOutcome` (``counts.sum()`` outcomes). A strategy yields it (see
    :data:`~sara_trl.allocation.strategies.Strategy`); a ``rollout_fn`` call, or the event loop through
    :class:`~sara_trl.allocation.rounds.RoundCollector`, answers it.

    Attributes
    ----------
    prompt_ids : ndarray of int64, shape (P,)
        Dataset indices.
    counts : ndarray of int64, shape (P,)
        New rollouts per prompt (>= 1).
    """

    prompt_ids: np.ndarray
    counts: np.ndarray

    @property
    def total(self) -> int:
        """Rollouts the round asks for."""
        return int(self.counts.sum())


class RolloutFn(Protocol):
    """``rollout_fn(prompt_ids, counts) -> RoundOutcome``: ONE batched generation call for a whole round.

    Parameters
    ----------
    prompt_ids : ndarray of int64, shape (P,)
        Dataset indices drawn from the prompt stream.
    counts : ndarray of int64, shape (P,)
        New rollouts per prompt (>= 1).

    Returns
    -------
    RoundOutcome or tuple
        ``counts.sum()`` outcomes, prompt-major (see :meth:`RoundOutcome.coerce` for what is accepted).
    """

    def __call__(self, prompt_ids: np.ndarray, counts: np.ndarray) -> RoundOutcome | tuple: ...


@dataclass
class Group:
    """One group handed to the trainer.

    Attributes
    ----------
    prompt_id : int
        Dataset index of the prompt.
    rollout_ids : ndarray of int64, shape (m,)
        Step-local ids of the group's rollouts, in generation order. Ids count up from 0 over the step: first the
        rollouts carried in from the previous step (in the order of its ``StepResult.carry_rollout_ids``), then in
        the order ``rollout_fn`` returned them. ``m <= k``; the trainer pads to k with masked rows. Empty for a
        fill group.
    success : ndarray of float64, shape (m,)
        Outcomes of those rollouts (NaN: unscorable).
    is_fill : bool
        True for a placeholder added because the step ended short of B groups (budget cap, ``max_rounds`` or an
        exhausted stream, see :meth:`sara_trl.allocation.Allocator.collect`); the trainer masks it out of the loss.
    """

    prompt_id: int
    rollout_ids: np.ndarray
    success: np.ndarray
    is_fill: bool = False

    @property
    def size(self) -> int:
        """Rollouts in the group, ``m``."""
        return int(self.rollout_ids.shape[0])

    @property
    def effective(self) -> bool:
        """Mixed outcomes (:func:`~sara_trl.allocation.labels.is_mixed`): non-zero GRPO advantage (paper Def. 1)."""
        scored = self.success[~np.isnan(self.success)]
        return bool(is_mixed(int(np.sum(scored == 1.0)), scored.size))


@dataclass
class WindowStats:
    """A continuous collector's accounting for one window (:meth:`StreamingCollector.window`), in rollouts and tokens.

    Invariant (asserted by :meth:`check`), for rollouts and for tokens:
    ``generated == emitted + abandoned + aborted + (active at the end - active at the start)``. ``generated``
    counts the completions recorded in the window plus the requests aborted in it (reported in it); ``emitted``
    the rollouts of the ``groups_emitted`` groups committed in it (earlier windows' rollouts of those prompts
    included); ``abandoned`` those of the prompts abandoned in it; ``*_active`` the rollouts recorded on undecided
    prompts at the window's start and end; ``in_flight`` the requests still running into the next window.
    """

    rollouts_generated: int
    tokens_generated: int
    groups_emitted: int
    rollouts_emitted: int
    tokens_emitted: int
    rollouts_abandoned: int
    tokens_abandoned: int
    rollouts_aborted: int
    tokens_aborted: int
    rollouts_active: tuple[int, int]
    tokens_active: tuple[int, int]
    in_flight: int

    def check(self) -> None:
        """Raise ``AssertionError`` when the invariant fails, for rollouts or for tokens."""
        for unit in ("rollouts", "tokens"):
            start, end = getattr(self, f"{unit}_active")
            out = sum(getattr(self, f"{unit}_{fate}") for fate in ("emitted", "abandoned", "aborted")) + end - start
            assert getattr(self, f"{unit}_generated") == out, f"{unit}: generated != emitted + abandoned + aborted + " \
                f"change in active ({self})"


@dataclass
class StepStats:
    """Accounting for one step, in rollouts, tokens and prompts.

    Invariant (asserted by :meth:`check`), for rollouts and for tokens:
    ``generated + carried_in == trained + abandoned + surplus + active_left``.

    ``*_generated`` counts only what was generated in this step. With ``carry_over`` the rollouts of prompts still
    undecided (``active_left``) or committed beyond B (``surplus``) at the end of a step move into the next step,
    where they are counted as ``*_carried_in`` (never as generated) and end as trained, abandoned, surplus or
    active there; without it ``*_carried_in`` is 0 and those fates are final.

    Prompt counts: ``prompts_drawn`` fresh prompts drawn this step; ``carried_in`` prompts carried in;
    ``committed`` groups kept by the rule (trained + surplus); ``abandoned``, ``surplus``, ``active_left`` prompts
    by final fate (:class:`Fate`); ``unfilled`` is B minus the real groups in the batch; ``effective_in_batch``
    mixed groups among the B; ``batch_groups`` is B. ``rounds`` counts ``rollout_fn`` calls; ``unscorable`` the
    rollouts with a NaN outcome (carried ones included). ``expected_lost`` is the summed p_eff at abandonment, the
    expected number of abandoned groups that would have been effective at size k (paper Thm 1). ``stop_reason``:
    ``"filled"``, ``"budget"``, ``"max_rounds"`` or ``"stream"`` (see
    :class:`~sara_trl.allocation.strategies.StrategyResult`). ``rollouts_aborted`` / ``tokens_aborted``: streaming
    collection's requests aborted before they finished (or finished after their abort) and their decoded tokens, a
    part of ``*_surplus`` (0 with rounds, where every request runs to its end).
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
    rollouts_aborted: int = 0
    tokens_aborted: int = 0

    @property
    def effective_fraction(self) -> float:
        """Share of the B groups in the batch that are effective (fill groups count as not effective)."""
        return self.effective_in_batch / self.batch_groups if self.batch_groups else 0.0

    def check(self) -> None:
        """Check that every generated or carried rollout and token has exactly one fate.

        Raises
        ------
        AssertionError
            The fates do not sum to what was generated plus carried in.
        """
        r = self.rollouts_trained + self.rollouts_abandoned + self.rollouts_surplus + self.rollouts_active_left
        t = self.tokens_trained + self.tokens_abandoned + self.tokens_surplus + self.tokens_active_left
        if (r != self.rollouts_generated + self.rollouts_carried_in
                or t != self.tokens_generated + self.tokens_carried_in):
            raise AssertionError(
                f"accounting broken: generated {self.rollouts_generated} rollouts/{self.tokens_generated} tokens "
                f"(+ carried in {self.rollouts_carried_in}/{self.tokens_carried_in}) but fates sum to {r}/{t}"
            )

    def as_dict(self) -> dict:
        """Every field, plus ``effective_fraction``."""
        d = dataclasses.asdict(self)
        d["effective_fraction"] = self.effective_fraction
        return d


@dataclass
class PromptRecord:
    """Trace of one prompt within a step (benchmarks: decidability, paper Fig. 3a; the Thm 1 check).

    Attributes
    ----------
    prompt_id : int
        Dataset index.
    n, s : int
        Rollouts and successes when the step ended (at the decision, for a decided prompt).
    fate : str
        :attr:`Fate.label` of its final fate: ``"trained"``, ``"surplus"``, ``"abandoned"`` or ``"active"``.
    round : int
        The round (1-based) whose outcomes decided it (0: undecided, or decided in an earlier step).
    p_eff : float
        p_eff (paper Eq. 2) after its latest decision (1 for a mixed group).
    tokens : int
        Its completion tokens in this step's id space (carried rollouts included).
    """

    prompt_id: int
    n: int
    s: int
    fate: str
    round: int
    p_eff: float
    tokens: int


@dataclass
class StepResult:
    """What one call of an allocator returns: exactly B groups (real ones first, then fill), plus accounting.

    Attributes
    ----------
    groups : list of Group
        Exactly B groups.
    stats : StepStats
        The step's accounting.
    prompt_table : dict of str to ndarray
        One entry per prompt of the step (carried-in first, then in draw order), as ``(P,)`` arrays:
        ``prompt_id``, ``n``, ``s``, ``fate`` (:class:`Fate` codes 0-3), ``round``, ``p_eff``, ``tokens``.
        :attr:`records` gives the same as :class:`PromptRecord` objects.
    round_sizes : list of int
        Rollouts requested per round.
    carry_rollout_ids : ndarray of int64, shape (C,)
        With ``carry_over``: step-local ids of the rollouts carried into the next step, in the order they take the
        next step's ids ``0 .. C-1`` (a trainer keeps these rollouts' completions for the next step). Empty
        otherwise. In a merge of several processes' results (:func:`~sara_trl.allocation.merge_step_results`):
        every process's carried ids in the merged id space, process after process (see :attr:`carry_split`).
    carry_split : list of int
        A merge of several processes' results: per process, in process order, how many of ``carry_rollout_ids``
        it carries into its own next step (they sum to ``C``; :meth:`carried_by`). Empty for one collector's result.
    rollout_fates : ndarray of int8, shape (R,)
        The final :class:`Fate` code (0-3: trained, surplus, abandoned, active) of every rollout of the step, by
        step-local rollout id (carried-in rollouts first): the fate of its prompt. What a trainer splits its own
        per-rollout costs by (tool and model tokens, tool calls), consistently with :class:`StepStats`. Empty for a
        result built without a ledger.
    """

    groups: list[Group]
    stats: StepStats
    prompt_table: dict = field(default_factory=dict)
    round_sizes: list[int] = field(default_factory=list)
    carry_rollout_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    carry_split: list[int] = field(default_factory=list)
    rollout_fates: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))

    def carried_by(self, rank: int) -> np.ndarray:
        """The rollout ids process ``rank`` carries into its next step, ``(C_rank,)`` int64, in the order they take
        its next step's ids ``0 .. C_rank - 1``: its slice of ``carry_rollout_ids`` in a merged result, all of them
        otherwise (one collector's result, or rounds, where every process carries the same prompts).

        Raises
        ------
        ValueError
            ``rank`` is not a process of the merge (``0 <= rank < len(carry_split)``).
        """
        if not self.carry_split:
            return self.carry_rollout_ids
        if not 0 <= rank < len(self.carry_split):
            raise ValueError(f"rank {rank} is not one of the {len(self.carry_split)} merged processes")
        start = int(sum(self.carry_split[:rank]))
        return self.carry_rollout_ids[start: start + int(self.carry_split[rank])]

    @property
    def records(self) -> list[PromptRecord]:
        """:attr:`prompt_table` as :class:`PromptRecord` objects (built on first access, then cached)."""
        cached = self.__dict__.get("_records")
        if cached is None:
            t = self.prompt_table
            cached = [
                PromptRecord(prompt_id=int(pid), n=int(n), s=int(s), fate=Fate(int(f)).label, round=int(r),
                             p_eff=float(p), tokens=int(tok))
                for pid, n, s, f, r, p, tok in zip(t.get("prompt_id", ()), t.get("n", ()), t.get("s", ()),
                                                   t.get("fate", ()), t.get("round", ()), t.get("p_eff", ()),
                                                   t.get("tokens", ()))
            ]
            self.__dict__["_records"] = cached
        return cached
