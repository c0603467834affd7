"""manage.py simulate_traffic against a real Daphne server on the test database.

Kept apart from the browser tests: Playwright's sync API holds an event loop in the test thread while a
module's browser is open, and this command runs its own loop.
"""

import pytest

from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start
from serving.services import room_upsert
from tests.live_servers import requires_services, start_daphne, stop
from tests.serving.test_reply_api import ROOM

pytestmark = [
    pytest.mark.django_db(transaction=True),
    requires_services,
]

def test_simulate_traffic_drives_a_running_experiment(workspace, harness):
    """The command talks to a real server over HTTP: replies assign arms, events land once, rollups move."""
    from django.core.management import call_command

    from serving.models import Event, Exposure, Rollup
    from workspaces.access import Actor

    system = Actor.system("test")
    harness_services.label_move(actor=system, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    experiment = experiment_create(actor=system, workspace=workspace, key="sim", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=system, experiment=experiment)
    daphne, base = start_daphne(HARNESSOPS_LIVE_JUDGE_RATE="0")
    try:
        call_command("simulate_traffic", url=base, workspace="acme", room="demo-room",
                     viewers=30, effect=0.5, concurrency=4, duplicate_rate=0.2, seed=3)
    finally:
        stop(daphne)
    assert Exposure.objects.filter(experiment=experiment).count() == 30
    views = Event.objects.filter(type="item_page_view").count()
    assert views > 0
    assert sum(r.sum_y for r in Rollup.objects.filter(experiment=experiment)) == views  # duplicates counted once
