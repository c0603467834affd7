"""Diagnosis of live traffic: a window of a version's live traces with their live judge scores, through the
same analysis, cpu-queue job, review queue and proposals as an eval run; on PostgreSQL with a real worker."""

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from evaluation import services as eval_services
from evaluation.evolution import decisions, diagnosing, rounds
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Diagnosis, Proposal, Round
from evaluation.evolution.patches import make_diff
from evaluation.models import EvalRun
from serving.models import Trace
from serving.services import api_key_create
from serving.traces import trace_row, traces_store
from tests.live_servers import requires_services, start_worker, stop, wait_for
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), requires_services]


def _store(workspace, harness, trace: dict, *, minutes_ago: float, source=Trace.Source.API,
           scores: tuple | None = None, reasons=(), judge="harness:test") -> Trace:
    """One live trace (a real runtime trace under a fresh id), optionally with a live judge verdict."""
    data = {**trace, "trace_id": uuid.uuid4().hex, "started_at": time.time() - minutes_ago * 60}
    traces_store([trace_row(workspace_id=workspace.pk, data=data, source=source, harness_id=harness.pk,
                            version_id=harness.head_id)])
    if scores is not None:
        Trace.objects.filter(trace_id=data["trace_id"]).update(
            judge_accuracy=scores[0], judge_effectiveness=scores[1], judge_version=judge, judge_reasons=list(reasons))
    return Trace.objects.get(trace_id=data["trace_id"])


@pytest.fixture
def live(workspace, harness, finished_run):
    """Live traffic of v1 in the last hour: the run's real traces replayed as API traces with the verdicts the
    judge gave them, plus traces that must be left out (unsampled, abstained, playground, outside the window)."""
    results = list(finished_run.results.order_by("id"))
    judged = [_store(workspace, harness, r.trace, minutes_ago=30 + i, scores=(r.accuracy, r.effectiveness),
                     reasons=r.reasons) for i, r in enumerate(results)]
    extra = {
        "unjudged": _store(workspace, harness, results[0].trace, minutes_ago=5),
        "abstained": _store(workspace, harness, results[1].trace, minutes_ago=6, scores=(None, None)),
        "playground": _store(workspace, harness, results[2].trace, minutes_ago=7, scores=(0, 0),
                             source=Trace.Source.PLAYGROUND),
        "old": _store(workspace, harness, results[3].trace, minutes_ago=60 * 24 * 10, scores=(0, 0)),
    }
    return {"judged": judged, **extra}


def _window(hours=2):
    now = datetime.now(UTC)
    return now - timedelta(hours=hours), now + timedelta(minutes=1)


def test_a_live_window_is_diagnosed_by_the_worker_into_the_review_queue(client, workspace, harness, members, live,
                                                                        purge_queue_fixture):
    person = Actor.for_user(members["operator"])
    start, end = _window()
    worker = start_worker()
    try:
        diagnosis = diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head,
                                                    start=start, end=end)
        assert diagnosis.source == "live" and diagnosis.run_id is None and diagnosis.status == "queued"
        wait_for(lambda: Diagnosis.objects.get(pk=diagnosis.pk).status in ("done", "failed"), 120, "the diagnosis")
    finally:
        stop(worker)
    diagnosis.refresh_from_db()
    assert diagnosis.status == "done", diagnosis.error
    judged_ids = {t.trace_id for t in live["judged"]}
    failing = {t.trace_id for t in live["judged"] if t.judge_accuracy < 1 or t.judge_effectiveness < 1}
    assert failing, "the scripted model should fail some cases"
    assert diagnosis.summary["total"] == len(judged_ids) and diagnosis.summary["failures"] == len(failing)
    # Only judged API traces of the window were read: the rest are counted, not clustered.
    assert diagnosis.summary["live"] == {"traces": len(judged_ids) + 2, "judged": len(judged_ids), "abstained": 1,
                                         "unjudged": 1, "read_in_part": False}
    assert diagnosis.summary["abstained"] == 1
    clustered = {cid for c in diagnosis.clusters.all() for cid in c.data["case_ids"]} | set(diagnosis.summary["noise"])
    assert clustered == failing
    assert diagnosis.advice["rule"]
    assert all(p.base_hash == harness.head.content_hash for p in diagnosis.proposals.all())
    assert diagnosis.config["backend"] == "scripted"
    audit = AuditEvent.objects.get(action="evolution.diagnose", target_id=str(diagnosis.pk))
    assert audit.actor_label == "operator" and audit.after["judged"] == len(judged_ids)

    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/evolution/diagnoses/{diagnosis.pk}/").content.decode()
    assert 'id="live-window"' in page and 'id="live-counts"' in page
    centre = diagnosis.clusters.first().data["centre_case"]
    assert f"/w/acme/traces/{centre}/" in page  # representatives link to the live trace, not an eval result
    history = client.get("/w/acme/harnesses/avatar/evolution/").content.decode()
    chart = json.loads(history.split('id="clusters-data" type="application/json">')[1].split("<")[0])
    assert chart["labels"] == [f"#{diagnosis.pk} v1 live"]
    assert sum(s["sizes"][0] for s in chart["series"]) + chart["noise"][0] == len(failing)


