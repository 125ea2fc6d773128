"""SaraConfig / SaraRLOOConfig: parsing, validation messages, conversion to the core's AllocationConfig, and the
construction-time errors of the trainers for features that do not fit SARA's seam yet."""

from __future__ import annotations

import dataclasses

import pytest
from datasets import Dataset, IterableDataset
from transformers import HfArgumentParser

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer
from sara_trl.allocation import AllocationConfig

BASE = dict(output_dir="unused", use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
            num_generations=4, per_device_train_batch_size=8)


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def test_defaults_and_allocation_config():
    args = SaraConfig(**BASE)
    assert args.generation_batch_size == 8 and args.num_groups == 2
    assert args.to_allocation_config() == AllocationConfig(
        allocator="sara", k=4, n0=2, tau_low=0.45, commit_min=None, prior_alpha=1.0, prior_beta=1.0, budget_cap=6.0,
        max_rounds=64, round_increment=1, max_rollouts_per_round=None, yield_decay=0.5,
        selection_seed=args.seed,  # selection_seed=None resolves to TRL's `seed` (42), like stream_seed
    )
    assert args.seed == 42
    rloo = SaraRLOOConfig(**{**BASE, "num_generations": 2, "commit_min": 2, "allocator": "uniform"})
    assert rloo.to_allocation_config().k == 2 and rloo.to_allocation_config().allocator == "uniform"
    assert rloo.beta == 0.05  # RLOO's own default is untouched


def test_hf_argument_parser_round_trip():
    parser = HfArgumentParser(SaraConfig)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", "o", "--use_cpu", "--bf16", "False", "--report_to", "none", "--num_generations", "4",
         "--per_device_train_batch_size", "8", "--allocator", "dynamic_sampling", "--n0", "3", "--tau_low", "0.2",
         "--commit_min", "3", "--budget_cap", "4.5", "--success_reward_func", "accuracy", "--stream_seed", "7"]
    )
    assert (args.allocator, args.n0, args.tau_low, args.commit_min) == ("dynamic_sampling", 3, 0.2, 3)
    assert (args.budget_cap, args.success_reward_func, args.stream_seed) == (4.5, "accuracy", 7)
    help_text = parser.format_help()
    for name in ("--allocator", "--n0", "--tau_low", "--commit_min", "--prior_alpha", "--budget_cap",
                 "--success_threshold", "--success_reward_func", "--stream_seed"):
        assert name in help_text
    with pytest.raises(SystemExit):  # argparse rejects an allocator outside the choices
        parser.parse_args_into_dataclasses(["--output_dir", "o", "--allocator", "greedy"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"n0": 5}, r"SaraConfig: n0=5 must satisfy 1 <= n0 <= k=4: .*cannot be larger.*here k is num_generations"),
        ({"n0": 0}, r"n0=0 must satisfy .*needs at least one probe rollout"),
        ({"commit_min": 1}, r"commit_min=1 must satisfy 2 <= commit_min <= k=4: .*here k is num_generations"),
        ({"commit_min": 5}, r"commit_min=5"),
        ({"tau_low": 1.0}, r"SaraConfig: tau_low=1.0 must lie in \[0, 1\): .*abandon every prompt"),
        ({"tau_low": -0.1}, r"tau_low=-0.1 .*a negative threshold on a probability never abandons"),
        ({"continue_to_decision": True, "round_increment": 2}, r"round_increment \(2\) is not used with "
                                                                r"continue_to_decision=True"),
        ({"prior_alpha": 0.0}, r"prior_alpha=0.0 must be finite and > 0"),
        ({"prior_beta": -1.0}, r"prior_beta"),
        ({"budget_cap": 0.5}, r"budget_cap=0.5 must be finite and >= 1"),
        ({"budget_cap": float("inf")}, r"budget_cap=inf must be finite"),
        ({"max_rounds": 0}, r"max_rounds=0 must be an integer >= 1"),
        ({"round_increment": 0}, r"round_increment"),
        ({"max_rollouts_per_round": 3},
         r"max_rollouts_per_round=3 must be None or an integer >= k=4.*k is num_generations"),
        ({"yield_decay": 1.5}, r"yield_decay"),
        ({"allocator": "greedy"}, r"allocator must be one of"),
        ({"success_threshold": float("nan")}, r"success_threshold"),
        ({"use_vllm": True, "generation_kwargs": {"seed": 1}}, r"must not set `seed` with use_vllm=True"),
        ({"per_device_train_batch_size": 6}, r"generation_batch_size \(6\) must be divisible by num_generations"),
    ],
)
def test_validation_messages(overrides, message):
    with pytest.raises(ValueError, match=message):
        SaraConfig(**{**BASE, **overrides})


