"""The torch-free allocation core: p_eff (paper Eq. 2), the decision rule (Eq. 3), the round-synchronous allocator
(Alg. 1) for SARA and the uniform / dynamic-sampling baselines, and their accounting.

Modules, each with one job: :mod:`~sara_trl.allocation.config` (every option, its default, help and check),
:mod:`~sara_trl.allocation.labels` (success labels and the one ``is_mixed`` test), :mod:`~sara_trl.allocation.predictor`
and :mod:`~sara_trl.allocation.rules` (Eq. 2 and 3), :mod:`~sara_trl.allocation.ledger` (one step's bookkeeping),
:mod:`~sara_trl.allocation.registry` (which allocators exist, each one's options and faces),
:mod:`~sara_trl.allocation.strategies` (uniform, dynamic sampling, SARA: each one's rounds strategy and streaming
policy),
:mod:`~sara_trl.allocation.allocator` (the :class:`Allocator` and its cross-step state),
:mod:`~sara_trl.allocation.prompt_stream` (the seeded prompt stream, over a map-style or an iterable dataset).
Beyond the paper: :mod:`~sara_trl.allocation.streaming` (decide per completion on a running engine,
``collection="streaming"``, or continuously with no batch) and :mod:`~sara_trl.allocation.event_loop` (the one loop
that drives it on an engine, with reward passes overlapping generation). The simulated task and engine and the
decode-step latency model are the benchmarks' (:mod:`benchmarks.simulator`), not the core's.

Beyond the paper (off by default, see :class:`AllocationConfig`): Bayes-optimal stopping
(``stopping_rule="bayes_optimal"``, :mod:`~sara_trl.allocation.optimal_stopping`), its empirical-Bayes prior fit
(:mod:`~sara_trl.allocation.empirical_bayes`) and the per-prompt history (:mod:`~sara_trl.allocation.history`),
wired in by :mod:`~sara_trl.allocation.beyond_paper`. The names a user calls directly (to inspect a boundary, fit a
prior to logged outcomes, or evaluate a policy) are exported here.

Depends on numpy and scipy only; never imports torch, TRL or transformers.
"""

from sara_trl.allocation.allocator import Allocator
from sara_trl.allocation.config import (
    ALLOCATORS,
    COLLECTIONS,
    COST_UNITS,
    DS_FILTERS,
    PRIOR_FAMILIES,
    SELECTIONS,
    STOPPING_RULES,
    AllocationConfig,
    AllocationConfigError,
)
from sara_trl.allocation.empirical_bayes import fit_prior_counts
from sara_trl.allocation.event_loop import Finished, StreamRun, drive_streaming_engine
from sara_trl.allocation.history import PromptHistory
from sara_trl.allocation.labels import allocator_labels, is_mixed, score_spread_labels, success_labels
from sara_trl.allocation.optimal_stopping import (
    MixturePrior,
    StoppingSolution,
    evaluate_policy,
    p_eff_mixture,
    solve_rate,
    solve_values,
)
from sara_trl.allocation.predictor import abandon_point_uniform, p_eff
from sara_trl.allocation.prompt_stream import (
    DEFAULT_SHUFFLE_BUFFER,
    IterablePromptStream,
    PromptStream,
    RowSource,
    ShardStream,
)
from sara_trl.allocation.rounds import RoundCollector, run_rounds
from sara_trl.allocation.rules import decide
from sara_trl.allocation.strategies import STRATEGIES, StepContext, StrategyResult
from sara_trl.allocation.streaming import Request, StreamActions, StreamingCollector, merge_step_results
from sara_trl.allocation.types import (
    ABANDON,
    COMMIT,
    CONTINUE,
    Fate,
    Group,
    PromptRecord,
    RolloutFn,
    RoundOutcome,
    RoundRequest,
    StepResult,
    StepStats,
    WindowStats,
)

__all__ = [
    "ALLOCATORS", "AllocationConfig", "AllocationConfigError", "Allocator", "PromptStream", "RoundOutcome",
    "IterablePromptStream", "RowSource", "DEFAULT_SHUFFLE_BUFFER",
    "RolloutFn", "StepResult", "StepStats", "Group", "PromptRecord", "Fate", "p_eff", "decide",
    "abandon_point_uniform", "COMMIT", "ABANDON", "CONTINUE",
    "is_mixed", "success_labels", "score_spread_labels", "allocator_labels", "DS_FILTERS",
    "STRATEGIES", "StepContext", "StrategyResult", "RoundRequest", "RoundCollector", "run_rounds",
    # beyond the paper
    "COLLECTIONS", "StreamingCollector", "StreamActions", "Request", "drive_streaming_engine", "Finished", "StreamRun",
    "ShardStream", "merge_step_results", "WindowStats",
    "SELECTIONS", "STOPPING_RULES", "COST_UNITS", "PRIOR_FAMILIES", "MixturePrior", "StoppingSolution", "solve_values",
    "solve_rate", "evaluate_policy", "p_eff_mixture", "fit_prior_counts", "PromptHistory",
]
