"""A workspace's HTTP tool host allowlist reaches live replies: a tool on 127.0.0.1 is refused by default
and called once the workspace lists the host (a real local HTTP server, the scripted model)."""

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import selectors
from harness.spec.model import Tool, ToolBinding
from serving.models import Trace
from serving.services import room_reply
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor
from workspaces.services import workspace_tool_hosts_set

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


class Stock(BaseHTTPRequestHandler):
    hits = 0

    def log_message(self, *args):
        pass

    def do_GET(self):
        Stock.hits += 1
        body = json.dumps({"link_id": self.path.rsplit("/", 1)[1], "stock": 7}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def stock_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stock)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_live_replies_follow_the_workspace_allowlist(workspace, harness, settings, stock_server):
    spec = selectors.version_spec(harness.head)
    stock = Tool(name="get_stock", description="stock of an item",
                 parameters={"type": "object", "properties": {"link_id": {"type": "string"}}, "required": ["link_id"]},
                 binding=ToolBinding("http", f"GET {stock_server}/stock/{{link_id}}"))
    spec = dataclasses.replace(spec, tools=(*spec.tools, stock))
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = [{"tool_calls": [{"name": "get_stock", "arguments": {"link_id": "L001"}}]},
                               "Checking stock now."]

    def ask():
        outcome = room_reply(actor=SYSTEM, workspace=workspace, room_id="demo-room", message="in stock?",
                             viewer_id="v1", room_context=ROOM, harness_name=harness.name, spec_override=spec)
        trace = Trace.objects.get(trace_id=outcome.result.trace["trace_id"])
        return next(s for s in trace.data["steps"] if s["kind"] == "tool" and s["name"] == "get_stock")

    Stock.hits = 0
    refused = ask()
    assert refused["error"].startswith("permission denied: host 127.0.0.1 resolves to non-public address")
    assert Stock.hits == 0

    workspace_tool_hosts_set(actor=SYSTEM, workspace=workspace, hosts=["127.0.0.1"])
    allowed = ask()
    assert allowed["error"] == "" and allowed["result"] == {"link_id": "L001", "stock": 7} and Stock.hits == 1