@pytest.mark.parametrize("k", [0, 1, -4, 2.5])
@pytest.mark.parametrize("config_class", [SaraConfig, SaraRLOOConfig])
def test_num_generations_is_checked_before_trl_divides_by_it(config_class, k):
    # num_generations=0 used to end in a ZeroDivisionError inside TRL's __post_init__.
    with pytest.raises(ValueError, match=rf"{config_class.__name__}: k={k!r}: a group needs at least 2 rollouts.*"
                                         r"here k is num_generations"):
        config_class(**{**BASE, "num_generations": k})


def test_allocation_fields_are_derived_from_the_core():
    core = {f.name: f for f in dataclasses.fields(AllocationConfig)}
    ours = {f.name: f for f in dataclasses.fields(SaraConfig)}
    help_text = HfArgumentParser(SaraConfig).format_help()
    squeezed = "".join(help_text.split())  # argparse re-wraps the text (also at hyphens)
    for name, f in core.items():
        if name == "k":  # TRL's num_generations
            assert name not in ours
            continue
        assert ours[name].metadata["help"].startswith(f.metadata["help"])  # one text, plus a note where it differs
        if name == "collection":  # the trainer adds 'auto' (its default): the core has no engine to choose for
            assert ours[name].metadata["choices"] == ["auto", *f.metadata["choices"]] and ours[name].default == "auto"
            continue
        assert ours[name].metadata.get("choices") == f.metadata.get("choices")
        assert ours[name].default == (None if name == "selection_seed" else f.default)
        assert f"--{name}" in help_text and "".join(f.metadata["help"].split()) in squeezed
        assert f"{name} : " in SaraConfig.__doc__ and f"{name} : " in SaraRLOOConfig.__doc__
    for name in ("continue_to_decision", "stopping_rule", "success_threshold", "success_reward_func", "stream_seed"):
        assert f"--{name}" in help_text and ours[name].metadata["help"]
    assert SaraConfig(**BASE).tau_low == AllocationConfig().tau_low == 0.45


def test_ds_filter_through_the_trainer_config():
    args = SaraConfig(**BASE, allocator="dynamic_sampling", ds_filter="score")
    assert args.to_allocation_config().ds_filter == "score"
    assert SaraConfig(**BASE).ds_filter == "success"
    with pytest.raises(ValueError, match="SaraConfig: ds_filter='score' is a dynamic-sampling option"):
        SaraConfig(**BASE, ds_filter="score")


def test_continue_to_decision_maps_to_the_core_schedule():
    parser = HfArgumentParser(SaraConfig)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", "o", "--use_cpu", "--report_to", "none", "--num_generations", "4",
         "--per_device_train_batch_size", "8", "--continue_to_decision", "True"])
    cfg = args.to_allocation_config()
    assert (cfg.continue_to_decision, cfg.round_increment) == (True, 1)
    assert not SaraConfig(**BASE).to_allocation_config().continue_to_decision
    assert SaraConfig(**BASE).to_allocation_config().round_increment == 1


