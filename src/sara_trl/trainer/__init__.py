"""SARA inside TRL: `SaraConfig`/`SaraGRPOTrainer` and `SaraRLOOConfig`/`SaraRLOOTrainer`.

Module map: :mod:`.config` (the configs), :mod:`.hooks` (what a trainer base must provide: the TRL seam, with the
checklist for a new base), :mod:`.mixin` (collect-then-replay, masks, checkpoints), :mod:`.rollout` (the per-round
``rollout_fn`` and success labels), :mod:`.distributed` (lock-step rounds over processes), :mod:`.metrics` (``sara/*``
metrics and padding-free TRL metrics), :mod:`.progress` (round progress line), :mod:`.model_card` (citation),
:mod:`.grpo` and :mod:`.rloo` (the two trainers).
"""

from sara_trl.trainer.config import SaraConfig, SaraRLOOConfig
from sara_trl.trainer.grpo import SaraGRPOTrainer
from sara_trl.trainer.rloo import SaraRLOOTrainer

__all__ = ["SaraConfig", "SaraGRPOTrainer", "SaraRLOOConfig", "SaraRLOOTrainer"]
