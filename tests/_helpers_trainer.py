"""Test helpers for the trainer tests: a reward scripted per prompt, so the groups SARA commits are known exactly;
a ``model.generate`` whose completions are scripted from each prompt (tool and environment tests)."""

from __future__ import annotations

import re

# Rollouts scored so far per prompt id; clear it before each training run.
POSITION: dict[int, int] = {}


def scripted_reward(completions, script, pid, **kwargs):
    """Rollout j of prompt ``pid`` (in generation order) gets reward ``int(script[j % len(script)])``.

    The dataset needs a ``script`` column (a string of 0/1 per prompt) and a ``pid`` column (the prompt's index).
    """
    rewards = []
    for text, p in zip(script, pid):
        j = POSITION.get(p, 0)
        POSITION[p] = j + 1
        rewards.append(float(text[j % len(text)]))
    return rewards


class ScriptedGeneration:
    """Replaces ``model.generate`` (TRL's transformers generation path): each row's completion is the text
    :meth:`turn` returns for its prompt ("Question <i>" in it), tokenized, right-padded with EOS. Records every call:
    rows per call, and whether it followed a tool response."""

    def __init__(self, trainer):
        self.tokenizer = trainer.processing_class
        self.calls: list[tuple[int, bool]] = []
        self.turns: dict[str, list[int]] = {}  # text -> ids of a scripted turn
        trainer.model.generate = self.generate

    def ids(self, text: str) -> list[int]:
        return self.turns.setdefault(text, self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def turn(self, question: int, position: int, text: str, after_tool: bool) -> str:
        """The completion of row ``position`` (prompt "Question ``question``", decoded as ``text``)."""
        raise NotImplementedError

    def generate(self, input_ids, attention_mask=None, **kwargs):
        import torch

        rows, after_tool = [], None
        for position, (ids, mask) in enumerate(zip(input_ids.tolist(), attention_mask.tolist())):
            text = self.tokenizer.decode([t for t, m in zip(ids, mask) if m])
            question = int(re.findall(r"Question (\d+)", text)[-1])
            after_tool = "<tool_response>" in text
            rows.append(self.ids(self.turn(question, position, text, after_tool)))
        self.calls.append((len(rows), after_tool))
        width = max(len(r) for r in rows)
        eos = self.tokenizer.eos_token_id
        completions = torch.tensor([r + [eos] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, completions.to(input_ids.device)], dim=1)