@pytest.mark.parametrize("config_class", [SaraConfig, SaraRLOOConfig])
@pytest.mark.parametrize("old, new, warned", [
    ({"tau_low": "auto"}, {"stopping_rule": "bayes_optimal"}, ["tau_low='auto' is deprecated and will be removed in "
                                                               "sara_trl 0.3; use stopping_rule='bayes_optimal'"]),
    ({"round_increment": "to_decision"}, {"continue_to_decision": True},
     ["round_increment='to_decision' is deprecated and will be removed in sara_trl 0.3; use "
      "continue_to_decision=True"]),
    ({"tau_low": "auto", "round_increment": "to_decision"}, {"stopping_rule": "bayes_optimal",
                                                             "continue_to_decision": True},
     ["tau_low='auto' is deprecated", "round_increment='to_decision' is deprecated"]),
])
def test_old_spellings_warn_and_convert_to_the_new_fields(config_class, old, new, warned):
    base = {**BASE, "num_generations": 4, "commit_min": None}
    with pytest.warns(FutureWarning) as record:
        args = config_class(**base, **old)
    messages = [str(w.message) for w in record if issubclass(w.category, FutureWarning)
                and "sara_trl 0.3" in str(w.message)]
    assert len(messages) == len(warned)
    for message, expected in zip(messages, warned):
        assert message.startswith(f"{config_class.__name__}: {expected}")
    assert all(w.filename == __file__ for w in record if "sara_trl 0.3" in str(w.message))  # the caller's line
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        modern = config_class(**base, **new)
    for name in ("tau_low", "stopping_rule", "round_increment", "continue_to_decision"):
        assert getattr(args, name) == getattr(modern, name), name
    assert args.to_allocation_config() == modern.to_allocation_config()


def test_to_allocation_config_is_a_field_copy():
    args = SaraConfig(**BASE, stopping_rule="bayes_optimal", continue_to_decision=True, n0=3, selection_seed=7)
    cfg = args.to_allocation_config()
    for f in dataclasses.fields(AllocationConfig):
        own = {"k": args.num_generations, "collection": args.schedule}  # the config's collection is 'auto'
        expected = own[f.name] if f.name in own else getattr(args, f.name)
        assert getattr(cfg, f.name) == expected, f.name
    assert SaraConfig(**BASE).to_allocation_config().selection_seed == SaraConfig(**BASE).seed  # None -> seed


def test_the_new_fields_parse_from_the_command_line():
    parser = HfArgumentParser(SaraConfig)
    argv = ["--output_dir", "o", "--use_cpu", "--bf16", "False", "--report_to", "none", "--num_generations", "4",
            "--per_device_train_batch_size", "8"]
    (args,) = parser.parse_args_into_dataclasses(argv + ["--stopping_rule", "bayes_optimal", "--continue_to_decision",
                                                         "True"])
    assert (args.stopping_rule, args.continue_to_decision, args.tau_low, args.round_increment) == (
        "bayes_optimal", True, 0.45, 1)
    # None (the collection's default) unless given, like TRL's own Optional[bool] fields (bf16): a value is required
    (args,) = parser.parse_args_into_dataclasses(argv + ["--continue_to_decision", "False", "--refill_margin", "0.5"])
    assert (args.continue_to_decision, args.refill_margin) == (False, 0.5)
    (args,) = parser.parse_args_into_dataclasses(argv)
    assert (args.continue_to_decision, args.refill_margin) == (None, None)
    help_text = parser.format_help()
    assert "--stopping_rule {threshold,bayes_optimal}" in help_text and "--continue_to_decision" in help_text
    for old in (["--tau_low", "auto"], ["--round_increment", "to_decision"]):  # one spelling on the command line
        with pytest.raises(SystemExit):
            parser.parse_args_into_dataclasses(argv + old)


def test_rloo_config_validates_against_its_own_k():
    with pytest.raises(ValueError, match=r"SaraRLOOConfig: n0=3 must satisfy 1 <= n0 <= k=2.*k is num_generations"):
        SaraRLOOConfig(**{**BASE, "num_generations": 2, "n0": 3})


@pytest.fixture
def prompts():
    return Dataset.from_dict({"prompt": [f"Question {i}" for i in range(4)]})


