"""The reply path's remembered routing (label → version, the harness's experiment) and the dashboard publisher:
a label move or an experiment start/stop is seen by the next request, in this process and in others; no
dashboard snapshot is computed inside a reply request."""

import json

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from harness import routing
from harness import services as harness_services
from harness.spec import read_dir
from serving.experiments.lifecycle import experiment_create, experiment_start, experiment_stop
from serving.selection import select_version
from serving.services import api_key_create, room_upsert
from tests.conftest import DEMO_HARNESS
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


@pytest.fixture
def two_versions(harness):
    files = read_dir(DEMO_HARNESS)
    files["prompt/00-persona.md"] = files["prompt/00-persona.md"] + "\nBe brief.\n"
    first = harness.head
    second = harness_services.version_commit(actor=SYSTEM, harness=harness, files=files, base_version=first,
                                             message="second").version
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=first, reason="go")
    harness.refresh_from_db()
    return harness, second


def test_label_resolution_is_remembered_until_the_label_moves(two_versions):
    harness, second = two_versions
    assert select_version(harness=harness, viewer_id="v", room_id="r", label="production").version.number == 1
    with CaptureQueriesContext(connection) as queries:
        again = select_version(harness=harness, viewer_id="v", room_id="r", label="production")
    assert again.version.number == 1 and not [q for q in queries if "harness_label" in q["sql"]]

    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=second, reason="next",
                                override=True)
    assert select_version(harness=harness, viewer_id="v", room_id="r", label="production").version.number == 2


