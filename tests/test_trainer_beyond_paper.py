"""The beyond-paper allocation options through the TRL configs: command-line parsing, conversion to the core's
AllocationConfig, validation messages, and the ``sara/*`` diagnostics a training run logs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_trainer import mode_dataset, mode_reward, sara_logs
from transformers import HfArgumentParser

from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig
from sara_trl.allocation import AllocationConfig
from sara_trl.trainer.metrics import CUMULATIVE_DIAGNOSTICS, log_step_metrics

BASE = dict(output_dir="unused", use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
            num_generations=4, per_device_train_batch_size=8)
BASE_ARGV = ["--output_dir", "o", "--use_cpu", "--bf16", "False", "--report_to", "none", "--num_generations", "4",
             "--per_device_train_batch_size", "8", "--gradient_checkpointing", "False"]


def parse(argv: list[str]) -> SaraConfig:
    (args,) = HfArgumentParser(SaraConfig).parse_args_into_dataclasses(BASE_ARGV + argv)
    return args


def test_parser_carries_every_beyond_paper_flag():
    args = parse(["--stopping_rule", "bayes_optimal", "--auto_prior", "beta", "--auto_prior_decay", "0.8",
                  "--auto_min_prompts", "16", "--auto_loss_cap", "0.1", "--cost_unit", "tokens",
                  "--history_decay", "0.7", "--selection", "thompson", "--selection_pool", "3",
                  "--selection_floor", "0.25", "--selection_seed", "5"])
    # Every field not named keeps its default; n0 etc. are the paper's.
    assert args.to_allocation_config() == AllocationConfig(
        k=4, stopping_rule="bayes_optimal", auto_prior="beta", auto_prior_decay=0.8, auto_min_prompts=16,
        auto_loss_cap=0.1, cost_unit="tokens", history_decay=0.7, selection="thompson", selection_pool=3.0,
        selection_floor=0.25, selection_seed=5,
    )


def test_parser_defaults_are_the_paper_and_kebab_case_works():
    default = parse([]).to_allocation_config()
    assert default.tau_low == 0.45 and default.history_decay is None and default.selection is None
    assert default.selection_seed == 42  # None resolves to TRL's `seed`
    args = parse(["--stopping-rule", "bayes_optimal", "--history-decay", "0.0", "--seed", "3"])
    cfg = args.to_allocation_config()
    assert (cfg.stopping_rule, cfg.tau_low, cfg.history_decay, cfg.selection_seed) == ("bayes_optimal", 0.45, 0.0, 3)
    assert (args.stopping_rule, args.tau_low) == ("bayes_optimal", 0.45)


def test_parser_help_and_choices():
    parser = HfArgumentParser(SaraConfig)
    help_text = parser.format_help()
    for flag in ("--stopping_rule", "--auto_prior", "--auto_prior_decay", "--auto_min_prompts", "--auto_loss_cap",
                 "--cost_unit", "--history_decay", "--selection", "--selection_pool", "--selection_floor",
                 "--selection_seed"):
        assert flag in help_text
    for bad in (["--stopping_rule", "auto"], ["--selection", "random"], ["--cost_unit", "seconds"],
                ["--auto_prior", "gauss"], ["--tau_low", "auto"]):  # tau_low stays a float on the command line
        with pytest.raises(SystemExit):
            parser.parse_args_into_dataclasses(BASE_ARGV + bad)


def test_python_fields_and_rloo_share_them():
    args = SaraConfig(**BASE, stopping_rule="bayes_optimal", history_decay=0.5, selection="greedy", selection_seed=9)
    cfg = args.to_allocation_config()
    assert (cfg.stopping_rule, cfg.history_decay, cfg.selection, cfg.selection_seed) == ("bayes_optimal", 0.5,
                                                                                          "greedy", 9)
    rloo = SaraRLOOConfig(**{**BASE, "num_generations": 2, "commit_min": 2, "stopping_rule": "bayes_optimal",
                             "cost_unit": "tokens"})
    assert (rloo.to_allocation_config().stopping_rule, rloo.to_allocation_config().cost_unit) == ("bayes_optimal",
                                                                                                  "tokens")
    # Integral values are passed as ints, never rounded: 3.0 is accepted as 3, 2.5 is rejected by the core.
    assert SaraConfig(**BASE, n0=3.0, auto_min_prompts=np.int64(8)).to_allocation_config().n0 == 3
    assert type(SaraConfig(**BASE, auto_min_prompts=np.int64(8)).to_allocation_config().auto_min_prompts) is int


@pytest.mark.parametrize(
    "overrides, message",
    [
        # The core's messages, raised through to_allocation_config() for the trainer config.
        ({"stopping_rule": "auto"},
         r"SaraConfig: stopping_rule='auto' must be one of \('threshold', 'bayes_optimal'\)"),
        ({"tau_low": "0.3"}, r"tau_low='0.3' must be a number in \[0, 1\).* set stopping_rule='bayes_optimal'"),
        ({"stopping_rule": "bayes_optimal", "tau_low": 0.3}, r"tau_low \(0.3\) is not used with stopping_rule="),
        ({"cost_unit": "tokens"}, r"cost_unit='tokens' needs stopping_rule='bayes_optimal'"),
        ({"allocator": "dynamic_sampling", "stopping_rule": "bayes_optimal"},
         r"stopping_rule='bayes_optimal' is a SARA stopping rule; allocator='dynamic_sampling'"),
        ({"selection": "thompson"}, r"selection needs history_decay"),
        ({"selection": "random", "history_decay": 0.5}, r"selection='random' must be None or one of"),
        ({"history_decay": 1.5}, r"history_decay=1.5 must lie in \[0, 1\] or be None"),
        ({"auto_loss_cap": 0.0}, r"auto_loss_cap=0.0 must lie in \(0, 1\] or be None"),
        ({"auto_prior_decay": -0.1}, r"auto_prior_decay=-0.1 must lie in \[0, 1\]"),
        ({"auto_min_prompts": 0}, r"auto_min_prompts=0 must be an integer >= 1"),
        ({"auto_prior": "gauss"}, r"auto_prior='gauss' must be one of \('mixture', 'beta'\)"),
        ({"selection_pool": 0.5}, r"selection_pool=0.5 must be >= 1"),
        ({"selection_floor": 0.0}, r"selection_floor=0.0 must lie in \(0, 1\]"),
        ({"selection_seed": 1.5}, r"selection_seed=1.5 must be an integer"),
        ({"n0": 2.5}, r"n0=2.5 must be an integer number of rollouts"),  # not silently rounded to 2
        ({"allocator": "greedy"}, r"allocator must be one of \('sara', 'dynamic_sampling', 'uniform'\)"),
        ({"round_increment": 0}, r"round_increment=0 must be an integer >= 1"),
        ({"yield_decay": 1.5}, r"yield_decay=1.5 must lie in \[0, 1\]"),
    ],
)
def test_invalid_combinations(overrides, message):
    with pytest.raises(ValueError, match=message):
        SaraConfig(**{**BASE, **overrides})


def test_log_step_metrics_diagnostics_numbers_only():
    from collections import defaultdict

    from sara_trl.allocation import StepStats

    metrics = defaultdict(list)
    stats = StepStats()
    diag = {"lam": 3.5, "prior_a": np.float64(0.5), "abandon_at_fail": float("nan"), "note": "text",
            "boundary_recomputes": 2.0}
    log_step_metrics(metrics, stats, np.array([1.0, 0.0]), 2, 10, diagnostics=diag)
    log_step_metrics(metrics, stats, np.array([1.0, 0.0]), 4, 20, diagnostics={**diag, "boundary_recomputes": 3.0})
    assert metrics["sara/lam"] == [3.5, 3.5] and metrics["sara/prior_a"] == [0.5, 0.5]
    assert "sara/abandon_at_fail" not in metrics and "sara/note" not in metrics  # NaN and non-numbers skipped
    assert "boundary_recomputes" in CUMULATIVE_DIAGNOSTICS
    assert metrics["sara/boundary_recomputes"] == [3.0]  # running total: latest value, not averaged


def test_two_steps_log_diagnostics(tiny_model_dir, tokenizer, cpu_trainer_kwargs):
    # Bayes-optimal stopping with a prompt history; the fitted prior is used from step 2 on (auto_min_prompts=1),
    # so step 1 runs the burn-in (paper rule, no lam) and step 2 solves the boundary once.
    args = SaraConfig(**cpu_trainer_kwargs(budget_cap=12.0, stopping_rule="bayes_optimal", history_decay=0.5,
                                           auto_min_prompts=1))
    trainer = SaraGRPOTrainer(model=tiny_model_dir, reward_funcs=mode_reward, args=args,
                              train_dataset=mode_dataset(), processing_class=tokenizer)
    assert trainer.sara_allocator.config.stopping_rule == "bayes_optimal"
    assert trainer.sara_allocator.config.history_decay == 0.5
    trainer.train()

    logs = sara_logs(trainer)
    assert len(logs) == 2
    first, last = logs
    # Step 1: no prompt has a history yet; burn-in, so no boundary and no lam.
    assert first["sara/history_hit_rate"] == 0.0 and first["sara/history_hit_rate_total"] == 0.0
    assert first["sara/boundary_recomputes"] == 0.0
    assert "sara/lam" not in first and "sara/abandon_at_fail" not in first
    assert (first["sara/prior_w0"], first["sara/prior_w1"], first["sara/prior_a"], first["sara/prior_b"]) == (
        0.0, 0.0, 1.0, 1.0)  # the config's Beta(prior_alpha, prior_beta) during burn-in
    assert first["sara/cost_pass"] == first["sara/cost_fail"] == 1.0  # cost_unit="rollouts"
    # Step 2: the fitted prior and the boundary solved once, at a finite cost per effective group >= 1 rollout.
    assert last["sara/boundary_recomputes"] == 1.0
    assert last["sara/lam"] >= 1.0 and math.isfinite(last["sara/lam"])
    assert args.n0 <= last["sara/abandon_at_fail"] <= args.num_generations  # the probe is never cut short
    # The last log holds exactly the allocator's numeric, non-NaN diagnostics after the last step.
    diag = {key: value for key, value in trainer.sara_allocator.diagnostics().items() if not math.isnan(value)}
    logged = {key[len("sara/"):]: value for key, value in last.items()
              if key[len("sara/"):] in trainer.sara_allocator.diagnostics()}
    assert logged == pytest.approx(diag)
