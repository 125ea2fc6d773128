"""The port to TRL 1.16 (``trl>=1.16,<1.17``): every private TRL member SARA names, and every piece of TRL code it
mirrors, with the TRL file and function each follows.

Three parts:

- :class:`TrlHooks`, the overrides of TRL's private methods that SARA answers (put in a SARA trainer's bases through
  :class:`sara_trl.trainer.mixin.SaraTrainerMixin`). Each is a few lines: during a replay it answers from the cache
  (``self.sara.replay``, a :class:`sara_trl.trainer.replay.Replay`, which counts every answer it serves), otherwise it
  calls TRL, or hands TRL's method to the mixin (collect, loss, checkpoints).
- Operations on a trainer that reach a private member (tokenizer, metric sink, prompt tokenization, one generation
  round, one reward pass, the tool loop, environments, the weight-sync marker, the checkpoint folder).
- Mirrors of TRL code (decoding, the colocated engine's sampling parameters, one tool turn of TRL's loop; for the
  asynchronous worker, the request body, prompt rendering, reward sum, advantages and sample layout of TRL's default
  rollout worker), each citing the TRL function it follows; a TRL upgrade re-reads exactly these.

What TRL must keep doing for SARA to be correct is written in :data:`REPLAY_HOOKS`: during the replay of one
generation batch, TRL's ``_generate_and_score_completions`` calls each listed hook exactly once (the environments'
``reset`` once per row); :meth:`sara_trl.trainer.replay.Replay.check_served` raises when it did not.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import trl
from trl.chat_template_utils import parse_response
from trl.data_utils import is_conversational
from trl.extras.profiling import profiling_context

__all__ = [
    "ASYNC_ADVANTAGE_EPS", "async_completion_payload", "async_cpu_stand_ins_installed", "async_group_advantages",
    "async_group_rewards", "async_lora_name", "async_prompt_ids", "async_request_model", "async_rollout_sample",
    "install_async_cpu_stand_ins",
    "REPLAY_HOOKS", "TRL_LINE", "TRL_MEMBERS", "TRL_VERSION", "TrlHooks", "calculate_rewards",
    "captured_extra_logs", "checkpoint_folder", "colocate_sampling_params", "env_tools", "environment_pool",
    "grpo_decode", "grpo_generate_round", "has_tool_loop", "is_vlm", "local_reward_pass", "log_completion_extra",
    "metrics", "multi_environment", "parse_turn", "replaced_environment_pool", "rloo_decode", "rloo_generate_round",
    "sampled_logprobs", "set_batch_environments", "standalone_tools", "sync_weights_once",
    "tokenize_prompts", "tokenizer", "tool_turn", "trainer_name", "trl_paper", "trl_refuses_dataset", "vllm_awake",
]

TRL_LINE = "1.16"
TRL_VERSION = trl.__version__  # the installed release of this line, named in the replay guard's error

# Class members SARA drives (checked on the trainer class at construction: sara_trl.trainer.hooks.check_trainer_class).
TRL_MEMBERS = ("_tokenize_prompts", "_calculate_rewards", "_generate_and_score_completions", "_generate_single_turn",
               "_get_per_token_logps_and_entropies", "_compute_loss", "_log_completion_extra", "_save_checkpoint",
               "_load_optimizer_and_scheduler")

# What the replay serves, and the TRL hook through which TRL 1.16's `_generate_and_score_completions` must ask for it
# (trl/trainer/grpo_trainer.py `_generate`, `_generate_and_score_completions`; rloo_trainer.py the same).
REPLAY_HOOKS = {
    "completions": "_generate_single_turn",
    "rollout_output": "rollout_func",
    "prompt_tokens": "_tokenize_prompts",
    "tool_loop": "_tool_call_loop",
    "rewards": "_calculate_rewards",
    "environment_resets": "the `reset` of the environments TRL draws from `_environment_pool`",
}


def _replay(trainer: Any) -> Any:
    """The replay in progress (``trainer.sara.replay``), or None."""
    run = getattr(trainer, "sara", None)
    return None if run is None else run.replay


class TrlHooks:
    """TRL 1.16's private methods that SARA overrides; each answers from the replay in progress or calls TRL.

    The SARA side (collect, lay out, replay; the padding-free loss metrics; SARA's checkpoint state) is in
    :class:`sara_trl.trainer.mixin.SaraTrainerMixin`, which reaches TRL only through these overrides and the
    functions of this module.
    """

    def _generate_and_score_completions(self, inputs):
        """Training: SARA's generation batch (``_sara_generation_batch``: collect, then replay through TRL's own
        method, handed in); evaluation and the replay itself: TRL's."""
        if not self.model.training or _replay(self) is not None:
            return super()._generate_and_score_completions(inputs)
        return self._sara_generation_batch(super()._generate_and_score_completions)

    def _tokenize_prompts(self, prompts):
        """TRL's tokenization; while replaying a custom ``rollout_func``'s rows, the prompt ids it returned."""
        replay = _replay(self)
        if replay is None or replay.prompt_ids is None:
            return super()._tokenize_prompts(prompts)
        return replay.prompt_tokens(prompts)

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        """Generate with TRL; during the replay, the cached completions (and vLLM log-probs for GRPO)."""
        replay = _replay(self)
        if replay is None:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        return replay.completions(prompt_ids, self._sara_returns_logprobs)

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        """TRL's tool loop (GRPO); during the replay, the cached trajectories."""
        replay = _replay(self)
        if replay is None:
            return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images,
                                           multimodal_fields)
        return replay.tool_loop(completions)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """Score with TRL; during the replay, the cached, already gathered ``(B*k, F)`` reward rows."""
        replay = _replay(self)
        if replay is None:
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return replay.reward_rows(len(prompts) * self.accelerator.num_processes)

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        """TRL's forward pass; during the replay its per-token log-probs are also kept (for the metric repairs)."""
        result = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        replay = _replay(self)
        if replay is not None:
            replay.logps.append(result[0].detach())
        return result

    def _compute_loss(self, model, inputs):
        """TRL's loss of one micro-batch, through ``_sara_loss`` (padding rows kept out of the metrics)."""
        return self._sara_loss(inputs, lambda batch: super(TrlHooks, self)._compute_loss(model, batch))

    def _save_checkpoint(self, model, trial):
        """SARA's state into the checkpoint folder first, then TRL's save (a ``push_to_hub`` then includes it)."""
        self._sara_save_state(trial)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """TRL's restore (through ``_sara_load_state``, which also restores SARA's state)."""
        self._sara_load_state(checkpoint, super()._load_optimizer_and_scheduler)