def test_an_empty_window_or_one_without_judge_scores_is_refused_and_nothing_is_stored(workspace, harness, members,
                                                                                      foreign_harness, live):
    person = Actor.for_user(members["operator"])
    start, end = _window()
    far = datetime(2020, 1, 1, tzinfo=UTC)
    with pytest.raises(EvolutionError, match="No live traces of avatar@v1 between 2020-01-01 00:00"):
        diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head, start=far,
                                        end=far + timedelta(days=1))
    # A window holding only the unsampled and the abstained traces: live traces, but none with a score.
    quiet = (datetime.now(UTC) - timedelta(minutes=8), datetime.now(UTC))
    with pytest.raises(EvolutionError, match=r"None of the 2 live traces .* has a live judge score "
                                                      r"\(1 judged, the judge abstained\).*HARNESSOPS_LIVE_JUDGE_RATE"):
        diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head, start=quiet[0],
                                        end=quiet[1])
    with pytest.raises(EvolutionError, match="start must be before"):
        diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head, start=end, end=start)
    with pytest.raises(EvolutionError, match="longer than 31 days"):
        diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head,
                                        start=end - timedelta(days=40), end=end)
    with pytest.raises(EvolutionError, match="not a version of avatar"):
        diagnosing.diagnosis_request_live(actor=person, harness=harness, version=foreign_harness.head, start=start,
                                        end=end)
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        diagnosing.diagnosis_request_live(actor=Actor.for_user(members["viewer"]), harness=harness,
                                        version=harness.head, start=start, end=end)
    assert not Diagnosis.objects.exists() and not AuditEvent.objects.filter(action="evolution.diagnose").exists()


