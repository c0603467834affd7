"""A backend for any OpenAI-compatible chat-completions server: vLLM in production, or
`serving.openai_compat` wrapping another backend (tests, benchmarks, the CPU stand-in).

Streaming is the default so the trace gets a real time-to-first-token; vLLM's reasoning parser puts
thinking in `delta.reasoning` (older releases: `reasoning_content`) and its tool parser streams
`delta.tool_calls` in pieces keyed by `index`, which are put back together here.
"""

import asyncio
import functools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from serving.backends.base import BackendError, ModelResponse, ToolCall
from serving.backends.registry import register_backend

_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_BODY_EXCERPT = 300


@functools.cache
def _ssl_context():
    # Building one costs 20-40 ms (it loads the CA bundle), and httpx would build one per client.
    return httpx.create_ssl_context()


# Pooled clients, one set per (event loop, timeout, key), so a reply reuses the connections of the turns before
# it instead of building a client (and connecting) per turn. A pool belongs to the loop that made it: the
# server's loop lives as long as the process; a job that runs its own loop (asyncio.run) closes its pools
# with `close_shared_clients` before the loop ends; pools of loops that ended without it are dropped.
_SHARED: dict[asyncio.AbstractEventLoop, dict[tuple, "_Lanes"]] = {}
_SHARED_LOCK = threading.Lock()
LANES = 8


class _Lanes:
    """LANES clients (for every server reached with one timeout and key), each with a share of the limits;
    a call takes the one with the fewest calls in flight (the first among equals, so calls one at a time keep
    one connection).

    httpcore's pool walks its connections several times for each request, and once per idle connection inside
    one of those walks: at 32 calls in flight on one client, 600-700 connection checks a model call (21 with
    lanes), the largest part of an eval run's CPU (docs/performance.md)."""

    def __init__(self, timeout_s: float, api_key: str | None):
        self.timeout_s, self.api_key = timeout_s, api_key
        self.clients: list[httpx.AsyncClient | None] = [None] * LANES
        self.in_flight = [0] * LANES

    @contextmanager
    def client(self) -> Iterator[httpx.AsyncClient]:
        lane = self.in_flight.index(min(self.in_flight))
        client = self.clients[lane]
        if client is None or client.is_closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            # Up to 256 requests in flight per server in all (eval runs at high concurrency).
            client = self.clients[lane] = httpx.AsyncClient(
                timeout=self.timeout_s, headers=headers, verify=_ssl_context(),
                limits=httpx.Limits(max_connections=256 // LANES, max_keepalive_connections=64 // LANES))
        self.in_flight[lane] += 1
        try:
            yield client
        finally:
            self.in_flight[lane] -= 1


def _shared_lanes(timeout_s: float, api_key: str | None) -> _Lanes:
    loop = asyncio.get_running_loop()
    key = (timeout_s, api_key)
    with _SHARED_LOCK:
        pools = _SHARED.get(loop)
        if pools is None:
            for ended in [other for other in _SHARED if other.is_closed()]:
                del _SHARED[ended]
            pools = _SHARED[loop] = {}
        lanes = pools.get(key)
        if lanes is None:
            lanes = pools[key] = _Lanes(timeout_s, api_key)
    return lanes


async def close_shared_clients() -> None:
    """Close the pooled clients of the running event loop (call before a job's own loop ends)."""
    with _SHARED_LOCK:
        pools = list(_SHARED.pop(asyncio.get_running_loop(), {}).values())
    for client in [client for lanes in pools for client in lanes.clients if client is not None]:
        await client.aclose()


class _RetryableError(Exception):
    """A failed attempt that another attempt may fix (connect error, 429, 5xx)."""


@register_backend("openai")
class OpenAIBackend:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 2,
        stream: bool = True,
        extra_body: dict[str, Any] | None = None,
        *,
        backoff_s: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """`base_url` includes the API prefix (`http://host:8000/v1`), as with the openai client.
        `extra_body` is merged into every request (e.g. `chat_template_kwargs`, `cache_salt`).
        `retries` counts attempts after the first; `transport` is for tests."""
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.stream = stream
        self.extra_body = dict(extra_body or {})
        self.backoff_s = backoff_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @contextmanager
    def _http(self) -> Iterator[httpx.AsyncClient]:
        """The client for one call, held for the call's length."""
        if self._transport is None:  # the usual case: the process's pooled clients for this server
            with _shared_lanes(self.timeout_s, self.api_key).client() as client:
                yield client
            return
        # A client's connection pool belongs to the event loop it was created on; code that calls
        # asyncio.run per job (Celery tasks, tests) would otherwise reuse a pool of a closed loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=self._headers(),
                                             transport=self._transport, verify=_ssl_context())
            self._client_loop = loop
        yield self._client

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def aclose(self) -> None:
        """Close this backend's own client (one given a transport); pooled clients stay open for the
        process's other turns (`close_shared_clients` closes them when their event loop ends)."""
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None
        self._client_loop = None

    def request_body(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int,
        temperature: float, tool_choice: str,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature, "stream": self.stream}
        if tools:  # vLLM refuses tool_choice without tools
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        tool_choice: str = "auto",
    ) -> ModelResponse:
        body = self.request_body(messages, tools, max_tokens=max_tokens, temperature=temperature,
                                 tool_choice=tool_choice)
        started = time.perf_counter()  # latency and ttft include retries: what the caller waited
        for attempt in range(self.retries + 1):
            try:
                if self.stream:
                    return await self._complete_streaming(body, started)
                return await self._complete_json(body, started)
            except _RetryableError as error:
                if attempt == self.retries:
                    raise BackendError(f"{error} (after {attempt + 1} attempts)") from error
                await asyncio.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    async def _post_error(self, response: httpx.Response) -> Exception:
        await response.aread()
        excerpt = response.text[:_BODY_EXCERPT]
        message = f"{self.base_url}/chat/completions answered HTTP {response.status_code}: {excerpt}"
        return _RetryableError(message) if response.status_code in _RETRY_STATUSES else BackendError(message)

    def _transport_error(self, error: httpx.HTTPError) -> Exception:
        message = f"{self.base_url}/chat/completions: {type(error).__name__}: {error}"
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
            return _RetryableError(message)
        return BackendError(message)

    async def _complete_json(self, body: dict[str, Any], started: float) -> ModelResponse:
        try:
            with self._http() as http:
                response = await http.post(f"{self.base_url}/chat/completions", json=body)
            if response.status_code != 200:
                raise await self._post_error(response)
            payload = response.json()
        except httpx.HTTPError as error:
            raise self._transport_error(error) from error
        except ValueError as error:
            raise BackendError(f"chat completion is not JSON: {error}") from error
        return _response_from_json(payload, latency_ms=(time.perf_counter() - started) * 1000)

    async def _complete_streaming(self, body: dict[str, Any], started: float) -> ModelResponse:
        stream = _StreamState()
        try:
            with self._http() as http:
                async with http.stream("POST", f"{self.base_url}/chat/completions", json=body) as response:
                    if response.status_code != 200:
                        raise await self._post_error(response)
                    await self._read_stream(response, stream, started)
        except httpx.HTTPError as error:
            raise self._transport_error(error) from error
        return stream.response(latency_ms=(time.perf_counter() - started) * 1000)

    @staticmethod
    async def _read_stream(response: httpx.Response, stream: "_StreamState", started: float) -> None:
        done = False
        async for line in response.aiter_lines():
            if done or not line.startswith("data:"):
                continue  # blank separators, `event:` and `:` keep-alive comments
            data = line[5:].strip()
            if data == "[DONE]":
                done = True  # still read to the end: only a stream read to its end keeps its connection
                continue
            try:
                chunk = json.loads(data)
            except ValueError as error:
                raise BackendError(f"malformed stream chunk {data[:_BODY_EXCERPT]!r}") from error
            if stream.add(chunk) and stream.ttft_ms is None:
                stream.ttft_ms = (time.perf_counter() - started) * 1000


