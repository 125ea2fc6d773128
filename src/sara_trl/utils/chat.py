"""A tool-calling chat template for a tokenizer whose own template renders no tool call (SmolLM2's)."""

from __future__ import annotations

from typing import Any

__all__ = ["use_tool_chat_template"]


def use_tool_chat_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` TRL's Qwen3 chat template and ``<|im_end|>`` as EOS, in place, and return it.

    TRL refuses ``tools`` and ``environment_factory`` (even an environment without tool methods) unless
    ``trl.chat_template_utils.supports_tool_calling`` accepts the chat template; SmolLM2-135M-Instruct's own template
    (ChatML, with a default system prompt) renders no tool call. Qwen3's template uses the same ChatML markers
    (``<|im_start|>`` / ``<|im_end|>``, tokens of SmolLM2's vocabulary), renders tool schemas, calls and responses, and
    ends each turn with ``<|im_end|>``, which is therefore the EOS; TRL then sets its response template and swaps in
    its prefix-preserving training template, as for Qwen3.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        A tokenizer whose vocabulary holds ``<|im_start|>`` and ``<|im_end|>`` (ChatML).

    Returns
    -------
    transformers.PreTrainedTokenizerBase
        The same object.
    """
    from trl.chat_template_utils import qwen3_chat_template

    tokenizer.chat_template = qwen3_chat_template
    tokenizer.eos_token = "<|im_end|>"
    return tokenizer
