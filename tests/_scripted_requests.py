"""A scripted request-level engine for streaming collection without vLLM: :class:`ScriptedRequests` stands in for
:class:`sara_trl.trainer.streaming.VLLMStreamingEngine` (``add``, ``step``, ``abort``, ``pending``), its completions
written by a ``turn`` function of the question and the text so far. Shared by tests/test_trainer_trajectory_streaming.py
(one process) and tests/_mp_train.py (several processes, each its own engine)."""

from __future__ import annotations

import re

from sara_trl.allocation.event_loop import Finished


class ScriptedRequests:
    """A request-level engine (``add(rid, prompt_ids, max_tokens)``, ``step``, ``abort``, ``pending``): each
    request's completion is ``turn(question, text, after_tool)`` tokenized, cut to ``max_tokens``, one token per
    engine step; log-probs -0.01 * (position + 1)."""

    def __init__(self, tokenizer, turn):
        self.tokenizer, self.turn = tokenizer, turn
        self.running: dict[int, list] = {}  # rid -> [ids, emitted]
        self.requests: list[tuple[int, bool, int | None]] = []  # (rid, after_tool, max_tokens)

    @property
    def pending(self) -> int:
        return len(self.running)

    def script(self, prompt_ids, max_tokens=None):
        text = self.tokenizer.decode(prompt_ids)
        question = int(re.findall(r"Question (\d+)", text)[-1])
        after_tool = "<tool_response>" in text
        ids = self.tokenizer(self.turn(question, text, after_tool), add_special_tokens=False)["input_ids"]
        return (ids if max_tokens is None else ids[:max_tokens]), after_tool

    def add(self, rid, prompt_ids, max_tokens=None):
        assert rid not in self.running and (max_tokens is None or max_tokens >= 1)
        ids, after_tool = self.script(prompt_ids, max_tokens)
        self.requests.append((rid, after_tool, max_tokens))
        self.running[rid] = [ids, 0]

    def step(self):
        done = []
        for rid in list(self.running):
            state = self.running[rid]
            state[1] += 1
            if state[1] >= len(state[0]):
                ids = self.running.pop(rid)[0]
                done.append(Finished(rid, ids, [-0.01 * (i + 1) for i in range(len(ids))]))
        return done

    def abort(self, rids):
        return [self.running.pop(rid)[1] if rid in self.running else 0 for rid in rids]
