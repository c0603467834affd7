"""A backend for any OpenAI-compatible chat-completions server: vLLM in production, or
`serving.openai_compat` wrapping another backend (tests, benchmarks, the CPU stand-in).

Streaming is the default so the trace gets a real time-to-first-token; vLLM's reasoning parser puts
thinking in `delta.reasoning` (older releases: `reasoning_content`) and its tool parser streams
`delta.tool_calls` in pieces keyed by `index`, which are put back together here.
"""

import asyncio
import json
import time
from typing import Any

import aiohttp

from harness.http_pool import LoopSessions, proxy_for, ssl_context
from harness.model_protocol import BackendError, ModelResponse, ToolCall, ToolConstraint
from serving.backends import tool_grammar
from serving.backends.registry import register_backend

_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_JSON = {"Content-Type": "application/json"}
_BODY_EXCERPT = 300


# One aiohttp session per (event loop, timeout, key), so a reply reuses the connections of the turns before it
# instead of connecting per turn (harness.http_pool, which says why aiohttp).
_SESSIONS = LoopSessions()
MAX_CONNECTIONS = 256  # requests in flight per process and server (eval runs at high concurrency)


def _shared_session(timeout_s: float, api_key: str | None) -> aiohttp.ClientSession:
    return _SESSIONS.get((timeout_s, api_key), lambda: aiohttp.ClientSession(
        # Idle connections kept 4 s, under the 5 s after which vLLM's server (uvicorn) closes them: a request is
        # not sent on a connection the server is closing (a disconnect is not retried).
        connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, ssl=ssl_context(), keepalive_timeout=4.0),
        headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        # As httpx's timeout was: connecting, and every read, not the whole call (the turn's deadline bounds
        # that); waiting for a free connection (past MAX_CONNECTIONS in flight) is not connecting.
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s),
        trust_env=False,  # the proxy is chosen per server once (`proxy_for`)
    ))


async def close_shared_clients() -> None:
    """Close the pooled sessions of the running event loop (a job's own loop may call it before it ends)."""
    await _SESSIONS.close_running()


class _RetryableError(Exception):
    """A failed attempt that another attempt may fix (connect error, 429, 5xx)."""


# Structural tags by (harness content hash, tool choice), built once per harness version.
STRUCTURAL_TAGS = tool_grammar.ConstraintCache()


