"""The model server misbehaving under the reply API: answering too slowly, erroring, or closing the connection in
the middle of a streamed answer. Each reply still ends, within the harness's deadline, in the harness's fallback
reply with a failed outcome (never `replied`); its trace says why; a streaming (SSE) client gets its final event.

The model server is a real OpenAI-compatible HTTP server in this process (aiohttp, its own thread and loop) that
misbehaves as the requested model's name says; the `openai` backend talks to it over TCP as it would to vLLM.
"""

import asyncio
import json
import threading
import time

import pytest
from aiohttp import web

from harness import services as harness_services
from serving.backends.openai import close_shared_clients
from serving.models import Trace
from serving.services import api_key_create, room_upsert
from tests.live_servers import free_port
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
DEADLINE_S = 2.0
SLACK_S = 2.5  # the request around the turn (key check, routing, the trace write) on a loaded 2-core CI host
FIRST_CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "cut",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": "The sweater is"},
                            "finish_reason": None}]}


async def completions(request: web.Request) -> web.StreamResponse:
    mode = (await request.json())["model"]
    if mode == "slow":  # far past any deadline
        await asyncio.sleep(30)
    if mode == "error":
        return web.json_response({"error": {"message": "the model server fell over", "type": "server_error"}},
                                 status=500)
    # "cut": a streamed answer that stops after its first chunk, the connection closed under it
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(f"data: {json.dumps(FIRST_CHUNK)}\n\n".encode())
    request.transport.close()
    return response


@pytest.fixture(scope="module")
def model_server():
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    port = free_port()
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/v1"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


@pytest.fixture
def api(client, workspace, demo_files, settings, model_server):
    settings.MODEL_BACKEND = "openai"
    settings.OPENAI_BASE_URL = model_server
    settings.OPENAI_TIMEOUT_S = 30.0
    settings.TRACE_WRITES = "sync"
    files = {**demo_files, "harness.yaml": demo_files["harness.yaml"].replace("deadline_s: 15.0",
                                                                              f"deadline_s: {DEADLINE_S}")}
    assert files["harness.yaml"] != demo_files["harness.yaml"]
    system = Actor.system("t")
    harness = harness_services.harness_create(actor=system, workspace=workspace, name="avatar", files=files,
                                              message="first")
    harness_services.label_move(actor=system, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=system, workspace=workspace, name="platform", scopes=["read"])[1]

    def post(path, **extra):
        return client.post(path, json.dumps({"message": "price of the sweater?", "viewer_id": "v1"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}", **extra)

    yield post
    asyncio.run(close_shared_clients())


FALLBACK = "Great question! Let me double-check that and get right back to you."


@pytest.mark.parametrize(("mode", "outcome", "why"), [
    ("slow", "deadline", "deadline of 2 s reached"),
    ("error", "error", "500"),
    ("cut", "error", "Response payload is not completed"),
])
def test_a_misbehaving_model_ends_in_the_fallback_within_the_deadline(api, settings, mode, outcome, why):
    settings.OPENAI_MODEL = mode
    started = time.monotonic()
    response = api("/api/v1/rooms/demo-room/reply")
    took = time.monotonic() - started
    body = response.json()
    assert response.status_code == 200 and took < DEADLINE_S + SLACK_S, (response.status_code, took)
    assert (body["outcome"], body["reply"]) == (outcome, FALLBACK)
    trace = Trace.objects.get(trace_id=body["trace_id"])
    assert trace.outcome == outcome and why in trace.data["reason"], trace.data["reason"]


@pytest.mark.parametrize("mode", ["slow", "error", "cut"])
def test_a_streaming_client_gets_its_final_event(api, settings, mode):
    settings.OPENAI_MODEL = mode
    started = time.monotonic()
    response = api("/api/v1/rooms/demo-room/reply?stream=1")
    events = [chunk.decode() for chunk in response.streaming_content]
    assert time.monotonic() - started < DEADLINE_S + SLACK_S
    final = [event for event in events if event.startswith("event: final")]
    assert len(final) == 1 and events[-1] == final[0]
    body = json.loads(final[0].split("data: ", 1)[1])
    assert body["outcome"] in ("deadline", "error") and body["reply"] == FALLBACK
