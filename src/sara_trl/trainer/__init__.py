"""SARA inside TRL: `SaraConfig`/`SaraGRPOTrainer` and `SaraRLOOConfig`/`SaraRLOOTrainer`.

Module map: :mod:`.config` (the configs), :mod:`.hooks` (what a trainer base must provide: the TRL seam, with the
checklist for a new base), :mod:`.mixin` (TRL's hook methods, each delegating to one of the next five), :mod:`.prepare`
(checks before and set-up after TRL's construction), :mod:`.plan` (how a run collects, decided once), :mod:`.collect`
(collecting one step on the core's event loop), :mod:`.round_engine` (the batch engine: one TRL generation call per
round, lock-step), :mod:`.streaming` (the request engine and the one scorer), :mod:`.trajectory` (multi-turn rollouts),
:mod:`.replay` (laying out rows and replaying them through TRL), :mod:`.checkpoint` (SARA's state in a checkpoint),
:mod:`.rollout` (the rollout cache, the reward pass and success labels), :mod:`.distributed` (lock-step rounds over
processes), :mod:`.metrics` (``sara/*`` metrics), :mod:`.metric_repair` (padding-free TRL metrics), :mod:`.iterable` (an
iterable dataset as the prompt stream's source), :mod:`.vllm_cpu` (vLLM's CPU platform), :mod:`.progress` (console
output), :mod:`.model_card` (citation), :mod:`.grpo` and :mod:`.rloo` (the two trainers).
"""

from sara_trl.trainer.config import SaraConfig, SaraRLOOConfig
from sara_trl.trainer.grpo import SaraGRPOTrainer
from sara_trl.trainer.progress import hide_renamed_checkpointing_warnings  # noqa: F401 (installed per trainer)
from sara_trl.trainer.rloo import SaraRLOOTrainer

__all__ = ["SaraConfig", "SaraGRPOTrainer", "SaraRLOOConfig", "SaraRLOOTrainer"]
