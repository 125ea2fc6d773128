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


# -- answers before torch: the preview of SaraConfig's flags (sara_trl._cli_preview) ----------------------------------

_HEAVY = ("torch", "trl", "transformers.training_args", "transformers.trainer")


def _run_code(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; it prints ``HEAVY [...]`` (heavy modules imported) at the end."""
    epilogue = f"\nimport sys\nprint('HEAVY', sorted(m for m in {_HEAVY!r} if m in sys.modules))\n"
    wrapped = "try:\n" + "".join(f"    {line}\n" for line in code.splitlines()) + \
        "except SystemExit as exit_info:\n    print('EXIT', exit_info.code)\n" + epilogue
    return _run("-c", wrapped)


@pytest.mark.parametrize("example", ["math_1p5b", "countdown_3b"])
@pytest.mark.parametrize(("flags", "code", "message"), [
    (["--help"], 0, None),
    (["--num_generation", "4"], 2, "unknown flag --num_generation (did you mean --num_generations?)"),
    (["--n0", "9"], 2, "invalid configuration: SaraConfig: n0=9 must satisfy 1 <= n0 <= k=8"),
])
def test_gpu_examples_answer_help_and_mistakes_before_torch(example, flags, code, message):
    """``examples/<name>.py --help`` and a flag mistake: answered from the preview, torch and TRL never imported."""
    path = ROOT / "examples" / f"{example}.py"
    result = _run_code("import importlib.util, sys\n"
                       f"spec = importlib.util.spec_from_file_location('ex', {str(path)!r})\n"
                       "module = sys.modules['ex'] = importlib.util.module_from_spec(spec)\n"
                       f"spec.loader.exec_module(module)\nmodule.parse_args({[*CPU, *flags]!r})")
    assert f"EXIT {code}" in result.stdout and "HEAVY []" in result.stdout, result.stdout[-2000:] + result.stderr
    if message is None:
        assert "SARA options (SaraConfig):" in result.stdout and "--allocator" in result.stdout
    else:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and lines[0].endswith("(--help lists every flag)"), lines


def test_help_lists_sara_flags_first_without_importing_torch():
    result = _run_code("from sara_trl.quickstart import parse_args\nparse_args(['--help'])")
    out = result.stdout
    assert result.returncode == 0 and "EXIT 0" in out
    assert "HEAVY []" in out  # neither torch nor TRL was imported to answer --help
    lines = out.splitlines()
    assert lines[0] == "usage: sara-quickstart [--flag VALUE ...]"  # one line, not every flag twice
    headers = [line for line in lines if line.endswith("):") and " options (" in line]
    assert headers == ["SARA options (SaraConfig):", "TRL options (GRPOConfig):",
                       "transformers options (TrainingArguments):"]
    position = {flag: next(i for i, line in enumerate(lines) if line.strip().startswith(flag))
                for flag in ("--dataset", "--allocator", "--n0", "--tau_low", "--num_generations", "--learning_rate",
                             "--output_dir", "--max_steps")}
    # the script's flags, then SARA's, then TRL's (num_generations, learning_rate), then transformers' (output_dir)
    assert position["--dataset"] < position["--allocator"] < position["--n0"] < position["--tau_low"]
    assert position["--tau_low"] < position["--num_generations"] < position["--output_dir"]
    assert position["--tau_low"] < position["--learning_rate"] < position["--output_dir"] < position["--max_steps"]
    sara_block = out[out.index("SARA options (SaraConfig):"):out.index("TRL options (GRPOConfig):")]
    assert "--n0 N0" in sara_block and "(default: 2)" in sara_block and "--num_generations" not in sara_block
    # TRL's and transformers' help texts and choices are the real ones, read from their source without importing
    assert "{no,steps,epoch,best}" in out and "(default: 1e-06)" in out  # save_strategy; GRPOConfig's learning_rate


@pytest.mark.parametrize(("flags", "message"), [
    (["--alocator", "x"], "unknown flag --alocator (did you mean --allocator?)"),
    (["--allocator", "foo"], "argument --allocator: invalid choice: 'foo'"),
    (["--n0", "9"], "invalid configuration: SaraConfig: n0=9 must satisfy 1 <= n0 <= k=8"),
    (["--num_generations", "0"], "invalid configuration: SaraConfig: k=0: a group needs at least 2 rollouts"),
    (["--max_steps", "x"], "argument --max_steps/--max-steps: invalid int value: 'x'"),
    (["--save_strategy", "sometimes"], "argument --save_strategy/--save-strategy: invalid choice: 'sometimes'"),
    (["--dataset", "/nonexistent/rows.jsonl"], "--dataset /nonexistent/rows.jsonl: no such file"),
    (["--model_name_or_path", "nobody/no-such-model"], "--model_name_or_path nobody/no-such-model: no such folder"),
])
def test_mistakes_are_answered_before_torch_in_one_line(flags, message):
    result = _run_code(f"from sara_trl.quickstart import parse_args\nparse_args({flags!r}, check=True)")
    assert "EXIT 2" in result.stdout and "HEAVY []" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("sara-quickstart: error: ") and message in lines[0]
    assert lines[0].endswith("(--help lists every flag)")


def test_preview_rejects_what_the_real_config_rejects_with_the_same_message(capsys):
    """The same command line through the preview (config named by a string) and through the real class."""
    for flags in (["--n0", "9"], ["--num_generations", "1"], ["--tau_low", "1.5"], ["--allocator", "foo"],
                  ["--stopping_rule", "bayes_optimal", "--tau_low", "0.3"],
                  ["--continue_to_decision", "True", "--round_increment", "2"], ["--tau_low", "auto"]):
        errors = []
        for config in ("sara_trl:SaraConfig", SaraConfig):
            errors.append(_fail(capsys, config, [*CPU, *flags], prog="x"))
        assert errors[0] == errors[1] and errors[0].count("\n") == 1, flags


@pytest.mark.parametrize("name", ["SaraConfig", "SaraRLOOConfig"])
def test_preview_has_exactly_the_real_flags(name):
    """Every flag of the real config, in the same order and help groups, with the same defaults and arity."""
    import sara_trl
    from sara_trl._cli_preview import preview_for
    from sara_trl.cli import ArgumentParser

    preview = ArgumentParser(None, prog="x")
    preview_for(f"sara_trl:{name}").add_arguments(preview)
    real = ArgumentParser(getattr(sara_trl, name), prog="x")
    assert preview.long_flags() == real.long_flags() and len(real.long_flags()) > 350
    assert [g.title for g in preview._action_groups] == [g.title for g in real._action_groups]
    differ = set()
    assert len(preview._actions) == len(real._actions)
    for other, action in zip(preview._actions, real._actions):  # same order (a --no_x flag shares x's dest)
        assert other.option_strings == action.option_strings
        for attr in ("nargs", "const", "default", "choices", "help", "required"):
            mine, theirs = getattr(other, attr), getattr(action, attr)
            if mine != theirs and not (attr == "choices" and list(mine or ()) == list(theirs or ())):
                differ.add((action.dest, attr))
    # choices the source gives as an expression (`trainer_log_levels.keys()`): only the real parser lists them
    assert differ <= {("log_level", "choices"), ("log_level_replica", "choices")}, differ


def test_preview_values_equal_the_real_parse():
    """The flags the preview parsed (what preflight sees) are the values the real config ends up with."""
    from sara_trl.cli import parse_args

    seen = {}
    flags = [*CPU, "--max_steps", "3", "--n0", "3", "--carry_over", "--save_strategy", "no", "--report_to", "none"]
    (config,) = parse_args("sara_trl:SaraConfig", flags, preflight=lambda ns: seen.update(vars(ns)))
    for name in ("max_steps", "n0", "carry_over", "num_generations", "tau_low", "learning_rate", "use_vllm"):
        assert seen[name] == getattr(config, name), name
    assert (config.max_steps, config.n0, config.carry_over) == (3, 3, True)


def test_one_spelling_of_the_stopping_rule_and_of_continue_to_decision(capsys):
    """``--stopping_rule`` and ``--continue_to_decision`` parse (through the preview and the real class alike); the
    core's old values are no flag values."""
    from sara_trl.cli import parse_args

    flags = [*CPU, "--report_to", "none", "--stopping_rule", "bayes_optimal", "--continue_to_decision", "True"]
    for config in ("sara_trl:SaraConfig", SaraConfig):
        (args,) = parse_args(config, flags, prog="x")
        assert (args.stopping_rule, args.tau_low, args.continue_to_decision, args.round_increment) == (
            "bayes_optimal", 0.45, True, 1)
        cfg = args.to_allocation_config()
        assert (cfg.stopping_rule, cfg.continue_to_decision) == ("bayes_optimal", True)
        (args,) = parse_args(config, [*CPU, "--report_to", "none", "--continue_to_decision", "False"], prog="x")
        assert args.continue_to_decision is False and args.to_allocation_config().to_decision is False
    err = _fail(capsys, "sara_trl:SaraConfig", [*CPU, "--stopping_rule", "auto"], prog="x")
    assert "argument --stopping_rule/--stopping-rule: invalid choice: 'auto'" in err
    err = _fail(capsys, "sara_trl:SaraConfig", [*CPU, "--round_increment", "to_decision"], prog="x")
    assert "invalid int value: 'to_decision'" in err


def test_preflight_error_is_one_line_and_runs_without_a_preview_too(capsys):
    def refuse(flags):
        raise FileNotFoundError(f"--max_steps {flags.max_steps}: refused")

    for config in ("sara_trl:SaraConfig", SaraConfig):
        err = _fail(capsys, config, [*CPU, "--max_steps", "5"], prog="x", preflight=refuse)
        assert err == "x: error: --max_steps 5: refused (--help lists every flag)\n"
