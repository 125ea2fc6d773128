"""`AsyncWorkerConfig`: the settings of SARA's asynchronous rollout worker that are not allocation options.

The allocation options (allocator, k, n0, tau_low, commit_min, ...) are :class:`sara_trl.allocation.AllocationConfig`'s;
this dataclass holds what the worker needs besides: the server and its sampling parameters (the names and defaults of
TRL 1.16's ``AsyncRolloutWorker`` arguments), how a rollout is labelled a success (as in the synchronous trainers),
and how often an accounting window closes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["AsyncWorkerConfig"]


def _help(text: str) -> dict:
    return {"help": " ".join(text.split())}


@dataclass
class AsyncWorkerConfig:
    """Settings of :class:`~sara_trl.trainer.async_worker.SaraAsyncRolloutWorker` beyond the allocation options.

    Raises
    ------
    ValueError
        From ``__post_init__``: a count, a length or a time that is not positive, a sampling parameter out of range.
    """

    model_name: str = field(default="model", metadata=_help(
        "The model name the server serves (the `model` of each request; with `lora_name`, the base model)."))
    vllm_server_url: str = field(default="http://localhost:8000", metadata=_help(
        "Base URL of the OpenAI-compatible server (vLLM's `python -m vllm.entrypoints.openai.api_server`)."))
    lora_name: Optional[str] = field(default=None, metadata=_help(
        """With TRL's LoRA weight sync: requests name the adapter `f"{lora_name}-v{model_version}"` of the policy
        version current when each request is sent (as TRL's own worker does). None: the base model."""))
    max_inflight_tasks: int = field(default=32, metadata=_help(
        """Requests (rollouts) in flight at once, >= k: the collector's concurrency cap, and the HTTP client's
        connection limit."""))
    queue_maxsize: int = field(default=0, metadata=_help(
        "Capacity of `rollout_buffer` in samples (0: unbounded); a full buffer holds the worker back (backpressure)."))
    max_tokens: int = field(default=256, metadata=_help(
        "Completion length cap in tokens (TRL's `max_completion_length`), >= 1."))
    temperature: float = field(default=1.0, metadata=_help("Sampling temperature, >= 0."))
    top_p: float = field(default=1.0, metadata=_help("Nucleus sampling mass, in (0, 1]."))
    top_k: int = field(default=0, metadata=_help("Top-k sampling (0 or -1: off)."))
    min_p: Optional[float] = field(default=None, metadata=_help("Min-p sampling in [0, 1], None: off."))
    repetition_penalty: float = field(default=1.0, metadata=_help("Repetition penalty, > 0."))
    request_timeout: float = field(default=120.0, metadata=_help("Seconds one request may take, > 0."))
    chat_template_kwargs: Optional[dict] = field(default=None, metadata=_help(
        "Extra keyword arguments of `apply_chat_template` when a prompt is rendered."))
    success_reward_func: Optional[str] = field(default=None, metadata=_help(
        """Name of the reward function whose raw value labels a rollout a success (`> success_threshold`), as in
        the synchronous trainers; None: the sum of every reward function (TRL's asynchronous reward)."""))
    success_threshold: Optional[float] = field(default=None, metadata=_help(
        """A rollout is a success when its score is `> success_threshold` (paper App. F). None: 0.5, the default for
        0/1 rewards, checked against the scores of the first window (an error if they are not 0/1 labels)."""))
    window_groups: int = field(default=8, metadata=_help(
        "An accounting window closes (one dict to `metrics_queue`) after this many committed groups, >= 1 ..."))
    window_seconds: float = field(default=10.0, metadata=_help("... or after this many seconds, > 0."))
    seed: int = field(default=0, metadata=_help("Seed of the prompt order and of the per-request sampling seeds."))
    poll_seconds: float = field(default=0.05, metadata=_help(
        "How long the worker's loop waits for a completion before it looks at `stop()` again, > 0."))

    def __post_init__(self):
        positive_ints = {"max_inflight_tasks": self.max_inflight_tasks, "max_tokens": self.max_tokens,
                         "window_groups": self.window_groups}
        for name, value in positive_ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.queue_maxsize, bool) or not isinstance(self.queue_maxsize, int) or self.queue_maxsize < 0:
            raise ValueError(f"queue_maxsize must be an integer >= 0 (0: unbounded), got {self.queue_maxsize!r}")
        for name in ("request_timeout", "window_seconds", "poll_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] or None, got {self.min_p!r}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty!r}")
        if self.success_threshold is not None and not math.isfinite(self.success_threshold):
            raise ValueError(f"success_threshold must be a finite number or None, got {self.success_threshold!r}")

    @property
    def threshold(self) -> float:
        """The success threshold in force (0.5 when ``success_threshold`` is None)."""
        return 0.5 if self.success_threshold is None else float(self.success_threshold)
