"""Trace storage: one bad row never drops the others, and its id still resolves (as a stub); what a turn sent
to the model is stored once per workspace and put back on the trace page."""

import time
import uuid

import pytest
from django.db import transaction

from serving.models import PromptPart, Trace
from serving.selectors import trace_sent_request
from serving.traces import joined_request, split_request, trace_row, traces_store

pytestmark = pytest.mark.django_db


def trace_data(message="hi", **extra):
    return {"trace_id": uuid.uuid4().hex, "input": {"message": message, "viewer_id": "v1", "room_id": "r1"},
            "arm": "label:production", "backend": "scripted", "outcome": "replied", "silent": False, "reply": "ok",
            "duration_ms": 12.5, "model_calls": 1, "tokens_in": 10, "tokens_out": 2, "hooks_fired": [],
            "started_at": time.time(), "steps": [], **extra}


def row(workspace, data):
    return trace_row(workspace_id=workspace.pk, data=data, source=Trace.Source.API, harness_id=None, version_id=None)


def test_a_bad_row_does_not_drop_the_batch_and_still_resolves(workspace):
    good = [row(workspace, trace_data(f"message {i}")) for i in range(5)]
    bad = row(workspace, trace_data())
    bad.message = "raw \x00 NUL"  # bypasses trace_row's cleaning: PostgreSQL refuses this text
    bad.outcome = "x" * 40  # and a value too long for its column
    stubs = traces_store([*good[:2], bad, *good[2:]])
    assert stubs == 1
    stored = {t.trace_id: t for t in Trace.objects.all()}
    assert set(stored) == {r.trace_id for r in [*good, bad]}
    assert all(stored[r.trace_id].message == r.message for r in good)
    stub = stored[bad.trace_id]
    assert stub.data["storage_error"] and stub.outcome == "x" * 16 and stub.message == ""


def test_storing_the_same_trace_twice_keeps_one_row(workspace):
    data = trace_data()
    traces_store([row(workspace, data)])
    assert traces_store([row(workspace, data), row(workspace, trace_data())]) == 0
    assert Trace.objects.filter(trace_id=data["trace_id"]).count() == 1 and Trace.objects.count() == 2


def test_nul_characters_are_cleaned_everywhere(workspace):
    data = trace_data("a\x00b", steps=[{"kind": "model", "content": "c\x00d"}])
    traces_store([row(workspace, data)])
    stored = Trace.objects.get(trace_id=data["trace_id"])
    assert stored.message == "a\ufffdb" and stored.data["steps"][0]["content"] == "c\ufffdd"


def test_the_trace_page_surfaces_hook_errors(client, members, workspace):
    error = "EvalError: no such overload"
    data = trace_data(outcome="silent", silent=True, reply="",
                      reason="input hook refuse could not be evaluated (failed closed)",
                      hook_errors=[{"hook": "refuse", "event": "input", "error": error, "failed_closed": True}],
                      steps=[{"kind": "hook", "at_ms": 0.1, "event": "input", "hook": "refuse", "fired": False,
                              "action": "block", "message": "", "error": error, "failed_closed": True}])
    traces_store([row(workspace, data)])
    client.force_login(members["viewer"])
    html = client.get(f"/w/acme/traces/{data['trace_id']}/").content.decode()
    assert "Hook <span class=\"mono\">refuse</span> (input) could not be evaluated and failed closed" in html
    assert "(could not evaluate: failed closed)" in html and error in html


@pytest.mark.django_db(transaction=True)  # autocommit, as served: the lone trace takes the uncompiled insert
def test_a_lone_trace_is_stored_as_the_orm_stores_it(workspace):
    from django.forms.models import model_to_dict

    lone = trace_data("how much is L001?", hooks_fired=["ground-numbers"], steps=[{"kind": "model", "at_ms": 1.5}])
    batched = {**lone, "trace_id": uuid.uuid4().hex}
    traces_store([row(workspace, lone)])
    with transaction.atomic():  # in a transaction the ORM's own insert runs
        traces_store([row(workspace, batched)])
    stored = {t.trace_id: model_to_dict(t, exclude=["id", "trace_id", "data"]) | {"data": t.data}
              for t in Trace.objects.all()}
    assert stored[lone["trace_id"]] == {**stored[batched["trace_id"]],
                                       "data": {**stored[batched["trace_id"]]["data"], "trace_id": lone["trace_id"]}}
    assert stored[lone["trace_id"]]["created_at"] is not None and stored[lone["trace_id"]]["data"] == lone

    assert traces_store([row(workspace, lone)]) == 0  # again: still one row
    bad = row(workspace, trace_data())
    bad.outcome = "x" * 40  # too long for its column
    assert traces_store([bad]) == 1
    assert Trace.objects.get(trace_id=bad.trace_id).data["storage_error"]
    assert Trace.objects.count() == 3


def test_a_new_trace_is_compressed_with_lz4_where_postgresql_has_it(workspace):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL column setting")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        if not cursor.fetchone()[0]:
            pytest.skip("this PostgreSQL was built without LZ4")
    data = trace_data(steps=[{"kind": "model", "text": f"step {i} " * 40} for i in range(60)])  # past TOAST's 2 KB
    traces_store([row(workspace, data)])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_column_compression(data) FROM serving_trace WHERE trace_id = %s", [data["trace_id"]])
        assert cursor.fetchone()[0] == "lz4"
    assert Trace.objects.get(trace_id=data["trace_id"]).data["steps"] == data["steps"]


SYSTEM = "You are Mia.\n\n# Catalogue\nL001 · Merino Crew-Neck Sweater · $89"
TOOLS = [{"type": "function", "function": {"name": "get_product_info_by_link_id", "description": "A product.",
                                           "parameters": {"type": "object", "properties": {"link_id": {"type": "string"}}}}}]


