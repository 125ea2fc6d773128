"""Streaming vs rounds on a GPU, projected from kernel-latency fits."""