# ------------------------------------------------------------------------------------------------ trainer members
def tokenizer(trainer: Any) -> Any:
    """The trainer's text tokenizer (``_tokenizer``; the processing class itself for a text model)."""
    return trainer._tokenizer


def metrics(trainer: Any, mode: str = "train") -> dict[str, list]:
    """TRL's metric sink for ``mode`` (``"train"`` or ``"eval"``): ``{name: [values]}``, averaged (NaN-free) over
    each logging window by TRL's ``log`` (``_metrics[mode]``)."""
    return trainer._metrics[mode]


def tokenize_prompts(trainer: Any, prompts: list) -> tuple[list[list[int]], Any, dict]:
    """TRL's ``_tokenize_prompts``: ``(R,)`` prompts -> ``(prompt_ids (R,) lists of ids, images, multimodal fields)``
    (chat template applied, with the tool schema of each row's environment)."""
    return trainer._tokenize_prompts(prompts)


def calculate_rewards(trainer: Any, rows: list[dict], prompts: list, completions: list,
                      completion_ids: list[list[int]]) -> Any:
    """One reward pass (``_calculate_rewards``): ``(R * processes, F)`` float rows gathered over processes, NaN
    where a function returned None (inside :func:`local_reward_pass`: this process's ``(R, F)`` rows)."""
    return trainer._calculate_rewards(rows, prompts, completions, completion_ids)


