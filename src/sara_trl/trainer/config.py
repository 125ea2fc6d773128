"""`SaraConfig` (extends `trl.GRPOConfig`) and `SaraRLOOConfig` (extends `trl.RLOOConfig`).

Both share the allocation fields of :class:`_SaraArguments`; the parent's fields, defaults and checks are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig, RLOOConfig

from sara_trl.allocation import ALLOCATORS, AllocationConfig

__all__ = ["SaraConfig", "SaraRLOOConfig"]


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
            effective full group, p_eff (Eq. 2), drops below `tau_low`. In `[0, 1)`; 0 never abandons.
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
        max_rollouts_per_round (`int` or `None`, *optional*, defaults to `None`):
            Capacity of one batched generation call, in rollouts (`>= k`). `None` means no cap.
        yield_decay (`float`, *optional*, defaults to `0.5`):
            Per-step decay of the running estimate of the share of fresh prompts that get committed, used to size
            refills. In `[0, 1]`.
        refill_margin (`float`, *optional*, defaults to `0.5`):
            Extra fresh prompts drawn per round, in standard deviations of the number of commits the round can
            expect: 0 draws for the expected need only (fewest rollouts, most rounds). `>= 0`.
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

    def _validate_sara(self) -> None:
        """Check the allocation fields against each other and against the parent config (after its __post_init__).

        Raises:
            ValueError: with a message naming the field and the invariant it protects.
        """
        k = self.num_generations
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {list(ALLOCATORS)}, got {self.allocator!r}.")
        if not 1 <= self.n0 <= k:
            raise ValueError(
                f"n0 ({self.n0}) must satisfy 1 <= n0 <= num_generations ({k}): the probe of a fresh prompt cannot "
                "be larger than a full group."
            )
        if self.commit_min is not None and not 2 <= self.commit_min <= k:
            raise ValueError(
                f"commit_min ({self.commit_min}) must satisfy 2 <= commit_min <= num_generations ({k}): a committed "
                "group needs two outcomes to be mixed, and a group never holds more than num_generations rollouts."
            )
        if not 0.0 <= self.tau_low < 1.0:
            raise ValueError(
                f"tau_low ({self.tau_low}) must lie in [0, 1): it is a probability threshold on p_eff, and 1 would "
                "abandon every prompt that is not already mixed."
            )
        for name in ("prior_alpha", "prior_beta"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} ({value}) must be finite and > 0: it is a parameter of the Beta prior.")
        if not (math.isfinite(self.budget_cap) and self.budget_cap >= 1.0):
            raise ValueError(
                f"budget_cap ({self.budget_cap}) must be >= 1 (units of generation_batch_size): below 1 even uniform "
                "sampling could not fill one batch."
            )
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds ({self.max_rounds}) must be >= 1: a step needs at least one round.")
        if self.round_increment < 1:
            raise ValueError(f"round_increment ({self.round_increment}) must be >= 1.")
        if self.max_rollouts_per_round is not None and self.max_rollouts_per_round < k:
            raise ValueError(
                f"max_rollouts_per_round ({self.max_rollouts_per_round}) must be None or >= num_generations ({k}), "
                "so that one full group fits in a round."
            )
        if not 0.0 <= self.yield_decay <= 1.0:
            raise ValueError(f"yield_decay ({self.yield_decay}) must lie in [0, 1].")
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
        self.to_allocation_config()  # the core's own checks, for any combination not covered above

    def to_allocation_config(self) -> AllocationConfig:
        """The :class:`sara_trl.allocation.AllocationConfig` these fields describe (``k = num_generations``).

        Raises:
            ValueError: from :class:`AllocationConfig` for an invalid combination.
        """
        return AllocationConfig(
            allocator=self.allocator,
            k=int(self.num_generations),
            n0=int(self.n0),
            tau_low=float(self.tau_low),
            commit_min=None if self.commit_min is None else int(self.commit_min),
            prior_alpha=float(self.prior_alpha),
            prior_beta=float(self.prior_beta),
            budget_cap=float(self.budget_cap),
            max_rounds=int(self.max_rounds),
            round_increment=int(self.round_increment),
            max_rollouts_per_round=None if self.max_rollouts_per_round is None else int(self.max_rollouts_per_round),
            yield_decay=float(self.yield_decay),
            refill_margin=float(self.refill_margin),
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
