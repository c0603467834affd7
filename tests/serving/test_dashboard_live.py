"""The experiment dashboard live: the deployed server (compose's web command: uvicorn, two processes, so the
reply, the events and the websocket may each land on a different one) with the Redis channel layer, a real Celery worker judging sampled
traffic, events posted through the API, and headless Chromium watching the page update over its websocket."""

import json
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start
from serving.models import Trace
from serving.services import api_key_create, room_upsert
from tests.live_servers import log_in, requires_services, start_deployed, start_worker, stop, wait_for
from tests.serving.test_reply_api import ROOM

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    requires_services,
]
VERDICT = json.dumps({"accuracy": 1, "effectiveness": 1, "reasons": ["fine"]})


def test_dashboard_updates_live(page, workspace, harness, members, purge_queue_fixture):
    from workspaces.access import Actor

    system = Actor.system("test")
    harness_services.label_move(actor=system, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=system, workspace=workspace, name="platform", scopes=["read", "ingest"])[1]
    experiment = experiment_create(actor=system, workspace=workspace, key="live", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=system, experiment=experiment)

    # Every experiment reply is judged on the worker; the scripted model answers as the judge expects.
    env = {"HARNESSOPS_SCRIPTED_STEPS": json.dumps([VERDICT]), "HARNESSOPS_LIVE_JUDGE_RATE": "1"}
    server, base = start_deployed(**env)
    worker = start_worker(**env)
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        log_in(page, base, members["viewer"])
        page.goto(f"{base}/w/acme/experiments/live/")
        page.wait_for_function("Number(document.getElementById('decision').dataset.updates) >= 2")  # render + ws
        before = int(page.locator("#decision").get_attribute("data-updates"))

        arms = {}
        for i in range(12):
            body = api.post("/api/v1/rooms/demo-room/reply", json={"message": "hi", "viewer_id": f"w{i}"}).json()
            arms[f"w{i}"] = body["arm"]
        events = [{"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": v, "room_id": "demo-room",
                   "item_id": "L001", "ts": datetime.now(UTC).isoformat()} for v in arms for _ in range(2)]
        assert api.post("/api/v1/events", json={"events": events}).json()["accepted"] == 24

        # Pushed over the websocket (no reload): 24 views across the arms, and the worker's judgements.
        page.wait_for_function(
            "Array.from(document.querySelectorAll('#metrics tr')).slice(1)"
            ".reduce((s, r) => s + Number(r.children[2].textContent), 0) === 24", timeout=30_000)
        wait_for(lambda: Trace.objects.exclude(judge_accuracy=None).count() >= 1, 60, "a judged live reply")
        page.wait_for_function(  # the "Judged" column, found by its heading
            "(() => { const rows = Array.from(document.querySelectorAll('#guardrails tr'));"
            " const judged = Array.from(rows[0].children).findIndex(c => c.textContent === 'Judged');"
            " return judged > 0 && rows.slice(1).some(r => Number(r.children[judged].textContent) >= 1); })()",
            timeout=30_000)
        assert int(page.locator("#decision").get_attribute("data-updates")) > before
        assert page.url.endswith("/w/acme/experiments/live/")
    finally:
        api.close()
        stop(worker)
        stop(server)