@contextlib.contextmanager
def captured_extra_logs(trainer: Any) -> Iterator[dict[str, list]]:
    """Collect what reward functions pass to ``log_extra`` during one reward pass, away from TRL's pending buffer
    (``_pending_extra_logs``, which TRL flushes against the *trained* rows); yields ``{column: values}``."""
    saved = trainer._pending_extra_logs
    captured: dict[str, list] = defaultdict(list)
    trainer._pending_extra_logs = captured
    try:
        yield captured
    finally:
        trainer._pending_extra_logs = saved


@contextlib.contextmanager
def local_reward_pass(trainer: Any) -> Iterator[None]:
    """Make the TRL base's ``_calculate_rewards`` return this process's reward rows without gathering them.

    TRL 1.16 ends ``_calculate_rewards`` (trl/trainer/grpo_trainer.py, rloo_trainer.py) with
    ``gather(rewards_per_func)``, a collective. In streaming collection every process scores its own completions at
    its own pace, so the module-level name ``gather`` of the module defining the base's ``_calculate_rewards`` is the
    identity for the duration of the block (a no-op with one process).

    Raises
    ------
    TypeError
        No TRL class in the trainer's bases defines ``_calculate_rewards`` with a module-level ``gather``.
    """
    if trainer.accelerator.num_processes == 1:
        yield
        return
    module = None
    for klass in type(trainer).__mro__:
        if "_calculate_rewards" in vars(klass) and klass.__module__.startswith("trl."):
            module = sys.modules[klass.__module__]
            break
    if module is None or not callable(getattr(module, "gather", None)):
        raise TypeError(f"{type(trainer).__name__}: no TRL base defines _calculate_rewards with a module-level "
                        "`gather`; streaming collection on several processes needs a local reward pass")
    original = module.gather
    module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        module.gather = original


def log_completion_extra(trainer: Any, column: str, values: list) -> None:
    """Add a column to TRL's completions table (``_log_completion_extra``): one value per local row of the batch
    being scored, flushed by TRL's pipeline."""
    trainer._log_completion_extra(column, values)


def checkpoint_folder(trainer: Any, trial: Any) -> str:
    """The folder TRL's ``_save_checkpoint`` is about to write (``_get_output_dir(trial)/checkpoint-<step>``)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")


def is_vlm(trainer: Any) -> bool:
    """Whether TRL resolved a vision-language processor (``_is_vlm``)."""
    return bool(getattr(trainer, "_is_vlm", False))


def has_tool_loop(cls: type) -> bool:
    """Whether the TRL base has a tool loop (``_tool_call_loop``: GRPO 1.16, not RLOO)."""
    return callable(getattr(cls, "_tool_call_loop", None))


def trl_refuses_dataset(train_dataset: Any, args: Any, environment_factory: bool = False) -> bool:
    """Whether TRL 1.16's own argument checks (``GRPOTrainer.__init__`` / ``RLOOTrainer.__init__``, the "Datasets"
    block) will refuse this ``train_dataset``: None without an ``environment_factory`` (GRPO) or at all (RLOO; an
    RLOO trainer never has an ``environment_factory``), neither a ``Dataset`` nor an ``IterableDataset``, or an
    iterable one with ``accelerator_config.dispatch_batches=True``. SARA then leaves the mistake to TRL, so a TRL
    user sees TRL's error in TRL's words."""
    from datasets import Dataset, IterableDataset

    if train_dataset is None:
        return not environment_factory
    if not isinstance(train_dataset, (Dataset, IterableDataset)):
        return True
    config = getattr(args, "accelerator_config", None)
    return isinstance(train_dataset, IterableDataset) and bool(getattr(config, "dispatch_batches", None))


def trl_paper(base: type) -> dict:
    """The base trainer's model-card citation record (``_paper``: ``{"title", "id", "citation"}``)."""
    return base._paper


