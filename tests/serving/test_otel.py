"""OpenTelemetry export of a reply (serving.otel): a real OTLP/HTTP receiver in the test, decoding the protobuf the
SDK's exporter sends, gets the turn's spans with the GenAI attributes, their parent links and the stored trace id;
no viewer text unless content capture is on; nothing at all when no collector is configured."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.conf import settings as django_settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from harness import services as harness_services
from serving import otel
from serving.models import Trace
from serving.services import api_key_create, room_upsert
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
MESSAGE = "how much is the sweater, my friend?"
# A lookup, a coupon above the demo harness's cap (denied by a pre_tool hook), a markdown reply sent back by a
# reply hook, then the reply.
STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}},
                         {"name": "issue_coupon", "arguments": {"link_id": "L001", "discount_pct": 60}}],
          "tokens_in": 300, "tokens_cached": 120, "tokens_out": 20},
         "**The sweater** is $71.2 now.",
         {"content": "The sweater is $71.2 now, down from $89.", "tokens_in": 340, "tokens_out": 14}]


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces with an ExportTraceServiceRequest."""

    def __init__(self):
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.requests.append(request)
                received.paths.append(self.path)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict, object]]:
        """(resource attributes, span) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope.spans)
        return found

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind)


def attributes(span) -> dict:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
def receiver(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
                 "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    running = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "harnessops-under-test")
    otel.reset()
    yield running
    otel.reset()
    running.close()


@pytest.fixture
def reply(client, workspace, harness, settings):
    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS = "scripted", STEPS
    settings.REPLY_RATE_PER_MINUTE = 1000
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read"])[1]

    def send(viewer: str = "v1") -> dict:
        response = client.post("/api/v1/rooms/demo-room/reply", json.dumps({"message": MESSAGE, "viewer_id": viewer}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == 200, response.content
        return response.json()

    return send


def test_one_reply_arrives_as_genai_spans_linked_to_its_stored_trace(receiver, reply):
    body = reply()
    assert otel.flush()
    received = receiver.spans()
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    stored = Trace.objects.get(trace_id=body["trace_id"]).data
    assert {resource["service.name"] for resource, _ in received} == {"harnessops-under-test"}
    spans = [span for _, span in received]
    assert {span.trace_id for span in spans} == {bytes.fromhex(body["trace_id"])}  # the stored id is the trace id

    turns = [s for s in spans if s.name == "invoke_agent avatar"]
    assert len(turns) == 1 and not turns[0].parent_span_id
    turn = turns[0]
    turn_attributes = attributes(turn)
    assert turn_attributes["harnessops.trace_id"] == body["trace_id"]
    assert turn_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn_attributes["harnessops.outcome"] == "replied" and turn_attributes["harnessops.label"] == "production"
    assert (turn.end_time_unix_nano - turn.start_time_unix_nano) / 1e6 == pytest.approx(stored["duration_ms"],
                                                                                          abs=0.01)

    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time_unix_nano)
    assert len(chats) == 3 and all(s.parent_span_id == turn.span_id for s in chats)
    first, _, second = (attributes(s) for s in chats)
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.request.model"] == "scripted"
    assert first["gen_ai.provider.name"] == first["gen_ai.system"] == "harnessops.scripted"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"],
            first["gen_ai.usage.cache_read.input_tokens"]) == (300, 20, 120)
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"]) == (340, 14)
    assert second["gen_ai.response.finish_reasons"] == ["stop"]
    assert all(s.kind == s.SPAN_KIND_CLIENT for s in chats)

    tools = {attributes(s)["gen_ai.tool.name"]: s for s in spans if s.name.startswith("execute_tool ")}
    assert set(tools) == {"load_skill", "get_product_info_by_link_id", "issue_coupon"}
    assert all(s.parent_span_id == turn.span_id for s in tools.values())
    assert attributes(tools["issue_coupon"])["error.type"] == "tool_error"
    hooks = {attributes(s)["harnessops.hook.name"]: s for s in spans if s.name.startswith("hook ")}
    denial = attributes(hooks["cap-coupon-discount"])
    assert (denial["harnessops.hook.event"], denial["harnessops.hook.action"], denial["harnessops.hook.fired"]) == \
        ("pre_tool", "deny", True)
    assert hooks["cap-coupon-discount"].parent_span_id == tools["issue_coupon"].span_id  # a tool's hook under it
    assert attributes(hooks["reply-format"])["harnessops.hook.action"] == "retry_with_feedback"
    assert hooks["reply-format"].parent_span_id == turn.span_id
    assert [e.name for e in turn.events] == ["harnessops.retry"]
    stored_hooks = [s for s in stored["steps"] if s["kind"] == "hook"]
    assert len(hooks) == len(stored_hooks) == 2  # one span per recorded hook decision
    assert len(spans) == 1 + 3 + 3 + 2

    # No prompt, viewer or reply text leaves without content capture.
    texts = json.dumps([attributes(s) for s in spans])
    assert "sweater" not in texts and "my friend" not in texts and "71.2" not in texts


def test_content_capture_is_the_operators_choice(receiver, reply, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    reply()
    assert otel.flush()
    spans = [span for _, span in receiver.spans()]
    turn = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert attributes(turn)["harnessops.input.message"] == MESSAGE
    assert "71.2" in attributes(turn)["harnessops.output.reply"]
    lookup = next(s for s in spans if s.name == "execute_tool get_product_info_by_link_id")
    assert json.loads(attributes(lookup)["gen_ai.tool.call.arguments"]) == {"link_id": "L001"}


def test_export_is_off_without_a_collector_and_a_dead_one_never_fails_a_reply(reply, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    otel.reset()
    try:
        assert otel.tracer() is None
        assert reply()["outcome"] == "replied"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing listens (discard port)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        otel.reset()
        assert otel.tracer() is None  # the SDK's own off switch
        monkeypatch.delenv("OTEL_SDK_DISABLED")
        otel.reset()
        assert otel.tracer() is not None
        assert reply("v2")["outcome"] == "replied"
    finally:
        otel.reset()


@pytest.mark.skipif(not django_settings.REDIS_URL
                    or not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="the route on the loop needs PostgreSQL and Redis")
@pytest.mark.django_db(transaction=True)
def test_the_route_on_the_event_loop_exports_its_replies_too(receiver, workspace, harness, settings):
    from django.core.cache import cache

    from tests.serving import test_lean_reply as lean

    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS, settings.REPLY_RATE_PER_MINUTE = "scripted", lean.STEPS, 1000
    cache.clear()
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=lean.ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read"])[1]
    answers = lean.asgi([(lean.REPLY, {**lean.HELLO, "viewer_id": f"v{i}"}, lean.bearer(token)) for i in range(2)])
    assert answers[0]["django"] and not answers[1]["django"]
    assert otel.flush()
    spans = [span for _, span in receiver.spans()]
    turns = {s.trace_id.hex(): s for s in spans if s.name == "invoke_agent avatar"}
    assert set(turns) == {a["json"]["trace_id"] for a in answers}  # one turn span per reply, each its own trace
    for turn in turns.values():
        children = [s for s in spans if s.trace_id == turn.trace_id and s.parent_span_id == turn.span_id]
        assert {s.name for s in children} >= {"chat scripted", "execute_tool get_product_info_by_link_id"}