def test_the_api_requests_a_live_diagnosis_with_documented_errors(client, workspace, harness, live):
    _, token = api_key_create(actor=Actor.system("test"), workspace=workspace, name="w", scopes=["write"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    _, read_token = api_key_create(actor=Actor.system("test"), workspace=workspace, name="r", scopes=["read"])
    start, end = _window()

    def post(body, headers=auth, name="avatar"):
        return client.post(f"/api/v1/harnesses/{name}/diagnoses", json.dumps(body), content_type="application/json",
                           **headers)

    body = {"version": 1, "start": start.isoformat(), "end": end.isoformat()}
    created = post(body)
    assert created.status_code == 201, created.content
    out = created.json()
    assert out["source"] == "live" and out["run"] is None and out["status"] == "queued"
    assert out["window_start"].startswith(start.strftime("%Y-%m-%dT%H:%M"))
    diagnosing.diagnosis_execute(diagnosis_id=out["id"])  # the job (run inline here)
    assert client.get(f"/api/v1/diagnoses/{out['id']}", **auth).json()["status"] == "done"
    assert client.get(f"/api/v1/diagnoses/{out['id']}/clusters", **auth).json()

    empty = post({"version": 1, "start": "2020-01-01T00:00:00", "end": "2020-01-02T00:00:00"})  # naive: UTC
    assert empty.status_code == 409 and empty.json()["detail"].startswith("No live traces of avatar@v1 between "
                                                                          "2020-01-01 00:00 and 2020-01-02 00:00 UTC")
    for start, end in [(body["end"], body["start"]), (body["start"], body["start"]),  # not before `end`
                       ("2020-01-01T00:00:00Z", "2020-02-01T00:00:01Z")]:  # longer than 31 days
        refused = post({**body, "start": start, "end": end})
        assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "body.payload.end", refused.content
    assert post({**body, "version": True}).status_code == 422  # a boolean is not a version number
    assert post({**body, "version": 99}).status_code == 404
    assert post(body, name="nope").status_code == 404
    missing = post({"version": 1, "start": body["start"]})
    assert missing.status_code == 422 and any(e["path"].endswith("end") for e in missing.json()["errors"])
    assert post(body, headers={"HTTP_AUTHORIZATION": f"Bearer {read_token}"}).status_code == 403
    assert post(body, headers={}).status_code == 401
    assert Diagnosis.objects.count() == 1

    operation = client.get("/api/openapi.json").json()["paths"]["/api/v1/harnesses/{name}/diagnoses"]["post"]
    assert {"201", "400", "401", "403", "404", "409", "422"} <= set(operation["responses"])
    assert "HARNESSOPS_LIVE_JUDGE_RATE" in operation["description"]


def test_a_live_diagnosis_round_is_gated_on_a_chosen_dev_set(workspace, harness, members, finished_run, live):
    person = Actor.for_user(members["operator"])
    start, end = _window()
    diagnosis = diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head, start=start,
                                                end=end)
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    diagnosis.refresh_from_db()
    files, path = dict(harness.head.files), "prompt/40-constraints.md"
    diff = make_diff(files, {**files, path: files[path].replace("at most one emoji.", "no emoji at all.")})
    proposal = Proposal.objects.create(diagnosis=diagnosis, cluster=diagnosis.clusters.first(), generator="rules:test",
                                       hypothesis="emoji", diff=diff, target=path, base_hash=harness.head.content_hash,
                                       fingerprint="f", valid=True)
    decisions.proposal_accept(actor=person, proposal=proposal)
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    with pytest.raises(EvolutionError, match="Choose the eval set"):
        rounds.round_evaluate(actor=person, evolution_round=evolution_round)
    assert Round.objects.get(pk=evolution_round.pk).run_id is None

    # The diagnosed version's done run on that set (same backend, reference judge) is the baseline: reused.
    run = rounds.round_evaluate(actor=person, evolution_round=evolution_round, set_version=finished_run.set_version)
    evolution_round.refresh_from_db()
    assert evolution_round.baseline_id == finished_run.pk and run.harness_version_id == evolution_round.candidate_id
    assert rounds.round_finish(round_id=evolution_round.pk) == "gated"
    evolution_round.refresh_from_db()
    assert evolution_round.comparison.baseline_id == finished_run.pk
    assert "mcnemar_p" in evolution_round.comparison.metrics["accuracy"]
    ledger = evolution_round.attribution["proposals"][str(proposal.pk)]
    assert ledger["fix_rate"] is None and ledger["fixed"] == []  # live traces are not re-run by a dev-set eval


def test_a_live_round_without_a_baseline_run_evaluates_the_diagnosed_version_first(workspace, harness, members,
                                                                                   finished_run, live):
    person = Actor.for_user(members["operator"])
    start, end = _window()
    diagnosis = diagnosing.diagnosis_request_live(actor=person, harness=harness, version=harness.head, start=start,
                                                end=end)
    Diagnosis.objects.filter(pk=diagnosis.pk).update(status="done")
    files, path = dict(harness.head.files), "prompt/40-constraints.md"
    diff = make_diff(files, {**files, path: files[path].replace("at most one emoji.", "no emoji at all.")})
    proposal = Proposal.objects.create(diagnosis=diagnosis, generator="rules:test", hypothesis="emoji", diff=diff,
                                       target=path, base_hash=harness.head.content_hash, fingerprint="f", valid=True)
    decisions.proposal_accept(actor=person, proposal=proposal)
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    other = eval_services.eval_set_generate(actor=Actor.system("t"), workspace=workspace, name="other",
                                            suite="live_stream_qa", seed=5, n=4)
    rounds.round_evaluate(actor=person, evolution_round=evolution_round, set_version=other)
    evolution_round.refresh_from_db()
    baseline = evolution_round.baseline
    assert baseline.pk != finished_run.pk and baseline.status == "queued"
    assert baseline.harness_version_id == diagnosis.version_id and baseline.set_version_id == other.pk
    assert rounds.round_finish(round_id=evolution_round.pk) == "gated"
    assert EvalRun.objects.get(pk=baseline.pk).status == "done"


def test_the_console_form_requests_a_live_diagnosis_and_reports_an_empty_window(client, workspace, harness, members,
                                                                                live):
    client.force_login(members["operator"])
    page = client.get("/w/acme/harnesses/avatar/evolution/").content.decode()
    assert 'id="diagnose-live"' in page and "v1 12 judged of 14 traces" in page
    url = "/w/acme/harnesses/avatar/evolution/diagnose-live/"
    empty = client.post(url, {"version": "1", "start": "2020-01-01T00:00", "end": "2020-01-02T00:00"}, follow=True)
    assert "No live traces of avatar@v1 between 2020-01-01 00:00 and 2020-01-02 00:00 UTC" in empty.content.decode()
    bad = client.post(url, {"version": "1", "start": "yesterday", "end": "2020-01-02T00:00"}, follow=True)
    assert "The window&#x27;s start must be a date and time" in bad.content.decode()
    start, end = _window()
    made = client.post(url, {"version": "1", "start": start.strftime("%Y-%m-%dT%H:%M"),
                             "end": end.strftime("%Y-%m-%dT%H:%M")})
    diagnosis = Diagnosis.objects.get()
    assert made.status_code == 302 and made.url == f"/w/acme/evolution/diagnoses/{diagnosis.pk}/"
    client.force_login(members["viewer"])
    assert client.post(url, {"version": "1"}).status_code == 403
    assert 'id="diagnose-live"' not in client.get("/w/acme/harnesses/avatar/evolution/").content.decode()


def test_the_live_judge_keeps_its_reasons_for_diagnosis(workspace, harness, settings):
    from evaluation.tasks import judge_live_trace
    from tests.evaluation.builders import make_trace

    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["unused: a safety-net outcome is scored without a model"]
    trace = _store(workspace, harness, make_trace("Sorry, something went wrong.", outcome="fallback"), minutes_ago=1)
    judge_live_trace(trace.trace_id)
    trace.refresh_from_db()
    assert (trace.judge_accuracy, trace.judge_effectiveness) == (0, 0)
    assert trace.judge_reasons and "safety net" in trace.judge_reasons[0]
