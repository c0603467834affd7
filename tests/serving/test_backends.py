"""Backends without a model: the registry, the scripted backend, Hermes/ChatML formatting, the OpenAI
client's request, parsing and retry policy (against a local server of canned answers), and the vLLM profiles."""

import asyncio
import base64
import json
import shlex
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command

from harness.model_protocol import BackendError, ModelBackend, ModelResponse, ToolCall
from serving.backends import (
    backend_names,
    create_backend,
    register_backend,
)
from serving.backends.hermes import DEFAULT_SYSTEM, parse_tool_calls, render_chatml, signature, tools_section
from serving.backends.openai import OpenAIBackend
from serving.backends.scripted import ScriptedBackend, step_from_json
from serving.vllm import PROFILES, VllmProfile

USER = [{"role": "user", "content": "How much is the red scarf?"}]
PRICE_TOOL = {"type": "function", "function": {
    "name": "get_price", "description": "Price of a product",
    "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}}


# --- registry ---------------------------------------------------------------------------------------

def test_registry_names_and_creates_backends():
    assert {"scripted", "openai", "local"} <= set(backend_names())
    backend = create_backend("scripted", steps=["hi"])
    assert isinstance(backend, ScriptedBackend) and isinstance(backend, ModelBackend)
    assert isinstance(create_backend("openai", base_url="http://x/v1", model="m"), ModelBackend)
    assert isinstance(create_backend("local"), ModelBackend)  # loads nothing until the first call


def test_registry_refuses_unknown_and_duplicate_names():
    with pytest.raises(KeyError, match="registered: .*scripted"):
        create_backend("gpt-17")
    with pytest.raises(ValueError, match="already registered"):
        register_backend("scripted")(lambda **config: None)


# --- scripted ---------------------------------------------------------------------------------------

def test_scripted_replays_steps_in_order_and_records_calls():
    def echo(messages, tools):
        return f"{len(messages)} messages, {len(tools)} tools"

    call = ToolCall(id="call_0", name="get_price", arguments='{"sku": "S1"}')
    backend = ScriptedBackend(["plain", ModelResponse(tool_calls=(call,)), echo])
    messages = [dict(USER[0])]

    first = asyncio.run(backend.complete(messages, [PRICE_TOOL], max_tokens=64))
    messages.append({"role": "assistant", "content": first.content})  # the runtime mutates its list
    second = asyncio.run(backend.complete(messages, [PRICE_TOOL]))
    third = asyncio.run(backend.complete(messages, []))

    assert first.content == "plain" and first.finish_reason == "stop" and first.latency_ms > 0
    assert second.tool_calls == (call,) and second.finish_reason == "tool_calls"
    assert third.content == "2 messages, 0 tools"
    assert [len(c.messages) for c in backend.calls] == [1, 2, 2]  # copies, not the live list
    assert backend.calls[0].max_tokens == 64 and backend.calls[0].tools == [PRICE_TOOL]
    assert backend.remaining == 0
    with pytest.raises(BackendError, match="exhausted"):
        asyncio.run(backend.complete(messages, []))


def test_scripted_delay_is_cancellable_for_deadlines():
    backend = ScriptedBackend(["slow", "next"], delay_s=5)

    async def with_deadline():
        return await asyncio.wait_for(backend.complete(USER, []), timeout=0.05)

    with pytest.raises(TimeoutError):
        asyncio.run(with_deadline())
    backend.delay_s = 0
    assert asyncio.run(backend.complete(USER, [])).content == "next"  # the cancelled call used its step


def test_script_steps_from_json():
    step = step_from_json({"content": "let me check", "tool_calls": [{"name": "get_price", "arguments": {"sku": "S1"}},
                                                                     {"name": "x", "arguments": "{bad"}]})
    assert step.content == "let me check" and step.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in step.tool_calls] == [("get_price", '{"sku": "S1"}'), ("x", "{bad")]
    failing = ScriptedBackend([step_from_json({"error": "model overloaded"})])
    with pytest.raises(BackendError, match="model overloaded"):
        asyncio.run(failing.complete(USER, []))


# --- Hermes parsing ---------------------------------------------------------------------------------

def test_parse_plain_text_has_no_calls():
    assert parse_tool_calls("  The scarf is $12.  ") == ("The scarf is $12.", ())


def test_parse_one_call_with_surrounding_text_and_whitespace():
    content, calls = parse_tool_calls(
        'Let me check.\n<tool_call>\n  {"name": "get_price", "arguments": {"sku": "S1"}}  \n</tool_call>\n')
    assert content == "Let me check."
    assert calls == (ToolCall(id="call_0", name="get_price", arguments='{"sku": "S1"}'),)


def test_parse_two_calls_get_sequential_ids():
    text = ('<tool_call>{"name": "get_price", "arguments": {"sku": "S1"}}</tool_call>\n'
            '<tool_call>{"name": "get_stock", "arguments": {"sku": "S1", "size": "M"}}</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == ""
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_0", "get_price", {"sku": "S1"}), ("call_1", "get_stock", {"sku": "S1", "size": "M"})]


def test_parse_missing_close_tag_at_end_of_generation():
    _, calls = parse_tool_calls('<tool_call>\n{"name": "get_price", "arguments": {"sku": "S1"}}\n')
    assert calls == (ToolCall("call_0", "get_price", '{"sku": "S1"}'),)


def test_parse_missing_close_tag_before_the_next_call():
    _, calls = parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {}}')
    assert [(c.name, c.arguments) for c in calls] == [("a", "{}"), ("b", "{}")]


def test_parse_malformed_json_keeps_raw_arguments_for_the_runtime_to_report():
    _, calls = parse_tool_calls('<tool_call>{"name": "get_price", "arguments": {"sku": S1}}</tool_call>')
    assert calls[0].name == "get_price"
    assert calls[0].arguments == '{"sku": S1}}'
    with pytest.raises(ValueError):
        json.loads(calls[0].arguments)
    _, calls = parse_tool_calls("<tool_call>get the price please</tool_call>")
    assert calls == (ToolCall("call_0", "", "get the price please"),)


def test_parse_recovers_arguments_when_only_the_wrapper_is_broken():
    _, calls = parse_tool_calls('<tool_call>{"name": "get_price", "arguments": {"sku": "S1"}</tool_call>')
    assert (calls[0].name, calls[0].arguments) == ("get_price", '{"sku": "S1"}')


def test_parse_arguments_given_as_a_string_or_parameters():
    _, calls = parse_tool_calls('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
                                '<tool_call>{"name": "b", "parameters": {"y": 2}}</tool_call>')
    assert [(c.name, c.arguments) for c in calls] == [("a", '{"x": 1}'), ("b", '{"y": 2}')]


# --- ChatML rendering -------------------------------------------------------------------------------

def test_render_without_system_uses_the_models_default_and_opens_the_assistant_turn():
    assert render_chatml(USER) == (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
                                   "<|im_start|>user\nHow much is the red scarf?<|im_end|>\n"
                                   "<|im_start|>assistant\n")


def test_render_tools_into_the_system_message_one_signature_per_line():
    prompt = render_chatml([{"role": "system", "content": "You sell scarves."}, *USER], [PRICE_TOOL])
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou sell scarves.\n\n# Tools\n")
    signature = ('{"name":"get_price","description":"Price of a product","parameters":{"type":"object",'
                 '"properties":{"sku":{"type":"string"}},"required":["sku"]}}')
    assert f"<tools>\n{signature}\n</tools>" in system
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in system
    assert tools_section([PRICE_TOOL]) in system


def test_a_signature_keeps_what_a_model_can_act_on_and_is_its_own_signature():
    strict = {"type": "function", "function": {**PRICE_TOOL["function"], "strict": True, "parameters": {
        **PRICE_TOOL["function"]["parameters"], "additionalProperties": False}}}
    assert signature(strict) == {"name": "get_price", "description": "Price of a product",
                                 "parameters": {"type": "object", "properties": {"sku": {"type": "string"}},
                                                "required": ["sku"]}}
    assert signature(signature(strict)) == signature(strict)
    assert tools_section([strict]) == tools_section([PRICE_TOOL]) == tools_section([signature(PRICE_TOOL)])


def test_render_tool_calls_and_results_round_trip():
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_price", "arguments": '{"sku": "S1"}'}},
            {"id": "call_1", "type": "function", "function": {"name": "get_stock", "arguments": {"sku": "S1"}}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"price": 12}'},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "3 left"}]},
    ]
    prompt = render_chatml(messages, [PRICE_TOOL])
    assistant = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert assistant == ('<tool_call>\n{"name": "get_price", "arguments": {"sku": "S1"}}\n</tool_call>\n'
                         '<tool_call>\n{"name": "get_stock", "arguments": {"sku": "S1"}}\n</tool_call>')
    assert ("<|im_start|>user\n<tool_response>\n{\"price\": 12}\n</tool_response>\n"
            "<tool_response>\n3 left\n</tool_response><|im_end|>\n<|im_start|>assistant\n") in prompt
    assert prompt.count("<|im_start|>user") == 2  # both results in one turn: there is no tool role
    _, parsed = parse_tool_calls(assistant)  # what is rendered back is what the parser reads
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == [("get_price", {"sku": "S1"}),
                                                                   ("get_stock", {"sku": "S1"})]