def test_environment_factory_with_rollout_func_raises_at_construction(prompts, tiny_model_dir, tokenizer):
    # tools= and environment_factory train in rounds (tests/test_trainer_tools.py, tests/test_trainer_environment.py,
    # with their refusals); together with a rollout_func they are refused before TRL's construction
    with pytest.raises(ValueError, match="does not support `environment_factory`: together with `rollout_func`"):
        SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=constant_reward, args=SaraConfig(**BASE),
                        train_dataset=prompts, processing_class=tokenizer, environment_factory=object,
                        rollout_func=lambda prompts, trainer: {})


def test_dataset_and_args_errors(prompts, tiny_model_dir, tokenizer):
    make = dict(model=tiny_model_dir, reward_funcs=constant_reward, processing_class=tokenizer)
    from trl import GRPOConfig

    with pytest.raises(TypeError, match="needs a `SaraConfig`"):
        SaraGRPOTrainer(args=GRPOConfig(**BASE), train_dataset=prompts, **make)
    # TRL's rules first, in TRL's words: a missing train set, one of the wrong type, an iterable one with
    # dispatch_batches (checked by TRL's construction; SARA's own checks, such as max_steps, do not pre-empt them)
    with pytest.raises(ValueError, match=r"^`train_dataset` is required unless an `environment_factory` is provided"):
        SaraGRPOTrainer(args=SaraConfig(**BASE), train_dataset=None, **make)
    with pytest.raises(ValueError, match=r"^`train_dataset` is required$"):
        SaraRLOOTrainer(args=SaraRLOOConfig(**BASE), train_dataset=None, **make)
    with pytest.raises(TypeError, match=r"^`train_dataset` must be a `Dataset` or `IterableDataset`, got `list`"):
        SaraGRPOTrainer(args=SaraConfig(**BASE), train_dataset=[{"prompt": "a"}], **make)
    with pytest.raises(ValueError, match=r"^Iterable datasets require `dispatch_batches=False`"):
        SaraGRPOTrainer(args=SaraConfig(**{**BASE, "max_steps": -1}, accelerator_config={"dispatch_batches": True}),
                        train_dataset=IterableDataset.from_generator(lambda: iter([])), **make)
    # where TRL accepts what SARA cannot use, SARA says so: no train set with an environment that owns its data
    with pytest.raises(ValueError, match="needs a `train_dataset`: SARA draws fresh prompts from it"):
        SaraGRPOTrainer(args=SaraConfig(**BASE), train_dataset=None, environment_factory=object, **make)
    with pytest.raises(ValueError, match="with an IterableDataset needs `max_steps` > 0"):  # as TRL
        SaraGRPOTrainer(args=SaraConfig(**BASE), train_dataset=IterableDataset.from_generator(lambda: iter([])),
                        **make)
    with pytest.raises(ValueError, match="does not support multimodal input"):
        images = Dataset.from_dict({"prompt": ["a", "b"], "image": [None, None]})
        SaraGRPOTrainer(args=SaraConfig(**BASE), train_dataset=images, **make)
    with pytest.raises(ValueError, match="has 1 prompts but one generation batch needs B = .* = 2"):
        SaraGRPOTrainer(args=SaraConfig(**BASE), train_dataset=prompts.select([0]), **make)
    with pytest.raises(ValueError, match=r"success_reward_func='accuracy' names no reward function.*constant_reward"):
        SaraGRPOTrainer(args=SaraConfig(**BASE, success_reward_func="accuracy"), train_dataset=prompts, **make)
    with pytest.raises(TypeError, match="needs a `SaraRLOOConfig`"):
        SaraRLOOTrainer(args=SaraConfig(**BASE), train_dataset=prompts, **make)


