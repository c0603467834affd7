"""The HTTP tool binding against a real local HTTP server: success, permission, malformed, timeout, size cap."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.runtime import RoomContext, ToolContext, ToolRegistry
from harness.spec.model import Tool, ToolBinding

CTX = ToolContext(room=RoomContext(room_id="r"), viewer_id="v")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else body
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (the timeout test)
            pass

    def do_GET(self):
        if self.path.startswith("/products/"):
            link_id = self.path.split("/")[2].split("?")[0]
            return self._send(200, json.dumps({"link_id": link_id, "query": self.path.partition("?")[2]}))
        if self.path == "/forbidden":
            return self._send(403, "{}")
        if self.path == "/text":
            return self._send(200, "<html>oops</html>", "text/html")
        if self.path == "/huge":
            return self._send(200, "[" + ",".join(["1"] * 200_000) + "]")
        if self.path == "/slow":
            time.sleep(1.0)
            return self._send(200, "{}")
        return self._send(404, "{}")

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        return self._send(200, json.dumps({"echo": json.loads(self.rfile.read(length))}))


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def http_tool(target, timeout_ms=2000, retries=0):
    return Tool(name="t", description="d", parameters={"type": "object"}, binding=ToolBinding("http", target),
                timeout_ms=timeout_ms, retries=retries)


def execute(tool, args):
    return asyncio.run(ToolRegistry().execute(tool, args, CTX))


def test_get_with_path_placeholder_and_query(server):
    outcome = execute(http_tool(f"GET {server}/products/{{link_id}}"), {"link_id": "L 01/x", "fields": "price"})
    assert outcome.error == "" and outcome.result == {"link_id": "L%2001%2Fx", "query": "fields=price"}


def test_post_sends_json_body(server):
    assert execute(http_tool(f"POST {server}/echo"), {"a": 1}).result == {"echo": {"a": 1}}


def test_permission_malformed_and_size_cap(server):
    assert execute(http_tool(f"GET {server}/forbidden", retries=2), {}).error == "permission denied: HTTP 403"
    assert "malformed tool output" in execute(http_tool(f"GET {server}/text"), {}).error
    assert "larger than" in execute(http_tool(f"GET {server}/huge"), {}).error
    assert execute(http_tool(f"GET {server}/missing"), {}).error.startswith("HTTP 404")


def test_timeout_with_retries(server):
    outcome = execute(http_tool(f"GET {server}/slow", timeout_ms=200, retries=1), {})
    assert outcome.error == "timed out after 200 ms" and outcome.attempts == 2


def test_connection_refused_is_a_tool_error():
    outcome = execute(http_tool("GET http://127.0.0.1:9/nothing"), {})
    assert outcome.error and outcome.result is None