def trainer_name(cls: type) -> str:
    """The trainer's model-card name (the ``_name`` class attribute, e.g. ``"SARA-GRPO"``), which TRL also uses in
    the default ``output_dir``."""
    return cls._name


# ------------------------------------------------------------------------------------------------ generation
def grpo_generate_round(trainer: Any, prompt_ids: list[list[int]], images: Any, multimodal_fields: dict):
    """ONE batched generation call: ``GRPOTrainer._generate_single_turn`` with ``num_generations=1`` (the request
    list is already expanded prompt-major). Returns ``(completion_ids (R,), logprobs (R,) or None)``."""
    return trainer._generate_single_turn(prompt_ids, images, multimodal_fields, 1)


def rloo_generate_round(trainer: Any, prompt_ids: list[list[int]], images: Any, multimodal_fields: dict):
    """ONE batched generation call: ``RLOOTrainer._generate_single_turn``, one completion per entry.

    RLOO's vLLM *server* path de-duplicates prompts with a stride of ``num_generations``; SARA's request list is
    already expanded, so the stride is 1 for this call. Returns ``(completion_ids (R,), None)``."""
    saved = trainer.num_generations
    trainer.num_generations = 1
    try:
        completion_ids = trainer._generate_single_turn(prompt_ids, images, multimodal_fields)
    finally:
        trainer.num_generations = saved
    return completion_ids, None


def grpo_decode(trainer: Any, prompts: list, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list:
    """Decode completions exactly as TRL 1.16's ``GRPOTrainer._generate`` does (trl/trainer/grpo_trainer.py, the
    "Decode completions" block): ``parse_response`` with each prompt's tools when the tokenizer has a response
    schema, else ``batch_decode``; conversational prompts give ``[{"role": "assistant", ...}]`` per completion."""
    if is_conversational({"prompt": prompts[0]}):
        tok = trainer._tokenizer
        if getattr(tok, "response_template", None) is not None or getattr(tok, "response_schema", None) is not None:
            if trainer.environment_factories is not None:
                tools = [trainer._env_tools[name] for name in trainer._batch_environments]
            else:
                tools = [trainer.tools] * len(completion_ids)
            return [[parse_response(tok, ids, prefix=prompt_ids[i], tools=tools[i])]
                    for i, ids in enumerate(completion_ids)]
        contents = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        return [[{"role": "assistant", "content": content}] for content in contents]
    return trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)


