"""SARA inside TRL: `SaraConfig`/`SaraGRPOTrainer` and `SaraRLOOConfig`/`SaraRLOOTrainer`.

Module map: :mod:`.config` (the configs), :mod:`.mixin` (collect-then-replay, masks, checkpoints), :mod:`.rollout`
(the per-round ``rollout_fn`` and success labels), :mod:`.metrics` (``sara/*`` metrics), :mod:`.progress` (round
progress line), :mod:`.model_card` (citation), :mod:`.grpo` and :mod:`.rloo` (the two trainers).
"""

from sara_trl.trainer.config import SaraConfig, SaraRLOOConfig
from sara_trl.trainer.grpo import SaraGRPOTrainer
from sara_trl.trainer.rloo import SaraRLOOTrainer

__all__ = ["SaraConfig", "SaraGRPOTrainer", "SaraRLOOConfig", "SaraRLOOTrainer"]