# --- OpenAI client against a local server of canned answers ------------------------------------------------------------

def sse(*chunks) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b": keep-alive\n\ndata: [DONE]\n\n"


def delta(**fields):
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


@dataclass(frozen=True)
class Received:
    """A request as the canned server read it."""

    url: str
    headers: dict[str, str]  # names in lower case
    content: bytes
    target: str = ""  # the request line's target: a path, or the whole URL when the server is asked as a proxy


class _CannedHandler(BaseHTTPRequestHandler):
    """Answers each POST with what the test's handler returns for it (an httpx.Response, as a value)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        content = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        received = Received(f"http://{self.headers['Host']}{self.path}",
                            {name.lower(): value for name, value in self.headers.items()}, content, self.path)
        self.server.received.append(received)
        answer = self.server.handler(received)
        self.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in ("content-length", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture
def mock_backend():
    """`mock_backend(handler, **kwargs) -> (backend, received)`: an OpenAIBackend against a local HTTP server
    whose every answer is `handler(request)`; `received` lists the requests as they came."""
    servers = []

    def start(handler, **kwargs) -> tuple[OpenAIBackend, list[Received]]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _CannedHandler)
        server.daemon_threads = True
        server.handle_error = lambda request, address: None  # a client that hung up (the timeout test)
        server.handler, server.received = handler, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        backend = OpenAIBackend(f"http://127.0.0.1:{server.server_port}/v1/", "qwen3-8b", backoff_s=0.001, **kwargs)
        return backend, server.received

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_openai_request_body(mock_backend):
    backend, requests = mock_backend(lambda r: httpx.Response(200, content=sse()), api_key="sk-test",
                                     extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    asyncio.run(backend.complete(USER, [], max_tokens=99, temperature=0.3))
    asyncio.run(backend.complete(USER, [PRICE_TOOL], tool_choice="required"))
    first, second = (json.loads(r.content) for r in requests)
    assert requests[0].url.endswith("/v1/chat/completions") and requests[0].headers["content-type"] == "application/json"
    assert requests[0].headers["authorization"] == "Bearer sk-test"
    assert first == {"model": "qwen3-8b", "messages": USER, "max_tokens": 99, "temperature": 0.3, "stream": True,
                     "stream_options": {"include_usage": True},
                     "chat_template_kwargs": {"enable_thinking": False}}
    assert second["tools"] == [PRICE_TOOL] and second["tool_choice"] == "required"


def test_openai_stream_accumulates_reasoning_content_tool_calls_and_usage(mock_backend):
    body = sse(
        delta(role="assistant", content=""),
        delta(reasoning_content="The user wants "), delta(reasoning="a price."),
        delta(content="Checking"), delta(content="…"),
        delta(tool_calls=[{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                           "function": {"name": "get_price", "arguments": ""}}]),
        delta(tool_calls=[{"index": 1, "id": "chatcmpl-tool-2", "function": {"name": "get_stock"}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"sk'}}]),
        delta(tool_calls=[{"index": 1, "function": {"arguments": "{}"}}]),
        delta(tool_calls=[{"index": 0, "function": {"name": "get_price", "arguments": 'u": "S1"}'}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 321, "completion_tokens": 17}},
    )
    backend, _ = mock_backend(lambda r: httpx.Response(200, content=body))
    response = asyncio.run(backend.complete(USER, [PRICE_TOOL]))
    assert response.reasoning == "The user wants a price." and response.content == "Checking…"
    assert response.tool_calls == (ToolCall("chatcmpl-tool-1", "get_price", '{"sku": "S1"}'),
                                   ToolCall("chatcmpl-tool-2", "get_stock", "{}"))
    assert (response.tokens_in, response.tokens_out, response.finish_reason) == (321, 17, "tool_calls")
    assert 0 < response.ttft_ms <= response.latency_ms


def test_openai_stream_error_chunk_and_garbage_raise_backend_error(mock_backend):
    for body, message in [(sse(delta(content="a"), {"error": {"message": "KV cache full"}}), "KV cache full"),
                          (b"data: {not json\n\n", "malformed stream chunk")]:
        backend, _ = mock_backend(lambda r, body=body: httpx.Response(200, content=body))
        with pytest.raises(BackendError, match=message):
            asyncio.run(backend.complete(USER, []))


def test_openai_non_streaming_json(mock_backend):
    payload = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning_content": "hm",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_price", "arguments": {"sku": "S1"}}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    backend, requests = mock_backend(lambda r: httpx.Response(200, json=payload), stream=False)
    response = asyncio.run(backend.complete(USER, [PRICE_TOOL]))
    assert "stream_options" not in json.loads(requests[0].content)
    assert (response.content, response.reasoning, response.ttft_ms) == ("", "hm", None)
    assert response.tool_calls == (ToolCall("c1", "get_price", '{"sku": "S1"}'),)
    assert (response.tokens_in, response.tokens_out, response.finish_reason) == (10, 5, "tool_calls")


@pytest.mark.parametrize("stream", [True, False])
def test_openai_retries_429_and_5xx_then_succeeds(stream, mock_backend):
    answers = iter([httpx.Response(429, text="slow down"), httpx.Response(503, text="warming up"),
                    httpx.Response(200, content=sse(delta(content="ok"))) if stream else
                    httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})])
    backend, requests = mock_backend(lambda r: next(answers), stream=stream, retries=2)
    assert asyncio.run(backend.complete(USER, [])).content == "ok"
    assert len(requests) == 3


def test_openai_gives_up_after_retries_with_status_and_body(mock_backend):
    backend, requests = mock_backend(lambda r: httpx.Response(500, text="CUDA out of memory " * 50), retries=2)
    with pytest.raises(BackendError, match=r"HTTP 500: CUDA out of memory .*\(after 3 attempts\)") as error:
        asyncio.run(backend.complete(USER, []))
    assert len(requests) == 3 and len(str(error.value)) < 500  # an excerpt, not the whole body


def test_openai_does_not_retry_4xx(mock_backend):
    backend, requests = mock_backend(lambda r: httpx.Response(400, json={"error": {"message": "bad tool"}}))
    with pytest.raises(BackendError, match="HTTP 400: .*bad tool"):
        asyncio.run(backend.complete(USER, []))
    assert len(requests) == 1


def test_openai_stream_lines_long_or_ended_by_cr_and_a_last_line_without_its_end(mock_backend):
    long = "x" * 600_000  # past aiohttp's 512 KiB line limit: one delta may carry a whole tool call's arguments
    body = f"data: {json.dumps(delta(content=long))}\n\n".encode() + (
        f"data: {json.dumps(delta(content='!'))}\r\rdata: [DONE]".encode())  # CR line ends; no end at the end
    backend, _ = mock_backend(lambda r: httpx.Response(200, content=body))
    assert asyncio.run(backend.complete(USER, [])).content == long + "!"


def test_openai_redirects_and_disconnects_are_reported_not_followed_or_retried(mock_backend):
    backend, requests = mock_backend(lambda r: httpx.Response(307, headers={"Location": "/v1/elsewhere"}), retries=2)
    with pytest.raises(BackendError, match="answered HTTP 307"):
        asyncio.run(backend.complete(USER, []))
    assert len(requests) == 1

    def hang_up(request):  # the request arrived whole, then the server went away: the model may have run it
        raise ConnectionAbortedError

    backend, requests = mock_backend(hang_up, retries=2)
    with pytest.raises(BackendError, match="ServerDisconnectedError") as error:
        asyncio.run(backend.complete(USER, []))
    assert len(requests) == 1 and "attempts" not in str(error.value)


def test_openai_read_timeout_is_a_backend_error_not_retried(mock_backend):
    # (A refused connection is retried: test_openai_http.py::test_connection_refused_is_a_backend_error.)
    def slow(request):
        time.sleep(0.6)
        return httpx.Response(200, content=sse(delta(content="late")))

    backend, requests = mock_backend(slow, retries=5, timeout_s=0.2)
    with pytest.raises(BackendError, match="Timeout") as error:
        asyncio.run(backend.complete(USER, []))
    assert len(requests) == 1 and "attempts" not in str(error.value)  # a read timeout is not retried


def test_openai_sessions_follow_the_running_event_loop_and_close_with_it(mock_backend):
    backend, _ = mock_backend(lambda r: httpx.Response(200, content=sse(delta(content="ok"))))
    sessions = []

    async def call():
        answer = await backend.complete(USER, [])
        sessions.append(backend._http())
        return answer.content

    for _ in range(2):  # asyncio.run per job, as a Celery task does
        assert asyncio.run(call()) == "ok"
    assert async_to_sync(call)() == "ok"  # a sync view's call: a loop of its own, closed after
    assert len({id(session) for session in sessions}) == 3 and all(session.closed for session in sessions)


_PROXY_ENVIRONMENT = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def proxy_environment(monkeypatch):
    """No proxy variable from the test's environment; `set(NAME=value, ...)` sets some."""
    for name in _PROXY_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return lambda **values: [monkeypatch.setenv(name, value) for name, value in values.items()]


