"""Simulated allocation (and the replay of the quickstart's bank): RESULTS.md, results.json, plots/."""