def test_collection_auto_picks_streaming_wherever_it_runs(monkeypatch):
    """The default collection='auto': streaming for SARA with the colocated vLLM engine (one tensor-parallel rank,
    options streaming implements), rounds in every other case (dynamic sampling included); an explicit value is
    kept."""
    colocate = dict(BASE, use_vllm=True, vllm_mode="colocate")
    assert SaraConfig(**BASE).schedule == "rounds" and SaraConfig(**BASE).collection == "auto"
    args = SaraConfig(**colocate)
    assert (args.schedule, args.collection, args.to_allocation_config().collection) == ("streaming", "auto",
                                                                                        "streaming")
    assert SaraRLOOConfig(**colocate).schedule == "streaming"
    assert SaraConfig(**colocate, allocator="dynamic_sampling", collection="streaming").schedule == "streaming"
    for other in (dict(allocator="uniform"), dict(allocator="dynamic_sampling"), dict(vllm_mode="server"),
                  dict(vllm_tensor_parallel_size=2)):
        assert SaraConfig(**{**colocate, **other}).schedule == "rounds", other
    for options in (dict(history_decay=0.5), dict(history_decay=0.5, selection="greedy")):  # both schedules run them
        assert SaraConfig(**{**colocate, **options}).schedule == "streaming", options
    carry = SaraConfig(**colocate, carry_over=True)
    assert carry.schedule == "streaming"
    # carry_over streams on several processes too (each process carries its own prompts): the rule alone, since
    # building a config under WORLD_SIZE=2 would set up a distributed state for the rest of the session
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert type(carry)._auto_streams(carry)
    monkeypatch.delenv("WORLD_SIZE")
    assert type(carry)._auto_streams(carry)
    explicit = SaraConfig(**colocate, collection="rounds")
    assert explicit.schedule == explicit.collection == "rounds"
    with pytest.raises(ValueError, match="collection='bogus' must be one of \\['auto', 'rounds', 'streaming'\\]"):
        SaraConfig(**BASE, collection="bogus")


def test_streaming_collection_needs_the_colocated_vllm_engine():
    assert SaraConfig(**BASE).schedule == "rounds"
    with pytest.raises(ValueError, match="SaraConfig: collection='streaming' needs use_vllm=True with vllm_mode="):
        SaraConfig(**BASE, collection="streaming")
    with pytest.raises(ValueError, match="SaraRLOOConfig: collection='streaming' needs use_vllm=True"):
        SaraRLOOConfig(**BASE, collection="streaming", use_vllm=True, vllm_mode="server")
    assert SaraConfig(**BASE, collection="streaming", use_vllm=True, vllm_mode="colocate").collection == "streaming"
    with pytest.raises(ValueError, match="SaraConfig: collection='streaming' decides prompts one completion"):
        SaraConfig(**BASE, allocator="uniform", collection="streaming")
    colocate = dict(BASE, collection="streaming", use_vllm=True, vllm_mode="colocate")
    assert SaraConfig(**colocate, stopping_rule="bayes_optimal").to_allocation_config().stopping_rule \
        == "bayes_optimal"
    assert SaraConfig(**colocate, allocator="dynamic_sampling", ds_filter="score").to_allocation_config().ds_filter \
        == "score"  # dynamic sampling on its scores' spread streams too
    assert SaraConfig(**colocate, carry_over=True, history_decay=0.5).to_allocation_config().history_decay == 0.5
    assert SaraConfig(**colocate, carry_over=True).to_allocation_config().carry_over