def rloo_decode(trainer: Any, prompts: list, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list:
    """Decode completions exactly as TRL 1.16's ``RLOOTrainer._generate`` does (trl/trainer/rloo_trainer.py)."""
    contents = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    if is_conversational({"prompt": prompts[0]}):
        return [[{"role": "assistant", "content": content}] for content in contents]
    return contents


def parse_turn(trainer: Any, ids: list[int], prefix: list[int], tools: list) -> dict:
    """One post-tool turn parsed as TRL 1.16's ``_tool_call_loop`` parses it (trl/trainer/grpo_trainer.py):
    ``parse_response`` with the prompt-and-trajectory ids as prefix; returns the assistant message dict."""
    return parse_response(trainer._tokenizer, ids, prefix=prefix, tools=tools)


def colocate_sampling_params(vllm_generation: Any) -> Any:
    """The ``vllm.SamplingParams`` TRL's colocate path uses for one completion per prompt.

    Mirrors ``VLLMGeneration.generate`` in colocate mode (trl/generation/vllm_generation.py, TRL 1.16) field for
    field: ``n=1``, repetition penalty, temperature, top-p, top-k, min-p (None -> 0), ``max_tokens =
    max_completion_length``, ``logprobs`` (0: the sampled token's log-prob), then ``generation_kwargs``, then the
    structured-output regex.

    Raises
    ------
    ValueError
        ``generation_kwargs`` asks for ``n != 1`` (streaming sends one request per rollout).
    """
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    gen = vllm_generation
    kwargs = {
        "n": 1,
        "repetition_penalty": gen.repetition_penalty,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "top_k": gen.top_k,
        "min_p": 0.0 if gen.min_p is None else gen.min_p,
        "max_tokens": gen.max_completion_length,
        "logprobs": gen.logprobs,
    }
    kwargs.update(gen.generation_kwargs)
    if kwargs["n"] != 1:
        raise ValueError(f"generation_kwargs sets n={kwargs['n']}: streaming collection sends one request per rollout")
    if gen.structured_outputs_regex is not None:
        kwargs["structured_outputs"] = StructuredOutputsParams(regex=gen.structured_outputs_regex)
    elif isinstance(structured := kwargs.get("structured_outputs"), dict):
        kwargs["structured_outputs"] = StructuredOutputsParams(**structured)
    return SamplingParams(**kwargs)


def sampled_logprobs(position_logprobs: list) -> list[float]:
    """One log-prob per completion token, as TRL's GRPO keeps them from a finished vLLM output:
    ``trl.generation.vllm_generation.extract_logprobs`` (rank-sorted, NaN -> None), then the first entry."""
    from trl.generation.vllm_generation import extract_logprobs

    output = SimpleNamespace(outputs=[SimpleNamespace(logprobs=position_logprobs)])
    logprobs, _ = extract_logprobs([output])
    return [lp[0] for lp in logprobs[0]]


def sync_weights_once(trainer: Any) -> None:
    """Push the policy's weights into the colocated engine if the optimizer step changed since the last push, as
    TRL 1.16's ``GRPOTrainer._generate_single_turn`` does (once per step; its ``_last_loaded_step`` marker)."""
    if trainer.state.global_step != trainer._last_loaded_step:
        with profiling_context(trainer, "sync_weights"):
            trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step


@contextlib.contextmanager
def vllm_awake(trainer: Any) -> Iterator[None]:
    """Keep a sleeping colocated vLLM engine awake for all rounds of one step (weights pushed once per step).

    TRL's ``VLLMGeneration.generate`` puts the engine to sleep (level 2, weights discarded) after every call and
    re-pushes all weights on the next one; with several rounds per step that would cost one full (collective) weight
    transfer per round. Here the weights are synced once (if the optimizer step changed, or they sleep: TRL's
    ``_llm_weights_sleeping``), the KV cache is woken, sleep mode is off for the rounds, and restored (engine back to
    sleep) afterwards. Other setups (no vLLM, server mode, sleep mode off) need nothing: TRL syncs once per step.
    """
    engine = getattr(trainer, "vllm_generation", None) if trainer.use_vllm else None
    if (engine is None or getattr(engine, "mode", None) != "colocate"
            or not getattr(engine, "enable_sleep_mode", False)):
        yield
        return
    if trainer.state.global_step != trainer._last_loaded_step or getattr(engine, "_llm_weights_sleeping", False):
        with profiling_context(trainer, "sync_weights"):
            engine.sync_weights()  # wakes the weights first (sleep mode is on)
        trainer._last_loaded_step = trainer.state.global_step
    engine.llm.wake_up(tags=["kv_cache"])
    engine.enable_sleep_mode = False
    try:
        yield
    finally:
        engine.enable_sleep_mode = True
        engine.llm.sleep(level=2)
        engine._llm_weights_sleeping = True


# ------------------------------------------------------------------------------------------------ tools
class _Regenerate(Exception):
    """Raised in place of TRL's regeneration call inside :func:`tool_turn`; carries the ids TRL would generate from."""

    def __init__(self, ids: list[int]):
        super().__init__("tool turn")
        self.ids = list(ids)


def tool_turn(trainer: Any, tool_dicts: tuple[list, list], prompt: Any, prompt_ids: list[int],
              completion_ids: list[int], view: list, logprobs: list | None) -> list[int] | None:
    """One iteration of TRL 1.16's ``GRPOTrainer._tool_call_loop`` for one rollout, up to its regeneration call.

    TRL's own loop runs the tool calls of ``view[0]`` (the last assistant turn), appends the assistant turn and the
    tool messages to ``view`` and builds the ids it would generate from (prompt + completion + tool suffix, its
    overlong rule included); its call of ``_generate_single_turn`` is intercepted on this instance (raising
    :class:`_Regenerate`), so nothing is generated here.

    Returns
    -------
    list of int or None
        The ids to generate the next turn from, or None when TRL found them over-long (and rolled the tool messages
        back).
    """
    trainer._sync_tool_dicts, trainer._async_tool_dicts = tool_dicts

    def regenerate(prompt_ids, *args, **kwargs):
        raise _Regenerate(prompt_ids[0])

    trainer._generate_single_turn = regenerate  # instance attribute: only this call's regeneration
    try:
        trainer._tool_call_loop([prompt], [prompt_ids], [list(completion_ids)], [view],
                                None if logprobs is None else [list(logprobs)], None, {})
    except _Regenerate as turn:
        return turn.ids
    finally:
        del trainer._generate_single_turn
    return None


# ------------------------------------------------------------------------------------------------ environments
def multi_environment(trainer: Any) -> bool:
    """Whether ``environment_factory`` is a dict (rows name their environment; ``_multi_environment``)."""
    return bool(trainer._multi_environment)


def set_batch_environments(trainer: Any, names: list) -> None:
    """Record each row's environment name (``_batch_environments``), which TRL's ``_tokenize_prompts`` and decoding
    read for the row's tool schema."""
    trainer._batch_environments = list(names)


def environment_pool(trainer: Any, name: Any) -> list:
    """TRL's pool of instances of environment ``name`` (``_environment_pool[name]``; grown by appending)."""
    return trainer._environment_pool[name]


@contextlib.contextmanager
def replaced_environment_pool(trainer: Any, stand_ins: dict[Any, list]) -> Iterator[None]:
    """While the block runs, TRL's pool (``_environment_pool``) is ``stand_ins``; the real pool and
    ``trainer.environments`` are restored afterwards."""
    pool, environments = trainer._environment_pool, trainer.environments
    trainer._environment_pool = stand_ins
    try:
        yield
    finally:
        trainer._environment_pool, trainer.environments = pool, environments


def standalone_tools(trainer: Any) -> list[Callable]:
    """The tools bound to no environment (``_standalone_tools``)."""
    return list(trainer._standalone_tools)


def env_tools(trainer: Any, name: Any) -> list:
    """The tool schema TRL renders for environment ``name`` (``_env_tools[name]``)."""
    return trainer._env_tools[name]



# ------------------------------------------------------------------------- the asynchronous trainer (experimental)
# Mirrors of TRL 1.16's default rollout worker (trl/experimental/async_grpo/async_rollout_worker.py,
# `_AsyncRolloutLoop`), used by sara_trl.trainer.async_worker so that a SARA worker and TRL's own worker build the
# same requests, rewards, advantages and samples. No private member is named: the worker's loop is re-implemented,
# these are the pieces of it that must stay identical to TRL's.
ASYNC_ADVANTAGE_EPS = 1e-8
"""The ``1e-8`` of TRL 1.16's asynchronous advantage ``(r - mean) / (std + 1e-8)`` (``_score_group``)."""


def async_prompt_ids(tokenizer: Any, prompt: list, chat_template_kwargs: dict | None = None) -> list[int]:
    """A conversational prompt's token ids as TRL 1.16's ``_AsyncRolloutLoop._generate_one`` renders them (no tools):
    ``apply_chat_template(messages, return_dict=False, add_generation_prompt=True, **chat_template_kwargs)``.

    Raises
    ------
    ValueError
        ``prompt`` is not a list of messages (TRL's asynchronous worker takes conversational prompts only).
    """
    if not (isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)):
        raise ValueError("the asynchronous worker takes conversational prompts (a list of {'role', 'content'} "
                         f"messages, as TRL's AsyncGRPOTrainer does), got {type(prompt).__name__}")
    ids = tokenizer.apply_chat_template(list(prompt), return_dict=False, add_generation_prompt=True,
                                        **(chat_template_kwargs or {}))
    return [int(t) for t in ids]


