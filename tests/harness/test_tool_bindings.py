"""The HTTP tool binding against a real local HTTP server: success, permission, malformed, timeout, size cap,
and the host policy (a server on 127.0.0.1 is refused unless the workspace allow-lists it)."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.runtime import HttpPolicy, RoomContext, ToolContext, ToolRegistry
from harness.spec.model import Tool, ToolBinding

CTX = ToolContext(room=RoomContext(room_id="r"), viewer_id="v")
LOCAL = HttpPolicy(allowed_hosts=("127.0.0.1",))
HITS: list[str] = []


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
        HITS.append(self.path)
        if self.path.startswith("/products/"):
            link_id = self.path.split("/")[2].split("?")[0]
            return self._send(200, json.dumps({"link_id": link_id, "query": self.path.partition("?")[2]}))
        if self.path == "/forbidden":
            return self._send(403, "{}")
        if self.path == "/text":
            return self._send(200, "<html>oops</html>", "text/html")
        if self.path == "/huge":
            return self._send(200, "[" + ",".join(["1"] * 200_000) + "]")
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if self.path.startswith("/query"):
            return self._send(200, json.dumps({"query": self.path.partition("?")[2]}))
        if self.path == "/slow":
            time.sleep(1.0)
            return self._send(200, "{}")
        return self._send(404, "{}")

    def do_POST(self):
        HITS.append(self.path)
        length = int(self.headers["Content-Length"])
        return self._send(200, json.dumps({"echo": json.loads(self.rfile.read(length)),
                                           "idempotency_key": self.headers.get("Idempotency-Key"),
                                           "host": self.headers.get("Host")}))


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def http_tool(target, timeout_ms=2000, retries=0, side_effect="read"):
    return Tool(name="t", description="d", parameters={"type": "object"}, binding=ToolBinding("http", target),
                timeout_ms=timeout_ms, retries=retries, side_effect=side_effect)


def execute(tool, args, policy=LOCAL, **kwargs):
    return asyncio.run(ToolRegistry(http_policy=policy).execute(tool, args, CTX, **kwargs))


def test_get_with_path_placeholder_and_query(server):
    outcome = execute(http_tool(f"GET {server}/products/{{link_id}}"), {"link_id": "L 01/x", "fields": "price"})
    assert outcome.error == "" and outcome.result == {"link_id": "L%2001%2Fx", "query": "fields=price"}


def test_get_arguments_become_the_query_as_httpx_wrote_it(server):
    args = {"on": True, "off": False, "none": None, "tags": ["a", "b c"], "n": 2, "text": "x&y=ü"}
    outcome = execute(http_tool(f"GET {server}/query?fixed=1"), args)
    assert outcome.result == {"query": "fixed=1&on=true&off=false&none=&tags=a&tags=b%20c&n=2&text=x%26y%3D%C3%BC"}


def test_a_redirect_is_reported_not_followed(server):
    HITS.clear()
    outcome = execute(http_tool(f"GET {server}/redirect", retries=2), {})
    assert outcome.error == "HTTP 302: the redirect to 'http://169.254.169.254/latest/meta-data/' is not followed"
    assert HITS == ["/redirect"]


def test_post_sends_json_body_host_and_idempotency_key(server):
    outcome = execute(http_tool(f"POST {server}/echo", side_effect="write"), {"a": 1}, idempotency_key="t1:c1")
    host = server.removeprefix("http://")
    assert outcome.result == {"echo": {"a": 1}, "idempotency_key": "t1:c1", "host": host}


# --- the host policy ---------------------------------------------------------------------------------

def test_a_local_server_is_refused_by_default_and_never_reached(server):
    HITS.clear()
    outcome = execute(http_tool(f"GET {server}/products/L001"), {}, policy=HttpPolicy())
    assert outcome.error.startswith("permission denied: host 127.0.0.1 resolves to non-public address 127.0.0.1")
    assert HITS == []


def test_a_local_server_is_reached_when_allow_listed_by_name_or_network(server):
    for policy in (LOCAL, HttpPolicy(allowed_hosts=("127.0.0.0/8",))):
        assert execute(http_tool(f"GET {server}/products/L001"), {}, policy=policy).result["link_id"] == "L001"
    by_name = server.replace("127.0.0.1", "localhost")  # resolves to loopback: refused unless the name is listed
    assert "non-public address" in execute(http_tool(f"GET {by_name}/products/L1"), {}, policy=HttpPolicy()).error
    outcome = execute(http_tool(f"GET {by_name}/products/L1"), {}, policy=HttpPolicy(allowed_hosts=("localhost",)))
    assert outcome.result["link_id"] == "L1"


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.7/x", "http://[::1]:9/x",
                                 "http://192.168.1.1/x", "http://0.0.0.0:9/x", "http://[::ffff:127.0.0.1]:9/x"])
def test_private_loopback_and_link_local_addresses_are_refused(url):
    outcome = execute(http_tool(f"GET {url}", timeout_ms=500), {}, policy=HttpPolicy())
    assert outcome.error.startswith("permission denied:") and "non-public address" in outcome.error


def test_a_non_empty_allowlist_limits_public_hosts_too(server):
    policy = HttpPolicy(allowed_hosts=("api.shop.example",))
    outcome = execute(http_tool("GET http://8.8.8.8/x", timeout_ms=500), {}, policy=policy)
    assert outcome.error == "permission denied: host 8.8.8.8 is not in this workspace's HTTP tool allowlist"
    assert "allowlist" in execute(http_tool(f"GET {server}/products/L1"), {}, policy=policy).error


def test_permission_malformed_and_size_cap(server):
    assert execute(http_tool(f"GET {server}/forbidden", retries=2), {}).error == "permission denied: HTTP 403"
    assert "malformed tool output" in execute(http_tool(f"GET {server}/text"), {}).error
    assert "larger than" in execute(http_tool(f"GET {server}/huge"), {}).error
    assert execute(http_tool(f"GET {server}/missing"), {}).error.startswith("HTTP 404")


def test_timeout_with_retries(server):
    outcome = execute(http_tool(f"GET {server}/slow", timeout_ms=200, retries=1), {})
    assert outcome.error == "timed out after 200 ms" and outcome.attempts == 2


def test_an_http_write_is_not_retried_on_timeout(server):
    HITS.clear()
    # 700 ms: time for the request to reach the server (which answers after 1 s) before the timeout.
    outcome = execute(http_tool(f"GET {server}/slow", timeout_ms=700, retries=2, side_effect="write"), {})
    time.sleep(0.3)
    assert outcome.attempts == 1 and "not retried" in outcome.error and HITS == ["/slow"]


def test_connection_refused_is_a_tool_error():
    outcome = execute(http_tool("GET http://127.0.0.1:9/nothing"), {})
    assert outcome.error and outcome.result is None


# --- TLS to the pinned address ---------------------------------------------------------------------------

def _tls_server(tmp_path, name):
    """A local HTTPS server whose certificate names `name` only, and a client context that trusts it."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    key, cert = tmp_path / f"{name}.key", tmp_path / f"{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name}", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = served.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    trusting = ssl.create_default_context(cafile=str(cert))
    return httpd, trusting


