"""A small OpenAI-compatible HTTP server around any registered model backend. Standard library only.

    python -m serving.openai_compat --backend local --host 127.0.0.1 --port 8001
    python -m serving.openai_compat --backend scripted --script steps.json --delay-ms 300 --port 0

Serves `GET /health`, `GET /v1/models` and `POST /v1/chat/completions` (JSON, or SSE with
`stream: true`). It is the CPU stand-in for vLLM, the server the `openai` backend's tests talk to
over real HTTP, and a fixed-latency model for benchmarks (`--delay-ms`). `--port 0` picks a free
port; the first line on stdout names the address.

Backends answer whole turns, so a stream is the finished response cut into chunks: the wire format
is OpenAI's, but time to first token here equals the backend's latency.
"""

import argparse
import asyncio
import hashlib
import json
import re
import sys
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from harness.model_protocol import BackendError, ModelBackend, ModelResponse, ToolConstraint
from serving.backends import backend_names, create_backend
from serving.backends.scripted import steps_from_json

T = TypeVar("T")
_WORDS = re.compile(r"\s*\S+\s*|\s+")
ARGUMENT_PIECE_CHARS = 8


class BackendLoop:
    """One asyncio loop on a daemon thread; request threads run backend coroutines on it, so a
    backend's clients and locks live on a single loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="backend-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class CompletionServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's listen backlog is 5: an eval run at concurrency 32 opening its connections at once had
    # half of them reset (ReadError, recorded as errored turns). vLLM's server listens with a deep backlog too.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], backend: ModelBackend, *, model_name: str,
                 delay_s: float = 0.0, quiet: bool = True):
        super().__init__(address, CompletionHandler)
        self.backend = backend
        self.model_name = model_name
        self.delay_s = delay_s
        self.quiet = quiet
        self.backend_loop = BackendLoop()
        self.started = int(time.time())

    async def answer(self, request: dict[str, Any]) -> ModelResponse:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return await self.backend.complete(
            request["messages"], request.get("tools") or [],
            max_tokens=int(request.get("max_completion_tokens") or request.get("max_tokens") or 512),
            temperature=float(request.get("temperature") or 0.0),
            tool_choice=request.get("tool_choice") or "auto",
            **self._constraint(request),
        )

    def _constraint(self, request: dict[str, Any]) -> dict[str, Any]:
        """A structural-tag request (what the `openai` backend sends vLLM for a constrained harness) constrains
        a backend that can: keyed by the tag's content, which names the tools and their schemas."""
        response_format = request.get("response_format")
        if not (isinstance(response_format, dict) and response_format.get("type") == "structural_tag"
                and request.get("tools") and getattr(self.backend, "constrains_tool_calls", False)):
            return {}
        key = hashlib.sha256(json.dumps(response_format, sort_keys=True).encode()).hexdigest()
        return {"constraint": ToolConstraint(key=f"structural-tag:{key}")}

    def server_close(self) -> None:
        super().server_close()
        self.backend_loop.close()


class CompletionHandler(BaseHTTPRequestHandler):
    server: CompletionServer
    protocol_version = "HTTP/1.1"  # keep-alive, streams included (chunked, as vLLM's server answers)
    disable_nagle_algorithm = True  # headers and body are separate writes: don't wait for delayed ACKs

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send_json(HTTPStatus.OK, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send_json(HTTPStatus.OK, {"object": "list", "data": [{
                "id": self.server.model_name, "object": "model", "created": self.server.started,
                "owned_by": "harnessops"}]})
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route {self.path}")

    def do_POST(self) -> None:
        if self.path != "/v1/chat/completions":
            self._send_error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        except ValueError as error:
            self._send_error(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {error}")
            return
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            self._send_error(HTTPStatus.BAD_REQUEST, "`messages` must be a list")
            return
        if request.get("model") not in (None, self.server.model_name):
            self._send_error(HTTPStatus.NOT_FOUND, f"The model `{request['model']}` does not exist.",
                             kind="NotFoundError")
            return
        try:
            response = self.server.backend_loop.run(self.server.answer(request))
        except BackendError as error:
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, str(error), kind="BackendError")
            return
        except Exception as error:  # a bug in a backend still gets an answer, and the server lives on
            self.log_error("backend failed: %r", error)
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(error).__name__}: {error}",
                             kind="InternalServerError")
            return
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if not request.get("stream"):
            self._send_json(HTTPStatus.OK, completion_json(response, self.server.model_name, completion_id))
            return
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")  # the connection stays open for the next request
        self.end_headers()
        try:
            for chunk in completion_chunks(response, self.server.model_name, completion_id, include_usage):
                self._send_chunk(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
            self._send_chunk(b"data: [DONE]\n\n")
            self._send_chunk(b"")  # the last chunk: the stream ends here
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (its deadline, say)

    def _send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_error(self, status: HTTPStatus, message: str, kind: str = "BadRequestError") -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "code": int(status)}})

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            super().log_message(format, *args)

    def log_error(self, format: str, *args: Any) -> None:
        super().log_message(format, *args)  # errors are logged even when quiet