def async_completion_payload(*, model: str, prompt_ids: list[int], max_tokens: int, temperature: float, top_p: float,
                             top_k: int, min_p: float | None, repetition_penalty: float, seed: int) -> dict:
    """The ``/v1/completions`` body of one rollout, field for field TRL 1.16's
    ``_AsyncRolloutLoop._generate_one_turn`` (``n=1``, the prompt as token ids, ``return_token_ids``, ``logprobs=0``
    (the sampled token's log-prob), a 63-bit ``seed`` per request, ``min_p`` only when set), plus ``stream: true`` so
    that the tokens of a request cancelled part-way are known (each chunk carries its new ``token_ids``)."""
    payload = {"model": model, "prompt": list(prompt_ids), "max_tokens": int(max_tokens),
               "temperature": temperature, "top_p": top_p, "top_k": top_k, "repetition_penalty": repetition_penalty,
               "n": 1, "return_token_ids": True, "logprobs": 0, "seed": int(seed), "stream": True}
    if min_p is not None:
        payload["min_p"] = min_p
    return payload


def async_request_model(model_name: str, lora_name: str | None, model_version: int) -> str:
    """The ``model`` a request names, as TRL 1.16's ``_AsyncRolloutLoop._request_model``: the base model, or with
    LoRA sync the adapter of the current policy version, ``f"{lora_name}-v{model_version}"``."""
    return model_name if lora_name is None else f"{lora_name}-v{model_version}"


