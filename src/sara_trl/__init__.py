"""sara_trl: Sequential Adaptive Rollout Allocation (SARA) for TRL.

The allocation core (:mod:`sara_trl.allocation`) is torch-free; the trainer exports below are resolved lazily
(as TRL's own ``__init__`` does) so that ``import sara_trl.allocation`` never imports torch, TRL or transformers.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "SaraConfig": "sara_trl.trainer",
    "SaraRLOOConfig": "sara_trl.trainer",
    "SaraGRPOTrainer": "sara_trl.trainer",
    "SaraRLOOTrainer": "sara_trl.trainer",
    # TRL's asynchronous trainer (trl.experimental.async_grpo), imported only when asked for
    "SaraAsyncGRPOConfig": "sara_trl.trainer.async_config",
    "SaraAsyncGRPOTrainer": "sara_trl.trainer.async_grpo",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover
    from sara_trl.trainer import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer  # noqa: F401
    from sara_trl.trainer.async_config import SaraAsyncGRPOConfig  # noqa: F401
    from sara_trl.trainer.async_grpo import SaraAsyncGRPOTrainer  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sara_trl' has no attribute {name!r}")
