"""A SARA trainer's construction: the checks before TRL's (slow) ``__init__``, and the allocator and prompt stream
after it.

Before (:func:`prepare_arguments`): the class has every member SARA drives, no TRL feature SARA cannot replay was
passed, the config is a SARA config, and the dataset can feed SARA's prompt stream (:func:`check_iterable` for a
``datasets.IterableDataset``). After (:func:`setup`): the success rule, the :class:`~sara_trl.allocation.Allocator`
and the prompt stream (``PromptStream``; ``ShardStream`` per process for streaming on several processes;
``IterablePromptStream`` over an iterable dataset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from datasets import IterableDataset
from transformers import ProcessorMixin
from transformers.utils import logging
from trl.trainer.utils import get_config_model_id

from sara_trl.allocation import DEFAULT_SHUFFLE_BUFFER, Allocator, IterablePromptStream, PromptStream, ShardStream
from sara_trl.trainer.hooks import check_trainer_class
from sara_trl.trainer.iterable import DatasetRows
from sara_trl.trainer.plan import CollectionPlan, plan_collection
from sara_trl.trainer.progress import hide_renamed_checkpointing_warnings
from sara_trl.trainer.rollout import make_success_rule
from sara_trl.trainer.state import SaraRun
from sara_trl.trainer.streaming import shard_groups
from sara_trl.trainer.trl import port
from sara_trl.trainer.vllm_cpu import repack_after_sync

if TYPE_CHECKING:
    from sara_trl.trainer.hooks import SaraTrainerBase

__all__ = ["check_iterable", "check_reward_models", "prepare_arguments", "setup", "shards_reward_model"]

logger = logging.get_logger(__name__)


def prepare_arguments(
    cls: type, model: Any, args: Any, config_class: type, train_dataset: Any, processing_class: Any, unsupported: dict,
    rounds_only: dict | None = None, reward_funcs: Any = None,
) -> tuple[Any, CollectionPlan]:
    """Validate what can be validated before TRL's (slow) construction; return the args to use and the collection
    plan (:func:`~sara_trl.trainer.plan.plan_collection`).

    Parameters
    ----------
    cls : type
        The SARA trainer class (checked against :class:`~sara_trl.trainer.hooks.SaraTrainerBase`).
    model : str or transformers.PreTrainedModel
        As passed to the trainer (names the default output folder when ``args`` is None).
    args : config_class or None
        The trainer's config; None builds a default one.
    config_class : type
        The SARA config class of this trainer (e.g. ``SaraConfig``).
    train_dataset : datasets.Dataset or datasets.IterableDataset
        The training data (an iterable one needs ``max_steps``, and its rows are checked as they are read).
    processing_class : tokenizer or processor
        As passed to the trainer.
    unsupported : dict
        ``{argument name: value}`` of TRL features SARA cannot replay; a truthy value raises (a string value is the
        reason, said in the error).
    rounds_only : dict, optional
        ``{argument name: value}`` of features SARA collects in rounds unless told otherwise (``rollout_func``,
        ``tools``, ``environment_factory``): with a truthy value, ``collection="auto"`` resolves to ``"rounds"``;
        an explicit ``collection="streaming"`` raises for ``rollout_func``
        (:func:`~sara_trl.trainer.plan.plan_collection`).
    reward_funcs : reward function, model, model id, or a list of them, optional
        As passed to the trainer; checked by :func:`check_reward_models`.

    Returns
    -------
    args : config_class
        ``args``, or a default config when it was None (never written).
    plan : CollectionPlan
        How the trainer collects.

    Raises
    ------
    ValueError
        An unsupported feature was passed (a feature the TRL base lacks, such as ``tools`` or
        ``environment_factory`` in RLOO; tools or environment_factory together with rollout_func; rollout_func
        with collection='streaming'; a reward model under DeepSpeed ZeRO-3 on several processes with
        collection='streaming', see :func:`shards_reward_model`; overlap_round_scoring with rollout_func, tools or
        environment_factory, or on several processes; multimodal input), a reward model would be read as
        0/1 success labels (:func:`check_reward_models`), or the dataset cannot feed SARA's prompt stream.
    TypeError
        ``args`` is not a ``config_class``, or the class lacks a member of
        :class:`~sara_trl.trainer.hooks.SaraTrainerBase` (or, with ``tools`` or ``environment_factory``, TRL's
        ``_tool_call_loop``).
    """
    check_trainer_class(cls)
    hide_renamed_checkpointing_warnings()  # TRL's calls of renamed transformers methods, in this run
    for name, value in unsupported.items():
        if isinstance(value, str):
            raise ValueError(f"{cls.__name__} does not support `{name}`: {value}")
        if value:
            raise ValueError(
                f"{cls.__name__} does not support `{name}` yet: SARA replays cached rollouts and their rewards "
                f"through TRL's pipeline, and `{name}` changes how rollouts are generated and scored in a way SARA "
                f"does not cache. Use the plain TRL trainer for `{name}`."
            )
    if args is None:
        model_name = model if isinstance(model, str) else get_config_model_id(model.config)
        args = config_class(f"{str(model_name).split('/')[-1]}-{port.trainer_name(cls)}")
    elif not isinstance(args, config_class):
        raise TypeError(
            f"{cls.__name__} needs a `{config_class.__name__}` (it carries the allocation settings), got "
            f"`{type(args).__name__}`. Replace your config class with `{config_class.__name__}`; it accepts "
            "the same fields."
        )
    check_reward_models(cls, reward_funcs, args)
    features = rounds_only or {}
    plan = plan_collection(cls, args, processes=args.world_size, rollout_func=bool(features.get("rollout_func")),
                           tools=bool(features.get("tools")),
                           environment_factory=bool(features.get("environment_factory")),
                           sharded_reward_model=shards_reward_model(reward_funcs, args))
    looped = [name for name in ("tools", "environment_factory") if features.get(name)]
    if looped and not port.has_tool_loop(cls):
        raise TypeError(f"{cls.__name__} trains `{looped[0]}` through TRL's tool loop (GRPOTrainer's), which this "
                        "TRL base does not have: use SaraGRPOTrainer, or the TRL version sara_trl is tested with "
                        "(docs/getting-started.md#install)")
    if isinstance(processing_class, ProcessorMixin):
        raise ValueError(
            f"{cls.__name__} does not support multimodal (vision-language) models yet: pass a text tokenizer "
            "as `processing_class`."
        )
    if port.trl_refuses_dataset(train_dataset, args, environment_factory=bool(features.get("environment_factory"))):
        return args, plan  # TRL's own check refuses it during construction, in TRL's words
    if train_dataset is None:  # TRL accepts it with an environment_factory (placeholder prompts); SARA cannot
        raise ValueError(f"{cls.__name__} needs a `train_dataset`: SARA draws fresh prompts from it (TRL's "
                         "placeholder prompts for an environment that owns its data are not supported yet).")
    if isinstance(train_dataset, IterableDataset):
        check_iterable(cls, train_dataset, args)
        return args, plan
    columns = set(train_dataset.column_names)
    if "prompt" not in columns:
        raise ValueError(f"`train_dataset` must have a 'prompt' column, found {sorted(columns)}.")
    if columns & {"image", "images"}:
        raise ValueError(
            f"{cls.__name__} does not support multimodal input yet: remove the 'image'/'images' columns."
        )
    num_groups = args.num_groups
    if len(train_dataset) < num_groups:
        raise ValueError(
            f"`train_dataset` has {len(train_dataset)} prompts but one generation batch needs B = "
            f"generation_batch_size / num_generations = {num_groups} distinct prompts; TRL's sampler would "
            "yield no batch."
        )
    return args, plan


def _reward_func_list(reward_funcs: Any) -> list:
    """``reward_funcs`` as passed to the trainer (one, a list or tuple, or None) -> a list."""
    if reward_funcs is None:
        return []
    return list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]


def _reward_model_name(func: Any) -> str | None:
    """The name TRL gives a reward model in ``reward_func_names`` (its model id's last part), None for a callable."""
    import torch

    if isinstance(func, str):
        return func.split("/")[-1]
    if isinstance(func, torch.nn.Module):
        config = getattr(func, "config", None)
        return get_config_model_id(config).split("/")[-1] if config is not None else type(func).__name__
    return None


def check_reward_models(cls: type, reward_funcs: Any, args: Any) -> None:
    """Refuse, before anything loads, a reward model whose score would be read as a 0/1 success label.

    A reward model (a model id or an ``nn.Module`` in ``reward_funcs``; TRL loads an id with
    ``AutoModelForSequenceClassification``, ``num_labels=1``) scores a completion with a logit of any sign. Every
    allocator that chooses groups from success labels (SARA; dynamic sampling with ``ds_filter="success"``) labels a
    rollout a success when its score is ``> success_threshold`` (paper App. F), and the default threshold, 0.5, is
    meant for 0/1 labels. So when a reward model is the success score (named by ``success_reward_func``) or weighs in
    it (the weighted sum of the reward functions, without ``success_reward_func``), the threshold has to be set
    explicitly. A Python reward function's scale is known only once it has scored: the trainer checks it on the first
    step (:class:`~sara_trl.allocation.labels.SuccessRule`).

    Parameters
    ----------
    cls : type
        The SARA trainer class (named in the error).
    reward_funcs : reward function, model, model id, or a list of them, or None
        As passed to the trainer.
    args : SaraConfig or SaraRLOOConfig
        Read: ``success_threshold_explicit``, ``success_reward_func``, ``reward_weights``, ``allocator``,
        ``ds_filter``.

    Raises
    ------
    ValueError
        A reward model is, or weighs in, the success score, the threshold is the default, and the allocator decides
        from the labels.
    """
    funcs = _reward_func_list(reward_funcs)
    weights = list(args.reward_weights) if args.reward_weights is not None else [1.0] * len(funcs)
    binding = args.allocator != "uniform" and args.ds_filter == "success"
    if args.success_threshold_explicit or not binding or len(weights) != len(funcs):  # a mismatch: TRL's error follows
        return
    names = {i: _reward_model_name(f) for i, f in enumerate(funcs)}
    if args.success_reward_func is not None:
        scored = [i for i, name in names.items() if name is not None and name == args.success_reward_func][:1]
        how = f"success_reward_func={args.success_reward_func!r} names it as the success score"
    else:
        scored = [i for i, name in names.items() if name is not None and weights[i]]
        how = "it weighs in the success score (the weighted sum of the reward functions)"
    if not scored:
        return
    i = scored[0]
    name = repr(funcs[i]) if isinstance(funcs[i], str) else type(funcs[i]).__name__
    raise ValueError(
        f"{cls.__name__}: reward function {i} ({name}) is a reward model and {how}. A reward model scores a "
        "completion with a logit of any sign, not a 0/1 success label, and allocator="
        f"{args.allocator!r} decides which groups to train from success labels: score > "
        f"success_threshold, here the default {args.success_threshold:g}, meant for 0/1 labels (paper App. F). Fix "
        "it before training in one of two ways: (1) add a reward function that returns 1.0 for a success and 0.0 "
        "for a failure (a verifier) and name it with success_reward_func (the loss still uses every reward "
        "function, weighted by reward_weights); or (2) set success_threshold explicitly to the reward model's "
        "score above which a rollout counts as a success, e.g. the median score of the starting policy's "
        "completions (if its scores already are success probabilities in [0, 1], pass success_threshold=0.5). See "
        "docs/rewards.md, 'Worked example: a reward model'. If the task has no notion of success (the reward model "
        "is the only signal), allocator='uniform' keeps TRL's own behaviour (every drawn prompt trained with its k "
        "rollouts)."
    )


def shards_reward_model(reward_funcs: Any, args: Any) -> bool:
    """Whether TRL will run a reward model sharded over several processes: under DeepSpeed ZeRO-3.

    TRL (GRPO and RLOO) prepares each reward model (a model id, or a ``PreTrainedModel`` in ``reward_funcs``)
    with DeepSpeed at the training config's stage when that is 3, and other stages unsharded; without DeepSpeed it
    only moves it to the device (``accelerator.prepare_model(..., evaluation_mode=True)``: no FSDP or DDP wrapper,
    under FSDP too). Each forward pass of a ZeRO-3 model gathers its parameters from every process: a collective.

    Parameters
    ----------
    reward_funcs : reward function, model, model id, or a list of them, or None
        As passed to the trainer.
    args : SaraConfig or SaraRLOOConfig
        Read: ``world_size`` and ``deepspeed_plugin`` (its ``zero_stage``).
    """
    from transformers import PreTrainedModel

    funcs = _reward_func_list(reward_funcs)
    plugin = getattr(args, "deepspeed_plugin", None)
    return (any(isinstance(f, (str, PreTrainedModel)) for f in funcs) and getattr(args, "world_size", 1) > 1
            and plugin is not None and plugin.zero_stage == 3)


def check_iterable(cls: type, train_dataset: IterableDataset, args: Any) -> None:
    """What an iterable ``train_dataset`` needs (its columns, when known; rows are checked as they are read).

    Raises
    ------
    ValueError
        No ``max_steps``, a dataset split by process, a known column set without ``prompt`` or with images, or
        an option that needs the dataset size (``history_decay``, ``selection``).
    """
    if args.max_steps <= 0:
        raise ValueError(
            f"{cls.__name__} with an IterableDataset needs `max_steps` > 0 (as TRL): its length is unknown, and "
            "SARA's stream re-reads it epoch after epoch."
        )
    if getattr(train_dataset, "_distributed", None) is not None:
        raise ValueError(
            f"{cls.__name__} needs every process to read the same iterable dataset (SARA's stream makes the same "
            "decisions on every process, and shards it itself for collection='streaming'): pass it without "
            "`split_dataset_by_node`."
        )
    for name in ("history_decay", "selection"):
        if getattr(args, name) is not None:
            raise ValueError(
                f"{name}={getattr(args, name)!r} keeps a table indexed by prompt over the whole dataset, which "
                "an IterableDataset (unknown size) does not have: use a map-style `datasets.Dataset`, or leave "
                f"{name} unset."
            )
    columns = train_dataset.column_names  # None when unknown (e.g. after map): then checked row by row
    if columns is not None and "prompt" not in columns:
        raise ValueError(f"`train_dataset` must have a 'prompt' column, found {sorted(columns)}.")
    if columns is not None and set(columns) & {"image", "images"}:
        raise ValueError(
            f"{cls.__name__} does not support multimodal input yet: remove the 'image'/'images' columns."
        )


def setup(trainer: SaraTrainerBase, plan: CollectionPlan, rollout_func: Any = None) -> SaraRun:
    """SARA's run state (after TRL's construction): the plan (logged with its reasons), the success rule, the
    allocator and the prompt stream.

    Raises
    ------
    ValueError
        A vision-language processor was resolved, or ``success_reward_func`` names no reward function.
    """
    if port.is_vlm(trainer):
        raise ValueError(
            f"{type(trainer).__name__} does not support multimodal (vision-language) models yet: the resolved "
            "processing class is a processor, not a tokenizer."
        )
    args = trainer.args
    if args.success_reward_func is not None and args.success_reward_func not in trainer.reward_func_names:
        raise ValueError(
            f"success_reward_func={args.success_reward_func!r} names no reward function of this trainer; "
            f"available: {trainer.reward_func_names}."
        )
    success_rule = make_success_rule(trainer)  # labels; checks the scores' scale on the first step
    if trainer.accelerator.is_main_process:
        logger.info(f"{type(trainer).__name__}: {plan.describe()}")
    if getattr(trainer, "use_vllm", False):  # vLLM's CPU platform: repack its kernels after every weight sync
        repack_after_sync(trainer.vllm_generation)
    allocator = Allocator(args.to_allocation_config(plan.schedule))
    seed = args.seed if args.stream_seed is None else args.stream_seed
    world, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    if isinstance(trainer.train_dataset, IterableDataset):
        # Read in order through a bounded buffer by every process (sara_trl.trainer.iterable); with streaming
        # collection on several processes, each keeps its own share (positions % world == rank).
        shard = plan.sharded
        stream = IterablePromptStream(
            DatasetRows(trainer.train_dataset), seed=seed, shuffle=bool(args.shuffle_dataset),
            buffer_size=DEFAULT_SHUFFLE_BUFFER, wrap=True, rank=rank if shard else 0, world=world if shard else 1)
    elif plan.sharded:
        # Each process collects its own B / world groups from its own shard of the prompts (no collective
        # during the step; see sara_trl.trainer.streaming).
        groups = shard_groups(args.num_groups, world)
        stream = ShardStream(len(trainer.train_dataset), rank, world, seed=seed,
                             shuffle=bool(args.shuffle_dataset), wrap=True)
        if stream.num_prompts < groups:
            raise ValueError(
                f"`train_dataset` has {len(trainer.train_dataset)} prompts; split over {world} processes for "
                f"collection='streaming', process {rank} holds {stream.num_prompts}, fewer than the "
                f"{groups} distinct prompts its share of the batch needs."
            )
    else:
        stream = PromptStream(num_prompts=len(trainer.train_dataset), seed=seed,
                              shuffle=bool(args.shuffle_dataset), wrap=True)
    if args.max_steps <= 0:
        logger.warning(
            "SARA draws prompts from its own stream; the dataloader only counts steps, so `num_train_epochs` "
            "counts batches of B prompts, not passes over the data. Set `max_steps` to fix the training length."
        )
    return SaraRun(plan=plan, allocator=allocator, stream=stream, success_rule=success_rule,
                   rollout_func=rollout_func)
