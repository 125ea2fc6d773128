"""What a run prints besides its results: no FutureWarning the user cannot act on, warnings and log lines above the
SARA progress bar (not inside it), and counts with the right plural."""

from __future__ import annotations

import dataclasses
import logging
import warnings

import numpy as np
import pytest
from transformers import TrainingArguments

from sara_trl import SaraConfig, SaraRLOOConfig
from sara_trl.cli import plural
from sara_trl.trainer.progress import RoundProgress

BASE = dict(output_dir="unused", use_cpu=True, bf16=False, report_to="none", num_generations=4,
            per_device_train_batch_size=8)
# recent transformers releases (5.24, not 5.17) renamed gradient_checkpointing to activation_checkpointing and warn
# on the old name; where only the old name exists there is nothing to warn about
RENAMED = "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}


@pytest.mark.parametrize("config_class", [SaraConfig, SaraRLOOConfig])
def test_trl_checkpointing_default_raises_no_future_warning(config_class):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = config_class(**BASE)  # TRL's default: checkpointing on, under the old name
        assert args.gradient_checkpointing is True
        assert config_class(**BASE, gradient_checkpointing=True).gradient_checkpointing is True
    if RENAMED:
        assert args.activation_checkpointing is True
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            assert config_class(**BASE, activation_checkpointing=False).gradient_checkpointing is False
        # turning it off under the old name still works (and transformers still says the name is deprecated)
        with pytest.warns(FutureWarning, match="`gradient_checkpointing` is deprecated"):
            args = config_class(**BASE, gradient_checkpointing=False)
        assert args.activation_checkpointing is False


@pytest.mark.skipif(not RENAMED, reason="this transformers has no renamed checkpointing methods")
def test_trl_calls_to_renamed_model_methods_are_silent(tiny_model_dir):
    """TRL calls `model.is_gradient_checkpointing` around every generation; recent transformers deprecated that name."""
    from transformers import AutoModelForCausalLM

    from sara_trl.trainer import hide_renamed_checkpointing_warnings

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # without the filter: transformers warns on each call
        assert model.is_gradient_checkpointing is False
    assert any("`is_gradient_checkpointing` is deprecated" in str(w.message) for w in caught)
    with warnings.catch_warnings(record=True) as caught:
        hide_renamed_checkpointing_warnings()  # what constructing a SARA trainer does (pytest resets filters)
        assert model.is_gradient_checkpointing is False
        warnings.warn("`something_else` is deprecated", FutureWarning)
    assert [str(w.message) for w in caught] == ["`something_else` is deprecated"]


def test_warnings_and_log_lines_print_above_the_bar(capsys):
    previous = warnings.showwarning
    with RoundProgress(step=3, enabled=True) as progress:
        progress(1, 8, np.array([1.0, 0.0, np.nan, 1.0, 0.0, 0.0, 1.0, 1.0]))
        warnings.warn("watch out", UserWarning)
        logging.getLogger("sara_trl.test").warning("logged line")
    assert warnings.showwarning is previous  # restored on exit
    err = capsys.readouterr().err
    assert "SARA step 3" in err
    # tqdm.write clears the bar ('\r', blanks, '\r') before each message, so each starts its own line
    assert f"\r{__file__}:" in err and "UserWarning: watch out" in err
    assert "\rlogged line\n" in err


def test_disabled_bar_prints_nothing_and_leaves_warnings_alone(capsys):
    previous = warnings.showwarning
    with RoundProgress(step=1, enabled=False) as progress:
        assert warnings.showwarning is previous
        progress(1, 2, np.array([1.0, 0.0]))
    assert (progress.rollouts, progress.successes, progress.scored) == (2, 1.0, 2)
    assert capsys.readouterr().err == ""


def test_plural():
    assert [plural(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert plural(1, "batch", "batches") == "1 batch" and plural(3, "batch", "batches") == "3 batches"
