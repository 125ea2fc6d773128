"""Benchmarks of the SARA allocator against dynamic sampling and uniform allocation.

Run ``python benchmarks/run.py`` (or ``--quick``) from the repository root; it regenerates ``benchmarks/RESULTS.md``
and the PNG plots under ``benchmarks/plots/``. The modules here are importable (``from benchmarks import sim``) so the
test suite can run the harness in quick mode.
"""
