"""A scripted stand-in for an OpenAI-compatible completions server and a character-level tokenizer, injected into
:class:`sara_trl.trainer.async_worker.SaraAsyncRolloutWorker` through its ``client`` and ``processing_class`` seams
(no sockets, no model).

Prompts are ``[{"role": "user", "content": f"p{index}"}]``; the tokenizer renders a prompt as its characters' code
points followed by :data:`GEN`, so the client recovers the prompt's index from the request. ``script(index, j)``
says what the ``j``-th request of that prompt (in order of arrival) does: a :class:`Reply`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

GEN = 7  # the "generation prompt" token the fake chat template appends
SUCCESS, FAILURE = 1, 2  # a completion's first token says whether it is right (see `correct`)


class FakeTokenizer:
    """``apply_chat_template``: the code points of the messages' contents, then :data:`GEN`; ``decode``: the ids as
    text."""

    eos_token = "</s>"

    def apply_chat_template(self, messages, return_dict=False, add_generation_prompt=True, **kwargs):
        ids = [ord(ch) for m in messages for ch in m["content"]]
        return ids + ([GEN] if add_generation_prompt else [])

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


def prompt_index(prompt_ids: list[int]) -> int:
    """The index ``n`` of the prompt ``p{n}`` a request was rendered from."""
    return int("".join(chr(i) for i in prompt_ids if i != GEN)[1:])


def dataset(n: int) -> list[dict]:
    """``n`` conversational rows ``p0 .. p{n-1}`` with an ``index`` column (passed on to the reward functions)."""
    return [{"prompt": [{"role": "user", "content": f"p{i}"}], "index": i} for i in range(n)]


def correct(completions, completion_ids, **kwargs):
    """1.0 when the completion starts with :data:`SUCCESS`, else 0.0."""
    return [1.0 if ids and ids[0] == SUCCESS else 0.0 for ids in completion_ids]


def logprob(position: int) -> float:
    """The log-prob the fake server reports for the completion token at ``position``."""
    return -0.125 * (position + 1)


@dataclass
class Reply:
    """What one request does: stream ``tokens`` (one per tick), then finish, unless ``gate`` is given: then, after
    the tokens, wait until the gate is set (never, if it never is: a request that runs until cancelled)."""

    tokens: list[int]
    gate: threading.Event | None = None


@dataclass
class Served:
    """One request the fake server received."""

    request_id: str
    prompt: int
    j: int
    payload: dict
    started: float
    tokens: int = 0
    ended: float | None = None
    state: str = "running"  # running, finished, cancelled


@dataclass
class FakeCompletionsClient:
    """The worker's :class:`~sara_trl.trainer.async_worker.CompletionsClient` on a script (see the module docstring).

    ``served`` lists every request in order of arrival; a cancelled request records the tokens it had streamed."""

    script: callable
    tick: float = 0.0005
    served: list[Served] = field(default_factory=list)
    closed: bool = False

    def __post_init__(self):
        self._count: dict[int, int] = {}
        self._lock = threading.Lock()

    async def complete(self, payload, out, request_id):
        prompt = prompt_index(payload["prompt"])
        with self._lock:
            j = self._count.get(prompt, 0)
            self._count[prompt] = j + 1
            rec = Served(request_id, prompt, j, payload, time.monotonic())
            self.served.append(rec)
        reply = self.script(prompt, j)
        try:
            for position, token in enumerate(reply.tokens):
                await asyncio.sleep(self.tick)
                out.token_ids.append(token)
                out.logprobs.append(logprob(position))
                rec.tokens += 1
            while reply.gate is not None and not reply.gate.is_set():
                await asyncio.sleep(0.002)
        except asyncio.CancelledError:
            rec.state, rec.ended = "cancelled", time.monotonic()
            raise
        out.finish_reason = "stop"
        rec.state, rec.ended = "finished", time.monotonic()

    async def aclose(self):
        self.closed = True

    def of(self, state: str) -> list[Served]:
        with self._lock:
            return [s for s in self.served if s.state == state]
