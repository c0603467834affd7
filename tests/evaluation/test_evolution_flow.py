"""Diagnosis → review → candidate version → dev-set eval → regression gate, on PostgreSQL with a real worker,
and the API that drives it."""

import json

import pytest

from evaluation.evolution import calibration, decisions, diagnosing, rounds
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Diagnosis, Proposal, Round
from evaluation.models import EvalRun
from harness.models import HarnessVersion
from serving.services import api_key_create
from tests.live_servers import requires_services, start_worker, stop, wait_for
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), requires_services]


def test_accept_draft_eval_gate_with_a_real_worker(client, workspace, harness, members, finished_run,
                                                  purge_queue_fixture):
    person = Actor.for_user(members["operator"])
    worker = start_worker()
    try:
        diagnosis = diagnosing.diagnosis_request(actor=person, run=finished_run)
        wait_for(lambda: Diagnosis.objects.get(pk=diagnosis.pk).status in ("done", "failed"), 120, "the diagnosis")
        diagnosis.refresh_from_db()
        assert diagnosis.status == "done", diagnosis.error
        assert diagnosis.summary["failures"] > 0 and diagnosis.clusters.exists()
        assert diagnosis.advice["rule"]
        candidates = list(diagnosis.proposals.filter(valid=True).order_by("id"))
        assert len(candidates) >= 2, diagnosis.summary
        assert all(p.generator.startswith("rules:") for p in candidates)

        decisions.proposal_accept(actor=person, proposal=candidates[0])
        decisions.proposal_reject(actor=person, proposal=candidates[1], reason="the trigger list is long enough")
        evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
        candidate = evolution_round.candidate
        assert candidate.number == 2 and candidate.parent_id == finished_run.harness_version_id
        # The AI authored the version; the person approved it: two different actors in the audit log.
        assert candidate.author_kind == "system" and candidate.author_label.startswith("ai:evolution (rules:")
        commit = AuditEvent.objects.get(action="version.commit", target_id=str(candidate.pk))
        approval = AuditEvent.objects.get(action="evolution.round.approve", target_id=str(candidate.pk))
        assert commit.actor_kind == "system" and approval.actor_label == "operator" and approval.actor_kind == "user"

        run = rounds.round_evaluate(actor=person, evolution_round=evolution_round)
        assert run.harness_version_id == candidate.pk and run.set_version_id == finished_run.set_version_id
        wait_for(lambda: Round.objects.get(pk=evolution_round.pk).status in ("gated", "failed"), 180, "the gate")
    finally:
        stop(worker)
    evolution_round.refresh_from_db()
    assert evolution_round.status == "gated", evolution_round.error
    comparison = evolution_round.comparison
    assert comparison.baseline_id == finished_run.pk and comparison.candidate_id == evolution_round.run_id
    assert "accuracy" in comparison.metrics and comparison.reasons is not None
    ledger = evolution_round.attribution["proposals"][str(candidates[0].pk)]
    assert set(ledger) >= {"fixed", "still_failing", "regressed", "fix_rate"}

    # The history page: Acc/Eff per version for the chart (as JSON data, not HTML), the ledger with a revert.
    client.force_login(members["viewer"])
    page = client.get("/w/acme/harnesses/avatar/evolution/")
    assert page.status_code == 200
    chart = json.loads(page.content.decode().split('id="rounds-data" type="application/json">')[1].split("<")[0])
    assert chart["labels"] == ["v1", "v2"] and len(chart["accuracy"]) == 2
    assert f'id="ledger-{candidates[0].pk}"' in page.content.decode()
    assert "vendor/chart.js/chart.umd.min.js" in page.content.decode()
    review = client.get(f"/w/acme/evolution/diagnoses/{diagnosis.pk}/").content.decode()
    assert 'id="gate"' in review and "Check the evaluation" not in review

    # The candidate stayed off the head (its gate did not pass on these few cases): nothing to revert yet.
    harness.refresh_from_db()
    assert harness.head.number == 1
    with pytest.raises(EvolutionError, match="never promoted"):
        decisions.proposal_revert(actor=person, proposal=Proposal.objects.get(pk=candidates[0].pk))
    # Once a person made it the head, one click reverts the accepted edit on top of the head.
    from harness.services import head_promote

    head_promote(actor=person, harness=harness, version=candidate, reason="kept after review")
    reverted = decisions.proposal_revert(actor=person, proposal=Proposal.objects.get(pk=candidates[0].pk))
    assert reverted.content_hash == finished_run.harness_version.content_hash and reverted.number == 3

    # The next diagnosis (of the same run) reads the rejection: that edit is no longer a candidate,
    # and clusters keep their ids.
    again = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head, run=finished_run,
                                     created_by="t", config={}, split=diagnosis.split)
    assert diagnosing.diagnosis_execute(diagnosis_id=again.pk) == "done"
    again.refresh_from_db()
    # The rule whose edit was rejected is not run again for that signature (the reason steers it), and the
    # same edit from anywhere else would be invalid.
    assert not again.proposals.filter(fingerprint=candidates[1].fingerprint, valid=True).exists()
    rejected_core = Proposal.objects.get(pk=candidates[1].pk).cluster.core
    assert again.summary["steered"] == {rejected_core: ["the trigger list is long enough"]}
    assert not again.proposals.filter(generator=candidates[1].generator, cluster__core=rejected_core).exists()
    assert set(again.clusters.values_list("cluster_id", flat=True)) == set(
        diagnosis.clusters.values_list("cluster_id", flat=True))
    assert again.config["rejections_read"] == 1
    trend = client.get(f"/w/acme/evolution/diagnoses/{again.pk}/").content.decode()
    assert f"in <a href=\"/w/acme/evolution/diagnoses/{diagnosis.pk}/\">diagnosis #{diagnosis.pk}</a>" in trend