def test_openai_calls_a_remote_server_through_the_environments_proxy_and_a_loopback_one_directly(
        mock_backend, proxy_environment):
    proxy, seen_by_proxy = mock_backend(lambda r: httpx.Response(200, content=sse(delta(content="via the proxy"))))
    local, seen_directly = mock_backend(lambda r: httpx.Response(200, content=sse(delta(content="directly"))))
    proxy_environment(HTTP_PROXY=proxy.base_url.removesuffix("/v1").replace("http://", "http://ops:s%40id@"))
    remote = OpenAIBackend("http://model.test:8000/v1", "qwen3-8b", retries=0)

    assert asyncio.run(remote.complete(USER, [])).content == "via the proxy"
    assert [r.target for r in seen_by_proxy] == ["http://model.test:8000/v1/chat/completions"]
    assert json.loads(seen_by_proxy[0].content)["messages"] == USER
    assert seen_by_proxy[0].headers["proxy-authorization"] == "Basic " + base64.b64encode(b"ops:s@id").decode()
    assert asyncio.run(local.complete(USER, [])).content == "directly"  # a server on this host: never proxied
    assert [r.target for r in seen_directly] == ["/v1/chat/completions"] and len(seen_by_proxy) == 1


def test_the_proxy_of_a_model_server_follows_the_scheme_no_proxy_and_lower_case_first(proxy_environment):
    from harness.http_pool import proxy_for

    assert proxy_for("http://model.test:8000/v1/chat/completions") is None  # no proxy configured
    proxy_environment(HTTP_PROXY="http://proxy.corp:3128", HTTPS_PROXY="http://secure.corp:3128")
    assert proxy_for("http://model.test:8000/v1/chat/completions") == "http://proxy.corp:3128"
    assert proxy_for("https://model.test/v1/chat/completions") == "http://secure.corp:3128"
    for loopback in ("http://localhost:8000/v1", "http://127.0.0.2:8000/v1", "http://[::1]:8000/v1",
                     "http://vllm.localhost/v1"):
        assert proxy_for(loopback) is None, loopback
    proxy_environment(NO_PROXY="other.test, .model.test")
    assert proxy_for("http://gpu1.model.test:8000/v1") is None and proxy_for("http://model.test/v1") is None
    assert proxy_for("http://models.test/v1") == "http://proxy.corp:3128"
    proxy_environment(http_proxy="http://lower.corp:3128", no_proxy="*")  # lower case wins, as curl reads them
    assert proxy_for("http://models.test/v1") is None
    proxy_environment(no_proxy="")
    assert proxy_for("http://models.test/v1") == "http://lower.corp:3128"


