"""Live experiments end to end on the database: assignment through the reply API, idempotent events,
incremental rollups, the snapshot's statistics and the auto-stop guardrail."""

import json
import random
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from harness import services as harness_services
from serving.experiments.assignment import assign
from serving.experiments.lifecycle import experiment_create, experiment_start, experiment_stop
from serving.experiments.selectors import experiment_snapshot
from serving.models import Event, Experiment, Exposure, Rollup, Trace
from serving.services import api_key_create, room_upsert
from serving.tasks import check_guardrails
from tests.serving.test_reply_api import ROOM
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


@pytest.fixture
def setup(client, workspace, harness, settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Happy to help!"]
    settings.LIVE_JUDGE_RATE = 0.0
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read", "ingest"])[1]
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="skills-vs-react", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=SYSTEM, experiment=experiment)

    def post(path, body):
        return client.post(path, json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    return experiment, post


def reply(post, viewer):
    return post("/api/v1/rooms/demo-room/reply", {"message": "hi!", "viewer_id": viewer}).json()


def test_assignment_is_deterministic_sticky_and_growthbook_compatible(setup):
    experiment, post = setup
    arms = {}
    for i in range(60):
        body = reply(post, f"viewer-{i}")
        arms[f"viewer-{i}"] = body["arm"]
        expected = ["control", "harness"][assign("skills-vs-react", f"viewer-{i}", [0.5, 0.5])]
        assert body["arm"] == f"exp:skills-vs-react:{expected}"
    assert set(arms.values()) == {"exp:skills-vs-react:control", "exp:skills-vs-react:harness"}
    assert reply(post, "viewer-3")["arm"] == arms["viewer-3"]  # sticky
    assert Exposure.objects.filter(experiment=experiment).count() == 60  # one exposure per viewer
    control_trace = Trace.objects.filter(arm="exp:skills-vs-react:control").first()
    assert control_trace.data["skills_loaded"] == [] and control_trace.harness_version.number == 1
    assert sum(r.users for r in Rollup.objects.filter(experiment=experiment)) == 60


def test_events_are_idempotent_and_rollups_incremental(setup):
    experiment, post = setup
    viewers = [f"v{i}" for i in range(40)]
    for viewer in viewers:
        reply(post, viewer)
    rng = random.Random(1)
    views, batch = {}, []
    for viewer in viewers:
        k = rng.randint(0, 4)
        views[viewer] = k
        for _ in range(k):
            event = {"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": viewer,
                     "room_id": "demo-room", "item_id": "L001", "ts": datetime.now(UTC).isoformat()}
            batch.append(event)
            if rng.random() < 0.1:
                batch.append(dict(event))  # a duplicate inside the batch
    batch += [{"event_id": "bad", "type": "nope"}, {"type": "item_page_view"}]
    first = post("/api/v1/events", {"events": batch}).json()
    unique = sum(views.values())
    assert first["accepted"] == unique and [e["index"] for e in first["errors"]] == [len(batch) - 2, len(batch) - 1]
    again = post("/api/v1/events", {"events": batch}).json()  # the platform retried the whole batch
    assert again["accepted"] == 0 and again["duplicates"] == unique + (len(batch) - 2 - unique)
    assert Event.objects.filter(type="item_page_view").count() == unique
    rollups = Rollup.objects.filter(experiment=experiment)
    assert sum(r.sum_y for r in rollups) == unique
    assert sum(r.sum_y2 for r in rollups) == sum(k * k for k in views.values())
    snapshot = experiment_snapshot(experiment)
    control, treatment = snapshot["metrics"]
    assert control["users"] + treatment["users"] == 40 and control["views"] + treatment["views"] == unique
    assert snapshot["srm"]["observed"] == [control["users"], treatment["users"]]
    assert snapshot["decision"]["status"] in ("keep running", "ship", "roll back") and snapshot["decision"]["rule"]


def test_ingest_needs_the_ingest_scope_and_bounds_batches(client, workspace, setup):
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="reader", scopes=["read"])[1]
    denied = client.post("/api/v1/events", json.dumps({"events": []}), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {token}")
    assert denied.status_code == 403
    _, post = setup
    too_many = post("/api/v1/events", {"events": [{}] * 1001})
    assert too_many.status_code == 422


def test_an_ingest_key_is_remembered_between_batches_and_refused_by_the_first_batch_after_its_revocation(
        client, workspace, setup):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from serving.models import ApiKey
    from serving.services import api_key_revoke

    key, token = api_key_create(actor=SYSTEM, workspace=workspace, name="ingester", scopes=["ingest"])

    def batch():
        event = {"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": "v1", "room_id": "demo-room",
                 "item_id": "L001", "ts": datetime.now(UTC).isoformat()}
        return client.post("/api/v1/events", json.dumps({"events": [event]}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    assert batch().status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert batch().status_code == 200
    selects = [query["sql"] for query in queries.captured_queries if query["sql"].startswith("SELECT")]
    assert selects == []  # the key and the workspace's running experiments are remembered
    api_key_revoke(actor=SYSTEM, key=ApiKey.objects.get(pk=key.pk))
    assert batch().status_code == 401



def test_a_batch_after_an_experiment_stops_or_starts_sees_the_change(workspace, harness, setup, monkeypatch):
    """The running experiments a batch remembers are read again once one stops or starts (the services replace
    their token), and once kept RUNNING_KEPT_S (a change made around the services, which replaces nothing)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from serving.experiments import ingest

    experiment, post = setup
    reply(post, "s1")

    def batch(ts=None):
        with CaptureQueriesContext(connection) as queries:
            body = post("/api/v1/events", {"events": _views(["s1"], ts=ts)}).json()
        return body, sum('FROM "serving_experiment"' in query["sql"] for query in queries.captured_queries)

    batch()
    assert batch()[1] == 0 and _rollup_sums(experiment) == (2, 4)  # remembered, and folded into
    experiment_stop(actor=SYSTEM, experiment=experiment, reason="done")
    body, reads = batch()
    assert (reads, body["accepted"]) == (1, 1) and _rollup_sums(experiment) == (2, 4)  # stopped: no fold
    second = experiment_create(actor=SYSTEM, workspace=workspace, key="second", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=SYSTEM, experiment=second)
    early = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()  # before the second one started
    body, reads = batch(early)
    assert reads == 1 and "before experiment second started" in body["errors"][0]["message"]
    Experiment.objects.filter(pk=second.pk).update(status=Experiment.Status.STOPPED)  # around the services
    body, reads = batch(early)
    assert reads == 0 and body["accepted"] == 0  # the kept list, for up to RUNNING_KEPT_S
    monkeypatch.setattr(ingest, "RUNNING_KEPT_S", 0.0)
    body, reads = batch(early)
    assert (reads, body["accepted"], body["errors"]) == (1, 1, [])

def test_latency_guardrail_stops_and_routes_everyone_to_control(setup):
    experiment, post = setup
    for i in range(6):
        reply(post, f"g{i}")
    Experiment.objects.filter(pk=experiment.pk).update(guardrails={"latency_p95_ms": 0.0001, "min_samples": 1})
    reason = check_guardrails(experiment.pk)
    experiment.refresh_from_db()
    assert "latency P95" in reason and experiment.status == "stopped" and experiment.control_only
    assert AuditEvent.objects.filter(action="experiment.stop", actor_label="system:guardrail").exists()
    assert {reply(post, f"g{i}")["arm"] for i in range(6)} == {"exp:skills-vs-react:control"}
    decision = experiment_snapshot(experiment)["decision"]
    assert decision["status"] == "rolled back" and "everyone now gets the control arm" in decision["rule"]


def test_dashboard_page_renders_the_snapshot(client, members, setup):
    experiment, post = setup
    reply(post, "page-viewer")
    client.force_login(members["viewer"])
    html = client.get(f"/w/acme/experiments/{experiment.key}/").content.decode()
    assert 'id="snapshot"' in html and "skills-vs-react" in html and "/ws/experiments/" in html


def test_bad_or_out_of_window_timestamps_are_per_item_errors(setup):
    experiment, post = setup
    reply(post, "w1")
    now = datetime.now(UTC)
    good = {"type": "item_page_view", "viewer_id": "w1", "room_id": "demo-room", "item_id": "L001"}
    batch = [
        {**good, "event_id": "ok", "ts": now.isoformat()},
        {**good, "event_id": "month-13", "ts": "2026-13-45T00:00:00Z"},  # well-formed but impossible
        {**good, "event_id": "huge-epoch", "ts": 1e20},
        {**good, "event_id": "not-a-time", "ts": "yesterday"},
        {**good, "event_id": "bool", "ts": True},
        {**good, "event_id": "future", "ts": (now + timedelta(hours=2)).isoformat()},
        {**good, "event_id": "ancient", "ts": (now - timedelta(days=30)).isoformat()},
        {**good, "event_id": "before-start", "ts": (experiment.started_at - timedelta(minutes=10)).isoformat()},
    ]
    response = post("/api/v1/events", {"events": batch})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["accepted"] == 1
    errors = {batch[e["index"]]["event_id"]: e["message"] for e in body["errors"]}
    assert set(errors) == {"month-13", "huge-epoch", "not-a-time", "bool", "future", "ancient", "before-start"}
    assert "in the future" in errors["future"] and "older than" in errors["ancient"]
    assert "before experiment skills-vs-react started" in errors["before-start"]
    assert list(Event.objects.values_list("event_id", flat=True)) == ["ok"]
    assert sum(r.sum_y for r in Rollup.objects.filter(experiment=experiment)) == 1


def _views(viewers, k=1, ts=None):
    ts = ts or datetime.now(UTC).isoformat()
    return [{"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": v, "room_id": "demo-room",
             "item_id": "L001", "ts": ts} for v in viewers for _ in range(k)]


def _rollup_sums(experiment):
    rollups = Rollup.objects.filter(experiment=experiment)
    return sum(r.sum_y for r in rollups), sum(r.sum_y2 for r in rollups)


def test_each_way_of_writing_one_instant_is_stored_and_bucketed_as_that_instant(setup):
    """RFC 3339 times go to PostgreSQL as written; other ISO-8601 forms (basic, week dates, offsets without a
    colon, no offset = UTC, a space for T, what Python reads more loosely) and epoch seconds are rewritten
    first. Each is the same instant, and none fails the batch."""
    experiment, post = setup
    reply(post, "i1")
    at = (datetime.now(UTC) + timedelta(seconds=1)).replace(microsecond=250000)
    india = at.astimezone(timezone(timedelta(hours=5, minutes=30)))
    year, week, day = at.isocalendar()
    forms = [at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), india.isoformat(), at.strftime("%Y%m%dT%H%M%S.%f+0000"),
             india.strftime("%Y-%m-%dT%H:%M:%S.%f+0530"), f"{year}-W{week:02d}-{day}T{at:%H:%M:%S.%f}+00:00",
             at.strftime("%Y-%m-%d %H:%M:%S.%f"), at.timestamp(),
             # Python reads an offset's minutes past 59 on (+05:99 = +06:39); PostgreSQL would refuse them
             at.astimezone(timezone(timedelta(hours=6, minutes=39))).strftime("%Y-%m-%dT%H:%M:%S.%f+05:99")]
    events = _views(["i1"] * len(forms))
    for event, form in zip(events, forms, strict=True):
        event["ts"] = form
    body = post("/api/v1/events", {"events": events}).json()
    assert (body["accepted"], body["errors"]) == (len(forms), [])
    assert set(Event.objects.filter(workspace=experiment.workspace).values_list("ts", flat=True)) == {at}
    assert Exposure.objects.get(experiment=experiment, viewer_id="i1").ipv == len(forms)
    assert _rollup_sums(experiment) == (len(forms), len(forms) ** 2)


def test_a_batch_overlapping_a_stored_one_counts_only_its_new_views(setup):
    """The first batch goes in by COPY; the second repeats half of it, so its COPY fails on the first stored
    id, its transaction is undone and it goes again on the row-by-row path: only the new half is stored and
    folded, once."""
    experiment, post = setup
    viewers = [f"o{i}" for i in range(10)]
    for viewer in viewers:
        reply(post, viewer)
    first = _views(viewers, k=2)
    assert post("/api/v1/events", {"events": first}).json()["accepted"] == 20
    assert _rollup_sums(experiment) == (20, 10 * 2 ** 2)
    second = first[::2] + _views(viewers[:4])  # 10 stored again, 4 new (one more view for o0..o3)
    body = post("/api/v1/events", {"events": second}).json()
    assert (body["accepted"], body["duplicates"], body["errors"]) == (4, 10, [])
    assert Event.objects.filter(workspace=experiment.workspace).count() == 24
    ipv = dict(Exposure.objects.filter(experiment=experiment).values_list("viewer_id", "ipv"))
    assert ipv == {v: 3 if v in viewers[:4] else 2 for v in viewers}
    assert _rollup_sums(experiment) == (24, 4 * 3 ** 2 + 6 * 2 ** 2)


def test_text_the_database_cannot_store_is_that_items_error(setup):
    """Through the API neither arrives as such (its parser turns NUL into U+FFFD, and a lone surrogate was
    stored as valid text when tried); a caller in process can still pass them, and gets that item's error."""
    from serving.experiments.ingest import events_ingest
    from workspaces.access import Actor

    experiment, post = setup
    reply(post, "t1")
    good, bad_nul, bad_surrogate = _views(["t1"]) + _views(["t1\u0000x"]) + _views(["t1"])
    bad_surrogate["event_id"] = "id-\ud800"
    result = events_ingest(actor=Actor.system("platform"), workspace=experiment.workspace,
                           events=[good, bad_nul, bad_surrogate])
    assert result.accepted == 1
    assert result.errors == [{"index": 1, "message": "viewer_id contains a NUL character"},
                             {"index": 2, "message": "event_id is not valid Unicode text"}]
    assert list(Event.objects.values_list("event_id", flat=True)) == [good["event_id"]]


def test_text_with_copy_separators_and_backslashes_is_stored_as_sent(setup):
    """The batch goes in as one COPY text payload: tabs, newlines, carriage returns and backslashes in the
    text are escaped, so each value is stored exactly and the views still reach their viewer."""
    experiment, post = setup
    viewer = "tab\tnew\nline\\N back\\slash\rcr"
    reply(post, viewer)
    events = _views([viewer, viewer])
    events[0]["event_id"], events[0]["item_id"] = "id\t1\\.", "L\n001"
    events[1]["room_id"] = "demo-room\\"
    body = post("/api/v1/events", {"events": events}).json()
    assert (body["accepted"], body["errors"]) == (2, [])
    stored = {e.event_id: e for e in Event.objects.filter(workspace=experiment.workspace)}
    assert stored.keys() == {events[0]["event_id"], events[1]["event_id"]}
    assert stored["id\t1\\."].item_id == "L\n001" and stored["id\t1\\."].viewer_id == viewer
    assert stored[events[1]["event_id"]].room_id == "demo-room\\"
    assert Exposure.objects.get(experiment=experiment, viewer_id=viewer).ipv == 2


def test_a_failure_while_folding_writes_nothing(setup, monkeypatch):
    from serving.experiments import ingest, rollups
    from workspaces.access import Actor

    experiment, post = setup
    reply(post, "f1")

    def broken(*args, **kwargs):
        raise RuntimeError("fold failed")

    monkeypatch.setattr(rollups, "_fold_postgresql", broken)
    monkeypatch.setattr(rollups, "_fold_python", broken)
    with pytest.raises(RuntimeError):
        ingest.events_ingest(actor=Actor.system("platform"), workspace=experiment.workspace,
                               events=_views(["f1"], k=3))
    assert not Event.objects.exists()
    assert _rollup_sums(experiment) == (0, 0)
    assert Exposure.objects.get(experiment=experiment, viewer_id="f1").ipv == 0


def test_views_from_before_a_viewers_exposure_do_not_count_and_both_folds_agree(setup):
    """Views count from a minute before the viewer's exposure on. The PostgreSQL fold (one statement) and the
    Python fold used on SQLite give the same exposures and rollups."""
    from django.utils import timezone

    from serving.experiments import rollups
    from serving.experiments.event_checks import validated_event

    experiment, post = setup
    viewers = [f"e{i}" for i in range(6)]
    for viewer in viewers:
        reply(post, viewer)
    now = datetime.now(UTC)
    Experiment.objects.filter(pk=experiment.pk).update(started_at=now - timedelta(hours=1))
    Exposure.objects.filter(experiment=experiment, viewer_id="e0").update(first_seen_at=now - timedelta(minutes=5))
    Exposure.objects.filter(experiment=experiment, viewer_id="e1").update(first_seen_at=now - timedelta(minutes=50))
    events = (_views(viewers, k=2) + _views(["e0", "e1"], ts=(now - timedelta(minutes=30)).isoformat())
              + _views(["e0"], ts=(now - timedelta(minutes=5, seconds=30)).isoformat()))  # within the minute
    body = post("/api/v1/events", {"events": events}).json()
    assert body["accepted"] == len(events) and not body["errors"]
    ipv = dict(Exposure.objects.filter(experiment=experiment).values_list("viewer_id", "ipv"))
    assert ipv == {"e0": 3, "e1": 3, **{v: 2 for v in viewers[2:]}}
    expected = _rollup_sums(experiment)
    assert expected == (sum(ipv.values()), sum(k * k for k in ipv.values()))
    per_rollup = sorted(Rollup.objects.filter(experiment=experiment).values_list("arm_id", "bucket", "sum_y", "sum_y2"))

    Exposure.objects.filter(experiment=experiment).update(ipv=0)
    Rollup.objects.filter(experiment=experiment).update(sum_y=0, sum_y2=0)
    experiment.refresh_from_db()
    valid = [validated_event(e, timezone.now())[0] for e in events]
    rollups._fold_python(experiment, valid)
    assert dict(Exposure.objects.filter(experiment=experiment).values_list("viewer_id", "ipv")) == ipv
    assert sorted(Rollup.objects.filter(experiment=experiment)
                  .values_list("arm_id", "bucket", "sum_y", "sum_y2")) == per_rollup


@pytest.mark.django_db(False)
def test_the_earliest_counted_time_of_a_room_agrees_with_the_window_check():
    """A batch compares each event with its room's earliest counted time, and asks `outside_window` (for the
    message) only below it: the two must agree for any running experiments, rooms and times."""
    from serving.experiments.event_checks import earliest_counted, outside_window

    rng = random.Random(7)
    start = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)
    rooms = ["r1", "r2", "r3"]
    for _ in range(300):
        running = [Experiment(pk=i, key=f"e{i}", rooms=rng.sample(rooms, rng.randint(0, 2)),
                              started_at=None if rng.random() < 0.2 else start + timedelta(minutes=rng.randint(0, 30)))
                   for i in range(rng.randint(1, 3))]
        for room in rooms:
            for minute in range(-2, 33):
                event = {"room_id": room, "ts": start + timedelta(minutes=minute, seconds=rng.choice([0, 30]))}
                earliest = earliest_counted(room, running)
                assert (earliest is not None and event["ts"] < earliest) == bool(outside_window(event, running))
