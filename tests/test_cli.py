"""Command-line mistakes (`sara_trl.cli`): each ends with one stderr line and exit status 2, never a traceback.

The examples are driven through their own ``parse_args`` (the function their ``main`` calls); the subprocess tests run
the real scripts the way a user does, so what is asserted is exactly what a user sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sara_trl import SaraConfig
from sara_trl.cli import parse_args, suggest_flag

ROOT = Path(__file__).resolve().parents[1]
CPU = ["--use_cpu", "true", "--bf16", "false"]  # the GPU examples' bf16 default needs a GPU to validate


@dataclass
class Toy:
    max_steps: int = field(default=4, metadata={"help": "optimizer steps"})
    allocator: str = field(default="sara", metadata={"help": "who decides", "choices": ["sara", "uniform"]})
    rate: float = field(default=0.5, metadata={"help": "a share"})

    def __post_init__(self):
        if not 0 <= self.rate <= 1:
            raise ValueError(f"rate must be in [0, 1],\n got {self.rate}")


def _fail(capsys, *args, **kwargs) -> str:
    """Run parse_args expecting a usage error; return what it printed on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        parse_args(*args, **kwargs)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_suggest_flag_uses_the_closest_valid_flag():
    valid = ["--allocator", "--max_steps", "--max-steps", "--n0"]
    assert suggest_flag("--alocator", valid) == "--allocator"
    assert suggest_flag("--max_step", valid) == "--max_steps"
    assert suggest_flag("--max-step=3", valid) == "--max-steps"
    assert suggest_flag("--completely_different", valid) is None


def test_toy_parser_values_defaults_and_errors(capsys):
    assert parse_args(Toy, []) == (Toy(),)
    assert parse_args(Toy, ["--max_steps", "2", "--rate", "1"], defaults={"allocator": "uniform"}) == (
        Toy(max_steps=2, allocator="uniform", rate=1.0),)
    err = _fail(capsys, Toy, ["--alocator", "uniform"], prog="toy")
    assert err == "toy: error: unknown flag --alocator (did you mean --allocator?) (--help lists every flag)\n"
    err = _fail(capsys, Toy, ["--max_step", "1"], prog="toy")  # no prefix matching
    assert err == "toy: error: unknown flag --max_step (did you mean --max_steps?) (--help lists every flag)\n"
    err = _fail(capsys, Toy, ["--allocator", "foo"], prog="toy")
    assert err == ("toy: error: argument --allocator: invalid choice: 'foo' (choose from 'sara', 'uniform') "
                   "(--help lists every flag)\n") or err.startswith("toy: error: argument --allocator: invalid choice")
    assert err.count("\n") == 1
    err = _fail(capsys, Toy, ["--rate", "2"], prog="toy")  # __post_init__ ValueError, newlines folded
    assert err == "toy: error: invalid configuration: rate must be in [0, 1], got 2.0 (--help lists every flag)\n"
    err = _fail(capsys, Toy, ["--zzz", "--qqq=1", "stray"], prog="toy")
    assert err == "toy: error: unknown flags --zzz, --qqq (--help lists every flag)\n"


def test_help_still_lists_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(Toy, ["--help"], prog="toy")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--max_steps" in out and "optimizer steps" in out and "--allocator" in out


def test_sara_config_mistakes_in_an_example(capsys):
    """The quickstart's parser over (ScriptArguments, SaraConfig): the three mistakes of the issue."""
    from test_examples import load_example

    quickstart = load_example("quickstart_cpu")
    err = _fail(capsys, (quickstart.ScriptArguments, SaraConfig), ["--alocator", "dynamic_sampling"],
                defaults=quickstart.QUICKSTART_DEFAULTS, prog="quickstart_cpu.py")
    assert err.startswith("quickstart_cpu.py: error: unknown flag --alocator (did you mean --allocator?)")
    assert err.count("\n") == 1
    with pytest.raises(SystemExit):
        quickstart.parse_args(["--max_step", "1"])
    assert "unknown flag --max_step (did you mean --max_steps?)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        quickstart.parse_args(["--allocator", "foo"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "allocator" in err and "'foo'" in err
    # the right spelling still parses
    _, args = quickstart.parse_args(["--max_steps", "1", "--allocator", "dynamic_sampling"])
    assert (args.max_steps, args.allocator) == (1, "dynamic_sampling")


@pytest.mark.parametrize("example", ["math_1p5b", "countdown_3b"])
def test_gpu_examples_reject_unknown_and_abbreviated_flags(example, capsys):
    from test_examples import load_example

    module = load_example(example)
    with pytest.raises(SystemExit) as exit_info:
        module.parse_args([*CPU, "--num_generation", "4"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "unknown flag --num_generation (did you mean --num_generations?)" in err and err.count("\n") == 1


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_real_script_unknown_flag_is_one_line_no_traceback():
    """What a user sees: `python examples/quickstart_cpu.py --alocator dynamic_sampling`."""
    result = _run("examples/quickstart_cpu.py", "--alocator", "dynamic_sampling")
    assert result.returncode == 2 and result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1] == ("quickstart_cpu.py: error: unknown flag --alocator (did you mean --allocator?) "
                         "(--help lists every flag)")
    assert "Traceback" not in result.stderr and "usage:" not in result.stderr


def test_real_evaluate_mistakes_and_help():
    result = _run("-m", "sara_trl.evaluate", "--model", "x", "--benchmark", "aime24")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == ("python -m sara_trl.evaluate: error: unknown flag --benchmark "
                                              "(did you mean --benchmarks?) (--help lists every flag)")
    result = _run("-m", "sara_trl.evaluate", "--model", "x", "--benchmarks", "aime24,gsm9k")
    assert result.returncode == 2 and result.stderr.splitlines()[-1].startswith(
        "python -m sara_trl.evaluate: error: invalid configuration: --benchmarks 'aime24,gsm9k': unknown "
        "benchmark(s) gsm9k")
