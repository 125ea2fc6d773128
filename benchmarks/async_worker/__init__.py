"""TRL's default rollout worker vs dynamic sampling vs SARA in TRL 1.16's asynchronous GRPO trainer (issue 54):
the benchmark (``runs/``) and its report."""
