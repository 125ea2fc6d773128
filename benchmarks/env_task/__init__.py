"""SARA vs dynamic sampling with ``environment_factory`` on a guess-the-number environment (SmolLM2-135M, CPU)."""
