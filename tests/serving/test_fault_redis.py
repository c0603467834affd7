"""Redis stopped for 10 s under replies and event batches, then back: the deployed server (uvicorn, two processes)
keeps answering every reply and landing every batch, says the outage in /healthz, and after Redis returns nothing
is lost or counted twice.

The server runs against a Redis of this test's own (a spare port), its cache, admission, broker and channel layer,
so stopping it disturbs nothing else; PostgreSQL is the test database. A running experiment on the room makes
every reply an exposure and every event an item-page view to fold into a rollup: the fold is what a double count
would show.
"""

import json
import shutil
import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start
from serving.models import Event, Rollup, Trace
from serving.services import api_key_create, room_upsert
from tests.live_servers import free_port, requires_services, start_deployed, stop, wait_for
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

pytestmark = [pytest.mark.django_db(transaction=True), requires_services,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")]
OUTAGE_S = 10
# What the demo harness's hooks accept: a reply skill loaded and the product looked up, then the reply.
STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}]},
         "The Merino Crew-Neck Sweater is $71.2 right now."]


def start_redis(port: int) -> subprocess.Popen:
    process = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip()
             == b"PONG", 10, "redis-server")
    return process


def test_replies_and_events_live_through_redis_going_away_and_coming_back(workspace, harness):
    system = Actor.system("test")
    for label in ("production", "staging"):
        harness_services.label_move(actor=system, harness=harness, name=label, version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    experiment = experiment_create(actor=system, workspace=workspace, key="outage", harness=harness,
                                   arms=[{"name": "control", "weight": 0.5, "kind": "label", "label": "production"},
                                         {"name": "candidate", "weight": 0.5, "kind": "label", "label": "staging"}])
    experiment_start(actor=system, experiment=experiment)
    token = api_key_create(actor=system, workspace=workspace, name="platform", scopes=["read", "ingest"])[1]
    redis_port = free_port()
    redis = start_redis(redis_port)
    server, base = start_deployed(REDIS_URL=f"redis://127.0.0.1:{redis_port}/0", HARNESSOPS_LIVE_JUDGE_RATE="1",
                                  HARNESSOPS_SCRIPTED_STEPS=json.dumps(STEPS),
                                  HARNESSOPS_REPLY_RATE_PER_MINUTE="100000")
    replies: list[tuple[float, int, dict]] = []
    batches: list[tuple[float, int, dict, list[str]]] = []
    health: list[tuple[float, dict]] = []
    going = threading.Event()

    def viewer(i: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as api:
            n = 0
            while not going.is_set():
                viewer_id = f"v{i}-{n}"
                answer = api.post("/api/v1/rooms/demo-room/reply", json={"message": "price of the sweater?",
                                                                        "viewer_id": viewer_id})
                replies.append((time.monotonic(), answer.status_code, answer.json()))
                ids = [uuid.uuid4().hex for _ in range(5)]
                events = [{"event_id": event_id, "type": "item_page_view", "viewer_id": viewer_id,
                           "room_id": "demo-room", "item_id": "L001", "ts": datetime.now(UTC).isoformat()}
                          for event_id in ids]
                answer = api.post("/api/v1/events", json={"events": events})
                body = answer.json() if answer.status_code == 200 else {"retry_after": answer.headers.get("Retry-After")}
                batches.append((time.monotonic(), answer.status_code, body, ids))
                health.append((time.monotonic(), api.get("/healthz").json()))
                n += 1

    threads = [threading.Thread(target=viewer, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(replies) >= 20, 60, "replies before the outage")
        stop(redis)
        down_at = time.monotonic()
        time.sleep(OUTAGE_S)
        redis = start_redis(redis_port)
        up_at = time.monotonic()
        wait_for(lambda: [h for at, h in health if at > up_at + 2 and h.get("cache") == "ok"], 30,
                 "/healthz to say the cache is back")
        wait_for(lambda: len([r for r in replies if r[0] > up_at]) >= 20, 60, "replies after the outage")
    finally:
        going.set()
        for thread in threads:
            thread.join(timeout=60)
        stop(server)
        stop(redis)

    during = [r for r in replies if down_at < r[0] < up_at]
    assert len(during) >= 10, "the outage saw replies"
    assert {(status, body.get("outcome")) for _, status, body, in replies} == {(200, "replied")}
    assert any(h.get("cache") == "unavailable" for at, h in health if down_at + 1 < at < up_at)
    # A batch either landed whole or was refused with a time to come back; none vanished half-written.
    landed = [(body, ids) for _, status, body, ids in batches if status == 200]
    refused = [body for _, status, body, _ in batches if status != 200]
    assert all(status in (200, 503) for _, status, _, _ in batches) and all(r["retry_after"] for r in refused)
    assert all(body["accepted"] == 5 and not body["errors"] for body, _ in landed)
    assert [b for b in batches if down_at < b[0] < up_at and b[1] == 200], "batches land during the outage"
    accepted = [event_id for _, ids in landed for event_id in ids]
    assert Event.objects.filter(event_id__in=accepted).count() == len(accepted) == len(set(accepted))
    # Every view was folded once: each event's viewer was exposed by its reply just before.
    assert sum(Rollup.objects.filter(experiment=experiment).values_list("sum_y", flat=True)) == len(accepted)
    trace_ids = [body["trace_id"] for _, _, body in replies]
    wait_for(lambda: Trace.objects.filter(trace_id__in=trace_ids).count() == len(trace_ids), 15, "every trace stored")
