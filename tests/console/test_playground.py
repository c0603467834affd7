"""Playground turns (scripted model) and the trace browser's filters."""

import pytest

from harness import services as harness_services
from serving.models import Trace
from serving.services import room_upsert
from tests.serving.test_reply_api import LOAD_AND_LOOK, ROOM
from workspaces.access import Actor

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(client, members, workspace, harness, settings):
    settings.MODEL_BACKEND = "scripted"
    harness_services.label_move(actor=Actor.system("t"), harness=harness, name="production",
                                version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    client.force_login(members["operator"])
    return client


def send(client, message, version="label:production"):
    return client.post("/w/acme/playground/", {"harness": "avatar", "version": version, "backend": "scripted",
                                               "room": "demo-room", "viewer_id": "v1", "message": message},
                       HTTP_HX_REQUEST="true")


def test_playground_turn_shows_reply_and_trace(setup, settings):
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    response = send(setup, "price of the sweater?")
    html = response.content.decode()
    assert response.status_code == 200 and "It is $71.2 now." in html
    assert "get_product_info_by_link_id" in html and "product-qa" in html and "<html" not in html
    trace = Trace.objects.get()
    assert trace.source == "playground" and trace.harness_version.number == 1
    # The conversation is kept for the next turn's recent dialogue.
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "Yes, size M is in stock."]
    send(setup, "and in M?")
    second = Trace.objects.order_by("-created_at").first()
    user_message = second.data["steps"][0] if second.data["steps"] else None
    assert second.reply == "Yes, size M is in stock." and user_message is not None


def test_playground_runs_the_draft(setup, settings, members, harness):
    setup.get("/w/acme/harnesses/avatar/edit/")  # opens a draft
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "Draft says hi."]
    response = send(setup, "hello", version="draft")
    assert b"Draft says hi." in response.content
    assert Trace.objects.get().harness_version is None and Trace.objects.get().arm == "draft"


def test_playground_reports_bad_input(setup):
    response = send(setup, "")
    assert response.status_code == 422 and b"Type a viewer message" in response.content


def test_scripted_backend_is_offered_only_with_a_script(setup, settings):
    settings.SCRIPTED_STEPS = []
    page = setup.get("/w/acme/playground/").content.decode()
    assert 'value="scripted"' not in page
    refused = send(setup, "hello?")
    assert refused.status_code == 422 and b"scripted backend is not available" in refused.content
    settings.SCRIPTED_STEPS = ["Hi!"]
    assert 'value="scripted"' in setup.get("/w/acme/playground/").content.decode()


def test_trace_filters(setup, settings):
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    send(setup, "price?")
    settings.SCRIPTED_STEPS = ["never used: the input hook refuses first"]
    send(setup, "follow4follow check my channel")  # silent refusal by an input hook
    listing = setup.get("/w/acme/traces/", {"outcome": "silent"}, HTTP_HX_REQUEST="true").content.decode()
    assert "follow4follow" in listing and "price?" not in listing
    by_hook = setup.get("/w/acme/traces/", {"hook": "refuse-irrelevant-input"}, HTTP_HX_REQUEST="true").content.decode()
    assert "follow4follow" in by_hook and "price?" not in by_hook
    by_version = setup.get("/w/acme/traces/", {"version": "avatar@v1"}).content.decode()
    assert "follow4follow" in by_version and "price?" in by_version
    assert "price?" not in setup.get("/w/acme/traces/", {"version": "avatar@v9"}).content.decode()
    trace = Trace.objects.get(outcome="replied")
    page = setup.get(f"/w/acme/traces/{trace.trace_id}/").content.decode()
    assert "get_product_info_by_link_id" in page and "71.2" in page
