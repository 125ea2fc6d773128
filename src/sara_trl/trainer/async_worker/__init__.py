"""SARA in TRL 1.16's asynchronous trainer: a rollout worker for ``AsyncGRPOTrainer(rollout_worker=...)``.

Modules, one job each: :mod:`.config` (``AsyncWorkerConfig``: server, sampling, success rule, windows),
:mod:`.client` (the server seam: one streamed ``/v1/completions`` request per rollout), :mod:`.scoring` (one reward
pass over completions of different prompts, success labels), :mod:`.accounting` (one metrics dict per window),
:mod:`.loop` (the event loop: the continuous collector driven by requests, committed groups pushed as TRL samples),
:mod:`.worker` (``SaraAsyncRolloutWorker``: TRL's ``RolloutWorkerProtocol``, the thread).
"""

from sara_trl.trainer.async_worker.client import Completion, CompletionsClient, OpenAICompletionsClient
from sara_trl.trainer.async_worker.config import AsyncWorkerConfig
from sara_trl.trainer.async_worker.worker import SaraAsyncRolloutWorker

__all__ = ["AsyncWorkerConfig", "Completion", "CompletionsClient", "OpenAICompletionsClient",
           "SaraAsyncRolloutWorker"]
