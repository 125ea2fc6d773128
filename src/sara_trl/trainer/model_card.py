"""Model-card metadata: the SARA citation, concatenated with the base algorithm's (GRPO or RLOO) citation.

TRL's model-card template has one citation block, so ``_paper["citation"]`` holds both BibTeX entries; the card's
paper link points at SARA.
"""

from __future__ import annotations

import textwrap

__all__ = ["SARA_ARXIV_ID", "SARA_CITATION", "SARA_TITLE", "sara_paper"]

SARA_TITLE = (
    "Early Verdicts, Better Budgets: Sequential Adaptive Rollout Allocation for Compute-Efficient RLVR"
)
SARA_ARXIV_ID = "2607.26253"
# docstyle-ignore
SARA_CITATION = textwrap.dedent("""\
    @article{nomand2026sara,
        title        = {{Early Verdicts, Better Budgets: Sequential Adaptive Rollout Allocation for Compute-Efficient RLVR}},
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
