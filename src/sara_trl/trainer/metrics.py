"""SARA's per-step metrics (``sara/*``) and the corrections that keep TRL's own metrics honest under padding.

TRL logs through ``trainer._metrics[mode][name]``, a list averaged (NaN-free) over each logging window. SARA appends
one value per generation batch, so a logged ``sara/x`` is the mean per generation batch over the window; the
``sara/cumulative_*`` values are running totals and are overwritten instead (like TRL's ``num_tokens``).

Every logged metric is a number. A metric with no valid value in its window (TRL's ``reward`` when no group was
committed, ``kl`` or ``entropy`` when every row was padding) is logged as ``float("nan")``, where TRL 1.16 logs None
(:func:`numeric_logs`): a callback can do arithmetic on any logged value, and must test ``math.isnan`` (not ``is
None``) for "nothing to report".
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np
import torch

from sara_trl.allocation import StepStats

__all__ = ["CLIP_RATIO_METRICS", "CUMULATIVE_DIAGNOSTICS", "LOSS_TOKEN_METRICS", "ROW_METRIC_PADDING", "STEP_METRICS",
           "collection_warning", "correct_loss_metrics", "correct_padding_metrics", "global_masked_mean",
           "log_step_metrics", "masked_group_counts", "numeric_logs", "replace_last", "round_barrier_metrics",
           "zero_padding_rows"]

# Per-step counters logged as `sara/<name>`, read from StepStats (units: rollouts, tokens = completion tokens,
# groups = prompts, rounds = batched generation calls).
STEP_METRICS = (
    "rollouts_generated",
    "rollouts_trained",
    "rollouts_abandoned",
    "rollouts_surplus",
    "rollouts_active_left",
    "tokens_generated",
    "tokens_trained",
    "tokens_abandoned",
    "tokens_surplus",
    "tokens_active_left",
    "committed",
    "abandoned",
    "surplus",
    "active_left",
    "unfilled",
    "rounds",
    "prompts_drawn",
    "effective_fraction",
    "expected_lost",
    "unscorable",
    "rollouts_carried_in",
    "tokens_carried_in",
    "carried_in",
    "rollouts_aborted",
    "tokens_aborted",
)

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
        ``trainer._metrics["train"]``.
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


def numeric_logs(metrics: dict[str, list], logs: dict, prefix: str = "") -> None:
    """Move every metric with no valid value in the window out of ``metrics`` and into ``logs`` as NaN (in place).

    TRL's ``log`` averages each metric's non-NaN values and logs None when there is none; called just before it,
    this logs ``float("nan")`` for those metrics instead, so every logged metric stays a number.

    Parameters
    ----------
    metrics : dict
        ``trainer._metrics[mode]``.
    logs : dict
        The dict about to be logged.
    prefix : str
        ``"eval_"`` in evaluation (TRL's prefix), else ``""``.
    """
    for name in [name for name, values in metrics.items() if all(math.isnan(float(v)) for v in values)]:
        del metrics[name]
        logs[prefix + name] = float("nan")


def round_barrier_metrics(round_index: np.ndarray, tokens: np.ndarray) -> dict[str, float]:
    """What the round barriers of one step cost, in decode steps (the input of a waiting-share estimate).

    Each round is one batched generation call, and a call runs until its longest completion ends: it takes as many
    decode steps as that completion has tokens, while its shorter completions have already finished. Under the
    linear per-step latency model ``step time = a + b x sequences still running`` (:mod:`sara_trl.allocation.latency`,
    calibrated in ``benchmarks/cpu_latency.json``), a call of ``n`` completions with lengths ``L_1..L_n`` (``n`` at
    most the engine's concurrent sequences, vLLM's ``max_num_seqs``) takes ``a max(L) + b sum(L)`` seconds of
    decoding, and the same tokens decoded in lockstep (every completion as long as the mean) take
    ``a mean(L) + b sum(L)``: the barrier costs ``a (max(L) - mean(L))`` seconds. Summed over rounds. A larger call
    runs in waves, which these two numbers do not see (``benchmarks/streaming_small_batch.py`` models the queue).

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


def replace_last(metrics: dict[str, list], name: str, value: float) -> None:
    """Overwrite the value TRL appended last to ``metrics[name]`` (nothing happens if TRL logged none)."""
    if metrics.get(name):
        metrics[name][-1] = float(value)


_LENGTH_METRICS = tuple(f"completions/{m}" for m in (
    "mean_length", "min_length", "max_length", "clipped_ratio", "mean_terminated_length", "min_terminated_length",
    "max_terminated_length"))


def correct_padding_metrics(
    metrics: dict[str, list],
    lengths: np.ndarray,
    truncated: np.ndarray,
    is_padding: np.ndarray,
    unfilled: int,
    num_groups: int,
) -> None:
    """Recompute TRL's completion-length metrics over real rows only, and count fill groups as zero-std groups.

    TRL computed ``completions/*`` over every row of the batch it was handed, padding rows (a single EOS token)
    included, and counts a fill group (all rewards NaN, so its std is NaN) as a group with non-zero reward std.
    This replaces the value TRL has just appended for the current batch (NaN when every row is padding).

    Parameters
    ----------
    metrics : dict
        ``trainer._metrics["train"]``.
    lengths : numpy.ndarray
        ``(B*k,)`` completion lengths of the global batch in tokens, in row order.
    truncated : numpy.ndarray
        ``(B*k,)`` bool, the completion did not end with EOS/pad.
    is_padding : numpy.ndarray
        ``(B*k,)`` bool, padding row (short-group padding or fill group).
    unfilled : int
        Number of fill groups in the batch.
    num_groups : int
        B.
    """
    real = ~is_padding
    if real.any():
        real_lengths = lengths[real].astype(np.float64)
        replace_last(metrics, "completions/mean_length", real_lengths.mean())
        replace_last(metrics, "completions/min_length", real_lengths.min())
        replace_last(metrics, "completions/max_length", real_lengths.max())
        replace_last(metrics, "completions/clipped_ratio", truncated[real].mean())
        term = real_lengths[~truncated[real]]
        term = term if term.size else np.zeros(1)
        replace_last(metrics, "completions/mean_terminated_length", term.mean())
        replace_last(metrics, "completions/min_terminated_length", term.min())
        replace_last(metrics, "completions/max_terminated_length", term.max())
    else:  # an all-padding batch (every group a fill group): no real completion to measure
        for name in _LENGTH_METRICS:
            replace_last(metrics, name, float("nan"))
    if unfilled and metrics.get("frac_reward_zero_std"):
        # TRL's value is a mean over rows of isclose(group std, 0); fill-group rows (std NaN) counted as False.
        metrics["frac_reward_zero_std"][-1] += unfilled / num_groups


def zero_padding_rows(output: dict, is_padding_local: torch.Tensor) -> None:
    """Mask padding rows out of the loss in TRL's output dict (in place).

    ``completion_mask`` rows are zeroed (so the loss and TRL's token-masked metrics ignore them), and RLOO's
    sequence-level ``old_logps`` is zeroed to match (its ratio becomes exp(0) = 1, with a zero advantage).
    ``num_items_in_batch`` is recomputed by the caller (it is a collective).

    Parameters
    ----------
    output : dict
        TRL's batch dict for this process's ``(N, T)`` rows.
    is_padding_local : torch.Tensor
        ``(N,)`` bool, this process's padding rows.
    """
    keep = (~is_padding_local).to(output["completion_mask"].dtype).unsqueeze(1)
    output["completion_mask"] = output["completion_mask"] * keep
    if "old_logps" in output:
        output["old_logps"] = output["old_logps"].masked_fill(is_padding_local, 0.0)


# Metrics TRL 1.16 appends in `_compute_loss` as a mean over the micro-batch's completion tokens (masked): a padding
# row is already out of them (its completion_mask is zero), but a micro-batch without any real token is reported as
# 0 (TRL divides by max(count, 1)).
LOSS_TOKEN_METRICS = ("kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                      "clip_ratio/low_min", "clip_ratio/high_max", "cispo_clip_ratio", "vespo/phi_seq_mean")

# TRL's clip-ratio metrics (GRPO and RLOO), each one value per micro-batch.
CLIP_RATIO_METRICS = ("clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max",
                      "clip_ratio/region_mean")

# Metrics some settings make TRL average over rows (one value per sequence, no mask), with the value one padding
# row contributes. A padding row has advantage exactly 0, so no clip flag is ever set on it (TRL's flags require
# advantage < 0 or > 0); its sequence log-ratio is 0 (its mask is zero), so VESPO's weight phi(w=1) is exactly 1.
ROW_METRIC_PADDING = {
    "clip_ratio/low_mean": 0.0,
    "clip_ratio/high_mean": 0.0,
    "clip_ratio/region_mean": 0.0,
    "clip_ratio/low_min": 0.0,
    "clip_ratio/high_max": 0.0,
    "cispo_clip_ratio": 0.0,
    "vespo/phi_seq_mean": 1.0,
}


def correct_loss_metrics(
    metrics: dict[str, list],
    appended: set[str],
    real_tokens: int,
    real_rows: int,
    rows: int,
    row_metrics: tuple[str, ...] = (),
) -> None:
    """Remove padding rows from the metrics TRL has just appended for one micro-batch (in place).

    Rules, with counts summed over all processes for this micro-batch:

    - a name in ``row_metrics`` (a mean over rows, see :data:`ROW_METRIC_PADDING`): ``(value * rows - c * padding)
      / real_rows``, where ``c`` is a padding row's contribution and ``padding = rows - real_rows``. For the row
      flags' extremes: ``clip_ratio/high_max`` over rows is unchanged by padding rows (flags are 0 or 1, padding
      adds a 0); ``clip_ratio/low_min`` over the real rows is 1 exactly when every real row is low-clipped, i.e.
      when the corrected ``clip_ratio/low_mean`` counts ``real_rows`` clipped rows. NaN when ``real_rows == 0``.
    - any other name of :data:`LOSS_TOKEN_METRICS`: TRL's masked token mean already excludes padding rows; NaN when
      ``real_tokens == 0`` (TRL reports 0 there).

    Other metrics (``policy_loss``, ``aux_loss``, ``entropy_coef``) describe the loss itself and are left alone.
    TRL's ``log`` drops NaN values from the logging-window mean; when nothing is left the SARA trainers log NaN
    (:func:`numeric_logs`).

    Parameters
    ----------
    metrics : dict
        ``trainer._metrics["train"]``.
    appended : set of str
        Names TRL appended a value to during this micro-batch's ``_compute_loss``.
    real_tokens : int
        Completion tokens in the loss mask of the micro-batch, all processes.
    real_rows, rows : int
        Non-padding rows and all rows of the micro-batch, all processes.
    row_metrics : tuple of str, optional
        Names TRL averaged over rows under the current settings (the trainer's ``_sara_row_metrics()``).

    Raises
    ------
    KeyError
        A name of ``row_metrics`` has no entry in :data:`ROW_METRIC_PADDING`.
    """
    padding = rows - real_rows
    corrected: dict[str, float] = {}
    for name in sorted(appended & set(row_metrics), key=lambda n: n.endswith(("_min", "_max"))):  # means first
        value = metrics[name][-1]
        if real_rows == 0:
            corrected[name] = float("nan")
        elif name == "clip_ratio/low_min":
            clipped = round(corrected.get("clip_ratio/low_mean", float("nan")) * real_rows)
            corrected[name] = 1.0 if clipped == real_rows else 0.0
        elif name == "clip_ratio/high_max":
            corrected[name] = value
        else:
            corrected[name] = (value * rows - ROW_METRIC_PADDING[name] * padding) / real_rows
    for name in appended & set(LOSS_TOKEN_METRICS) - set(row_metrics):
        if real_tokens == 0:
            corrected[name] = float("nan")
    for name, value in corrected.items():
        replace_last(metrics, name, value)


def global_masked_mean(accelerator, values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``values`` over the positions where ``mask`` is set, over all processes; NaN when there is none.

    Parameters
    ----------
    accelerator : accelerate.Accelerator
        Its ``reduce`` sums over processes (every process must call this function at the same point).
    values : torch.Tensor
        ``(N, T)`` per-token values of this process's rows.
    mask : torch.Tensor
        ``(N, T)`` 0/1 (or bool) mask of the same shape.

    Returns
    -------
    float
        ``sum(values * mask) / sum(mask)`` over all processes, or NaN when ``sum(mask) == 0``.
    """
    mask = mask.bool()
    local = torch.stack([torch.where(mask, values, 0.0).sum(), mask.sum()]).float()
    total, count = accelerator.reduce(local, reduction="sum").tolist()
    return total / count if count > 0 else float("nan")
