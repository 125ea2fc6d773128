"""Benchmarks of the SARA allocator against dynamic sampling and uniform allocation: one subpackage per study.

Each folder holds one study's scripts, its report and its result files; the modules at this top level are the code
several studies share (``common``: intervals over seeds, tables, the environment stamp; ``sim``: simulated tasks and
distributions; ``replay``: replay banks of real outcomes; ``real_task``: the real-training task). Scripts run from the
repository root as modules, e.g. ``python -m benchmarks.simulated.run --quick``; the index of studies, commands and
result files is ``benchmarks/README.md``.
"""
