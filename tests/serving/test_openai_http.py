"""The `openai` backend over real HTTP against `python -m serving.openai_compat` in a subprocess."""

import asyncio
import json
import socket

import httpx
import pytest

from harness.model_protocol import BackendError, ModelResponse, ToolCall
from serving.backends.openai import OpenAIBackend, close_shared_clients
from serving.openai_compat import ARGUMENT_PIECE_CHARS, _usage
from serving.vllm import check_health

USER = [{"role": "user", "content": "Is the red scarf in stock?"}]
STOCK_TOOL = {"type": "function", "function": {"name": "get_stock", "parameters": {"type": "object"}}}
LONG_ARGUMENTS = {"sku": "SCARF-RED-001", "size": "one size", "warehouse": "Hangzhou"}
SCRIPT = [
    "The red scarf is in stock.",
    {"content": "Let me check.", "reasoning": "Stock needs a tool.", "tool_calls": [
        {"name": "get_stock", "arguments": LONG_ARGUMENTS}, {"name": "get_price", "arguments": {"sku": "S"}}]},
]


def run(backend, *args, **kwargs):
    return asyncio.run(backend.complete(*args, **kwargs))


def counted_connects(monkeypatch, base_url: str) -> list:
    """The connections opened to `base_url`'s port from now on."""
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    connects = []
    real_connect = socket.socket.connect

    def counted(sock, address):
        if address[1:2] == (port,):
            connects.append(address)
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", counted)
    return connects


@pytest.mark.parametrize("stream", [True, False])
def test_content_tool_calls_and_usage(scripted_server, stream):
    base_url = scripted_server(SCRIPT)
    backend = OpenAIBackend(base_url, "scripted", stream=stream)

    text = run(backend, USER, [STOCK_TOOL], max_tokens=32)
    assert text.content == "The red scarf is in stock." and text.finish_reason == "stop"
    assert text.tokens_out == 6 and text.latency_ms > 0

    calls = run(backend, USER, [STOCK_TOOL])
    assert calls.content == "Let me check." and calls.reasoning == "Stock needs a tool."
    assert calls.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in calls.tool_calls] == [
        ("get_stock", LONG_ARGUMENTS), ("get_price", {"sku": "S"})]
    assert all(isinstance(c, ToolCall) and c.id for c in calls.tool_calls)
    if stream:
        assert len(calls.tool_calls[0].arguments) > 3 * ARGUMENT_PIECE_CHARS  # it did arrive in pieces
        assert 0 < calls.ttft_ms <= calls.latency_ms
    else:
        assert calls.ttft_ms is None


def test_stream_is_openai_shaped_sse(scripted_server):
    base_url = scripted_server(SCRIPT[1:])
    body = {"model": "scripted", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body) as response:
        assert response.headers["content-type"] == "text/event-stream"
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
              if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert pieces[0]["id"] and pieces[0]["function"]["name"] == "get_stock" and pieces[1]["index"] == 0
    assert "".join(p["function"]["arguments"] for p in pieces if p["index"] == 0) == json.dumps(LONG_ARGUMENTS)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


def test_streamed_completions_reuse_one_connection(scripted_server, monkeypatch):
    """A stream is read to its end (past `[DONE]`), so its connection serves the next call, as vLLM's
    server keeps it open; a new connection a model call cost an eval run at concurrency 32 a fifth of its time."""
    base_url = scripted_server(["one", "two", "three"])
    connects = counted_connects(monkeypatch, base_url)
    backend = OpenAIBackend(base_url, "scripted", stream=True)

    async def three_calls():
        try:
            return [(await backend.complete(USER, [])).content for _ in range(3)]
        finally:
            await close_shared_clients()

    assert asyncio.run(three_calls()) == ["one", "two", "three"]
    assert len(connects) == 1


def test_calls_in_flight_keep_their_connections_for_the_next_wave(scripted_server, monkeypatch):
    """Calls at once each hold a connection of the loop's session; a second wave reuses them all."""
    base_url = scripted_server(["ok"], "--cycle", "--delay-ms", "100")
    connects = counted_connects(monkeypatch, base_url)
    backend = OpenAIBackend(base_url, "scripted", stream=True)

    async def waves():
        try:
            for _ in range(2):
                answers = await asyncio.gather(*(backend.complete(USER, []) for _ in range(16)))
                assert [a.content for a in answers] == ["ok"] * 16
        finally:
            await close_shared_clients()

    asyncio.run(waves())
    assert len(connects) == 16  # the second wave connected nowhere


