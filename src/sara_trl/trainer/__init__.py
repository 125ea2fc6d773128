"""SARA inside TRL: `SaraConfig`/`SaraGRPOTrainer` and `SaraRLOOConfig`/`SaraRLOOTrainer`.

Module map: :mod:`.config` (the configs), :mod:`.hooks` (what a trainer base must provide: the TRL seam, with the
checklist for a new base), :mod:`.mixin` (collect-then-replay, masks, checkpoints), :mod:`.rollout` (the per-round
``rollout_fn`` and success labels), :mod:`.distributed` (lock-step rounds over processes), :mod:`.metrics` (``sara/*``
metrics and padding-free TRL metrics), :mod:`.progress` (round progress line), :mod:`.model_card` (citation),
:mod:`.grpo` and :mod:`.rloo` (the two trainers).
"""

import warnings

from sara_trl.trainer.config import SaraConfig, SaraRLOOConfig
from sara_trl.trainer.grpo import SaraGRPOTrainer
from sara_trl.trainer.rloo import SaraRLOOTrainer

__all__ = ["SaraConfig", "SaraGRPOTrainer", "SaraRLOOConfig", "SaraRLOOTrainer"]


def hide_renamed_checkpointing_warnings() -> None:
    """Hide the FutureWarnings recent transformers raise when TRL 1.16 calls their renamed checkpointing methods.

    TRL calls ``is_gradient_checkpointing`` and ``gradient_checkpointing_enable``/``_disable`` (renamed
    ``*activation_checkpointing*`` in recent transformers releases, e.g. 5.24) around every generation and loss pass;
    the user can neither act on the warning nor avoid it by a setting. Only those three messages are filtered; every
    other warning still shows. Called once when :mod:`sara_trl.trainer` is imported.
    """
    warnings.filterwarnings(
        "ignore",
        message=r"`(is_gradient_checkpointing|gradient_checkpointing_enable|gradient_checkpointing_disable)` is "
        r"deprecated",
        category=FutureWarning,
    )


hide_renamed_checkpointing_warnings()