def test_refusals_leave_nothing_half_written(workspace, harness, members, finished_run):
    person, viewer = Actor.for_user(members["operator"]), Actor.for_user(members["viewer"])
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t")
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    proposal = diagnosis.proposals.filter(valid=True).first()
    with pytest.raises(EvolutionError, match="Say why"):
        decisions.proposal_reject(actor=person, proposal=proposal, reason="  ")
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        decisions.proposal_accept(actor=viewer, proposal=proposal)
    with pytest.raises(EvolutionError, match="Accept at least one"):
        rounds.round_create(actor=person, diagnosis=diagnosis)
    assert Proposal.objects.get(pk=proposal.pk).status == "pending"
    assert HarnessVersion.objects.filter(harness=harness).count() == 1 and not Round.objects.exists()
    invalid = Proposal.objects.create(diagnosis=diagnosis, generator="rules:x", hypothesis="h", diff="x",
                                      base_hash="0", fingerprint="f", valid=False, errors=["applies: no"])
    with pytest.raises(EvolutionError, match="not a candidate"):
        decisions.proposal_accept(actor=person, proposal=invalid)
    running = EvalRun.objects.create(workspace=workspace, set_version=finished_run.set_version, harness=harness,
                                     harness_version=harness.head, backend="scripted", total=1, created_by="t")
    with pytest.raises(EvolutionError, match="finished"):
        diagnosing.diagnosis_request(actor=person, run=running)