def async_group_rewards(columns: list[list[float | None]]) -> np.ndarray:
    """One reward per completion from ``(F, m)`` reward columns (one per reward function, None: cannot judge), as
    TRL 1.16's ``_AsyncRolloutLoop._score_group``: ``nansum`` over the functions (each with weight 1), NaN where
    every function returned None.

    Returns
    -------
    ndarray of float64, shape (m,)
    """
    arr = np.array([[np.nan if r is None else r for r in row] for row in columns], dtype=float)
    rewards = np.nansum(arr, axis=0)
    rewards[np.all(np.isnan(arr), axis=0)] = np.nan
    return rewards


def async_group_advantages(rewards: np.ndarray) -> tuple[np.ndarray, float, float]:
    """GRPO advantages of one group as TRL 1.16's asynchronous worker computes them (``_score_group``):
    ``A_i = (r_i - mean(r)) / (std(r) + 1e-8)`` over the scorable completions, with numpy's population std
    (``ddof=0``; the synchronous GRPOTrainer uses Bessel's correction and 1e-4), and ``A_i = 0`` where ``r_i`` is NaN.

    Parameters
    ----------
    rewards : ndarray of float64, shape (m,)
        The group's rewards (:func:`async_group_rewards`), NaN: unscorable.

    Returns
    -------
    advantages : ndarray of float64, shape (m,)
    reward_mean, reward_std : float
        Over the scorable completions (NaN when there is none).
    """
    rewards = np.asarray(rewards, dtype=float)
    scored = ~np.isnan(rewards)
    advantages = np.zeros_like(rewards)
    if not scored.any():
        return advantages, float("nan"), float("nan")
    values = rewards[scored]
    advantages[scored] = (values - values.mean()) / (values.std() + ASYNC_ADVANTAGE_EPS)
    return advantages, float(values.mean()), float(values.std())