def sent(message="how much is L001?", system=SYSTEM, tools=TOOLS):
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": message}], "tools": tools}


def test_a_request_split_into_prompt_parts_joins_back_as_it_was():
    data = trace_data(request=sent())
    split, parts = split_request(data)
    assert split["request"]["messages"][0] == {"role": "system", "content_digest": split["request"]["messages"][0]
                                               ["content_digest"]}
    assert split["request"]["messages"][1] == {"role": "user", "content": "how much is L001?"}  # the turn's own
    assert "tools" not in split["request"] and len(parts) == 2 and SYSTEM not in str(split)
    assert joined_request(split["request"], parts) == data["request"]
    assert split_request(split) == (split, {})  # split already: nothing more to store
    assert {k: v for k, v in split.items() if k != "request"} == {k: v for k, v in data.items() if k != "request"}

    plain = trace_data()
    assert split_request(plain) == (plain, {})  # no request (a turn blocked before the model): kept as it is
    assert joined_request(data["request"], {}) == data["request"]  # stored whole, before prompt parts
    assert joined_request(split["request"], dict(list(parts.items())[:1])) is None  # a part missing
    assert joined_request(None, parts) is None
    no_tools, parts = split_request(trace_data(request=sent(tools=[])))
    assert joined_request(no_tools["request"], parts) == sent(tools=[])  # an empty tool list comes back empty
    unicode, parts = split_request(trace_data(request=sent(system="L001 · ¥89 \x00")))
    assert joined_request(unicode["request"], parts)["messages"][0]["content"] == "L001 · ¥89 \x00"


def test_a_rooms_system_message_and_tools_are_stored_once_per_workspace(workspace):
    from workspaces.models import Workspace

    first, second = trace_data(request=sent()), trace_data(request=sent("and L002?"))
    traces_store([row(workspace, first)])
    traces_store([row(workspace, second)])
    assert PromptPart.objects.filter(workspace=workspace).count() == 2  # the system message and the tools, once
    for data in (first, second):
        stored = Trace.objects.get(trace_id=data["trace_id"])
        assert SYSTEM not in str(stored.data) and trace_sent_request(stored) == data["request"]
    other = Workspace.objects.create(slug="other", name="Other")
    traces_store([row(other, trace_data(request=sent()))])
    assert PromptPart.objects.filter(workspace=other).count() == 2  # a workspace's parts are its own
    changed = trace_data(request=sent(system=SYSTEM + "\nL002 · Jeans · $40"))
    traces_store([row(workspace, changed)])
    assert PromptPart.objects.filter(workspace=workspace).count() == 3
    assert trace_sent_request(Trace.objects.get(trace_id=changed["trace_id"])) == changed["request"]


def test_the_trace_page_shows_the_prompt_from_its_parts_and_says_when_they_are_gone(client, members, workspace):
    data = trace_data(request=sent())
    traces_store([row(workspace, data)])
    client.force_login(members["viewer"])
    html = client.get(f"/w/acme/traces/{data['trace_id']}/").content.decode()
    assert "Merino Crew-Neck Sweater" in html and 'id="sent-tools"' in html and 'id="no-request"' not in html
    PromptPart.objects.filter(workspace=workspace).delete()
    response = client.get(f"/w/acme/traces/{data['trace_id']}/")
    html = response.content.decode()
    assert response.status_code == 200 and "are no longer stored" in html and 'id="sent-tools"' not in html


@pytest.mark.django_db(transaction=True)  # commits for real: what a process remembers follows them
def test_a_part_is_written_once_committed_and_again_after_its_transaction_rolled_back(workspace):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    traces_store([row(workspace, trace_data(request=sent()))])
    with CaptureQueriesContext(connection) as queries:
        later = trace_data(request=sent("and L002?"))
        traces_store([row(workspace, later)])
    assert [q["sql"].split()[2] for q in queries] == ['"serving_trace"']  # its parts remembered: the trace alone
    assert trace_sent_request(Trace.objects.get(trace_id=later["trace_id"])) == later["request"]

    changed = sent(system="You are Mia, now on sale.")
    with pytest.raises(RuntimeError), transaction.atomic():
        traces_store([row(workspace, trace_data(request=changed))])
        raise RuntimeError("the caller's unit of work fails after the trace")
    assert PromptPart.objects.filter(workspace=workspace).count() == 2  # the new system message went with it
    batch = [row(workspace, trace_data(f"m{i}", request=changed)) for i in range(3)]
    batch[1].outcome = "x" * 40  # too long: the batch is stored row by row, each row with its parts
    assert traces_store(batch) == 1
    for good in (batch[0], batch[2]):
        assert trace_sent_request(Trace.objects.get(trace_id=good.trace_id)) == changed
    assert PromptPart.objects.filter(workspace=workspace).count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_remembered_part_is_written_again_after_a_while_so_a_restore_that_lost_it_heals(workspace, monkeypatch):
    from serving import traces

    traces_store([row(workspace, trace_data(request=sent()))])
    PromptPart.objects.filter(workspace=workspace).delete()  # a backup restored from before the parts
    soon = trace_data(request=sent("and L002?"))
    traces_store([row(workspace, soon)])
    assert trace_sent_request(Trace.objects.get(trace_id=soon["trace_id"])) is None  # still remembered as stored
    monkeypatch.setattr(traces, "PARTS_RECHECK_S", 0.0)  # as if the minutes had passed
    later = trace_data(request=sent("and L003?"))
    traces_store([row(workspace, later)])
    assert trace_sent_request(Trace.objects.get(trace_id=later["trace_id"])) == later["request"]
    assert trace_sent_request(Trace.objects.get(trace_id=soon["trace_id"])) == soon["request"]  # healed, too