def test_api_requests_a_diagnosis_and_decides(client, workspace, harness, finished_run):
    system = Actor.system("test")
    _, token = api_key_create(actor=system, workspace=workspace, name="w", scopes=["write"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = client.post(f"/api/v1/eval/runs/{finished_run.pk}/diagnoses", **auth)
    assert response.status_code == 201 and response.json()["status"] == "queued"
    split = response.json()["split"]  # the API's diagnosis reads the default seeded split, and says so
    assert split["kind"] == "seeded" and split["seed"] == 0 and split["gate_case_ids"]
    diagnosis_id = response.json()["id"]
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis_id)  # the job (run inline here)
    clusters = client.get(f"/api/v1/diagnoses/{diagnosis_id}/clusters", **auth).json()
    assert clusters and clusters[0]["rank"] == 1 and clusters[0]["cluster_id"].startswith("c-")
    proposals = client.get(f"/api/v1/diagnoses/{diagnosis_id}/proposals?valid=true", **auth).json()
    assert proposals and all(p["valid"] and p["generator"].startswith("rules:") for p in proposals)
    first, second = proposals[0]["id"], proposals[1]["id"]
    empty = client.post(f"/api/v1/proposals/{second}/reject", json.dumps({"reason": ""}),
                        content_type="application/json", **auth)
    assert empty.status_code == 422 and empty.json()["errors"][0]["path"].endswith("reason")
    assert client.post(f"/api/v1/proposals/{first}/accept", **auth).json()["status"] == "accepted"
    again = client.post(f"/api/v1/proposals/{first}/accept", **auth)
    assert again.status_code == 409 and "already accepted" in again.json()["detail"]  # the proposal's state
    rejected = client.post(f"/api/v1/proposals/{second}/reject", json.dumps({"reason": "too broad"}),
                           content_type="application/json", **auth).json()
    assert rejected["status"] == "rejected" and rejected["reason"] == "too broad"
    schema = client.get("/api/openapi.json").json()
    assert "/api/v1/diagnoses/{diagnosis_id}/proposals" in schema["paths"]


def test_the_model_proposer_runs_inside_the_diagnosis(settings, workspace, harness, finished_run):
    from evaluation.evolution.patches import make_diff
    from evaluation.evolution.proposer import scripted_answer

    files = dict(harness.head.files)
    path = "skills/product-qa/SKILL.md"
    edited = {**files, path: files[path].replace("or the item on screen.", "or the item on screen, or any price.")}
    answer = scripted_answer("Price questions miss product-qa.", "Name prices as a trigger.", [],
                             make_diff(files, edited))
    settings.SCRIPTED_STEPS = [answer]  # every proposer run answers at once with this edit
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t", config={"proposer": "scripted"})
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    made = diagnosis.proposals.filter(generator__startswith="proposer:")
    assert made.exists() and all(p.valid and p.target == path for p in made), list(made.values("errors"))
    assert made.count() <= diagnosing.MODEL_PROPOSALS_PER_DIAGNOSIS
    assert diagnosis.proposals.filter(generator__startswith="rules:").exists()  # both generators, told apart
    diagnosis.refresh_from_db()
    runs = diagnosis.summary["proposer_runs"]
    # Each cluster asked for a few variants; the same answer twice is one proposal, tried and kept.
    assert len(runs) == diagnosing.PROPOSER_VARIANTS * made.count()
    assert all(r["outcome"] == "replied" and r["model"] == "scripted" for r in runs)
    assert {t["generator"] for t in diagnosis.summary["trials"] if t["kept"]} >= {made.first().generator}


def test_weak_judge_calibration_flags_a_category(monkeypatch, workspace, harness, members, finished_run):
    from evaluation.models import Annotation

    monkeypatch.setattr(calibration, "MIN_CALIBRATION_LABELS", 2)
    for result in finished_run.results.all():
        # People disagree with every verdict of the judge: no better than chance (kappa <= 0).
        Annotation.objects.create(result=result, annotator=members["operator"], accuracy=1 - int(result.accuracy),
                                  effectiveness=1.0)
    kappas = calibration.category_calibration(finished_run)
    assert kappas and all(kappa < 0.4 for kappa in kappas.values())
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t")
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    flagged = [c for c in diagnosis.clusters.all() if c.judge_suspect]
    assert flagged and any("human labels" in " ".join(c.data["suspect_reasons"]) for c in flagged)
    # Every case here carries a person's contradicting label, which flags its cluster as well.
    assert all("a person's label contradicts the verdict" in " ".join(c.data["suspect_reasons"]) for c in flagged)
    assert not diagnosis.proposals.filter(cluster__in=flagged).exists()
    diagnosis.refresh_from_db()
    assert diagnosis.config["calibration"] == kappas


def test_edit_opens_the_file_editor_with_the_result(client, workspace, harness, members, finished_run):
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t")
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    proposal = diagnosis.proposals.filter(valid=True).first()
    client.force_login(members["operator"])
    response = client.post(f"/w/acme/evolution/proposals/{proposal.pk}/edit/")
    assert response.status_code == 302 and response.url.endswith(f"edit/?path={proposal.target.replace('/', '%2F')}")
    from harness.models import Draft

    draft = Draft.objects.get(harness=harness, author=members["operator"])
    assert draft.files[proposal.target] != harness.head.files[proposal.target]
    assert Proposal.objects.get(pk=proposal.pk).status == "edited"
    editor = client.get(response.url)
    assert editor.status_code == 200


def test_accepted_edits_of_one_file_merge_and_real_conflicts_are_flagged(workspace, harness, members, finished_run):
    from evaluation.evolution.patches import make_diff

    person = Actor.for_user(members["operator"])
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t", status="done")
    files, path = dict(harness.head.files), "prompt/40-constraints.md"
    old = "at most one emoji."
    proposals = []
    for n, new in enumerate(("no emoji at all.", "at most two emoji.")):
        diff = make_diff(files, {**files, path: files[path].replace(old, new)})
        proposals.append(Proposal.objects.create(
            diagnosis=diagnosis, generator=f"rules:test{n}", hypothesis=f"edit {n}", diff=diff, target=path,
            base_hash=harness.head.content_hash, fingerprint=f"f{n}", valid=True))
        decisions.proposal_accept(actor=person, proposal=proposals[-1])
    # A third edit of the same file, on other lines (and adding one): merged, not flagged.
    line = "- Address the viewer directly as \"you\"; never show viewer ids."
    diff = make_diff(files, {**files, path: files[path].replace(line, line + "\n- Never invent a price.")})
    proposals.append(Proposal.objects.create(
        diagnosis=diagnosis, generator="rules:test2", hypothesis="edit 2", diff=diff, target=path,
        base_hash=harness.head.content_hash, fingerprint="f2", valid=True))
    decisions.proposal_accept(actor=person, proposal=proposals[-1])
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    text = evolution_round.candidate.files[path]
    assert "no emoji at all." in text and "- Never invent a price." in text and "two emoji" not in text
    second = Proposal.objects.get(pk=proposals[1].pk)
    assert second.status == "conflict" and "both edits change line" in second.reason
    assert Proposal.objects.get(pk=proposals[2].pk).status == "accepted"
    assert evolution_round.candidate.author_label == "ai:evolution (rules:test0, rules:test2)"