@register_backend("openai")
class OpenAIBackend:
    """With a harness's `ToolConstraint` (on by default), a request carries vLLM's structured-output
    `response_format` of type `structural_tag`: text stays free until `<tool_call>`, and then only a call of
    a declared tool with schema-valid arguments can follow (`serving.backends.tool_grammar`). vLLM applies it
    with its structured-outputs backend (xgrammar by default) and its hermes parser still reads the calls.
    `constrain=False` leaves it out, for servers without structured outputs."""

    name = "openai"
    constrains_tool_calls = True

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
        constrain: bool = True,
    ):
        """`base_url` includes the API prefix (`http://host:8000/v1`), as with the openai client.
        `extra_body` is merged into every request (e.g. `chat_template_kwargs`, `cache_salt`).
        `retries` counts attempts after the first."""
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.stream = stream
        self.extra_body = dict(extra_body or {})
        self.backoff_s = backoff_s
        self.constrains_tool_calls = constrain

    def _http(self) -> aiohttp.ClientSession:
        """The running loop's pooled session for this server's timeout and key."""
        return _shared_session(self.timeout_s, self.api_key)

    def request_body(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int,
        temperature: float, tool_choice: str, constraint: ToolConstraint | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature, "stream": self.stream}
        if tools:  # vLLM refuses tool_choice without tools
            body["tools"] = tools
            body["tool_choice"] = tool_choice
            if constraint is not None and self.constrains_tool_calls and tool_choice != "none":
                body["response_format"] = STRUCTURAL_TAGS.get(
                    (constraint.key, tool_choice), lambda: tool_grammar.structural_tag(tools, tool_choice=tool_choice))
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
        constraint: ToolConstraint | None = None,
    ) -> ModelResponse:
        body = self.request_body(messages, tools, max_tokens=max_tokens, temperature=temperature,
                                 tool_choice=tool_choice, constraint=constraint)
        # Encoded once for every attempt, as httpx encoded a JSON body: compact, UTF-8, no NaN.
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        started = time.perf_counter()  # latency and ttft include retries: what the caller waited
        for attempt in range(self.retries + 1):
            try:
                if self.stream:
                    return await self._complete_streaming(data, started)
                return await self._complete_json(data, started)
            except _RetryableError as error:
                if attempt == self.retries:
                    raise BackendError(f"{error} (after {attempt + 1} attempts)") from error
                await asyncio.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    async def _post_error(self, response: aiohttp.ClientResponse) -> Exception:
        excerpt = (await response.read()).decode("utf-8", "replace")[:_BODY_EXCERPT]
        message = f"{self.base_url}/chat/completions answered HTTP {response.status}: {excerpt}"
        return _RetryableError(message) if response.status in _RETRY_STATUSES else BackendError(message)

    def _transport_error(self, error: aiohttp.ClientError) -> Exception:
        message = f"{self.base_url}/chat/completions: {type(error).__name__}: {error}"
        # Never connected: the request did not reach the model. (A disconnect after sending may have: not retried.)
        if isinstance(error, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
            return _RetryableError(message)
        return BackendError(message)

    def _post(self, data: bytes):
        # A redirect is an answer to report, as httpx reported it (aiohttp would follow it, a POST turned GET).
        url = f"{self.base_url}/chat/completions"
        return self._http().post(url, data=data, headers=_JSON, allow_redirects=False, proxy=proxy_for(url))

    async def _complete_json(self, data: bytes, started: float) -> ModelResponse:
        try:
            async with self._post(data) as response:
                if response.status != 200:
                    raise await self._post_error(response)
                payload = json.loads(await response.read())
        except aiohttp.ClientError as error:
            raise self._transport_error(error) from error
        except ValueError as error:
            raise BackendError(f"chat completion is not JSON: {error}") from error
        return _response_from_json(payload, latency_ms=(time.perf_counter() - started) * 1000)

    async def _complete_streaming(self, data: bytes, started: float) -> ModelResponse:
        stream = _StreamState()
        try:
            async with self._post(data) as response:
                if response.status != 200:
                    raise await self._post_error(response)
                await self._read_stream(response, stream, started)
        except aiohttp.ClientError as error:
            raise self._transport_error(error) from error
        return stream.response(latency_ms=(time.perf_counter() - started) * 1000)

    @staticmethod
    async def _read_stream(response: aiohttp.ClientResponse, stream: "_StreamState", started: float) -> None:
        # Lines split here, not by aiohttp's readline, which refuses a line over 512 KiB (a tool call's
        # arguments may come in one delta); \n, \r\n and \r all end a line, as in SSE. Read to the end, past
        # `[DONE]`: only a response read to its end leaves its connection for the next call.
        carry = b""
        async for received in response.content.iter_any():
            lines = (carry + received).splitlines(keepends=True)
            carry = lines.pop() if not lines[-1].endswith((b"\n", b"\r")) else b""
            for line in lines:
                stream.take_line(line, started)
        if carry:  # the last line, without its line end
            stream.take_line(carry, started)


class _StreamState:
    """Accumulates chat.completion.chunk objects into one ModelResponse."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.finish_reason = "stop"
        self.ttft_ms: float | None = None
        self.meta: dict[str, Any] = {}
        self.done = False  # `data: [DONE]` seen: what follows is ignored

    def take_line(self, line: bytes, started: float) -> None:
        """One line of the event stream: a `data:` chunk is added; blank lines, `event:` and `:` comments are not."""
        if self.done or not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError as error:
            raise BackendError(f"malformed stream chunk {data[:_BODY_EXCERPT].decode('utf-8', 'replace')!r}") from error
        if self.add(chunk) and self.ttft_ms is None:
            self.ttft_ms = (time.perf_counter() - started) * 1000

    def add(self, chunk: dict[str, Any]) -> bool:
        """Take one chunk; True when it carried model output (content, reasoning or a tool call)."""
        if "error" in chunk:  # vLLM reports failures after the 200 as an error chunk
            raise BackendError(f"stream error: {json.dumps(chunk['error'])[:_BODY_EXCERPT]}")
        self.meta.setdefault("id", chunk.get("id"))
        self.meta.setdefault("model", chunk.get("model"))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):  # llama.cpp's server: its prompt cache figures
            self.timings = chunk["timings"]
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
            tokens_out=int(self.usage.get("completion_tokens") or 0), tokens_cached=_cached(self.usage, self.timings),
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
        tokens_cached=_cached(usage, payload.get("timings")),
        latency_ms=latency_ms,
        finish_reason=choice.get("finish_reason") or "stop",
        raw=payload,
    )


def _cached(usage: dict[str, Any], timings: Any = None) -> int:
    """Prompt tokens the server took from its prefix cache: OpenAI's and vLLM's `prompt_tokens_details`
    (vLLM with --enable-prompt-tokens-details), llama.cpp server's `cache_n` in its timings otherwise."""
    details = usage.get("prompt_tokens_details") or {}
    try:
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            return int(details["cached_tokens"])
        return int(timings.get("cache_n") or 0) if isinstance(timings, dict) else 0
    except (TypeError, ValueError):
        return 0
