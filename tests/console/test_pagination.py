"""A `page` value that names no page is reported on every paginated page, not quietly turned into page 1."""

import pytest
from django.utils import timezone

from console.pagination import page_from_query
from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from serving.models import Trace
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


@pytest.mark.parametrize(("value", "message"), [
    ("abc", "Page: “abc” is not a page number; pages run from 1 to 3."),
    ("0", "Page: “0” is not a page number; pages run from 1 to 3."),
    ("-2", "Page: “-2” is not a page number; pages run from 1 to 3."),
    ("1.5", "Page: “1.5” is not a page number; pages run from 1 to 3."),
    ("²", "Page: “²” is not a page number; pages run from 1 to 3."),
    ("4", "Page: there is no page 4; pages run from 1 to 3."),
])
def test_a_page_that_does_not_exist_is_named_and_shows_nothing(value, message):
    paged = page_from_query({"page": value}, list(range(120)))
    assert paged.error == message
    assert list(paged.page) == []


def test_blank_and_real_pages_are_pages():
    assert list(page_from_query({}, list(range(120))).page)[:1] == [0]
    assert list(page_from_query({"page": " "}, list(range(120))).page)[:1] == [0]
    third = page_from_query({"page": "3"}, list(range(120)))
    assert third.error is None and list(third.page) == list(range(100, 120))
    assert page_from_query({"page": "2"}, []).error == "Page: there is no page 2; there is only page 1."


@pytest.fixture
def operator(client, members):
    client.force_login(members["operator"])
    return client


@pytest.fixture
def run(workspace, harness):
    eval_set = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="test", case_count=60)
    run = EvalRun.objects.create(workspace=workspace, set_version=version, harness=harness,
                                 harness_version=harness.head, backend="scripted", total=60, status="done")
    for i in range(60):
        case = EvalCase.objects.create(set_version=version, case_id=f"c{i:02d}", category="price",
                                       data={"case_id": f"c{i:02d}", "category": "price", "message": f"m{i}"})
        EvalResult.objects.create(run=run, case=case, category="price", accuracy=1, effectiveness=1, reasons=[],
                                  judge_version="j1", outcome="replied", latency_ms=1, reply=f"r{i}", trace={})
    return run


@pytest.fixture
def traces(workspace, harness):
    Trace.objects.bulk_create([
        Trace(workspace=workspace, trace_id=f"t{i:03d}", source="api", room_id="demo-room", viewer_id="v",
              harness=harness, harness_version=harness.head, arm="label:production", backend="scripted",
              outcome="replied", message=f"m{i}", reply="r", latency_ms=10, hooks_fired=[], data={},
              created_at=timezone.now()) for i in range(55)])


@pytest.fixture
def audit(workspace):
    AuditEvent.objects.bulk_create([
        AuditEvent(workspace=workspace, actor_label="test", actor_kind="system", action="label.move",
                   target_type="harness", target_label=f"t{i}") for i in range(55)])


def paginated_urls(run):
    return {
        "traces": "/w/acme/traces/",
        "audit": "/w/acme/audit/",
        "set": "/w/acme/eval/sets/qa/v/1/",
        "run": f"/w/acme/eval/runs/{run.pk}/",
    }


@pytest.mark.parametrize("page", ["traces", "audit", "set", "run"])
@pytest.mark.parametrize(("value", "message"), [
    ("abc", "Page: “abc” is not a page number; pages run from 1 to 2."),
    ("0", "Page: “0” is not a page number; pages run from 1 to 2."),
    ("-1", "Page: “-1” is not a page number; pages run from 1 to 2."),
    ("9", "Page: there is no page 9; pages run from 1 to 2."),
])
def test_every_paginated_page_reports_a_bad_page(operator, run, traces, audit, page, value, message):
    url = paginated_urls(run)[page]
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = operator.get(url, {"page": value}, **headers)
        html = response.content.decode()
        assert response.status_code == 422, (page, value)
        assert message in html and 'id="page-error"' in html
        assert "page=1" in html  # a way back to a page that exists
    good = operator.get(url, {"page": "2"})
    assert good.status_code == 200 and 'id="page-error"' not in good.content.decode()


def test_the_run_page_links_its_pages(operator, run):
    first = operator.get(f"/w/acme/eval/runs/{run.pk}/").content.decode()
    assert "60 case(s) · page 1 of 2" in first and "?page=2" in first
    second = operator.get(f"/w/acme/eval/runs/{run.pk}/", {"page": "2"}).content.decode()
    assert "c59" in second and "c00<" not in second
