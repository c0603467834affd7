"""What a new operator's walk through the seeded console turned up: panels that went stale after a
playground turn, and a favicon request that logged a 404 on every page."""

import pytest

from tests.serving.test_reply_api import LOAD_AND_LOOK

pytestmark = pytest.mark.django_db


def test_a_playground_turn_also_refreshes_the_measured_speed_and_the_conversation(operator, settings):
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    before = operator.get("/w/acme/playground/").content.decode()
    assert "no turns yet" in before.split('id="models-now"')[1].split("</table>")[0]
    turn = operator.post("/w/acme/playground/", {"harness": "avatar", "version": "label:production",
                                                 "backend": "scripted", "room": "demo-room", "viewer_id": "v1",
                                                 "message": "price of the sweater?"},
                         HTTP_HX_REQUEST="true").content.decode()
    models = turn.split('<div id="models-now" hx-swap-oob="true">')[1].split("</table>")[0]
    scripted = models.split('data-backend="scripted"')[1].split("</tr>")[0]
    assert "(last 1 turn)" in scripted and "no turns yet" not in scripted
    conversation = turn.split('<div id="conversation" hx-swap-oob="true">')[1]
    assert 'id="dialogue"' in conversation and "price of the sweater?" in conversation
    # A whole-page answer (no htmx) has each panel once.
    page = operator.post("/w/acme/playground/", {"harness": "avatar", "version": "label:production",
                                                 "backend": "scripted", "room": "demo-room", "viewer_id": "v1",
                                                 "message": "and in M?"}).content.decode()
    assert page.count('id="models-now"') == 1 and page.count('id="conversation"') == 1


def test_pages_declare_their_icon_so_the_browser_asks_for_no_missing_file(client, members):
    client.force_login(members["viewer"])
    html = client.get("/w/acme/").content.decode()
    assert '<link rel="icon" href="data:,">' in html


def test_the_prompt_preview_link_opens_a_page_and_htmx_gets_the_panel(operator):
    url = "/w/acme/harnesses/avatar/edit/preview/"
    page = operator.get(url)
    html = page.content.decode()
    assert page.status_code == 200 and "<html" in html and "Back to the editor" in html
    assert '<pre id="preview">' in html
    fragment = operator.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and "<pre>" in fragment
    assert "HX-Request" in page["Vary"]

