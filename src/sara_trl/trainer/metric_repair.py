"""Repairing TRL's logged metrics after a replay: every correction SARA makes to a metric TRL computed, in one place.

SARA replays B*k rows through TRL's unchanged pipeline (:mod:`sara_trl.trainer.replay`), some of them padding rows
(short groups, fill groups). TRL computes its metrics over every row it is handed, so each metric that a padding row
entered is recomputed here over the real rows, or set to NaN when no real row is left. Every logged metric stays a
number: a window without a valid value is logged as NaN, where TRL logs None (:func:`numeric_logs`).

When each correction runs:

- after the replay, for a generation batch with padding rows (:func:`mask_padding_rows`): padding rows are masked out
  of the loss (:func:`zero_padding_rows`, ``num_items_in_batch``, ``num_input_tokens_seen``), the completion-length
  metrics and ``frac_reward_zero_std`` are recomputed (:func:`correct_padding_metrics`), with ``tools=`` also
  ``tools/call_frequency`` (:func:`correct_tool_metrics`), and the trainer's
  ``_sara_fix_replay_metrics`` hook recomputes what its TRL base logged during the replay: GRPO's vLLM
  ``sampling/*`` (:func:`repair_grpo_sampling_metrics`), RLOO's ``kl`` (:func:`repair_rloo_kl`);
- after each micro-batch's loss (:func:`loss_with_real_row_metrics`): the loss-time ``kl``, ``entropy`` and clip ratios
  (:func:`correct_loss_metrics`);
- before each ``log`` (:func:`numeric_logs`): None becomes NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from trl.trainer.utils import nanmax, nanmin

from sara_trl.trainer.replay import PADDING_COMPLETION_TOKENS, PADDING_KEY
from sara_trl.trainer.trl import port

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["CLIP_RATIO_METRICS", "LOSS_TOKEN_METRICS", "ROW_METRIC_PADDING", "SAMPLING_ORIGIN_METRICS",
           "correct_loss_metrics", "correct_padding_metrics", "correct_tool_metrics", "global_masked_mean",
           "log_sampling_difference_by_origin", "loss_with_real_row_metrics", "mask_padding_rows", "model_tokens",
           "numeric_logs", "repair_grpo_sampling_metrics", "repair_rloo_kl", "replace_last", "zero_padding_rows"]


def numeric_logs(metrics: dict[str, list], logs: dict, prefix: str = "") -> None:
    """Move every metric with no valid value in the window out of ``metrics`` and into ``logs`` as NaN (in place).

    TRL's ``log`` averages each metric's non-NaN values and logs None when there is none; called just before it,
    this logs ``float("nan")`` for those metrics instead, so every logged metric stays a number.

    Parameters
    ----------
    metrics : dict
        ``port.metrics(trainer, mode)``.
    logs : dict
        The dict about to be logged.
    prefix : str
        ``"eval_"`` in evaluation (TRL's prefix), else ``""``.
    """
    for name in [name for name, values in metrics.items() if all(math.isnan(float(v)) for v in values)]:
        del metrics[name]
        logs[prefix + name] = float("nan")


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
        ``port.metrics(trainer)``.
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


def correct_tool_metrics(metrics: dict[str, list], cache: Any, plan_rollouts: np.ndarray) -> None:
    """Recompute TRL's ``tools/call_frequency`` (tool calls per row) over real rows (``tools=``; NaN when every row is
    padding). Padding rows made no tool call, so ``tools/failure_frequency`` (failures per call) is TRL's already.

    Parameters
    ----------
    metrics : dict
        ``port.metrics(trainer)``.
    cache : sara_trl.trainer.rollout.RolloutCache
        The step's rollouts (each with the record of TRL's tool loop).
    plan_rollouts : numpy.ndarray
        ``(B*k,)`` rollout id of each row of the global batch, -1 for a padding row.
    """
    real = [int(r) for r in plan_rollouts if r >= 0]
    calls = sum(cache.trajectories[r].tool_calls for r in real)
    replace_last(metrics, "tools/call_frequency", calls / len(real) if real else float("nan"))


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


# Metrics TRL appends in `_compute_loss` as a mean over the micro-batch's completion tokens (masked): a padding
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
        ``port.metrics(trainer)``.
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


# ---------------------------------------------------------------------------------------------- on the trainer
def mask_padding_rows(trainer: SaraTrainerBase, output: dict, layout: Any, cache: Any, stats: Any) -> None:
    """After the replay of a batch with padding rows: mask them out of the loss and repair TRL's replay-time metrics.

    Decided from the global row plan, so every process takes part in the collectives (call it on every process, and
    only when ``layout.is_padding.any()``). Adds :data:`~sara_trl.trainer.replay.PADDING_KEY` to ``output``.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer (its ``accelerator``, ``state``, ``_metrics``, tokenizer and ``_sara_fix_replay_metrics``).
    output : dict
        TRL's batch dict for this process's rows (modified in place).
    layout : sara_trl.trainer.replay.RowLayout
        The replayed rows (the global plan, this process's share, and the replay with its prompt lengths and
        log-probs).
    cache : sara_trl.trainer.rollout.RolloutCache
        The step's rollouts.
    stats : sara_trl.allocation.StepStats
        The step's accounting (``unfilled``).
    """
    accelerator, device = trainer.accelerator, trainer.accelerator.device
    metrics = port.metrics(trainer)
    is_padding, plan_rollouts, replay = layout.is_padding, layout.plan_rollouts, layout.replay
    pad_local = torch.as_tensor(is_padding[layout.local], device=device)
    zero_padding_rows(output, pad_local)
    if "num_items_in_batch" in output:
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        output["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()
    # TRL counted each padding row's prompt and its EOS tokens in `num_input_tokens_seen`.
    pad_tokens = sum(length + PADDING_COMPLETION_TOKENS
                     for length, pad in zip(replay.prompt_lengths, is_padding[layout.local]) if pad)
    pad_tokens = accelerator.gather(torch.tensor([pad_tokens], device=device)).sum().item()
    trainer.state.num_input_tokens_seen -= pad_tokens
    metrics["num_tokens"] = [trainer.state.num_input_tokens_seen]
    eos_and_pad = {*trainer.eos_token_ids, port.tokenizer(trainer).pad_token_id}
    lengths = np.asarray([model_tokens(cache, r) if r >= 0 else PADDING_COMPLETION_TOKENS for r in plan_rollouts])
    truncated = np.asarray(
        [r >= 0 and (not cache.completion_ids[r] or cache.completion_ids[r][-1] not in eos_and_pad)
         for r in plan_rollouts]
    )
    correct_padding_metrics(metrics, lengths, truncated, is_padding, stats.unfilled, trainer.args.num_groups)
    if getattr(trainer, "tools", None):
        correct_tool_metrics(metrics, cache, plan_rollouts)
    trainer._sara_fix_replay_metrics(output, pad_local, replay.logps)
    output[PADDING_KEY] = pad_local


def model_tokens(cache: Any, rollout_id: int) -> int:
    """A rollout's completion length as TRL's metrics count it: only the model's tokens when a custom
    ``rollout_func`` returned an ``env_mask`` (TRL counts ``sum(tool_mask)``), else every completion token."""
    trajectory = cache.trajectories.get(rollout_id)
    if trajectory is not None and trajectory.env_mask is not None:
        return int(sum(trajectory.env_mask))
    return len(cache.completion_ids[rollout_id])


def loss_with_real_row_metrics(trainer: SaraTrainerBase, compute_loss: Callable[[dict], torch.Tensor], inputs: dict,
                               padding: torch.Tensor) -> torch.Tensor:
    """TRL's loss of one micro-batch holding padding rows, then its just-appended metrics made to exclude them.

    One extra small collective per such micro-batch counts real tokens and rows over all processes; see
    :func:`correct_loss_metrics` for the rules.

    Parameters
    ----------
    trainer : SaraTrainerBase
        The SARA trainer.
    compute_loss : callable
        TRL's ``_compute_loss`` bound to the model: ``compute_loss(inputs) -> loss``.
    inputs : dict
        The micro-batch, without :data:`~sara_trl.trainer.replay.PADDING_KEY`.
    padding : torch.Tensor
        ``(N,)`` bool, the micro-batch's padding rows.

    Returns
    -------
    torch.Tensor
        TRL's loss, unchanged.
    """
    mode = "train" if trainer.model.training else "eval"
    metrics = port.metrics(trainer, mode)
    before = {name: len(values) for name, values in metrics.items()}
    loss = compute_loss(inputs)
    appended = {name for name, values in metrics.items() if len(values) > before.get(name, 0)}
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    local = torch.tensor([float(mask.sum()), float((~padding).sum()), float(len(padding))], device=mask.device)
    real_tokens, real_rows, rows = (int(v) for v in trainer.accelerator.reduce(local, reduction="sum").tolist())
    correct_loss_metrics(metrics, appended, real_tokens, real_rows, rows, trainer._sara_row_metrics())
    return loss


def repair_grpo_sampling_metrics(trainer: SaraTrainerBase, output: dict, is_padding_local: torch.Tensor) -> None:
    """GRPO: recompute the vLLM importance-sampling metrics (``sampling/*``) over real tokens.

    TRL computes them in ``_generate_and_score_completions`` over every row's tokens: a padding row has no
    sampling log-prob (NaN), so its importance ratio is exactly 1 and entered the min/mean/max, and a process
    holding only padding rows reported 0. Here, as in TRL: per process the mean and max of
    ``|old log-prob - sampling log-prob|`` and the min/mean/max of the importance ratio (per token, or per
    sequence in the ``sequence_*`` modes), then the mean / max / min over processes; a process without a real
    token is left out (NaN), and each value is NaN when no process has one.
    """
    uses_is = trainer.use_vllm and trainer.vllm_importance_sampling_correction
    if not uses_is or "importance_sampling_ratio" not in output:
        return
    mask = output["completion_mask"].bool()
    if "tool_mask" in output:
        mask = mask & output["tool_mask"].bool()
    metrics = port.metrics(trainer)
    nan = torch.tensor(float("nan"), device=mask.device)
    old, sampling = output.get("old_per_token_logps"), output.get("sampling_per_token_logps")
    if old is not None and sampling is not None:
        delta = (old - sampling).abs()
        delta = delta[mask & ~torch.isnan(delta)]
        local = torch.stack([delta.mean(), delta.max()]) if delta.numel() else torch.stack([nan, nan])
        gathered = trainer.accelerator.gather(local.unsqueeze(0)).view(-1, 2)
        replace_last(metrics, "sampling/sampling_logp_difference/mean", gathered[:, 0].nanmean().item())
        replace_last(metrics, "sampling/sampling_logp_difference/max", nanmax(gathered[:, 1]).item())
    ratio = output["importance_sampling_ratio"]
    if trainer.vllm_importance_sampling_mode in ("sequence_mask", "sequence_truncate"):
        ratio = ratio[~is_padding_local].flatten()  # (N, 1): one ratio per sequence
    else:
        ratio = ratio[mask]
    local = torch.stack([ratio.min(), ratio.mean(), ratio.max()]) if ratio.numel() else torch.stack([nan] * 3)
    gathered = trainer.accelerator.gather(local.unsqueeze(0)).view(-1, 3)
    replace_last(metrics, "sampling/importance_sampling_ratio/min", nanmin(gathered[:, 0]).item())
    replace_last(metrics, "sampling/importance_sampling_ratio/mean", gathered[:, 1].nanmean().item())
    replace_last(metrics, "sampling/importance_sampling_ratio/max", nanmax(gathered[:, 2]).item())


# ``sara/<name>`` logged by :func:`log_sampling_difference_by_origin`: per origin of the trained rollouts, the mean and
# max over tokens.
SAMPLING_ORIGIN_METRICS = tuple(f"sampling_logp_difference_{origin}/{stat}"
                                for origin in ("fresh", "carried_in") for stat in ("mean", "max"))


def log_sampling_difference_by_origin(trainer: SaraTrainerBase, output: dict, layout: Any, cache: Any) -> None:
    """GRPO on vLLM with ``carry_over``: TRL's sampling log-prob difference split by where each trained rollout was
    generated (call it on every process: it gathers).

    TRL's ``sampling/sampling_logp_difference/*`` mixes two things under ``carry_over``: the engine's numerical
    mismatch with the trained model (the fresh rollouts, generated this step by the current policy), and the policy
    lag of the rollouts carried in from the previous step (sampled by the policy of the previous generation batch;
    TRL's importance-sampling correction weights them like any other mismatch). Logged, over every process's
    real tokens (padding rows and tool tokens left out), as the token mean and max of ``|old log-prob - sampling
    log-prob|`` (nats per token):

    - ``sara/sampling_logp_difference_fresh/mean``, ``.../max``: the rollouts generated this step;
    - ``sara/sampling_logp_difference_carried_in/mean``, ``.../max``: the carried-in ones, only in a step that trains
      some (else absent).

    Parameters
    ----------
    trainer : SaraGRPOTrainer
        With ``use_vllm``, ``vllm_importance_sampling_correction`` and ``carry_over`` (else nothing is logged).
    output : dict
        TRL's batch dict for this process's rows (``old_per_token_logps``, ``sampling_per_token_logps``: ``(N, T)``).
    layout : sara_trl.trainer.replay.RowLayout
        The replayed rows (``plan_rollouts`` and this process's ``local`` share).
    cache : sara_trl.trainer.rollout.RolloutCache
        The step's rollouts (:meth:`~sara_trl.trainer.rollout.RolloutCache.generated_ids` tells fresh from carried).
    """
    if not (trainer.args.carry_over and getattr(trainer, "use_vllm", False)
            and getattr(trainer, "vllm_importance_sampling_correction", False)):
        return
    old, sampling = output.get("old_per_token_logps"), output.get("sampling_per_token_logps")
    if old is None or sampling is None:
        return
    local_rollouts = layout.plan_rollouts[layout.local]
    fresh = np.isin(local_rollouts, cache.generated_ids())  # padding rows (-1) are neither
    carried = ~fresh & (local_rollouts >= 0)
    mask = output["completion_mask"].bool()
    if "tool_mask" in output:
        mask = mask & output["tool_mask"].bool()
    delta = (old - sampling).abs()
    valid = mask & ~torch.isnan(delta)
    stats = []
    for rows in (fresh, carried):
        picked = valid & torch.as_tensor(rows, device=delta.device).unsqueeze(1)
        values = delta[picked]
        stats += [values.sum(), torch.tensor(float(values.numel()), device=delta.device),
                  values.max() if values.numel() else torch.tensor(float("-inf"), device=delta.device)]
    gathered = trainer.accelerator.gather(torch.stack(stats).float().unsqueeze(0)).view(-1, 6)
    metrics = port.metrics(trainer)
    for column, (mean_name, max_name) in zip((0, 3), (SAMPLING_ORIGIN_METRICS[:2], SAMPLING_ORIGIN_METRICS[2:])):
        total, count = gathered[:, column].sum().item(), gathered[:, column + 1].sum().item()
        if count > 0:
            metrics[f"sara/{mean_name}"].append(total / count)
            metrics[f"sara/{max_name}"].append(gathered[:, column + 2].max().item())


def repair_rloo_kl(trainer: SaraTrainerBase, output: dict, replay_logps: list) -> None:
    """RLOO: recompute the ``kl`` metric over real tokens (NaN when there is none).

    TRL logs it in ``_generate_and_score_completions`` as the mean over completion tokens of RLOO's first-order
    estimate ``old log-prob - reference log-prob`` (Ahmadian et al., 2024), before SARA masks padding rows: every
    padding row's EOS tokens were in it. Both log-prob tensors are the replay's two forward passes (policy, then
    reference model); nothing is logged when ``beta == 0``.

    Raises
    ------
    RuntimeError
        The replay made fewer than two forward passes with ``beta != 0`` (a TRL version that computes the
        reference log-probs elsewhere).
    """
    if trainer.beta == 0.0:
        return
    if len(replay_logps) < 2:
        raise RuntimeError(
            f"RLOO replay made {len(replay_logps)} forward passes; SARA expects the policy's and the reference "
            "model's (TRL) to recompute the `kl` metric without padding rows."
        )
    old, ref = replay_logps[0], replay_logps[1]
    kl = global_masked_mean(trainer.accelerator, old - ref, output["completion_mask"])
    replace_last(port.metrics(trainer), "kl", kl)
