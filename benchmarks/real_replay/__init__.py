"""Replay of the real-training task's bank at the paper's batch size."""
