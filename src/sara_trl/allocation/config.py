"""Allocation settings shared by every allocator, each option defined once (defaults from paper App. D).

:class:`AllocationConfig` owns every allocation option: its default, its help text (``metadata={"help": ...}``, as
TRL's configs write it, so :class:`transformers.HfArgumentParser` can print it) and its validation. The trainer
configs (:mod:`sara_trl.trainer.config`) derive their allocation fields from these and validate through this class.
"""

from __future__ import annotations

import math
import textwrap
import typing
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Optional

from sara_trl.allocation.labels import DS_FILTERS
from sara_trl.allocation.registry import REGISTRY, accepts, owner, spec_of, streaming_allocators

__all__ = [
    "ALLOCATORS",
    "streaming_abandons_every_prompt",
    "COST_UNITS",
    "DS_FILTERS",
    "PAPER_TAU_LOW",
    "PRIOR_FAMILIES",
    "ROUND_TO_DECISION",
    "SELECTIONS",
    "STOPPING_RULES",
    "AllocationConfig",
    "AllocationConfigError",
    "COLLECTIONS",
    "check_group_size",
    "inert_options",
    "options_doc",
    "upgrade_spellings",
]


class _RegisteredAllocators(Sequence):
    """The names registered in :data:`~sara_trl.allocation.registry.REGISTRY`, read from the registry at each use
    (so a strategy registered after this module was imported is a valid ``allocator`` and a ``--allocator``
    choice); compares equal to the tuple of those names."""

    def __getitem__(self, index):
        return tuple(REGISTRY)[index]

    def __len__(self) -> int:
        return len(REGISTRY)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and name in REGISTRY

    def __iter__(self):
        return iter(tuple(REGISTRY))

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, _RegisteredAllocators)) else other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(tuple(self))


ALLOCATORS = _RegisteredAllocators()
"""The valid ``allocator`` values: the names in the strategy registry, in its order (a live view, never a copy)."""
STOPPING_RULES = ("threshold", "bayes_optimal")
"""``stopping_rule`` values: the paper's fixed threshold on p_eff (``tau_low``), or the Bayes-optimal boundary."""
SELECTIONS = ("thompson", "greedy")
COST_UNITS = ("rollouts", "tokens")
PRIOR_FAMILIES = ("mixture", "beta")
COLLECTIONS = ("rounds", "streaming")
PAPER_TAU_LOW = 0.45
"""The paper's abandon threshold (App. D); also the rule ``stopping_rule="bayes_optimal"`` runs during its burn-in."""

ROUNDS_REFILL_MARGIN = 0.5
"""``refill_margin=None`` in rounds: half a standard deviation of commits more per round (docs/allocation.md)."""
STREAMING_REFILL_MARGIN = 2.0
"""``refill_margin=None`` in streaming: two standard deviations, chosen by the GPU projection and the replayed CPU
engine (benchmarks/streaming_projection/STREAMING_PROJECTION.md, section "Streaming defaults")."""

ROUND_TO_DECISION = "to_decision"
"""Deprecated (removed in sara_trl 0.3): the old ``round_increment`` value for ``continue_to_decision=True``."""
_REMOVED_IN = "sara_trl 0.3"

_OWNER = "AllocationConfig"


class AllocationConfigError(ValueError):
    """A rejected allocation setting.

    Parameters
    ----------
    message : str
        What is wrong and which rule it breaks.
    terms : tuple of str
        The fields the message names whose spelling a front end may not share (only ``"k"``: the group size is
        TRL's ``num_generations`` in the trainer configs), so that the front end can add a note.
    owner : str
        The config class the message is reported for.
    """

    def __init__(self, message: str, terms: tuple[str, ...] = (), owner: str = _OWNER):
        super().__init__(f"{owner}: {message}")
        self.message = message
        self.terms = tuple(terms)


def _fail(message: str, *terms: str) -> None:
    raise AllocationConfigError(message, terms)


