"""The first real CPU training runs (read by section 6 of the simulated study's RESULTS.md)."""
