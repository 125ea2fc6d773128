"""The worker's seam to the inference server: one streamed ``/v1/completions`` request per rollout.

:class:`CompletionsClient` is what the worker needs (tests inject a scripted one); :class:`OpenAICompletionsClient`
speaks to an OpenAI-compatible server (vLLM's ``python -m vllm.entrypoints.openai.api_server``) with ``aiohttp``.
A request fills a :class:`Completion` as its chunks arrive, so when the worker cancels it (an abandoned prompt's
request, or everything at ``stop()``) the tokens it had generated are known exactly. Cancelling the awaiting task
closes the HTTP connection, which vLLM answers by aborting the request in the engine.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Completion", "CompletionsClient", "OpenAICompletionsClient"]


@dataclass
class Completion:
    """One rollout's completion as it streams in.

    Attributes
    ----------
    token_ids : list of int
        Completion tokens received so far.
    logprobs : list of float
        The sampled token's log-prob for each of them (natural log), same length.
    finish_reason : str or None
        The server's reason once the request finished (``"stop"``, ``"length"``); None while it runs.
    """

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


class CompletionsClient(Protocol):
    """What :class:`~sara_trl.trainer.async_worker.SaraAsyncRolloutWorker` needs from a server."""

    async def complete(self, payload: dict, out: Completion, request_id: str) -> None:
        """Run one request (``payload``: the ``/v1/completions`` body, ``n=1``), appending its tokens and log-probs
        to ``out`` as they arrive; return when it has finished. Cancelling the awaiting task must stop the request
        on the server; ``out`` then holds what was generated until then."""
        ...

    async def aclose(self) -> None:
        """Release connections (called once, when the worker's loop ends)."""
        ...


class OpenAICompletionsClient:
    """:class:`CompletionsClient` over HTTP: ``POST {base_url}/v1/completions`` with ``stream: true``, read as
    server-sent events (each ``data:`` chunk's ``choices[0].token_ids`` and ``logprobs.token_logprobs``, until
    ``data: [DONE]``); header ``X-Request-Id: request_id`` (vLLM's engine request id is derived from it).

    Parameters
    ----------
    base_url : str
        The server, e.g. ``"http://127.0.0.1:8000"``.
    timeout_s : float
        Seconds one request may take (> 0).
    max_connections : int
        Connection pool limit (>= 1), e.g. the worker's ``max_inflight_tasks``.
    max_attempts : int
        Attempts for a request that fails to connect before any token arrived (>= 1; with exponential backoff up to
        8 s). A request that fails after tokens arrived is not retried.

    Raises
    ------
    ValueError
        A parameter out of range.
    ImportError
        ``aiohttp`` is not installed.
    """

    def __init__(self, base_url: str, *, timeout_s: float = 120.0, max_connections: int = 32, max_attempts: int = 3):
        import aiohttp  # noqa: F401  (fail at construction, not in the worker's thread)

        if not timeout_s > 0 or max_connections < 1 or max_attempts < 1:
            raise ValueError(f"timeout_s must be > 0, max_connections and max_attempts >= 1; got {timeout_s}, "
                             f"{max_connections}, {max_attempts}")
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.timeout_s, self.max_connections, self.max_attempts = float(timeout_s), int(max_connections), \
            int(max_attempts)
        self._session: Any = None

    def _session_now(self) -> Any:
        import aiohttp

        if self._session is None:  # created on the worker's event loop, where it is used
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.max_connections))
        return self._session

    async def complete(self, payload: dict, out: Completion, request_id: str) -> None:
        """See :meth:`CompletionsClient.complete`.

        Raises
        ------
        RuntimeError
            The server answered with an error status or an error chunk (its text in the message).
        ValueError
            A chunk whose log-probs do not match its tokens (a server without ``return_token_ids`` / ``logprobs``).
        aiohttp.ClientError, asyncio.TimeoutError
            Transport failures after ``max_attempts``.
        """
        import aiohttp

        session = self._session_now()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        for attempt in range(self.max_attempts):
            try:
                async with session.post(self.url, json=payload, timeout=timeout,
                                        headers={"X-Request-Id": request_id}) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"{self.url} answered {resp.status} to request {request_id}: "
                                           f"{(await resp.text())[:500]}")
                    try:
                        await _read_events(resp, out, request_id)
                    except asyncio.CancelledError:
                        resp.close()  # drop the connection: vLLM aborts the request on disconnect
                        raise
                return
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError):
                if out.token_ids or attempt == self.max_attempts - 1:
                    raise
                await asyncio.sleep(min(2.0 ** attempt, 8.0))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _read_events(resp: Any, out: Completion, request_id: str) -> None:
    """Append the streamed chunks of ``resp`` to ``out`` until ``data: [DONE]`` or the end of the body."""
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"request {request_id} failed on the server: {chunk['error']}")
        if not chunk.get("choices"):  # a usage-only chunk
            continue
        choice = chunk["choices"][0]
        ids = choice.get("token_ids") or []
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        if len(logprobs) != len(ids):
            raise ValueError(f"request {request_id}: a chunk with {len(ids)} token ids and {len(logprobs)} log-probs "
                             "(the server must honour return_token_ids and logprobs=0)")
        out.token_ids.extend(int(t) for t in ids)
        out.logprobs.extend(logprobs)
        if choice.get("finish_reason") is not None:
            out.finish_reason = choice["finish_reason"]
