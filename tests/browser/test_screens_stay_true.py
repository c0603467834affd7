"""Screens that stay true, in a real browser: a label move updates every panel that shows labels without a
reload; trace filters live in the URL (reload, back button, a shared link); and no element on the main pages
reads like a Python value printed as itself."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.urls import reverse
from playwright.sync_api import expect

from evaluation.models import Annotation, EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start
from serving.models import Trace
from serving.services import room_reply, room_upsert
from tests.conftest import PASSWORD
from tests.serving.test_reply_api import LOAD_AND_LOOK, ROOM
from workspaces.access import Actor

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SYSTEM = Actor.system("test")


def log_in(page, base, username):
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/w/"))


def reply(**kwargs) -> dict:
    """room_reply in a thread of its own: Playwright keeps an event loop running in this one."""
    def run():
        try:
            return room_reply(actor=SYSTEM, room_id="demo-room", viewer_id="v1", **kwargs).result.trace
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def second_version(harness):
    files = dict(harness.head.files)
    path = next(p for p in sorted(files) if p.endswith("SKILL.md"))
    return harness_services.version_commit(actor=SYSTEM, harness=harness, files={**files, path: files[path] + "- x\n"},
                                           base_version=harness.head, message="second").version


def test_a_label_move_updates_every_panel_without_a_reload(live_server, page, members, harness):
    v1 = harness.head
    harness_services.label_move(actor=SYSTEM, harness=harness, name="staging", version=v1, reason="first")
    second_version(harness)
    log_in(page, live_server.url, "operator")
    page.goto(live_server.url + reverse("harness_detail", kwargs={"ws": "acme", "name": "avatar"}))
    page.evaluate("window.__sameDocument = true")
    history = page.locator("#history")
    expect(history.locator("tr", has_text="v1").first).to_contain_text("staging")

    page.fill("#promote input[name=label]", "staging")
    page.select_option("#promote select[name=version]", "2")
    page.fill("#promote input[name=reason]", "ship the extra rule")
    page.click("#promote button[type=submit]")

    card = page.locator(".label[data-label=staging]")
    expect(card).to_contain_text("v2")
    expect(card.locator("button")).to_contain_text("Roll back to v1")  # the rollback form follows the move
    card.locator("summary").click()
    expect(card).to_contain_text("ship the extra rule")  # the label history
    expect(card.locator("summary")).to_contain_text("History (2)")
    # The version history (outside the labels panel) moved the tag too: swapped out of band.
    expect(history.locator("tr").nth(1)).to_contain_text("staging")  # newest first: v2
    expect(history.locator("tr").nth(2)).not_to_contain_text("staging")
    expect(page.locator("#labels-panel .messages")).to_contain_text("staging → v2")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened

    # Roll back: the same panels follow.
    card.locator("input[name=reason]").fill("oops")
    card.locator("button").click()
    expect(page.locator(".label[data-label=staging]")).to_contain_text("v1")
    expect(history.locator("tr").nth(2)).to_contain_text("staging")
    assert page.evaluate("window.__sameDocument") is True


def test_trace_filters_round_trip_through_the_url(live_server, page, members, workspace, harness, settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    for message in ("price of the sweater?", "follow4follow check my channel"):  # the second is refused
        reply(workspace=workspace, message=message)
    assert set(Trace.objects.values_list("outcome", flat=True)) == {"replied", "silent"}

    log_in(page, live_server.url, "viewer")
    traces = live_server.url + reverse("trace_list", kwargs={"ws": "acme"})
    page.goto(traces)
    rows = page.locator("#trace-rows")
    expect(rows).to_contain_text("price of the sweater?")
    page.select_option("select[name=outcome]", "silent")
    expect(page).to_have_url(re.compile(r"outcome=silent"))
    expect(rows).not_to_contain_text("price of the sweater?")
    expect(rows).to_contain_text("follow4follow")
    page.fill("input[name=version]", "production")
    expect(page).to_have_url(re.compile(r"version=production.*outcome=silent|outcome=silent.*version=production"))
    expect(rows).to_contain_text("follow4follow")

    filtered = page.url
    page.reload()  # the URL alone rebuilds the page: the form and the rows
    expect(page.locator("select[name=outcome]")).to_have_value("silent")
    expect(page.locator("input[name=version]")).to_have_value("production")
    expect(rows).not_to_contain_text("price of the sweater?")

    page.go_back()  # one step back: the outcome filter alone, in the form as in the address
    expect(page).not_to_have_url(re.compile(r"version=production"))
    expect(page.locator("input[name=version]")).to_have_value("")
    expect(page.locator("select[name=outcome]")).to_have_value("silent")
    outcome_only = page.url
    page.goto(traces)
    expect(rows).to_contain_text("price of the sweater?")
    page.go_back()  # from a full page load back to the filtered list
    expect(page).to_have_url(outcome_only)
    expect(page.locator("select[name=outcome]")).to_have_value("silent")
    expect(rows).not_to_contain_text("price of the sweater?")

    other = page.context.new_page()  # a shared link
    other.goto(filtered)
    expect(other.locator("select[name=outcome]")).to_have_value("silent")
    expect(other.locator("#trace-rows")).to_contain_text("follow4follow")
    expect(other.locator("#trace-rows")).not_to_contain_text("price of the sweater?")

    page.fill("input[name=min_latency_ms]", "abc")  # a bad value is reported, not dropped
    expect(page.locator("#filter-errors")).to_contain_text("“abc” is not a number of milliseconds")


# Text of every element except scripts and styles (a closed <details> counts: its text is on the page).
VISIBLE_TEXT = """() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {acceptNode: (node) =>
    node.parentElement.closest("script, style, template") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const out = [];
  while (walker.nextNode()) out.push(walker.currentNode.textContent);
  return out.join("\\n");
}"""
PYTHON_REPR = re.compile(r"\{'|\[\('|Traceback|<object |ZERO_NEGATIVE_VARIANCE|BASELINE_VARIATION_ZERO|invalid literal")


def test_no_element_on_the_main_pages_looks_like_a_python_repr(live_server, page, members, workspace, harness,
                                                                settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    second_version(harness)
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    trace_id = reply(workspace=workspace, message="price?")["trace_id"]
    eval_set = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    set_version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="test", case_count=1)
    case = EvalCase.objects.create(set_version=set_version, case_id="c1", category="price", data={
        "case_id": "c1", "category": "price", "message": "how much?", "viewer_id": "v",
        "room": {"products": [{"link_id": "L1", "name": "Sweater", "price": 10}]},
        "dialogue": [{"role": "viewer", "text": "hello"}],
        "expected": {"facts": ["10"], "tools": [{"name": "get_product_info_by_link_id", "arguments": {"link_id": "L1"}}]}})
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend="scripted", total=1, status="done",
                                 summary={"overall": {"n": 1, "accuracy": 1.0}})
    result = EvalResult.objects.create(run=run, case=case, category="price", accuracy=1, effectiveness=1,
                                       reasons=["stated the price"], judge_version="j1", outcome="replied",
                                       latency_ms=1, reply="It is 10.", trace={"steps": []})
    Annotation.objects.create(result=result, annotator=members["operator"], accuracy=1, effectiveness=1)
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="ab", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "treatment", "weight": 1, "kind": "label", "label": "production"}], guardrails={"min_samples": 5})
    experiment_start(actor=SYSTEM, experiment=experiment)

    ws = {"ws": "acme"}
    urls = [
        reverse("harness_list", kwargs=ws), reverse("harness_detail", kwargs={**ws, "name": "avatar"}),
        reverse("version_detail", kwargs={**ws, "name": "avatar", "number": 1}),
        reverse("version_diff", kwargs={**ws, "name": "avatar"}),
        reverse("version_augment", kwargs={**ws, "name": "avatar", "number": 1}),
        reverse("harness_edit", kwargs={**ws, "name": "avatar"}),
        reverse("playground", kwargs=ws), reverse("trace_list", kwargs=ws),
        reverse("trace_detail", kwargs={**ws, "trace_id": trace_id}),
        reverse("evaluation_home", kwargs=ws), reverse("eval_run_detail", kwargs={**ws, "run_id": run.pk}),
        reverse("eval_result_detail", kwargs={**ws, "run_id": run.pk, "result_id": result.pk}),
        reverse("eval_set_detail", kwargs={**ws, "name": "qa", "number": 1}),
        reverse("annotate", kwargs=ws), reverse("agreement", kwargs=ws), reverse("eval_compare", kwargs=ws),
        reverse("experiment_list", kwargs=ws), reverse("experiment_detail", kwargs={**ws, "key": "ab"}),
        reverse("training_home", kwargs=ws), reverse("member_list", kwargs=ws), reverse("key_list", kwargs=ws),
        reverse("audit_log", kwargs=ws),
    ]
    log_in(page, live_server.url, "admin")
    for url in urls:
        response = page.goto(live_server.url + url)
        assert response.status == 200, url
        text = page.evaluate(VISIBLE_TEXT)
        found = PYTHON_REPR.search(text)
        assert found is None, f"{url}: …{text[max(0, found.start() - 100):found.end() + 100]}…"