# --- vLLM profiles and the serve_model command ------------------------------------------------------

def test_vllm_profile_argv():
    argv = PROFILES["qwen3-8b"].to_argv()
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    text = shlex.join(argv)
    for expected in ["--served-model-name qwen3-8b", "--enable-auto-tool-choice", "--tool-call-parser hermes",
                     "--reasoning-parser qwen3", "--enable-prefix-caching", "--prefix-caching-hash-algo sha256",
                     "--max-model-len 16384", "--gpu-memory-utilization 0.9", "--port 8000"]:
        assert expected in text
    kwargs = json.loads(argv[argv.index("--default-chat-template-kwargs") + 1])
    assert kwargs == {"enable_thinking": False}
    speculative = json.loads(argv[argv.index("--speculative-config") + 1])
    assert speculative["method"] == "eagle3"  # plain Qwen3 checkpoints have no MTP head
    assert json.loads(PROFILES["qwen3-30b-a3b"].to_argv()[-1])["method"] == "ngram"


def test_vllm_profile_options_and_base_url():
    profile = VllmProfile(model="/models/x", served_model_name="x", reasoning_parser=None,
                          enable_prefix_caching=False, default_chat_template_kwargs={}, port=9000,
                          extra_args=("--max-num-seqs", "8"))
    argv = profile.to_argv()
    assert "--reasoning-parser" not in argv and "--speculative-config" not in argv
    assert "--no-enable-prefix-caching" in argv and "--default-chat-template-kwargs" not in argv
    assert argv[-2:] == ["--max-num-seqs", "8"]
    assert profile.base_url == "http://127.0.0.1:9000/v1"


