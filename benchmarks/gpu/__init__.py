"""One check on a lent GPU: the trainers on CUDA and a 1.5B model's decode-step latency."""
