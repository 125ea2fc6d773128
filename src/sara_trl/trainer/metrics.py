"""SARA's per-step metrics (``sara/*``): what one step collected and what it cost.

TRL logs through its metric sink (the port's ``metrics(trainer, mode)[name]``), a list averaged (NaN-free) over each
logging window. SARA appends one value per generation batch, so a logged ``sara/x`` is the mean per generation batch
over the window; the ``sara/cumulative_*`` values are running totals and are overwritten instead (like TRL's
``num_tokens``).

Every logged metric is a number. A metric with no valid value in its window (TRL's ``reward`` when no group was
committed, ``kl`` or ``entropy`` when every row was padding) is logged as ``float("nan")``, where TRL logs None
(:func:`~sara_trl.trainer.metric_repair.numeric_logs`): a callback can do arithmetic on any logged value, and must test
``math.isnan`` (not ``is None``) for "nothing to report". The corrections SARA makes to TRL's own metrics (padding
rows) are in :mod:`sara_trl.trainer.metric_repair`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from sara_trl.allocation import Fate, StepStats
from sara_trl.trainer.environment import uses_environments
from sara_trl.trainer.rollout import uses_tools
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["CUMULATIVE_DIAGNOSTICS", "STEP_METRICS", "TOOL_FATES", "TOOL_METRICS", "TOOL_UNITS",
           "check_tool_accounting", "collection_warning", "log_collected_step", "log_step_metrics",
           "masked_group_counts", "round_barrier_metrics", "tool_accounting", "truncation_masked_rollouts"]

# StepStats fields that only make up ``effective_fraction`` (effective groups / B): logged as that fraction, in the
# place of the first of them.
_FRACTION_PARTS = ("effective_in_batch", "batch_groups")


def _step_metrics() -> tuple[str, ...]:
    """Every numeric field of :class:`~sara_trl.allocation.StepStats`, in declaration order, with
    ``effective_fraction`` in the place of :data:`_FRACTION_PARTS` (``stop_reason``, a string, is not a metric)."""
    names = []
    for f in dataclasses.fields(StepStats):
        if f.name == _FRACTION_PARTS[0]:
            names.append("effective_fraction")
        elif f.name not in _FRACTION_PARTS and f.type in (int, float, "int", "float"):
            names.append(f.name)
    return tuple(names)


# Per-step counters logged as `sara/<name>`, read from StepStats (units: rollouts, tokens = completion tokens,
# groups = prompts, rounds = batched generation calls).
STEP_METRICS = _step_metrics()

# With ``tools=`` or ``environment_factory``: the completion tokens split into the model's own (``tool_mask`` 1) and
# the tool / environment output TRL's tool loop inserted (``tool_mask`` 0), and the tool calls, each by the fate of
# its rollout (StepStats' fates), logged as `sara/<unit>_<fate>` (:func:`tool_accounting`).
TOOL_UNITS = ("model_tokens", "tool_tokens", "tool_calls")
TOOL_FATES = ("generated", "trained", "abandoned", "surplus", "active_left", "carried_in")
TOOL_METRICS = tuple(f"{unit}_{fate}" for unit in TOOL_UNITS for fate in TOOL_FATES)
# The final fates a rollout can have (StepResult.rollout_fates codes), by the name used in the metrics.
_ROLLOUT_FATES = {"trained": Fate.TRAINED, "abandoned": Fate.ABANDONED, "surplus": Fate.SURPLUS,
                  "active_left": Fate.ACTIVE}

# Beyond-paper diagnostics (``Allocator.diagnostics()``) that are running totals since the start of training: logged
# like ``sara/cumulative_*`` (latest value), not averaged over the logging window.
CUMULATIVE_DIAGNOSTICS = ("boundary_recomputes", "history_hit_rate_total")


def log_step_metrics(
    metrics: dict[str, list],
    stats: StepStats,
    success_labels: np.ndarray,
    cumulative_rollouts: int,
    cumulative_tokens: int,
    diagnostics: Mapping[str, object] | None = None,
    masked: tuple[int, int] = (0, 0),
) -> None:
    """Append one step's ``sara/*`` values to TRL's metric buffer.

    Logged: every name in :data:`STEP_METRICS` (accounting invariant, for rollouts and tokens alike:
    ``generated + carried_in = trained + abandoned + surplus + active_left``, where ``carried_in`` is nonzero only
    with ``carry_over``, whose ``surplus`` and ``active_left`` are carried into the next step, not lost);
    ``sara/raw_success_rate``, the success rate over
    *all* rollouts generated this step (TRL's ``reward`` only sees the committed, mostly mixed groups, so it is biased
    towards 0.5 under SARA and dynamic sampling); ``sara/cumulative_rollouts`` and ``sara/cumulative_tokens``,
    running totals since the start of training (restored on resume); and ``sara/<key>`` for each number in
    ``diagnostics``, the beyond-paper values of :meth:`sara_trl.allocation.Allocator.diagnostics` (empty when every
    beyond-paper option is off). Those are, with ``stopping_rule="bayes_optimal"``: ``prior_w0``, ``prior_w1``,
    ``prior_a``, ``prior_b`` (the prior in use: fitted mixture, or the config's Beta during burn-in), ``lam`` (cost per
    effective group the boundary is solved at, in cost units), ``abandon_at_fail`` / ``abandon_at_pass`` (rollout
    count at which an all-fail / all-pass prompt is abandoned), ``boundary_recomputes`` (running total),
    ``cost_pass`` / ``cost_fail`` (cost of a success / failure: 1, or mean tokens with ``cost_unit="tokens"``); with
    ``history_decay``: ``history_hit_rate`` (share of drawn prompts with a history), ``history_hit_rate_total``
    (running); with ``selection``: ``selection_pool`` (candidates ranked this step), ``selection_uniform_picks``.
    Values that are NaN (an option that is off, a fit not yet available) and non-numbers are skipped, so a key is
    absent rather than logged as NaN.

    ``sara/masked_fraction``: the share of the B groups whose every row TRL masks out of the loss
    (``mask_truncated_completions=True`` and every completion of the group truncated; 0.0 when that option is off).
    Such a group carries no gradient, so ``sara/effective_fraction`` does not count it even when it is mixed.

    Parameters
    ----------
    metrics : dict
        ``port.metrics(trainer)``.
    stats : StepStats
        The step's accounting.
    success_labels : numpy.ndarray
        ``(rollouts_generated,)`` threshold labels, NaN = unscorable.
    cumulative_rollouts, cumulative_tokens : int
        Running totals (rollouts, completion tokens) after this step.
    diagnostics : mapping, optional
        ``Allocator.diagnostics()`` after this step.
    masked : tuple of int
        ``(groups, effective groups)`` among the B whose every row is masked out of the loss
        (:func:`masked_group_counts`).
    """
    values = stats.as_dict()
    masked_groups, masked_effective = masked
    if stats.batch_groups:
        values["effective_fraction"] = (stats.effective_in_batch - masked_effective) / stats.batch_groups
    metrics["sara/masked_fraction"].append(masked_groups / stats.batch_groups if stats.batch_groups else 0.0)
    for name in STEP_METRICS:
        metrics[f"sara/{name}"].append(float(values[name]))
    scored = success_labels[~np.isnan(success_labels)]
    metrics["sara/raw_success_rate"].append(float(scored.mean()) if scored.size else float("nan"))
    metrics["sara/cumulative_rollouts"] = [float(cumulative_rollouts)]
    metrics["sara/cumulative_tokens"] = [float(cumulative_tokens)]
    for key, value in (diagnostics or {}).items():
        if not isinstance(value, numbers.Real) or math.isnan(value):
            continue
        if key in CUMULATIVE_DIAGNOSTICS:
            metrics[f"sara/{key}"] = [float(value)]
        else:
            metrics[f"sara/{key}"].append(float(value))


def masked_group_counts(groups, rollout_masked: np.ndarray) -> tuple[int, int]:
    """How many groups TRL trains on no token of: every rollout of the group masked out of the loss.

    Parameters
    ----------
    groups : list of Group
        The B groups of the step (fill groups hold no rollout and are never counted here: they are ``unfilled``).
    rollout_masked : numpy.ndarray
        ``(rollouts,)`` bool by step-local rollout id: TRL masks the rollout's completion out of the loss
        (``mask_truncated_completions`` and the completion was truncated).

    Returns
    -------
    tuple of int
        ``(masked groups, masked groups that are effective)``.
    """
    rollout_masked = np.asarray(rollout_masked, dtype=bool)
    masked = effective = 0
    for group in groups:
        ids = np.asarray(group.rollout_ids, dtype=np.int64)
        if ids.size and rollout_masked[ids].all():
            masked += 1
            effective += int(group.effective)
    return masked, effective


def tool_accounting(cache: Any, rollout_fates: np.ndarray, stats: StepStats) -> dict[str, int]:
    """Model tokens, tool/environment tokens and tool calls of one step, each split by the fate of its rollout.

    A rollout's completion tokens (``len(cache.completion_ids[i])``, what :class:`~sara_trl.allocation.StepStats`
    counts as its tokens) are its model tokens (``env_mask``, TRL's ``tool_mask``, 1) plus its tool tokens (mask 0:
    tool or environment output TRL's tool loop appended); without a mask (no tool loop ran, e.g. an environment
    without tool methods) all of them are model tokens. Its tool calls are the calls TRL's loop ran for it (failed
    ones included, as TRL's ``tools/call_frequency`` counts them).

    Parameters
    ----------
    cache : sara_trl.trainer.rollout.RolloutCache
        The step's rollouts (``(R,)`` by step-local id; those carried in: every id but ``cache.generated_ids()``).
    rollout_fates : numpy.ndarray
        ``(R,)`` int :class:`~sara_trl.allocation.Fate` codes by rollout id (``StepResult.rollout_fates``).
    stats : StepStats
        The step's accounting, which the split is checked against (:func:`check_tool_accounting`).

    Returns
    -------
    dict of str to int
        Every name of :data:`TOOL_METRICS`: ``<unit>_<fate>`` for ``unit`` in :data:`TOOL_UNITS` (tokens, tokens,
        calls) and ``fate`` in :data:`TOOL_FATES` (``generated`` in this step's rounds, ``carried_in`` from the
        previous step with ``carry_over``, and the four final fates).

    Raises
    ------
    ValueError
        ``rollout_fates`` does not hold one fate per cached rollout, or a rollout's mask is not one entry per
        completion token.
    AssertionError
        The split breaks the invariant (:func:`check_tool_accounting`).
    """
    fates = np.asarray(rollout_fates, dtype=np.int64)
    n = cache.num_rollouts
    if fates.shape != (n,):
        raise ValueError(f"{fates.shape[0]} rollout fates for {n} cached rollouts")
    per_unit = {unit: np.zeros(n, np.int64) for unit in TOOL_UNITS}
    for i, ids in enumerate(cache.completion_ids):
        trajectory = cache.trajectories.get(i)
        mask = None if trajectory is None else trajectory.env_mask
        if mask is not None and len(mask) != len(ids):
            raise ValueError(f"rollout {i}: its tool mask has {len(mask)} entries for {len(ids)} completion tokens")
        tool = 0 if mask is None else len(mask) - int(np.count_nonzero(mask))
        per_unit["tool_tokens"][i] = tool
        per_unit["model_tokens"][i] = len(ids) - tool
        per_unit["tool_calls"][i] = 0 if trajectory is None else trajectory.tool_calls
    carried = np.ones(n, bool)
    carried[cache.generated_ids()] = False  # carried in from the previous step (carry_over), wherever they lie
    out = {}
    for unit, values in per_unit.items():
        uncached = int(cache.uncached.get(unit, 0))  # streaming: rollouts generated, never cached, all surplus
        out[f"{unit}_generated"] = int(values[~carried].sum()) + uncached
        out[f"{unit}_carried_in"] = int(values[carried].sum())
        for name, code in _ROLLOUT_FATES.items():
            out[f"{unit}_{name}"] = int(values[fates == code].sum()) + (uncached if name == "surplus" else 0)
    check_tool_accounting(out, stats)
    return out


def check_tool_accounting(values: Mapping[str, int], stats: StepStats) -> None:
    """Check the invariant of :func:`tool_accounting`'s split.

    For model tokens, tool tokens and tool calls alike, as :meth:`StepStats.check` for rollouts and tokens:
    ``generated + carried_in = trained + abandoned + surplus + active_left`` (without ``carry_over``,
    ``carried_in`` is 0); and per fate, model tokens + tool tokens = the step's tokens of that fate
    (``StepStats.tokens_<fate>``).

    Parameters
    ----------
    values : mapping
        Every name of :data:`TOOL_METRICS` (counts).
    stats : StepStats
        The step's accounting.

    Raises
    ------
    AssertionError
        Either equality fails (the message names the unit or fate and both sides).
    """
    for unit in TOOL_UNITS:
        total = values[f"{unit}_generated"] + values[f"{unit}_carried_in"]
        split = sum(values[f"{unit}_{name}"] for name in _ROLLOUT_FATES)
        if total != split:
            raise AssertionError(f"accounting broken: generated {values[f'{unit}_generated']} {unit} (+ carried in "
                                 f"{values[f'{unit}_carried_in']}) but fates (trained, abandoned, surplus, "
                                 f"active_left) sum to {split}")
    for name in ("generated", "carried_in", *_ROLLOUT_FATES):
        tokens = getattr(stats, f"tokens_{name}")
        split = values[f"model_tokens_{name}"] + values[f"tool_tokens_{name}"]
        if split != tokens:
            raise AssertionError(f"accounting broken: {values[f'model_tokens_{name}']} model + "
                                 f"{values[f'tool_tokens_{name}']} tool tokens {name}, but the step counts {tokens} "
                                 f"tokens {name}")


def collection_warning(step: int, allocator: str, stats: StepStats, success_labels: np.ndarray, num_groups: int,
                       unscorable_by: str, tau_low_hint: bool) -> str | None:
    """The warning for a step that ended short of B groups, or whose every rollout was unscorable; None otherwise.

    Parameters
    ----------
    step : int
        1-based step number.
    allocator : str
        ``args.allocator``.
    stats : StepStats
        The step's accounting.
    success_labels : numpy.ndarray
        ``(rollouts_generated,)`` threshold labels of the step's own rollouts, NaN = unscorable.
    num_groups : int
        B.
    unscorable_by : str
        Who returned None when a rollout is unscorable, in words (e.g. ``"the reward functions ['acc']"``).
    tau_low_hint : bool
        Suggest lowering ``tau_low`` (SARA).

    Returns
    -------
    str or None
        The message (no NaN in it, and computed without numpy's empty-mean RuntimeWarning).
    """
    labels = np.asarray(success_labels, dtype=np.float64)
    scored = labels[~np.isnan(labels)]
    missing = f"the {stats.unfilled} missing groups are masked out of the loss" if stats.unfilled else ""
    if labels.size and not scored.size:
        return (f"Step {step} (allocator {allocator!r}): none of the {labels.size} completions could be scored: "
                f"{unscorable_by} returned None for every one of them, so no group can mix"
                + (f" ({missing})" if missing else "") + ". This is not the task's difficulty: check what makes the "
                "reward functions give up (the dataset columns they read, the answer format they parse, a time limit).")
    if not stats.unfilled:
        return None
    rate = f"success rate {float(scored.mean()):.3f}" if scored.size else "no rollout generated"
    unscorable = f", {labels.size - scored.size} unscorable" if scored.size < labels.size else ""
    return (f"Step {step} (allocator {allocator!r}): only {num_groups - stats.unfilled} of {num_groups} groups were "
            f"filled (stopped by: {stats.stop_reason}); {missing}. {stats.rollouts_generated} rollouts, {rate}"
            f"{unscorable}. If this repeats, the task is too hard or too easy for the model (or max_completion_length "
            "too short): raise budget_cap or max_rounds" + (", lower tau_low," if tau_low_hint else "")
            + " or change the data.")


def round_barrier_metrics(round_index: np.ndarray, tokens: np.ndarray) -> dict[str, float]:
    """What the round barriers of one step cost, in decode steps (the input of a waiting-share estimate).

    Each round is one batched generation call, and a call runs until its longest completion ends: it takes as many
    decode steps as that completion has tokens, while its shorter completions have already finished. Under the
    linear per-step latency model ``step time = a + b x sequences still running`` (:mod:`benchmarks.simulator.latency`,
    calibrated in ``benchmarks/cpu_latency/cpu_latency.json``), a call of ``n`` completions with lengths ``L_1..L_n``
    (``n`` at most the engine's concurrent sequences, vLLM's ``max_num_seqs``) takes ``a max(L) + b sum(L)`` seconds of
    decoding, and the same tokens decoded in lockstep (every completion as long as the mean) take ``a mean(L) + b
    sum(L)``: the barrier costs ``a (max(L) - mean(L))`` seconds. Summed over rounds. A larger call runs in waves, which
    these two numbers do not see (``benchmarks/streaming_small_batch/streaming_small_batch.py`` models the queue).

    Parameters
    ----------
    round_index : numpy.ndarray
        ``(rollouts,)`` int, the round (generation call) of each rollout generated this step, numbered from 1;
        rollouts carried in from the previous step (round 0) are left out.
    tokens : numpy.ndarray
        ``(rollouts,)`` completion tokens of each rollout.

    Returns
    -------
    dict
        ``round_longest_tokens``: sum over rounds of the longest completion (tokens = decode steps of the calls);
        ``round_tail_tokens``: sum over rounds of longest minus mean completion (decode steps during which the call
        waits on completions longer than its mean); both 0.0 when no round ran.

    Raises
    ------
    ValueError
        ``round_index`` and ``tokens`` differ in length.
    """
    round_index = np.asarray(round_index, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.float64)
    if round_index.shape != tokens.shape:
        raise ValueError(f"round_index has shape {round_index.shape} but tokens has shape {tokens.shape}")
    keep = round_index > 0
    rounds, inverse = np.unique(round_index[keep], return_inverse=True)
    if not rounds.size:
        return {"round_longest_tokens": 0.0, "round_tail_tokens": 0.0}
    kept = tokens[keep]
    longest = np.full(rounds.size, -np.inf)
    np.maximum.at(longest, inverse, kept)
    mean = np.bincount(inverse, weights=kept) / np.bincount(inverse)
    return {"round_longest_tokens": float(longest.sum()), "round_tail_tokens": float((longest - mean).sum())}


def truncation_masked_rollouts(trainer: SaraTrainerBase, cache: Any) -> np.ndarray:
    """``(rollouts,)`` bool by rollout id: TRL masks the completion out of the loss (``mask_truncated_completions``
    and no EOS/pad at its end, TRL's own test)."""
    if not getattr(trainer, "mask_truncated_completions", False):
        return np.zeros(cache.num_rollouts, dtype=bool)
    eos_and_pad = {*trainer.eos_token_ids, port.tokenizer(trainer).pad_token_id}
    return np.asarray([not ids or ids[-1] not in eos_and_pad for ids in cache.completion_ids], dtype=bool)


def log_collected_step(trainer: SaraTrainerBase, step: Any) -> None:
    """Append one collected step's ``sara/*`` values to ``port.metrics(trainer)``.

    The accounting (:func:`log_step_metrics`), the wall-clock of the collection (``sara/collect_seconds``: every
    round's generation call and reward pass, plus the allocator: what a step's rollouts cost in time, beside
    ``sara/rollouts_generated`` and ``sara/tokens_generated``), and what the collection mode cost: with streaming, the
    slowest process's engine steps and reward passes (``sara/rounds`` is 0: there are no rounds); with rounds, the
    decode steps each call spent on its longest completion (the round barrier's cost, :func:`round_barrier_metrics`).
    With ``environment_factory``, ``sara/env_resets``: the environment resets of the step's rounds on every process
    (one per generated rollout, plus the padding copies of a round split over processes; the replay resets none).
    With ``tools=`` or ``environment_factory``, ``sara/<name>`` for each name of :data:`TOOL_METRICS`: model tokens,
    tool/environment tokens and tool calls by fate (:func:`tool_accounting`, which checks their invariant and raises
    ``AssertionError`` when it is broken).

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer (its allocator and ``_metrics``).
    step : sara_trl.trainer.collect.CollectedStep
        The step as collected.
    """
    metrics = port.metrics(trainer)
    allocator, result, cache = trainer.sara.allocator, step.result, step.cache
    log_step_metrics(
        metrics,
        result.stats,
        step.new_labels,
        cumulative_rollouts=allocator.total_rollouts,
        cumulative_tokens=allocator.total_tokens,
        diagnostics=allocator.diagnostics(),
        masked=masked_group_counts(result.groups, truncation_masked_rollouts(trainer, cache)),
    )
    metrics["sara/collect_seconds"].append(step.seconds)
    run = step.stream_run
    if run is not None:
        metrics["sara/engine_steps"].append(run.engine_steps)
        metrics["sara/reward_passes"].append(run.reward_passes)
        metrics["sara/reward_seconds"].append(run.reward_seconds)
        metrics["sara/reward_wait_seconds"].append(run.reward_wait_seconds)
    else:
        tokens = np.concatenate(cache.tokens) if cache.tokens else np.zeros(0, np.int64)
        for name, value in round_barrier_metrics(np.asarray(cache.round_index), tokens).items():
            metrics[f"sara/{name}"].append(value)
    if uses_environments(trainer):  # environment_factory: resets of the rounds
        metrics["sara/env_resets"].append(float(cache.env_resets))
    if uses_tools(trainer) or uses_environments(trainer):  # model vs tool tokens, tool calls, by fate
        for name, value in tool_accounting(cache, result.rollout_fates, result.stats).items():
            metrics[f"sara/{name}"].append(float(value))