def test_failed_and_cancelled_calls_leave_the_session_usable(scripted_server):
    """An error answer and a call cancelled while it waits leave nothing half-read in the pool: the next
    call gets its own answer."""
    base_url = scripted_server([{"error": "a"}, "slow", "after"], "--delay-ms", "300")
    backend = OpenAIBackend(base_url, "scripted", retries=0, backoff_s=0.01)

    async def fail_cancel_then_answer():
        try:
            with pytest.raises(BackendError):
                await backend.complete(USER, [])
            slow = asyncio.create_task(backend.complete(USER, []))
            await asyncio.sleep(0.1)  # the call is waiting for the server's answer
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            return (await backend.complete(USER, [])).content
        finally:
            await close_shared_clients()

    assert asyncio.run(fail_cancel_then_answer()) == "after"


def test_fixed_latency_is_measured(scripted_server):
    base_url = scripted_server(["slow answer"], "--delay-ms", "300")
    response = run(OpenAIBackend(base_url, "scripted"), USER, [])
    assert response.content == "slow answer"
    assert 300 <= response.ttft_ms <= response.latency_ms < 3000


def test_a_500_is_retried_then_gives_a_backend_error(scripted_server):
    base_url = scripted_server([{"error": "engine hiccup"}, "recovered", {"error": "a"}, {"error": "b"}])
    backend = OpenAIBackend(base_url, "scripted", retries=1, backoff_s=0.01)
    assert run(backend, USER, []).content == "recovered"
    with pytest.raises(BackendError, match=r'HTTP 500: .*"message": "b".*\(after 2 attempts\)'):
        run(backend, USER, [])


def test_an_unknown_model_is_a_4xx_and_not_retried(scripted_server):
    base_url = scripted_server(["only step"])
    with pytest.raises(BackendError, match="HTTP 404: .*does not exist"):
        run(OpenAIBackend(base_url, "qwen3-8b", retries=3, backoff_s=0.01), USER, [])
    assert run(OpenAIBackend(base_url, "scripted"), USER, []).content == "only step"  # nothing consumed it


def test_bad_requests_get_openai_shaped_errors(scripted_server):
    base_url = scripted_server(["x"])
    for response, status in [(httpx.post(f"{base_url}/chat/completions", content=b"{oops"), 400),
                             (httpx.post(f"{base_url}/chat/completions", json={"model": "scripted"}), 400),
                             (httpx.post(f"{base_url}/completions", json={}), 404),
                             (httpx.get(f"{base_url}/nothing"), 404)]:
        assert response.status_code == status and response.json()["error"]["message"]


def test_connection_refused_is_a_backend_error():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "scripted", retries=2, backoff_s=0.01)
    with pytest.raises(BackendError, match=r"ClientConnectorError.*after 3 attempts"):
        run(backend, USER, [])
    assert asyncio.run(check_health(f"http://127.0.0.1:{port}"))["ok"] is False


def test_check_health(scripted_server):
    base_url = scripted_server(["x"], "--model-name", "qwen3-8b")
    for url in (base_url, base_url.removesuffix("/v1")):
        health = asyncio.run(check_health(url))
        assert health["ok"] and health["models"] == ["qwen3-8b"] and health["error"] is None


def test_a_burst_of_concurrent_requests_is_answered_not_reset(scripted_server):
    # 64 clients connecting at once, as an eval run at concurrency 32+ does: with socketserver's listen backlog
    # of 5 about half of them were reset (ReadError) and recorded as errored turns.
    base_url = scripted_server(["ok"], "--cycle", "--delay-ms", "200")

    async def burst():
        async def one():
            async with httpx.AsyncClient(timeout=30) as client:  # its own connection, like a fresh pool
                response = await client.post(f"{base_url}/chat/completions", json={"messages": USER})
                return response.status_code

        return await asyncio.gather(*(one() for _ in range(64)), return_exceptions=True)

    outcomes = asyncio.run(burst())
    assert outcomes == [200] * 64, [o for o in outcomes if o != 200][:3]


def test_usage_names_the_prompt_tokens_the_backend_took_from_its_cache_as_openai_and_vllm_do():
    assert _usage(ModelResponse(tokens_in=10, tokens_out=2)) == {"prompt_tokens": 10, "completion_tokens": 2,
                                                                  "total_tokens": 12}
    cached = _usage(ModelResponse(tokens_in=10, tokens_out=2, raw={"cached_tokens": 7}))
    assert cached["prompt_tokens_details"] == {"cached_tokens": 7} and cached["total_tokens"] == 12