class _StreamState:
    """Accumulates chat.completion.chunk objects into one ModelResponse."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.finish_reason = "stop"
        self.ttft_ms: float | None = None
        self.meta: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> bool:
        """Take one chunk; True when it carried model output (content, reasoning or a tool call)."""
        if "error" in chunk:  # vLLM reports failures after the 200 as an error chunk
            raise BackendError(f"stream error: {json.dumps(chunk['error'])[:_BODY_EXCERPT]}")
        self.meta.setdefault("id", chunk.get("id"))
        self.meta.setdefault("model", chunk.get("model"))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        produced = False
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
                produced = True
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if reasoning:
                self.reasoning.append(reasoning)
                produced = True
            for piece in delta.get("tool_calls") or ():
                self._add_tool_piece(piece)
                produced = True
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return produced

    def _add_tool_piece(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", len(self.calls))
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        name = function.get("name")
        if name and name != call["name"]:  # some servers repeat the name in every piece
            call["name"] += name
        arguments = function.get("arguments")
        if arguments:
            call["arguments"].append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def response(self, *, latency_ms: float) -> ModelResponse:
        calls = tuple(
            ToolCall(id=call["id"] or f"call_{index}", name=call["name"], arguments="".join(call["arguments"]))
            for index, call in sorted(self.calls.items())
        )
        return ModelResponse(
            content="".join(self.content), reasoning="".join(self.reasoning), tool_calls=calls,
            tokens_in=int(self.usage.get("prompt_tokens") or 0),
            tokens_out=int(self.usage.get("completion_tokens") or 0),
            latency_ms=latency_ms, ttft_ms=self.ttft_ms, finish_reason=self.finish_reason,
            raw={**self.meta, "usage": self.usage},
        )


def _response_from_json(payload: dict[str, Any], *, latency_ms: float) -> ModelResponse:
    try:
        choice = payload["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as error:
        raise BackendError(f"chat completion without a message: {json.dumps(payload)[:_BODY_EXCERPT]}") from error
    calls = []
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCall(id=call.get("id") or f"call_{index}", name=function.get("name", ""),
                              arguments=arguments))
    usage = payload.get("usage") or {}
    return ModelResponse(
        content=message.get("content") or "",
        reasoning=message.get("reasoning") or message.get("reasoning_content") or "",
        tool_calls=tuple(calls),
        tokens_in=int(usage.get("prompt_tokens") or 0),
        tokens_out=int(usage.get("completion_tokens") or 0),
        latency_ms=latency_ms,
        finish_reason=choice.get("finish_reason") or "stop",
        raw=payload,
    )
