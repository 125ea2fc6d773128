"""Test helpers for the trainer tests: a reward scripted per prompt, so the groups SARA commits are known exactly."""

from __future__ import annotations

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