def test_the_next_reply_answers_with_the_moved_label(client, workspace, two_versions, settings):
    """Through the API end to end: a reply remembers production → v1; moving the label (the API's label
    route, which calls label_move) makes the very next reply answer with v2."""
    harness, second = two_versions
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Happy to help!"]
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform",
                           scopes=["read", "write", "approve"])[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def reply_version():
        response = client.post("/api/v1/rooms/demo-room/reply", json.dumps({"message": "hi", "viewer_id": "v1"}),
                               content_type="application/json", **auth)
        assert response.status_code == 200, response.content
        return response.json()["harness_version"]

    assert [reply_version(), reply_version()] == [1, 1]  # the second from the remembered resolution
    moved = client.put(f"/api/v1/harnesses/{harness.name}/labels/production",
                       json.dumps({"version": second.number, "reason": "ship v2", "override": True}),
                       content_type="application/json", **auth)
    assert moved.status_code == 200, moved.content
    assert reply_version() == 2


def test_a_move_made_by_another_process_is_seen(two_versions):
    """Another process's move reaches this one through the shared token: simulated by moving the row
    behind this process's back and replacing the token as that process's label_move would."""
    from harness.models import Label

    harness, second = two_versions
    assert select_version(harness=harness, viewer_id="v", room_id="r").version.number == 1
    Label.objects.filter(harness=harness, name="production").update(version=second)
    assert select_version(harness=harness, viewer_id="v", room_id="r").version.number == 1  # remembered
    routing.routing_changed(harness.pk)
    assert select_version(harness=harness, viewer_id="v", room_id="r").version.number == 2


def test_a_lost_token_never_serves_a_remembered_answer(two_versions):
    from harness.models import Label

    harness, second = two_versions
    select_version(harness=harness, viewer_id="v", room_id="r")
    Label.objects.filter(harness=harness, name="production").update(version=second)
    cache.delete(f"routing:{harness.pk}")  # evicted or flushed: a new token is made, matching nothing
    assert select_version(harness=harness, viewer_id="v", room_id="r").version.number == 2


def test_unknown_label_is_not_remembered(two_versions):
    from django.http import Http404

    harness, second = two_versions
    with pytest.raises(Http404):
        select_version(harness=harness, viewer_id="v", room_id="r", label="staging")
    harness_services.label_move(actor=SYSTEM, harness=harness, name="staging", version=second, reason="try")
    assert select_version(harness=harness, viewer_id="v", room_id="r", label="staging").version.number == 2


def test_experiment_start_and_stop_change_routing_at_once(workspace, two_versions):
    harness, _ = two_versions
    assert select_version(harness=harness, viewer_id="v1", room_id="r").arm == "label:production"
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="ab", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    assert select_version(harness=harness, viewer_id="v1", room_id="r").arm == "label:production"  # a draft
    experiment_start(actor=SYSTEM, experiment=experiment)
    assert select_version(harness=harness, viewer_id="v1", room_id="r").arm.startswith("exp:ab:")
    experiment_stop(actor=SYSTEM, experiment=experiment, reason="done")
    assert select_version(harness=harness, viewer_id="v1", room_id="r").arm == "label:production"
    experiment_stop(actor=SYSTEM, experiment=experiment, reason="guardrail", control_only=True)
    assert select_version(harness=harness, viewer_id="v2", room_id="r").arm == "exp:ab:control"


def test_reply_in_an_experiment_schedules_the_dashboard_instead_of_computing_it(
        client, workspace, harness, settings, monkeypatch, django_capture_on_commit_callbacks):
    from serving.experiments import live, selectors

    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Happy to help!"]
    settings.LIVE_JUDGE_RATE = 0.0
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read"])[1]
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="dash", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=SYSTEM, experiment=experiment)
    cache.delete(f"experiment-publish:{experiment.pk}")

    def no_snapshot(*args, **kwargs):
        raise AssertionError("a dashboard snapshot was computed inside the reply request")

    scheduled = []
    monkeypatch.setattr(selectors, "experiment_snapshot", no_snapshot)
    monkeypatch.setattr(live, "_publish_later", scheduled.append)
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(5):
            response = client.post("/api/v1/rooms/demo-room/reply", json.dumps({"message": "hi", "viewer_id": f"v{i}"}),
                                   content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
            assert response.status_code == 200, response.content
    # Five replies (five exposures): one debounced publication, on a timer thread a second later.
    assert scheduled == [experiment.pk]


def test_the_publisher_sends_the_snapshot_and_reopens_the_debounce(workspace, harness, monkeypatch):
    from serving.experiments import live

    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="sent", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    sent = []

    class Layer:
        async def group_send(self, group, message):
            sent.append((group, message))

    monkeypatch.setattr(live, "get_channel_layer", lambda: Layer())
    cache.set(f"experiment-publish:{experiment.pk}", 1)
    live.experiment_send(experiment.pk)
    assert sent[0][0] == f"experiment-{experiment.pk}" and sent[0][1]["type"] == "experiment.update"
    assert sent[0][1]["payload"]["experiment"]["key"] == "sent"
    assert cache.get(f"experiment-publish:{experiment.pk}") is None  # the next change schedules again


def test_the_room_route_reads_the_stored_room_and_its_harness_as_they_are_now(harness, workspace, foreign_workspace):
    """One uncompiled statement (serving.selectors.room_route), nothing remembered: a change is seen at once,
    and a room is only ever found in its own workspace."""
    from serving.selectors import room_route

    room_upsert(workspace=workspace, context={**ROOM, "room_id": "routed"}, harness=harness)
    route = room_route(workspace.pk, "routed")
    assert route.context == {**ROOM, "room_id": "routed"}
    assert (route.harness.pk, route.harness.name, route.harness.workspace_id) == (harness.pk, harness.name, workspace.pk)
    assert route.harness.head_id == harness.head_id
    assert route.harness.description == harness.description  # a field not read loads when asked for
    assert room_route(foreign_workspace.pk, "routed") is None
    assert room_route(workspace.pk, "elsewhere") is None

    room_upsert(workspace=workspace, context={**ROOM, "room_id": "routed", "title": "Evening"})
    assert room_route(workspace.pk, "routed").context["title"] == "Evening"
    from serving.models import Room

    Room.objects.filter(workspace=workspace, room_id="routed").update(harness=None)
    assert room_route(workspace.pk, "routed").harness is None
