"""The model card: the SARA citation next to the base algorithm's (GRPO or RLOO), and a true "base model" line.

TRL's model-card template has one citation block, so ``_paper["citation"]`` holds both BibTeX entries; the card's
paper link points at SARA.

TRL names the base model only when it is a Hub id: for a model given as a local folder (the quickstart's converted
SmolLM2, any checkpoint on disk) its card read "a fine-tuned version of [None](https://huggingface.co/None)", and its
usage snippet ``pipeline(model="None")`` when no ``hub_model_id`` is set. :class:`SaraModelCardMixin` rewrites those
two spots: the card says which local checkpoint the model was trained from (and the GGUF file it was converted
from, for a checkpoint made by :func:`sara_trl.utils.convert_gguf_checkpoint`), and the snippet loads the output
folder. A Hub base model is left as TRL writes it.
"""

from __future__ import annotations

import json
import os
import textwrap

__all__ = ["SARA_ARXIV_ID", "SARA_CITATION", "SARA_TITLE", "SaraModelCardMixin", "describe_base_model",
           "fix_local_model_card", "sara_paper"]

_CONVERSION_MARKER = "sara_trl_conversion.json"  # written by sara_trl.utils.convert_gguf_checkpoint
_NONE_LINK = "a fine-tuned version of [None](https://huggingface.co/None)"
_NONE_PIPELINE = 'model="None"'

SARA_TITLE = (
    "Early Verdicts, Better Budgets: Sequential Adaptive Rollout Allocation for Compute-Efficient RLVR"
)
SARA_ARXIV_ID = "2607.26253"
# docstyle-ignore
SARA_CITATION = textwrap.dedent("""\
    @article{nomand2026sara,
        title        = {{""" + SARA_TITLE + """}},
        author       = {Pixel Nomand and Elena Voss and Marcus Hale and Sofia Reyes},
        year         = 2026,
        eprint       = {arXiv:2607.26253},
    }""")


def sara_paper(base_paper: dict) -> dict:
    """``_paper`` dict for a SARA trainer: SARA's title and arXiv id, SARA's BibTeX followed by the base trainer's.

    Parameters
    ----------
    base_paper : dict
        The base trainer's ``_paper`` (keys ``title``, ``id``, ``citation``).

    Returns
    -------
    dict
        ``{"title", "id", "citation"}`` for TRL's model-card template.
    """
    citation = SARA_CITATION
    if base_paper.get("citation"):
        citation = citation + "\n\n" + base_paper["citation"]
    return {"title": SARA_TITLE, "id": SARA_ARXIV_ID, "citation": citation}


def describe_base_model(source: str | None) -> str:
    """The words that replace TRL's ``[None](https://huggingface.co/None)`` for a model not from the Hub.

    Parameters
    ----------
    source : str or None
        The model's ``config._name_or_path``: a local folder, or empty for a model built in memory.

    Returns
    -------
    str
        E.g. ``"a local checkpoint (`/ckpt/smollm2`), converted from the GGUF file `SmolLM2-135M-Instruct.Q4_1.gguf`"``.
    """
    if not source:
        return "a model built in memory (no checkpoint name recorded in its config)"
    text = f"a local checkpoint (`{source}`)"
    marker = os.path.join(source, _CONVERSION_MARKER)
    if os.path.isfile(marker):
        try:
            with open(marker) as handle:
                gguf = os.path.basename(json.load(handle).get("source", ""))
        except (OSError, ValueError):
            gguf = ""
        if gguf:
            text += f", converted from the GGUF file `{gguf}`"
    return text


def fix_local_model_card(card_path: str, source: str | None, output_dir: str) -> bool:
    """Rewrite TRL's "None" placeholders in the model card at ``card_path`` (see the module docstring).

    Parameters
    ----------
    card_path : str
        The ``README.md`` TRL wrote.
    source : str or None
        The model's ``config._name_or_path``.
    output_dir : str
        Where the trained model is saved (what the usage snippet then loads).

    Returns
    -------
    bool
        Whether the card was changed.
    """
    if not os.path.isfile(card_path):
        return False
    with open(card_path, encoding="utf-8") as handle:
        text = handle.read()
    fixed = text.replace(_NONE_LINK, f"a fine-tuned version of {describe_base_model(source)}")
    fixed = fixed.replace(_NONE_PIPELINE, f"model={json.dumps(output_dir)}")
    if fixed == text:
        return False
    with open(card_path, "w", encoding="utf-8") as handle:
        handle.write(fixed)
    return True


class SaraModelCardMixin:
    """``create_model_card`` that names a local base model instead of TRL's "None" (see the module docstring)."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        source = getattr(self.model.config, "_name_or_path", "") or ""
        fix_local_model_card(os.path.join(self.args.output_dir, "README.md"), source, self.args.output_dir)
