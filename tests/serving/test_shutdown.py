"""A server stopped while replies are under way (SIGTERM, as a container stop or a rolling deploy sends it): it
exits promptly and cleanly, nothing it answered was an error, and every reply it answered has its trace stored
(a trace id handed out must resolve). Both servers the product runs under: the deployed one (docker-compose.yml's
web command: uvicorn, two processes) and Daphne."""

import signal
import threading
import time

import httpx
import pytest

from harness import services as harness_services
from serving.models import Trace
from serving.services import api_key_create, room_upsert
from tests.live_servers import requires_services, start_daphne, start_deployed, stop, wait_for
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

pytestmark = [pytest.mark.django_db(transaction=True), requires_services]
CLIENTS = 8


@pytest.mark.parametrize("server", ["deployed", "daphne"])
def test_a_server_stopped_under_load_exits_promptly_and_every_reply_it_answered_has_its_trace(
        server, workspace, harness):
    system = Actor.system("test")
    harness_services.label_move(actor=system, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=system, workspace=workspace, name="platform", scopes=["read"])[1]
    unlimited = {"HARNESSOPS_REPLY_RATE_PER_MINUTE": "1000000"}  # this is about stopping, not about rate limits
    process, base = start_deployed(**unlimited) if server == "deployed" else start_daphne(**unlimited)
    answered: list[httpx.Response] = []
    going = threading.Event()

    def viewer(i: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as api:
            n = 0
            while not going.is_set() or process.poll() is None:
                try:
                    answered.append(api.post("/api/v1/rooms/demo-room/reply",
                                             json={"message": "price of the sweater?", "viewer_id": f"v{i}-{n}"}))
                except httpx.TransportError:  # refused, or the connection closed unanswered: the server is going
                    if going.is_set():
                        return
                n += 1

    threads = [threading.Thread(target=viewer, args=(i,)) for i in range(CLIENTS)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(answered) >= 60, 60, "replies under load")
        going.set()
        stopped_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        took = time.monotonic() - stopped_at
    finally:
        going.set()
        stop(process)
        for thread in threads:
            thread.join(timeout=30)

    assert process.returncode == 0 and took < 10, (process.returncode, took)
    assert {response.status_code for response in answered} == {200}
    trace_ids = {response.json()["trace_id"] for response in answered}
    assert len(trace_ids) == len(answered) >= 60
    assert Trace.objects.filter(trace_id__in=trace_ids).count() == len(trace_ids)
