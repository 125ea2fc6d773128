"""`SaraConfig` (extends `trl.GRPOConfig`) and `SaraRLOOConfig` (extends `trl.RLOOConfig`).

Both share the allocation fields of :class:`_SaraArguments`; the parent's fields, defaults and checks are unchanged.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from trl import GRPOConfig, RLOOConfig

from sara_trl.allocation import (
    ALLOCATORS,
    COST_UNITS,
    PRIOR_FAMILIES,
    SELECTIONS,
    AllocationConfig,
)

__all__ = ["STOPPING_RULES", "SaraConfig", "SaraRLOOConfig"]

# `stopping_rule` values: the paper's fixed threshold on p_eff (tau_low), or the core's tau_low="auto".
STOPPING_RULES = ("threshold", "bayes_optimal")
_DEFAULT_TAU_LOW = 0.45


def _as_int(value):
    """``value`` as a plain int when it is an integral number (``2``, ``2.0``, ``numpy.int64(2)``), else unchanged
    (None, ``2.5``, a string: the core then rejects it with its own message)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    return value


def _as_float(value):
    """``value`` as a plain float when it is a real number (not a bool), else unchanged (None, a string)."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else value


_SARA_DOC = r"""
        > Parameters that control SARA rollout allocation (paper §3, Alg. 1; defaults from App. D)

        allocator (`str`, *optional*, defaults to `"sara"`):
            How each step's `generation_batch_size / num_generations = B` groups are collected:
            `"sara"` (sequential allocation: probe, then commit / abandon / continue each prompt, refill abandoned
            budget with fresh prompts), `"dynamic_sampling"` (DAPO: full groups of `num_generations` from fresh
            prompts, keep those whose reward std is non-zero until B are kept) or `"uniform"` (B prompts x k rollouts,
            all kept: what the plain TRL trainer does, but drawn from the SARA prompt stream).
        n0 (`int`, *optional*, defaults to `2`):
            Probe size: rollouts generated for a fresh prompt in its first round (SARA only). `1 <= n0 <= k`.
        tau_low (`float`, *optional*, defaults to `0.45`):
            Abandon threshold of paper Eq. 3: an unmixed prompt is abandoned once its predicted probability of an
            effective full group, p_eff (Eq. 2), drops below `tau_low`. In `[0, 1)`; 0 never abandons. Used with
            `stopping_rule="threshold"` only (for the core's `tau_low="auto"`, set `stopping_rule="bayes_optimal"`).
        commit_min (`int` or `None`, *optional*, defaults to `None`):
            Commit floor: a mixed group is committed once it holds at least this many rollouts. `None` means
            `num_generations` (every trained group is full, the paper's default). With a smaller value, groups
            shorter than k are padded to k with rows masked out of the loss, the token count and the group statistics.
            `2 <= commit_min <= k`.
        prior_alpha (`float`, *optional*, defaults to `1.0`):
            alpha_0 of the Beta prior on a prompt's success rate (paper §3.2). `> 0`.
        prior_beta (`float`, *optional*, defaults to `1.0`):
            beta_0 of the Beta prior on a prompt's success rate (paper §3.2). `> 0`.
        budget_cap (`float`, *optional*, defaults to `6.0`):
            Safety cap on the rollouts generated in one step, in units of B*k (`generation_batch_size`). `>= 1`.
        max_rounds (`int`, *optional*, defaults to `64`):
            Cap on generation rounds (batched generation calls) per step. When the cap, the budget or the stream ends
            a step short of B committed groups, the missing groups are fully masked fill groups (logged as
            `sara/unfilled`).
        round_increment (`int`, *optional*, defaults to `1`):
            Rollouts added per round to a continuing, still-unmixed prompt (paper: 1).
        continue_to_decision (`bool`, *optional*, defaults to `False`):
            The core's `round_increment="to_decision"`: an unmixed prompt gets, in one round, all its rollouts up to
            the point where the rule would abandon it if its run stayed unanimous (n_a = k - floor(tau_low (k + 1))
            in all for the paper's rule). With `commit_min=None` (full groups) every prompt costs exactly the
            rollouts it costs one at a time, and a step needs fewer rounds (simulation, k=8: median 3 instead of
            5). Per step it costs more (0.79 instead of 0.76 of dynamic sampling's rollouts at k=8): larger rounds
            leave more prompts drawn beyond the need when the batch fills, unless `carry_over=True` keeps them
            (0.75, median 3; benchmarks/RESULTS.md). A separate field because `HfArgumentParser` gives
            `round_increment` one type.
        max_rollouts_per_round (`int` or `None`, *optional*, defaults to `None`):
            Capacity of one batched generation call, in rollouts (`>= k`). `None` means no cap.
        yield_decay (`float`, *optional*, defaults to `0.5`):
            Per-step decay of the running estimate of the share of fresh prompts that get committed, used to size
            refills. In `[0, 1]`.
        refill_margin (`float`, *optional*, defaults to `0.5`):
            Extra fresh prompts drawn per round, in standard deviations of the number of commits the round can
            expect: 0 draws for the expected need only (fewest rollouts, most rounds). `>= 0`.
        carry_over (`bool`, *optional*, defaults to `False`):
            SARA only. Prompts still undecided when a step's B-th group commits (and groups committed beyond B) keep
            their rollouts and continue in the next step instead of being dropped, so a finite batch wastes nothing
            at its end (simulation, k=8, B=64: 0.74 instead of 0.76 of dynamic sampling's rollouts). Their earlier
            rollouts were sampled by the previous policy: one step off-policy. With vLLM, GRPO's
            `vllm_importance_sampling_correction` (on by default) compares the current model's log-probs with the
            sampling log-probs kept for each rollout, so a stale rollout is reweighted or, outside the clip range of
            the default `"sequence_mask"` mode, masked; with transformers generation (or RLOO) it is trained as if
            on-policy. Checkpoints save the carried completions (`sara_carry.pt`).
        success_threshold (`float`, *optional*, defaults to `0.5`):
            A rollout counts as a success when its score is `> success_threshold`. The score is the weighted reward
            sum (`reward_weights`, as TRL combines rewards), or the raw value of the reward function named by
            `success_reward_func`. A rollout whose score is NaN (every reward function returned `None`) is
            unscorable: it costs a rollout but does not move the posterior.
        success_reward_func (`str` or `None`, *optional*, defaults to `None`):
            Name of one reward function (as listed in the trainer's `reward_func_names`, i.e. the function's
            `__name__`) whose raw value alone decides success. `None` uses the weighted reward sum.
        stream_seed (`int` or `None`, *optional*, defaults to `None`):
            Seed of the fresh-prompt stream (its own numpy generator, identical on every process). `None` uses
            `seed`. The stream shuffles only if `shuffle_dataset` is true.

        > Beyond the paper (all off by default: with the defaults the allocator is the paper's SARA, decision for
        > decision; see `sara_trl.allocation.extensions` and `benchmarks/BEYOND_PAPER.md`). Each step's values are
        > logged as `sara/<name>` (see `sara_trl.trainer.metrics.log_step_metrics`).

        stopping_rule (`str`, *optional*, defaults to `"threshold"`):
            `"threshold"`: the paper's rule, abandon once p_eff < `tau_low`. `"bayes_optimal"` (the core's
            `tau_low="auto"`, SARA only): the Bayes-optimal continue/abandon boundary for the objective "effective
            groups per unit cost", by backward induction at the self-consistent cost per effective group, under a
            prior fitted online to the prompts seen (paper App. C.7, App. G future work). Until `auto_min_prompts`
            prompts are in, the paper's rule runs at tau_low = 0.45 with Beta(`prior_alpha`, `prior_beta`), so
            `tau_low` must stay at its default. A separate field because `HfArgumentParser` gives a field one type:
            `tau_low` stays a float on the command line.
        auto_prior (`str`, *optional*, defaults to `"mixture"`):
            Family of the fitted prior for `"bayes_optimal"`: `"mixture"` (point masses at gamma = 0 and 1 plus a
            Beta) or `"beta"`.
        auto_prior_decay (`float`, *optional*, defaults to `0.9`):
            Per-step decay of the outcome counts (and token means) the prior is fitted on. In `[0, 1]`.
        auto_min_prompts (`int`, *optional*, defaults to `64`):
            Prompts (decayed count) observed before the fitted prior is used (burn-in). `>= 1`.
        auto_loss_cap (`float` or `None`, *optional*, defaults to `None`):
            Cap in `(0, 1]` for `"bayes_optimal"`: abandon only where p_eff < cap, so the expected share of abandoned
            groups that would have mixed stays below it (paper Thm 1). `None`: the unconstrained optimum.
        cost_unit (`str`, *optional*, defaults to `"rollouts"`):
            What a rollout costs: `"rollouts"` (one unit each) or `"tokens"` (its expected completion length, a
            success and a failure priced separately from running means). `"tokens"` needs
            `stopping_rule="bayes_optimal"`.
        history_decay (`float` or `None`, *optional*, defaults to `None`):
            `None` (off) or lambda in `[0, 1]`: warm-start each prompt's prior from its decayed past outcomes (paper
            App. D); data from d steps ago weighs lambda^d, so 0 reproduces the paper's SARA.
        selection (`str` or `None`, *optional*, defaults to `None`):
            `None` (stream order), `"thompson"` or `"greedy"`: draw fresh prompts from a candidate pool of
            `selection_pool` x the request, ranked by a Thompson draw / the posterior mean of the chance that a full
            group mixes under the prompt's history posterior. Needs `history_decay`.
        selection_pool (`float`, *optional*, defaults to `4.0`):
            Candidate pool size, as a multiple (`>= 1`) of the prompts requested.
        selection_floor (`float`, *optional*, defaults to `0.1`):
            epsilon in `(0, 1]`: that share of the picks is uniform over the pool, so every candidate is drawn with
            probability >= epsilon * requested / pool (no prompt starves).
        selection_seed (`int` or `None`, *optional*, defaults to `None`):
            Seed of the selection generator (its state is saved in checkpoints). `None` uses `seed`.
"""


@dataclass
class _SaraArguments:
    """Allocation fields shared by :class:`SaraConfig` and :class:`SaraRLOOConfig` (see their docstrings)."""

    allocator: str = field(
        default="sara",
        metadata={
            "help": "How each step's B = generation_batch_size / num_generations groups are collected: 'sara' "
            "(sequential allocation, paper Alg. 1), 'dynamic_sampling' (DAPO: keep full groups with non-zero reward "
            "std) or 'uniform' (B prompts x k rollouts, all kept).",
            "choices": list(ALLOCATORS),
        },
    )
    n0: int = field(
        default=2,
        metadata={"help": "SARA probe size: rollouts generated for a fresh prompt in its first round (1 <= n0 <= k)."},
    )
    tau_low: float = field(
        default=0.45,
        metadata={
            "help": "SARA abandon threshold (paper Eq. 3): abandon an unmixed prompt once p_eff < tau_low. In [0, 1)."
        },
    )
    commit_min: int | None = field(
        default=None,
        metadata={
            "help": "Commit floor: commit a mixed group once it holds this many rollouts (2 <= commit_min <= k). "
            "None means k. Shorter groups are padded to k with masked rows."
        },
    )
    prior_alpha: float = field(
        default=1.0, metadata={"help": "alpha_0 of the Beta prior on a prompt's success rate (paper §3.2), > 0."}
    )
    prior_beta: float = field(
        default=1.0, metadata={"help": "beta_0 of the Beta prior on a prompt's success rate (paper §3.2), > 0."}
    )
    budget_cap: float = field(
        default=6.0,
        metadata={"help": "Cap on rollouts generated per step, in units of B*k (= generation_batch_size), >= 1."},
    )
    max_rounds: int = field(
        default=64, metadata={"help": "Cap on generation rounds (batched generation calls) per step, >= 1."}
    )
    round_increment: int = field(
        default=1, metadata={"help": "Rollouts added per round to a continuing, still-unmixed prompt, >= 1."}
    )
    continue_to_decision: bool = field(
        default=False,
        metadata={
            "help": "Give an unmixed prompt, in one round, all its rollouts up to the point where the rule would "
            "abandon it if its run stayed unanimous (the core's round_increment='to_decision'): same rollouts per "
            "prompt as the paper's one-at-a-time schedule when commit_min = num_generations, fewer rounds; more "
            "end-of-step over-draw unless carry_over=True."
        },
    )
    max_rollouts_per_round: int | None = field(
        default=None,
        metadata={"help": "Capacity of one batched generation call in rollouts (>= k); None means no cap."},
    )
    yield_decay: float = field(
        default=0.5,
        metadata={
            "help": "Per-step decay of the running kept-share estimate used to size refills, in [0, 1]."
        },
    )
    refill_margin: float = field(
        default=0.5,
        metadata={
            "help": "Extra fresh prompts per round, in standard deviations of the expected commits (>= 0); 0 draws "
            "for the expected need only (fewest rollouts, most rounds)."
        },
    )
    carry_over: bool = field(
        default=False,
        metadata={
            "help": "SARA: carry prompts still undecided at the end of a step (and surplus groups) into the next step "
            "with their rollouts instead of dropping them (one step off-policy)."
        },
    )
    success_threshold: float = field(
        default=0.5,
        metadata={
            "help": "A rollout is a success when its score > success_threshold; the score is the weighted reward "
            "sum, or the raw value of `success_reward_func`. NaN scores are unscorable."
        },
    )
    success_reward_func: str | None = field(
        default=None,
        metadata={
            "help": "Name of the reward function whose raw value alone decides success; None uses the weighted "
            "reward sum."
        },
    )
    stream_seed: int | None = field(
        default=None,
        metadata={"help": "Seed of the fresh-prompt stream (its own generator, same on every process); None = seed."},
    )
    # Beyond the paper (all off by default; see _SARA_DOC).
    stopping_rule: str = field(
        default="threshold",
        metadata={
            "help": "'threshold' (paper Eq. 3: abandon once p_eff < tau_low) or 'bayes_optimal' (the core's "
            "tau_low='auto': Bayes-optimal boundary under a prior fitted online; SARA only; tau_low stays default).",
            "choices": list(STOPPING_RULES),
        },
    )
    auto_prior: str = field(
        default="mixture",
        metadata={
            "help": "Fitted prior family for stopping_rule='bayes_optimal': 'mixture' (point masses at 0 and 1 plus "
            "a Beta) or 'beta'.",
            "choices": list(PRIOR_FAMILIES),
        },
    )
    auto_prior_decay: float = field(
        default=0.9,
        metadata={"help": "Per-step decay in [0, 1] of the outcome counts the bayes_optimal prior is fitted on."},
    )
    auto_min_prompts: int = field(
        default=64,
        metadata={
            "help": "Prompts (decayed count) seen before the fitted prior is used; until then the paper's rule "
            "runs at tau_low=0.45. >= 1."
        },
    )
    auto_loss_cap: float | None = field(
        default=None,
        metadata={
            "help": "Cap in (0, 1] for bayes_optimal: abandon only where p_eff < cap (bounds the share of abandoned "
            "groups that would have mixed, paper Thm 1). None = unconstrained optimum."
        },
    )
    cost_unit: str = field(
        default="rollouts",
        metadata={
            "help": "Cost of a rollout for bayes_optimal: 'rollouts' (one unit) or 'tokens' (expected completion "
            "length; needs stopping_rule='bayes_optimal').",
            "choices": list(COST_UNITS),
        },
    )
    history_decay: float | None = field(
        default=None,
        metadata={
            "help": "None (off) or lambda in [0, 1]: warm-start each prompt's prior from its past outcomes, data from "
            "d steps ago weighing lambda^d (paper App. D); 0 is the paper's SARA."
        },
    )
    selection: str | None = field(
        default=None,
        metadata={
            "help": "None (stream order), 'thompson' or 'greedy': pick fresh prompts from a candidate pool by their "
            "history posterior chance of a mixed group. Needs history_decay.",
            "choices": list(SELECTIONS),
        },
    )
    selection_pool: float = field(
        default=4.0, metadata={"help": "Selection candidate pool, as a multiple (>= 1) of the prompts requested."}
    )
    selection_floor: float = field(
        default=0.1,
        metadata={"help": "Share in (0, 1] of selection picks drawn uniformly from the pool (no prompt starves)."},
    )
    selection_seed: int | None = field(
        default=None, metadata={"help": "Seed of the selection generator (saved in checkpoints); None = seed."}
    )

    def _validate_sara(self) -> None:
        """Check the allocation fields against each other and against the parent config (after its __post_init__).

        Only what the core cannot say as clearly is checked here (fields phrased with TRL's names, such as
        ``num_generations``, and the trainer's own fields); every other field is checked by
        :class:`~sara_trl.allocation.AllocationConfig` through :meth:`to_allocation_config`.

        Raises:
            ValueError: with a message naming the field and the invariant it protects.
        """
        k = self.num_generations
        if not 1 <= self.n0 <= k:
            why = ("a fresh prompt needs at least one probe rollout before it can be judged" if self.n0 < 1
                   else "the probe of a fresh prompt cannot be larger than a full group")
            raise ValueError(f"n0 ({self.n0}) must satisfy 1 <= n0 <= num_generations ({k}): {why}.")
        if self.commit_min is not None and not 2 <= self.commit_min <= k:
            raise ValueError(
                f"commit_min ({self.commit_min}) must satisfy 2 <= commit_min <= num_generations ({k}): a committed "
                "group needs two outcomes to be mixed, and a group never holds more than num_generations rollouts."
            )
        if self.stopping_rule not in STOPPING_RULES:
            raise ValueError(f"stopping_rule must be one of {list(STOPPING_RULES)}, got {self.stopping_rule!r}.")
        if isinstance(self.tau_low, str):
            raise ValueError(
                f"tau_low={self.tau_low!r}: tau_low is a float in [0, 1) here; for the core's tau_low='auto' set "
                "stopping_rule='bayes_optimal' (one spelling on the command line and in Python)."
            )
        if not 0.0 <= self.tau_low < 1.0:
            why = ("a negative threshold on a probability never abandons; use 0 for that" if self.tau_low < 0
                   else "1 or more would abandon every prompt that is not already mixed")
            raise ValueError(f"tau_low ({self.tau_low}) must lie in [0, 1): it is a probability threshold on p_eff, "
                             f"and {why}.")
        if self.continue_to_decision and self.round_increment != 1:
            raise ValueError(
                f"round_increment ({self.round_increment}) is not used with continue_to_decision=True (an unmixed "
                "prompt then gets all its rollouts up to the next abandon point in one round): leave it at 1."
            )
        if self.stopping_rule == "bayes_optimal" and self.tau_low != _DEFAULT_TAU_LOW:
            raise ValueError(
                f"tau_low ({self.tau_low}) is not used with stopping_rule='bayes_optimal' (its burn-in runs the "
                f"paper's rule at {_DEFAULT_TAU_LOW}): leave tau_low at its default or use stopping_rule='threshold'."
            )
        if not (math.isfinite(self.budget_cap) and self.budget_cap >= 1.0):
            raise ValueError(
                f"budget_cap ({self.budget_cap}) must be >= 1 (units of generation_batch_size): below 1 even uniform "
                "sampling could not fill one batch."
            )
        if self.max_rollouts_per_round is not None and self.max_rollouts_per_round < k:
            raise ValueError(
                f"max_rollouts_per_round ({self.max_rollouts_per_round}) must be None or >= num_generations ({k}), "
                "so that one full group fits in a round."
            )
        if not math.isfinite(self.success_threshold):
            raise ValueError(f"success_threshold ({self.success_threshold}) must be a finite number.")
        # The parent already checks divisibility; B*k must be exactly the generation batch, because TRL splits it
        # into steps_per_generation micro-batches and silently drops any remainder rows.
        if self.generation_batch_size % k != 0:  # pragma: no cover - the parent config raises first
            raise ValueError(
                f"generation_batch_size ({self.generation_batch_size}) must be divisible by num_generations ({k}): "
                "SARA hands TRL exactly B = generation_batch_size / num_generations groups of num_generations rows."
            )
        if self.use_vllm and self.generation_kwargs and "seed" in self.generation_kwargs:
            raise ValueError(
                "generation_kwargs must not set `seed` with use_vllm=True: SARA sends each prompt's repeated ids in "
                "one call, and a fixed per-request seed would make the repeated rollouts of a prompt identical (never "
                "mixed). Remove `seed` from generation_kwargs."
            )
        try:  # the core's own checks (allocator, prior, rounds, decays, beyond-paper options)
            self.to_allocation_config()
        except ValueError as err:
            if "tau_low='auto'" in str(err):  # the core's name for what this config calls stopping_rule
                raise ValueError(f"{err} (here tau_low='auto' is stopping_rule='bayes_optimal')") from err
            raise

    def to_allocation_config(self) -> AllocationConfig:
        """The :class:`sara_trl.allocation.AllocationConfig` these fields describe.

        ``k = num_generations``; ``stopping_rule="bayes_optimal"`` becomes ``tau_low="auto"``; ``selection_seed=None``
        becomes ``seed``. Numbers are converted to plain ``int``/``float`` only when that loses nothing (``2.0`` ->
        ``2``, ``numpy.int64`` -> ``int``); anything else reaches the core unchanged and is rejected there, never
        rounded.

        Raises:
            ValueError: from :class:`AllocationConfig` for an invalid value or combination.
        """
        return AllocationConfig(
            allocator=self.allocator,
            k=int(self.num_generations),
            n0=_as_int(self.n0),
            tau_low="auto" if self.stopping_rule == "bayes_optimal" else float(self.tau_low),
            commit_min=_as_int(self.commit_min),
            prior_alpha=_as_float(self.prior_alpha),
            prior_beta=_as_float(self.prior_beta),
            budget_cap=_as_float(self.budget_cap),
            max_rounds=_as_int(self.max_rounds),
            round_increment="to_decision" if self.continue_to_decision else _as_int(self.round_increment),
            max_rollouts_per_round=_as_int(self.max_rollouts_per_round),
            yield_decay=_as_float(self.yield_decay),
            refill_margin=_as_float(self.refill_margin),
            carry_over=self.carry_over,
            auto_prior=self.auto_prior,
            auto_prior_decay=_as_float(self.auto_prior_decay),
            auto_min_prompts=_as_int(self.auto_min_prompts),
            auto_loss_cap=_as_float(self.auto_loss_cap),
            cost_unit=self.cost_unit,
            history_decay=_as_float(self.history_decay),
            selection=self.selection,
            selection_pool=_as_float(self.selection_pool),
            selection_floor=_as_float(self.selection_floor),
            selection_seed=_as_int(self.seed if self.selection_seed is None else self.selection_seed),
        )

    @property
    def num_groups(self) -> int:
        """B: groups per generation batch, ``generation_batch_size // num_generations``."""
        return self.generation_batch_size // self.num_generations


@dataclass
class SaraConfig(_SaraArguments, GRPOConfig):
    __doc__ = (
        r"""
    Configuration class for [`~sara_trl.SaraGRPOTrainer`]: every [`~trl.GRPOConfig`] field, plus SARA's allocation
    fields below. Parseable with [`~transformers.HfArgumentParser`].

    Each generation batch holds exactly B = `generation_batch_size / num_generations` groups of `num_generations` (k)
    rows, as in TRL; SARA only changes how those groups are collected. Because the prompts come from SARA's own
    stream (not from the dataloader), set `max_steps`: the dataloader only counts steps, so the logged `epoch` does
    not measure passes over the data.

    Parameters:
"""
        + _SARA_DOC
    )

    def __post_init__(self):
        super().__post_init__()
        self._validate_sara()


@dataclass
class SaraRLOOConfig(_SaraArguments, RLOOConfig):
    __doc__ = (
        r"""
    Configuration class for [`~sara_trl.SaraRLOOTrainer`]: every [`~trl.RLOOConfig`] field, plus SARA's allocation
    fields below (shared with [`~sara_trl.SaraConfig`]). Parseable with [`~transformers.HfArgumentParser`].

    Note that RLOO's default `num_generations` is 2, so `n0` and `commit_min` can be at most 2 unless you raise it.

    Parameters:
"""
        + _SARA_DOC
    )

    def __post_init__(self):
        super().__post_init__()
        self._validate_sara()