@pytest.mark.parametrize("certified", ["localhost", "other.test"])
def test_tls_checks_the_certificate_against_the_host_not_the_address_dialled(tmp_path, monkeypatch, certified):
    from harness.runtime import tools

    httpd, trusting = _tls_server(tmp_path, certified)
    monkeypatch.setattr(tools, "ssl_context", lambda: trusting)
    try:
        outcome = execute(http_tool(f"GET https://localhost:{httpd.server_address[1]}/products/L1"), {},
                          policy=HttpPolicy(allowed_hosts=("localhost",)))
    finally:
        httpd.shutdown()
    if certified == "localhost":  # dialled at 127.0.0.1, which the certificate does not name
        assert outcome.error == "" and outcome.result["link_id"] == "L1"
    else:
        assert outcome.result is None and "certificate" in outcome.error.lower()


def test_a_hosts_addresses_are_kept_briefly_and_checked_on_every_call(monkeypatch):
    import socket

    from harness.runtime import tools

    answers, lookups = {"svc.test": "127.0.0.1"}, []

    def lookup(host, port, *args, **kwargs):
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(tools, "_dns_kept", {})
    listed = HttpPolicy(allowed_hosts=("svc.test",))

    def resolve(policy):
        return asyncio.run(policy.resolve("http://svc.test:8080/x"))

    assert resolve(listed) == ("svc.test", "127.0.0.1") == resolve(listed)
    assert lookups == ["svc.test"]  # the second call used the kept answer
    with pytest.raises(tools.ToolPermissionError, match="non-public address 127.0.0.1"):
        resolve(HttpPolicy())  # a kept answer is still checked against the caller's policy
    answers["svc.test"] = "10.0.0.9"
    monkeypatch.setattr(tools, "DNS_KEPT_S", 0.0)  # expired: looked up again
    assert resolve(listed) == ("svc.test", "10.0.0.9") and lookups == ["svc.test"] * 2
