"""TRL's own trainer tests, run against the SARA trainers: the held-out suite for a TRL upgrade (opt-in, not in CI).

TRL's ``tests/test_grpo_trainer.py`` and ``tests/test_rloo_trainer.py`` exercise every option of its trainers. Run
with ``trl.GRPOTrainer`` / ``trl.RLOOTrainer`` replaced by ``SaraGRPOTrainer`` / ``SaraRLOOTrainer`` and
``trl.GRPOConfig`` / ``trl.RLOOConfig`` by SARA's configs with ``allocator="uniform"`` (every drawn prompt trained with
its k rollouts: TRL's own behaviour, collected and replayed through SARA's port), a test that passes with TRL's
trainers should pass with SARA's. The known exceptions: tests that construct a trainer without a config (SARA's
default config uses ``allocator="sara"``, which refuses a reward model as a success score). docs/trl-port.md says
when to run it. TRL's wheel and sdist ship no tests, so it needs a checkout of TRL at the installed version::

    git clone --depth 1 --branch v$(python -c "import trl; print(trl.__version__)") \\
        https://github.com/huggingface/trl /tmp/trl
    python scripts/trl_heldout.py /tmp/trl -x -q            # extra arguments go to pytest

Compare with the same files under TRL's own trainers (``python -m pytest /tmp/trl/tests/test_grpo_trainer.py``).
Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

TEST_FILES = ("tests/test_grpo_trainer.py", "tests/test_rloo_trainer.py")


def swap_in_sara() -> None:
    """Make ``trl``'s GRPO/RLOO trainer and config names the SARA ones (uniform allocation), before any test module
    imports them."""
    import trl

    from sara_trl import SaraConfig, SaraGRPOTrainer, SaraRLOOConfig, SaraRLOOTrainer

    uniform_help = {"help": "The held-out suite's default: uniform allocation (TRL's own behaviour)."}

    @dataclass
    class UniformSaraConfig(SaraConfig):
        allocator: str = field(default="uniform", metadata=uniform_help)

    @dataclass
    class UniformSaraRLOOConfig(SaraRLOOConfig):
        allocator: str = field(default="uniform", metadata=uniform_help)

    UniformSaraConfig.__name__ = UniformSaraConfig.__qualname__ = "GRPOConfig"
    UniformSaraRLOOConfig.__name__ = UniformSaraRLOOConfig.__qualname__ = "RLOOConfig"
    trl.GRPOConfig, trl.GRPOTrainer = UniformSaraConfig, SaraGRPOTrainer
    trl.RLOOConfig, trl.RLOOTrainer = UniformSaraRLOOConfig, SaraRLOOTrainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trl_checkout", type=Path, help="a checkout of TRL at the installed version's tag")
    parser.add_argument("--files", nargs="+", default=list(TEST_FILES), help="test files, relative to the checkout")
    args, pytest_args = parser.parse_known_args(argv)
    files = [args.trl_checkout / name for name in args.files]
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        parser.error(f"not found: {missing} (clone TRL at the installed version's tag, see --help)")
    import pytest

    swap_in_sara()
    return int(pytest.main([*map(str, files), "--rootdir", str(args.trl_checkout), *pytest_args]))


if __name__ == "__main__":
    sys.exit(main())