def async_rollout_sample(*, prompt: list, completion: list, prompt_ids: list[int], completion_ids: list[int],
                         logprobs: list[float], advantage: float, model_version: int, group_id: int,
                         metrics: dict[str, float]) -> Any:
    """One TRL 1.16 ``RolloutSample`` (trl/experimental/async_grpo/async_rollout_worker.py) for a single-turn
    completion, laid out as ``_chain_to_sequences`` lays out one clean turn: ``input_ids`` = prompt then completion
    (int64), ``completion_mask`` 0 on the prompt and 1 on the completion (int64), ``old_log_probs`` 0 on the prompt
    then the sampled log-probs (float32), all of length ``len(prompt_ids) + len(completion_ids)``.

    Raises
    ------
    ValueError
        ``logprobs`` is not one value per completion token.
    """
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    if len(logprobs) != len(completion_ids):
        raise ValueError(f"{len(logprobs)} log-probs for {len(completion_ids)} completion tokens")
    p, c = len(prompt_ids), len(completion_ids)
    return RolloutSample(
        prompt=prompt, completion=completion,
        input_ids=np.asarray(list(prompt_ids) + list(completion_ids), dtype=np.int64),
        completion_mask=np.asarray([0] * p + [1] * c, dtype=np.int64),
        old_log_probs=np.asarray([0.0] * p + [np.nan if x is None else float(x) for x in logprobs], dtype=np.float32),
        advantage=float(advantage), model_version=int(model_version), group_id=int(group_id), metrics=dict(metrics))


def async_lora_name(trainer: Any) -> str | None:
    """The adapter base name an ``AsyncGRPOTrainer``'s requests must name when it syncs weights as LoRA adapters
    (``_lora_sync``: a PEFT model, no injected ``weight_transfer``, a server started with ``--enable-lora``), as TRL
    1.16's trainer passes ``lora_name`` to its default worker (``_lora_name``, ``"trl-policy"``); None otherwise.
    Decided in the trainer's ``__init__`` (it probes the server)."""
    return trainer._lora_name if trainer._lora_sync else None


def _async_peak_flops_on_cpu(original: Callable) -> Callable:
    def peak_flops(accelerator: Any, dtype: str) -> float | None:
        if accelerator.device.type != "cuda":
            return None  # no peak known: TRL then logs no MFU, as for an unknown GPU
        return original(accelerator, dtype)

    peak_flops.sara_cpu_stand_in = True
    return peak_flops


def install_async_cpu_stand_ins(kernel: Any) -> None:
    """Point TRL 1.16's asynchronous trainer at CPU stand-ins (idempotent; see sara_trl.trainer.async_worker.cpu):

    - ``trl/experimental/async_grpo/packing.py``: ``tree_attention`` looks its kernel up at call time through the
      cached ``_flash_attn()`` (``kernels.get_kernel("kernels-community/flash-attn3")``); it returns ``kernel``
      instead (an object with ``flash_attn_varlen_func``).
    - ``async_grpo_trainer.py``: ``__init__`` calls the module's ``get_peak_flops_per_device`` (imported from
      ``trl/trainer/utils.py``, which calls ``torch.cuda.get_device_name``); off a CUDA device it returns None.
    """
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    packing._flash_attn = lambda: kernel
    if not getattr(async_grpo_trainer.get_peak_flops_per_device, "sara_cpu_stand_in", False):
        async_grpo_trainer.get_peak_flops_per_device = _async_peak_flops_on_cpu(
            async_grpo_trainer.get_peak_flops_per_device)


def async_cpu_stand_ins_installed(kernel: Any) -> bool:
    """Whether :func:`install_async_cpu_stand_ins` put ``kernel`` in place."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    if hasattr(packing._flash_attn, "cache_info"):  # TRL's own (functools.cache'd) Hub loader
        return False
    return packing._flash_attn() is kernel and bool(
        getattr(async_grpo_trainer.get_peak_flops_per_device, "sara_cpu_stand_in", False))