def completion_json(response: ModelResponse, model: str, completion_id: str) -> dict[str, Any]:
    """A `chat.completion` object for a finished response."""
    message: dict[str, Any] = {"role": "assistant", "content": response.content or None}
    if response.reasoning:
        message["reasoning"] = response.reasoning
    if response.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in response.tool_calls
        ]
    return {"id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": response.finish_reason}],
            "usage": _usage(response)}


def completion_chunks(response: ModelResponse, model: str, completion_id: str,
                      include_usage: bool = True) -> Iterator[dict[str, Any]]:
    """`chat.completion.chunk` objects: role, reasoning and content a few words at a time, each tool
    call's name then its arguments in pieces, the finish reason, then usage (with `choices: []`)."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _WORDS.findall(response.reasoning):
        yield chunk({"reasoning": piece})
    for piece in _WORDS.findall(response.content):
        yield chunk({"content": piece})
    for index, call in enumerate(response.tool_calls):
        yield chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        for start in range(0, len(call.arguments), ARGUMENT_PIECE_CHARS):
            piece = call.arguments[start:start + ARGUMENT_PIECE_CHARS]
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, response.finish_reason)
    if include_usage:
        yield {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [], "usage": _usage(response)}


def _usage(response: ModelResponse) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": response.tokens_in, "completion_tokens": response.tokens_out,
                             "total_tokens": response.tokens_in + response.tokens_out}
    cached = (response.raw or {}).get("cached_tokens")
    if isinstance(cached, int):  # the local backend's prompt tokens taken from llama.cpp's cache, as OpenAI and
        usage["prompt_tokens_details"] = {"cached_tokens": cached}  # vLLM (--enable-prompt-tokens-details) say it
    return usage


def _option(text: str) -> tuple[str, Any]:
    key, separator, value = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m serving.openai_compat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True, choices=backend_names())
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--model-name", help="the served model id (default: the backend's name)")
    parser.add_argument("--script", type=Path, help="scripted backend: a JSON list of steps")
    parser.add_argument("--cycle", action="store_true", help="scripted backend: repeat the steps forever")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added before every answer")
    parser.add_argument("--option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                        help="backend config (VALUE parsed as JSON when it parses), repeatable")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    config = dict(args.option)
    if args.backend == "scripted":
        if args.script is None:
            parser.error("--backend scripted needs --script FILE.json")
        config["steps"] = steps_from_json(json.loads(args.script.read_text()))
        config["cycle"] = args.cycle
    try:
        backend = create_backend(args.backend, **config)
        if hasattr(backend, "load"):
            backend.load()  # load the weights before announcing the address
    except (BackendError, TypeError) as error:
        parser.exit(1, f"cannot start the {args.backend} backend: {error}\n")
    server = CompletionServer((args.host, args.port), backend, model_name=args.model_name or backend.name,
                              delay_s=args.delay_ms / 1000, quiet=not args.verbose)
    host, port = server.server_address[:2]
    print(f"serving backend {args.backend} as {server.model_name!r} on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
