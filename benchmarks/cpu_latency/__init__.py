"""CPU latency model: the vLLM-CPU engine's decode-step cost, a + b x running sequences."""