def test_streaming_with_carry_over_is_not_refused_on_several_processes(monkeypatch):
    """Each process carries its own undecided prompts into its own next step, so streaming with carry_over is a
    valid configuration whatever WORLD_SIZE says (the check alone: building a config under WORLD_SIZE=2 would set up
    a distributed state for the rest of the session)."""
    args = SaraConfig(**BASE, collection="streaming", use_vllm=True, vllm_mode="colocate", carry_over=True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    args._check_streaming(type(args).__name__)  # raises nothing
    assert type(args)._auto_streams(args) and args.to_allocation_config().carry_over


def _warnings_of(make) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
    return [str(w.message) for w in caught if "no effect with allocator" in str(w.message)]


@pytest.mark.parametrize("config_class", [SaraConfig, SaraRLOOConfig])
def test_options_an_allocator_ignores_warn_once_at_construction(config_class):
    seen = _warnings_of(lambda: config_class(**BASE, allocator="dynamic_sampling", n0=3, tau_low=0.2,
                                             continue_to_decision=True, budget_cap=4.0, prior_alpha=2.0))
    assert seen == [f"{config_class.__name__}: n0=3, tau_low=0.2, continue_to_decision=True have no effect with "
                    "allocator='dynamic_sampling' and collection='rounds', which never reads them (options of the "
                    "other allocators). Leave them at the default or choose an allocator that uses them."]
    # budget_cap and the prior size dynamic sampling's draws: not named. Uniform reads neither.
    seen = _warnings_of(lambda: config_class(**BASE, allocator="uniform", budget_cap=4.0, commit_min=3))
    assert seen == [f"{config_class.__name__}: commit_min=3, budget_cap=4.0 have no effect with allocator='uniform', "
                    "which never reads them (options of the other allocators). Leave them at the default or choose "
                    "an allocator that uses them."]
    assert "refill_margin=1.0 has no effect" in _warnings_of(
        lambda: config_class(**BASE, allocator="dynamic_sampling", refill_margin=1.0))[0]


@pytest.mark.parametrize("overrides", [
    {"allocator": "dynamic_sampling"}, {"allocator": "uniform"}, {"allocator": "sara", "n0": 3, "tau_low": 0.2},
    {"allocator": "uniform", "num_generations": 2, "commit_min": 2},  # commit_min = k is the default's value
    {"allocator": "dynamic_sampling", "n0": 2, "tau_low": 0.45, "budget_cap": 3.0, "prior_beta": 2.0},
    {"allocator": "dynamic_sampling", "ds_filter": "score", "max_rounds": 8},
])
def test_defaults_and_used_options_do_not_warn(overrides):
    assert _warnings_of(lambda: SaraConfig(**{**BASE, **overrides})) == []


def test_inert_options_of_the_core_config():
    from sara_trl.allocation.config import inert_options

    assert inert_options(AllocationConfig(allocator="sara", n0=3, budget_cap=2.0)) == ()
    assert inert_options(AllocationConfig(allocator="dynamic_sampling", k=4, n0=3, commit_min=4, round_increment=2,
                                          auto_min_prompts=8)) == ("n0", "round_increment", "auto_min_prompts")
    assert inert_options(AllocationConfig(allocator="dynamic_sampling", k=4, commit_min=3)) == ("commit_min",)
    # streaming dynamic sampling prices a fresh prompt from n0 and commit_min until it has learned the price
    assert inert_options(AllocationConfig(allocator="dynamic_sampling", collection="streaming", n0=3,
                                          refill_margin=1.0, tau_low=0.3)) == ("tau_low",)
    assert inert_options(AllocationConfig(allocator="uniform", prior_alpha=2.0, yield_decay=0.1,
                                          max_rollouts_per_round=16)) == ("prior_alpha", "yield_decay")
    # with selection the prior ranks the fresh prompts, also for uniform sampling
    assert inert_options(AllocationConfig(allocator="uniform", prior_alpha=2.0, history_decay=0.5,
                                          selection="greedy")) == ()


def test_auto_collection_keeps_k2_in_rounds_where_streaming_would_abandon_every_prompt():
    """num_generations=2 at the paper's tau_low on a colocated engine: 'auto' picks rounds (with the reason), an
    explicit 'streaming' is refused (it would abandon every prompt at its first outcome); a lower tau_low streams."""
    base = {**BASE, "num_generations": 2, "per_device_train_batch_size": 4, "use_vllm": True, "vllm_mode": "colocate"}
    auto = SaraConfig(**base)
    assert auto.schedule == "rounds" and "abandon every prompt at its first outcome" in auto.auto_reason()
    with pytest.raises(ValueError, match=r"at most 0\.333 .* below tau_low=0\.45"):
        SaraConfig(**base, collection="streaming")
    assert SaraConfig(**base, tau_low=0.3).schedule == "streaming"
    assert SaraConfig(**{**base, "num_generations": 4, "per_device_train_batch_size": 8}).schedule == "streaming"