def test_serve_model_prints_or_explains_the_gpu_extra(capsys, monkeypatch):
    call_command("serve_model", "--profile", "qwen3-30b-a3b", "--port", "9001", "--print")
    printed = capsys.readouterr().out
    assert printed.startswith("vllm serve Qwen/Qwen3-30B-A3B ") and "--port 9001" in printed
    call_command("serve_model", "--local", "--print")
    assert "-m serving.openai_compat --backend local --host 127.0.0.1 --port 8001" in capsys.readouterr().out
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(CommandError, match=r"GPU-only extra: pip install 'harnessops\[gpu\]'"):
        call_command("serve_model", "--profile", "qwen3-8b")


def test_openai_a_call_cancelled_mid_stream_drops_its_connection_and_the_next_call_gets_its_own():
    """A turn cancelled (its deadline, a client gone) while the model's answer streams: the half-read connection
    is closed, not handed to the next call, which gets its own answer whole."""
    import socket

    first_chunk_sent, finish, first_closed = threading.Event(), threading.Event(), threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for number in range(2):
            conn, _ = listener.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += conn.recv(65536)
                chunks = [f"data: {json.dumps(delta(content=text))}\n\n".encode() for text in
                          (["Half ", "an answer"] if number == 0 else ["The whole ", "answer"])]
                chunks.append(b"data: [DONE]\n\n")
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")

                def send(chunk: bytes, conn=conn) -> None:
                    conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")

                send(chunks[0])
                if number == 0:
                    first_chunk_sent.set()
                    finish.wait(5)
                    conn.settimeout(5)
                    try:
                        hung_up = conn.recv(1) == b""  # not a second request on the half-read connection
                    except OSError:
                        hung_up = True
                    if hung_up:
                        first_closed.set()
                    continue
                for chunk in chunks[1:]:
                    send(chunk)
                conn.sendall(b"0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    backend = OpenAIBackend(f"http://127.0.0.1:{listener.getsockname()[1]}/v1/", "qwen3-8b", retries=0)

    async def cancel_then_call():
        from serving.backends.openai import close_shared_clients

        try:
            streaming = asyncio.create_task(backend.complete(USER, []))
            while not first_chunk_sent.is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the first chunk read, the rest still to come
            streaming.cancel()
            with pytest.raises(asyncio.CancelledError):
                await streaming
            finish.set()
            return (await backend.complete(USER, [])).content
        finally:
            await close_shared_clients()

    try:
        assert asyncio.run(cancel_then_call()) == "The whole answer"
        assert first_closed.wait(5)  # the cancelled call's connection was closed, not kept half-read
    finally:
        listener.close()