def upgrade_spellings(config, stacklevel: int = 4) -> dict:
    """The fields that replace the old spellings ``config`` still uses, each with a :class:`FutureWarning`.

    ``tau_low="auto"`` becomes ``stopping_rule="bayes_optimal"`` with ``tau_low`` at its default;
    ``round_increment="to_decision"`` becomes ``continue_to_decision=True`` with ``round_increment=1``. Both old
    spellings are accepted until sara_trl 0.3. Used by :class:`AllocationConfig` and the trainer configs, which
    set the returned fields before they validate.

    Parameters
    ----------
    config : object
        Has ``tau_low`` and ``round_increment`` (an :class:`AllocationConfig` or a trainer config being built).
    stacklevel : int
        Of the warnings, counted from this function (4: the line that built the config, through its
        ``__post_init__``).

    Returns
    -------
    dict
        Field name -> new value (empty when no old spelling is used).
    """
    owner = type(config).__name__
    out = {}
    if isinstance(config.tau_low, str) and config.tau_low == "auto":
        warnings.warn(f"{owner}: tau_low='auto' is deprecated and will be removed in {_REMOVED_IN}; use "
                      f"stopping_rule='bayes_optimal' (with tau_low left at its default, {PAPER_TAU_LOW}).",
                      FutureWarning, stacklevel=stacklevel)
        out.update(stopping_rule="bayes_optimal", tau_low=PAPER_TAU_LOW)
    if isinstance(config.round_increment, str) and config.round_increment == ROUND_TO_DECISION:
        warnings.warn(f"{owner}: round_increment={ROUND_TO_DECISION!r} is deprecated and will be removed in "
                      f"{_REMOVED_IN}; use continue_to_decision=True (with round_increment left at its default, 1).",
                      FutureWarning, stacklevel=stacklevel)
        out.update(continue_to_decision=True, round_increment=1)
    return out


def check_group_size(k) -> None:
    """Check the group size k on its own (a front end checks it before any arithmetic uses it).

    Raises
    ------
    AllocationConfigError
        ``k`` is not an integer >= 2.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        _fail(f"k={k!r}: a group needs at least 2 rollouts to have a non-zero advantage (k must be an integer "
              ">= 2)", "k")


def _help(text: str, **extra) -> dict:
    return {"help": " ".join(text.split()), **extra}


@dataclass(frozen=True)
class AllocationConfig:
    """How one step's rollouts are allocated (paper §3, Alg. 1; defaults from App. D).

    With the defaults the allocator is the paper's SARA, decision for decision. ``carry_over``,
    ``continue_to_decision``, ``stopping_rule="bayes_optimal"`` and the options from ``auto_prior`` on go beyond the
    paper (all off by default; see
    :mod:`sara_trl.allocation.beyond_paper`); ``ds_filter`` chooses how the dynamic-sampling baseline labels groups.
    Each option's meaning is its ``help`` metadata, listed in full under Parameters below (the same text
    ``HfArgumentParser`` prints for the trainer configs).
    """

    allocator: str = field(default="sara", metadata=_help(
        """How each step's B groups are collected: 'sara' (sequential allocation, paper Alg. 1: probe, then commit /
        abandon / continue each prompt, refill abandoned budget with fresh prompts), 'dynamic_sampling' (DAPO: full
        groups of k from fresh prompts, keep the mixed ones until B are kept) or 'uniform' (B prompts x k
        rollouts in one round, all kept: plain GRPO).""", choices=ALLOCATORS))
    k: int = field(default=8, metadata=_help("Group size: rollouts per prompt in a full group, >= 2."))
    n0: int = field(default=2, metadata=_help(
        "Probe size: rollouts generated for a fresh prompt in its first round (SARA only); 1 <= n0 <= k."))
    tau_low: float = field(default=PAPER_TAU_LOW, metadata=_help(
        f"""Abandon threshold of paper Eq. 3 (stopping_rule='threshold'): an unmixed prompt is abandoned once p_eff
        (Eq. 2), its predicted probability of an effective full group, drops below tau_low. In [0, 1); 0 never
        abandons. Not used with stopping_rule='bayes_optimal' (leave it at its default, {PAPER_TAU_LOW}, the threshold
        that rule's burn-in runs)."""))
    stopping_rule: str = field(default="threshold", metadata=_help(
        f"""When SARA abandons an unmixed prompt: 'threshold' (paper Eq. 3: once p_eff < tau_low) or
        'bayes_optimal' (beyond the paper: the Bayes-optimal continue/abandon boundary for the objective "effective
        groups per unit cost", by backward induction at the self-consistent cost per effective group, under a prior
        fitted online, paper App. C.7, App. G; until auto_min_prompts prompts are in, the paper's rule runs at
        tau_low={PAPER_TAU_LOW} with Beta(prior_alpha, prior_beta)). 'bayes_optimal' is SARA only.""",
        choices=list(STOPPING_RULES)))
    commit_min: Optional[int] = field(default=None, metadata=_help(
        """Commit floor: a mixed group is committed once it holds at least this many rollouts (2 <= commit_min <=
        k). None means k (the paper's default: every trained group has k rollouts). A trainer pads shorter groups
        to k with rows masked out of the loss, the token count and the group statistics."""))
    prior_alpha: float = field(default=1.0, metadata=_help(
        "alpha_0 of the Beta prior on a prompt's success rate gamma (paper §3.2), > 0."))
    prior_beta: float = field(default=1.0, metadata=_help(
        "beta_0 of the Beta prior on a prompt's success rate gamma (paper §3.2), > 0."))
    budget_cap: float = field(default=6.0, metadata=_help(
        """Safety cap on the rollouts generated in one step, in units of B*k (the generation batch; paper App. D:
        6), >= 1."""))
    max_rounds: int = field(default=64, metadata=_help(
        """Cap on generation rounds (batched generation calls) per step, >= 1. When this cap, the budget or the
        stream ends a step short of B committed groups, the missing groups are fully masked fill groups."""))
    round_increment: int = field(default=1, metadata=_help(
        """Rollouts added per round to a continuing, still-unmixed prompt (paper: 1), >= 1; larger values trade a
        few extra rollouts for fewer rounds. Not used with continue_to_decision (leave it at 1)."""))
    continue_to_decision: Optional[bool] = field(default=None, metadata=_help(
        """Beyond the paper, instead of round_increment: an unmixed prompt gets at once all the rollouts up to the
        point where the rule would abandon it if its run stayed unanimous (n_a = k - floor(tau_low (k + 1)) in all
        for the paper's rule). With commit_min = k every prompt then costs exactly what it costs one at a time, and a
        step needs fewer rounds (fewer serial waits in streaming), but a round step costs more rollouts, because
        larger rounds leave more prompts drawn beyond the need when the batch fills, unless carry_over keeps them
        (measured: docs/allocation.md). None (the default): True with collection='streaming' (unless round_increment
        is set), where each continuation would otherwise be one more serial wait on a completion; False with
        'rounds' (the paper's one rollout per round). Resolved value: AllocationConfig.to_decision."""))
    max_rollouts_per_round: Optional[int] = field(default=None, metadata=_help(
        """Capacity of one batched generation call, in rollouts (>= k); when it binds, continuing prompts are
        served in decreasing p_eff order and fresh prompts only with what is left. None means no cap."""))
    yield_decay: float = field(default=0.5, metadata=_help(
        """Per-step decay in [0, 1] of the refill model (learned mix rates and cost per fresh prompt) used to size
        refills: 0 keeps only the current step, values near 1 keep a long memory."""))
    refill_margin: Optional[float] = field(default=None, metadata=_help(
        """Extra fresh prompts drawn, in standard deviations of the number of commits the undecided prompts can
        expect (>= 0): 0 draws for the expected need only (fewest rollouts, most rounds); larger values trade a few
        more rollouts for fewer rounds, or in streaming for a shorter tail of a few groups finishing alone on an idle
        engine. None (the default): 0.5 with collection='rounds' (measured: docs/allocation.md), 2.0 with
        'streaming' (measured: docs/collection-modes.md). Resolved value: AllocationConfig.margin."""))
    carry_over: bool = field(default=False, metadata=_help(
        """SARA only. Prompts still undecided when a step's B-th group commits, and groups committed beyond B, keep
        their rollouts and continue in the next step (first in line) instead of being dropped, so a finite batch
        wastes nothing at its end (measured: docs/allocation.md). Their earlier rollouts were sampled by the
        previous policy: one step off-policy. Off by default (the paper drops them)."""))
    ds_filter: str = field(default="success", metadata=_help(
        """What dynamic sampling keeps a group on: 'success' (its binary success labels are mixed, the labels SARA
        decides from, so the two are compared like for like) or 'score' (its scores differ beyond float32 noise,
        DAPO's filter on the shaped reward: a group of wrong answers with different format or length scores then
        counts as mixed). 'score' needs allocator='dynamic_sampling'.""", choices=list(DS_FILTERS)))
    collection: str = field(default="rounds", metadata=_help(
        """How a step's rollouts reach the allocator: 'rounds' (the paper's batched rounds: each generation call
        ends before any decision) or 'streaming' (beyond the paper: each completion is decided as soon as it
        finishes on a continuously running engine, freed budget is refilled at once, and requests still in flight
        when B groups are committed are aborted and counted as surplus; no round barrier). Both schedules decide
        with the same rules (sara_trl.allocation.refill), so every option works in both; 'streaming' needs
        allocator 'sara' or 'dynamic_sampling' (uniform sampling decides nothing). With carry_over, the prompts
        undecided when the batch fills keep their finished rollouts; once the mixed prompts alone complete the
        batch, the other prompts' requests run on (what finishes is carried) until a top-up needs the slot or the
        batch fills, and are aborted then.""",
        choices=list(COLLECTIONS)))
    streaming_speculate: bool = field(default=False, metadata=_help(
        """collection='streaming' with allocator 'sara' only (beyond the paper): engine slots the rule leaves free
        go to speculative continuations of the undecided unmixed prompts, one more request each, oldest first, up
        to the commit floor and within the budget the undecided prompts do not need. A prompt that mixes then has
        its top-up already running; one that is abandoned has those requests aborted (surplus). Trades tokens for
        wall-clock where an engine step costs little more with more requests running (a GPU)."""))
    auto_prior: str = field(default="mixture", metadata=_help(
        """Family of the prior fitted for stopping_rule='bayes_optimal': 'mixture' (point masses at gamma = 0 and 1
        plus a Beta) or 'beta'.""", choices=list(PRIOR_FAMILIES)))
    auto_prior_decay: float = field(default=0.9, metadata=_help(
        """Per-step decay in [0, 1] of the outcome counts (and token means) the stopping_rule='bayes_optimal' prior
        is fitted on."""))
    auto_min_prompts: int = field(default=64, metadata=_help(
        f"""Prompts (decayed count) observed before the fitted prior is used, >= 1; until then (burn-in) the
        paper's rule runs at tau_low={PAPER_TAU_LOW}."""))
    auto_loss_cap: Optional[float] = field(default=None, metadata=_help(
        """Cap in (0, 1] for stopping_rule='bayes_optimal': abandon only where p_eff < cap, so the expected share of
        abandoned groups that would have mixed stays below it (paper Thm 1). None: the unconstrained optimum."""))
    cost_unit: str = field(default="rollouts", metadata=_help(
        """What a rollout costs: 'rollouts' (one unit each) or 'tokens' (its expected completion length, a success
        and a failure priced separately from running means). 'tokens' needs stopping_rule='bayes_optimal'.""",
        choices=list(COST_UNITS)))
    history_decay: Optional[float] = field(default=None, metadata=_help(
        """None (off) or lambda in [0, 1]: warm-start each prompt's prior from its decayed past outcomes (paper
        App. D); data from d steps ago weighs lambda^d, so 0 reproduces the paper's SARA."""))
    selection: Optional[str] = field(default=None, metadata=_help(
        """None (stream order), 'thompson' or 'greedy': draw fresh prompts from a candidate pool of
        selection_pool x the request, ranked by a Thompson draw / the posterior mean of the chance that a full
        group mixes under the prompt's history posterior. Needs history_decay.""", choices=list(SELECTIONS)))
    selection_pool: float = field(default=4.0, metadata=_help(
        "Selection candidate pool size, as a multiple (>= 1) of the prompts requested."))
    selection_floor: float = field(default=0.1, metadata=_help(
        """epsilon in (0, 1]: that share of the selection picks is uniform over the pool, so every candidate is
        drawn with probability >= epsilon * requested / pool (no prompt starves)."""))
    selection_seed: int = field(default=0, metadata=_help(
        "Seed of the selection generator (its state is saved with the allocator state)."))

    def __post_init__(self):
        for name, value in upgrade_spellings(self).items():  # the old spellings, until sara_trl 0.3
            object.__setattr__(self, name, value)
        self._check_paper_options()
        self._check_beyond_paper()
        self._check_collection()

    def _check_collection(self) -> None:
        if self.collection not in COLLECTIONS:
            _fail(f"collection={self.collection!r} must be one of {COLLECTIONS}")
        if self.streaming_speculate and (self.collection != "streaming"
                                         or not accepts(self.allocator, "streaming_speculate")):
            _fail(f"streaming_speculate=True fills a streaming engine's free slots with SARA's continuations; it needs "
                  f"collection='streaming' and allocator={owner('streaming_speculate')!r} (got "
                  f"collection={self.collection!r}, "
                  f"allocator={self.allocator!r}): rounds have no free slots between decisions to fill")
        if self.collection != "streaming":
            return
        if REGISTRY[self.allocator].streaming is None:
            _fail(f"collection='streaming' decides prompts one completion at a time; allocator={self.allocator!r} "
                  f"has nothing to decide (use one of {streaming_allocators()})")
        first = streaming_abandons_every_prompt(self)
        if first is not None:
            _fail(f"collection='streaming' decides a prompt after each of its completions, and with k={self.k} and "
                  f"prior Beta({self.prior_alpha}, {self.prior_beta}) p_eff after a first outcome is at most "
                  f"{first:.3f} (Eq. 2), below tau_low={self.tau_low}: every prompt would be abandoned at its first "
                  f"outcome and no group committed. Lower tau_low below {first:.3f}, raise k, or use "
                  "collection='rounds' (which decides after the n0 first outcomes)", "tau_low", "k")

    def _check_paper_options(self) -> None:
        if self.allocator not in ALLOCATORS:  # the registry, read now: a strategy registered later is accepted
            _fail(f"allocator must be one of {tuple(ALLOCATORS)}, got {self.allocator!r}")
        check_group_size(self.k)
        k = self.k
        if isinstance(self.n0, bool) or not isinstance(self.n0, int):
            _fail(f"n0={self.n0!r} must be an integer number of rollouts (the probe size)")
        if not 1 <= self.n0 <= k:
            why = ("a fresh prompt needs at least one probe rollout before it can be judged" if self.n0 < 1
                   else "the probe of a fresh prompt cannot be larger than a full group")
            _fail(f"n0={self.n0} must satisfy 1 <= n0 <= k={k}: {why}", "k")
        if self.stopping_rule not in STOPPING_RULES:
            _fail(f"stopping_rule={self.stopping_rule!r} must be one of {STOPPING_RULES}")
        if not isinstance(self.tau_low, (int, float)) or isinstance(self.tau_low, bool):
            _fail(f"tau_low={self.tau_low!r} must be a number in [0, 1): it is a probability threshold on p_eff (for "
                  "the Bayes-optimal boundary set stopping_rule='bayes_optimal')")
        if not 0.0 <= self.tau_low < 1.0:
            why = ("a negative threshold on a probability never abandons; use 0 for that" if self.tau_low < 0
                   else "1 or more would abandon every prompt that is not already mixed")
            _fail(f"tau_low={self.tau_low!r} must lie in [0, 1): it is a probability threshold on p_eff, and {why}")
        if self.stopping_rule == "bayes_optimal" and self.tau_low != PAPER_TAU_LOW:
            _fail(f"tau_low ({self.tau_low}) is not used with stopping_rule='bayes_optimal' (its burn-in runs the "
                  f"paper's rule at {PAPER_TAU_LOW}): leave tau_low at its default or use stopping_rule='threshold'")
        cm = self.commit_floor
        if isinstance(cm, bool) or not isinstance(cm, int) or not 2 <= cm <= k:
            _fail(f"commit_min={self.commit_min!r} must satisfy 2 <= commit_min <= k={k}: a committed group needs "
                  "two outcomes to be mixed, and a group never holds more than k rollouts", "k")
        for name in ("prior_alpha", "prior_beta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                _fail(f"{name}={v!r} must be finite and > 0 (Beta prior parameter)")
        if not (isinstance(self.budget_cap, (int, float)) and math.isfinite(self.budget_cap)
                and self.budget_cap >= 1.0):
            _fail(f"budget_cap={self.budget_cap!r} must be finite and >= 1 (units of B*k, the generation batch): "
                  "below 1 even uniform sampling could not fill one batch")
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds < 1:
            _fail(f"max_rounds={self.max_rounds!r} must be an integer >= 1")
        if isinstance(self.round_increment, bool) or not isinstance(self.round_increment, int) \
                or self.round_increment < 1:
            _fail(f"round_increment={self.round_increment!r} must be an integer >= 1 (for all the rollouts up to the "
                  "next abandon point set continue_to_decision=True)")
        if self.continue_to_decision is not None and not isinstance(self.continue_to_decision, bool):
            _fail(f"continue_to_decision={self.continue_to_decision!r} must be True, False or None (the collection's "
                  "default)")
        if self.continue_to_decision and self.round_increment != 1:
            _fail(f"round_increment ({self.round_increment}) is not used with continue_to_decision=True (an unmixed "
                  "prompt then gets all its rollouts up to the next abandon point in one round): leave it at 1")
        if self.max_rollouts_per_round is not None and (
            isinstance(self.max_rollouts_per_round, bool) or not isinstance(self.max_rollouts_per_round, int)
            or self.max_rollouts_per_round < k
        ):
            _fail(f"max_rollouts_per_round={self.max_rollouts_per_round!r} must be None or an integer >= k={k}, so "
                  "that one full group fits in a round", "k")
        if not (isinstance(self.yield_decay, (int, float)) and 0.0 <= self.yield_decay <= 1.0):
            _fail(f"yield_decay={self.yield_decay!r} must lie in [0, 1]")
        if self.refill_margin is not None and not (
                isinstance(self.refill_margin, (int, float)) and not isinstance(self.refill_margin, bool)
                and math.isfinite(self.refill_margin) and self.refill_margin >= 0):
            _fail(f"refill_margin={self.refill_margin!r} must be None (the collection's default) or a finite number "
                  ">= 0 (standard deviations)")
        if not isinstance(self.carry_over, bool):
            _fail(f"carry_over={self.carry_over!r} must be True or False")
        self._check_owned("carry_over")
        if self.ds_filter not in DS_FILTERS:
            _fail(f"ds_filter={self.ds_filter!r} must be one of {DS_FILTERS}")
        self._check_owned("ds_filter")

    def _check_beyond_paper(self) -> None:
        def unit(name, lo_open=False, none_ok=False):
            v = getattr(self, name)
            if v is None and none_ok:
                return
            ok = isinstance(v, (int, float)) and math.isfinite(v) and (0.0 < v if lo_open else 0.0 <= v) and v <= 1
            if not ok:
                _fail(f"{name}={v!r} must lie in {'(0' if lo_open else '[0'}, 1]" + (" or be None" if none_ok else ""))

        if self.auto_prior not in PRIOR_FAMILIES:
            _fail(f"auto_prior={self.auto_prior!r} must be one of {PRIOR_FAMILIES}")
        unit("auto_prior_decay")
        if isinstance(self.auto_min_prompts, bool) or not isinstance(self.auto_min_prompts, int) \
                or self.auto_min_prompts < 1:
            _fail(f"auto_min_prompts={self.auto_min_prompts!r} must be an integer >= 1")
        unit("auto_loss_cap", lo_open=True, none_ok=True)
        if self.cost_unit not in COST_UNITS:
            _fail(f"cost_unit={self.cost_unit!r} must be one of {COST_UNITS}")
        if self.cost_unit == "tokens" and self.stopping_rule != "bayes_optimal":
            _fail("cost_unit='tokens' needs stopping_rule='bayes_optimal': the fixed threshold rule has no cost model")
        self._check_owned("stopping_rule")
        unit("history_decay", none_ok=True)
        if self.selection is not None:
            if self.selection not in SELECTIONS:
                _fail(f"selection={self.selection!r} must be None or one of {SELECTIONS}")
            if self.history_decay is None:
                _fail("selection needs history_decay: prompts are ranked by their history posterior")
        if not (isinstance(self.selection_pool, (int, float)) and math.isfinite(self.selection_pool)
                and self.selection_pool >= 1.0):
            _fail(f"selection_pool={self.selection_pool!r} must be >= 1 (a multiple of the prompts requested)")
        unit("selection_floor", lo_open=True)
        if isinstance(self.selection_seed, bool) or not isinstance(self.selection_seed, int):
            _fail(f"selection_seed={self.selection_seed!r} must be an integer")

    def _check_owned(self, option: str) -> None:
        """``option`` away from its default needs an allocator that owns it (:attr:`AllocatorSpec.owns`)."""
        value = getattr(self, option)
        if value == _DEFAULTS[option] or accepts(self.allocator, option):
            return
        head, tail = next(spec.owns[option] for spec in REGISTRY.values() if option in spec.owns)
        _fail(f"{head.format(value=value)}; allocator={self.allocator!r} {tail}")

    @property
    def commit_floor(self) -> int:
        """``commit_min`` with None resolved to k."""
        return self.k if self.commit_min is None else self.commit_min

    @property
    def to_decision(self) -> bool:
        """``continue_to_decision`` with None resolved: True in streaming unless ``round_increment`` is set
        (!= 1), False in rounds."""
        if self.continue_to_decision is not None:
            return self.continue_to_decision
        return self.collection == "streaming" and self.round_increment == 1

    @property
    def margin(self) -> float:
        """``refill_margin`` with None resolved: :data:`STREAMING_REFILL_MARGIN` (2.0) in streaming,
        :data:`ROUNDS_REFILL_MARGIN` (0.5) in rounds."""
        if self.refill_margin is not None:
            return float(self.refill_margin)
        return STREAMING_REFILL_MARGIN if self.collection == "streaming" else ROUNDS_REFILL_MARGIN


_DEFAULTS = {f.name: f.default for f in fields(AllocationConfig)}


def inert_options(config: AllocationConfig) -> tuple[str, ...]:
    """The options ``config`` sets away from their defaults although its allocator never reads them.

    ``allocator="sara"`` reads every option. ``"dynamic_sampling"`` generates whole groups of k and keeps the mixed
    ones: the probe size, the stopping rule, the commit floor and the round increment are SARA's (its streaming
    collector still prices a fresh prompt from ``n0`` and ``commit_min`` until it has learned the price, so those
    two count there), and with rounds it sizes each draw without ``refill_margin``. ``"uniform"`` draws B prompts
    once and keeps every group: none of the options above, nor the budget, the round cap, the refill model
    (``yield_decay``, ``refill_margin``) or, without ``selection``, the Beta prior applies. Options whose non-default
    values the config rejects for an allocator (``carry_over``, ``ds_filter``, ``stopping_rule``) are not listed.

    Parameters
    ----------
    config : AllocationConfig
        A validated config.

    Returns
    -------
    tuple of str
        Field names, in field order; empty for SARA, for allocators registered beyond the three, and whenever the
        ignored options keep their defaults (``commit_min`` counts as default when it resolves to k).
    """
    spec = spec_of(config.allocator)
    if spec is None or spec.ignores is None:
        return ()
    names = spec.ignores(config)
    out = []
    for f in fields(config):
        if f.name not in names:
            continue
        changed = config.commit_floor != config.k if f.name == "commit_min" else getattr(config, f.name) != f.default
        if changed:
            out.append(f.name)
    return tuple(out)


def streaming_abandons_every_prompt(config: AllocationConfig) -> float | None:
    """Whether SARA's threshold rule, deciding after every completion (streaming), abandons every prompt at its first
    outcome: p_eff (Eq. 2) after one outcome is below ``tau_low`` whether it was a success or a failure (k = 2 with the
    paper's tau_low = 0.45 and a uniform prior: p_eff = 1/3), and one outcome can never make a group mixed.

    Returns
    -------
    float or None
        The larger of the two p_eff values after a first outcome when both are below ``tau_low`` (allocator
        ``"sara"``, ``stopping_rule="threshold"``, k >= 2), else None.
    """
    from sara_trl.allocation.predictor import p_eff

    spec = spec_of(config.allocator)
    if spec is None or "stopping_rule" not in spec.owns or config.stopping_rule != "threshold" or config.k < 2:
        return None
    first = max(float(p_eff(1, s, config.k, config.prior_alpha, config.prior_beta)) for s in (0, 1))
    return first if first < config.tau_low else None


def _type_name(tp) -> str:
    """``Optional[int]`` -> ``"int or None"``, ``int`` -> ``"int"``."""
    args = typing.get_args(tp)
    if args:
        return " or ".join("None" if a is type(None) else a.__name__ for a in args)
    return tp.__name__


def options_doc(cls, skip: tuple[str, ...] = (), indent: int = 4) -> str:
    """A numpydoc ``Parameters`` section listing ``cls``'s dataclass fields from their ``help`` metadata.

    Parameters
    ----------
    cls : type
        A dataclass whose fields carry ``metadata={"help": ...}``.
    skip : tuple of str
        Field names to leave out.
    indent : int
        Spaces before each entry.

    Returns
    -------
    str
        ``name : type, default value`` lines, each followed by its wrapped help text.
    """
    hints = typing.get_type_hints(cls)
    pad = " " * indent
    lines = [f"{pad}Parameters", f"{pad}----------"]
    for f in fields(cls):
        if f.name in skip or "help" not in f.metadata:
            continue
        lines.append(f"{pad}{f.name} : {_type_name(hints[f.name])}, default {f.default!r}")
        lines.append(textwrap.fill(f.metadata["help"], width=116, initial_indent=pad + "    ",
                                   subsequent_indent=pad + "    "))
    return "\n".join(lines) + "\n"


AllocationConfig.__doc__ += "\n" + options_doc(AllocationConfig) + """
    Raises
    ------
    AllocationConfigError
        (a ``ValueError``) for an invalid value or combination, with a message that names the rule it breaks.
"""
