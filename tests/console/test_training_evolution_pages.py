"""Training and evolution pages as an operator meets them: the live-diagnosis form keeps what was typed when
refused, the matrix's fragment carries the run table (so it follows its runs) and says when there is not
enough data, and a run's page links the diagnoses made of it."""

import pytest
from django.urls import reverse

from evaluation.evolution.models import Diagnosis
from evaluation.models import EvalRun, EvalSet, EvalSetVersion
from training.models import Checkpoint, CheckpointMatrix

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, members, harness):
    client.force_login(members["operator"])
    return client


def test_a_refused_live_diagnosis_keeps_the_window_typed(operator):
    url = reverse("evolution_diagnose_live", kwargs={"ws": "acme", "name": "avatar"})
    response = operator.post(url, {"version": "1", "start": "yesterday", "end": "2020-01-02T00:00"})
    html = response.content.decode()
    assert response.status_code == 422
    assert '<ul class="errors" id="live-error"><li>Not diagnosed: The window&#x27;s start must be a date' in html
    assert 'name="start" id="live-start" value="yesterday"' in html
    assert 'name="end" id="live-end" value="2020-01-02T00:00"' in html
    assert '<option value="1" selected>v1</option>' in html
    assert not Diagnosis.objects.exists()


def test_a_live_diagnosis_of_a_version_that_does_not_exist_is_refused_in_words(operator):
    url = reverse("evolution_diagnose_live", kwargs={"ws": "acme", "name": "avatar"})
    response = operator.post(url, {"version": "99", "start": "2020-01-01T00:00", "end": "2020-01-02T00:00"})
    assert response.status_code == 422  # not a 404 page that drops the form
    assert "Not diagnosed: “avatar” has no version v99." in response.content.decode()
    assert not Diagnosis.objects.exists()


def test_the_matrix_fragment_carries_the_run_table_and_an_empty_state(operator, workspace, harness):
    checkpoint = Checkpoint.objects.create(workspace=workspace, stage="sft", base_model="m", path="/ckpt")
    hv = EvalSet.objects.create(workspace=workspace, name="hv", suite="harness_variant")
    set_version = EvalSetVersion.objects.create(eval_set=hv, number=1, source="t", case_count=2)
    matrix = CheckpointMatrix.objects.create(workspace=workspace, set_version=set_version, created_by="t")
    matrix.checkpoints.set([checkpoint])
    matrix.harness_versions.set([harness.head])
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend=checkpoint.backend_name, status="running")
    matrix.runs.set([run])
    url = reverse("matrix_detail", kwargs={"ws": "acme", "matrix_id": matrix.pk})
    fragment = operator.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="heatmap"') and 'hx-trigger="every 3s"' in fragment
    assert 'id="runs"' in fragment and "Not enough data yet: no run of this matrix has finished" in fragment
    assert "1 still queued or running" in fragment
    EvalRun.objects.filter(pk=run.pk).update(status="done", summary={"overall": {"n": 2, "accuracy": 0.5}})
    fragment = operator.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "Not enough data yet" not in fragment and "hx-trigger" not in fragment
    assert fragment.count("0.500") == 2  # the heat-map table and the run table


def test_a_run_page_links_its_diagnoses(operator, workspace, harness):
    qa = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    set_version = EvalSetVersion.objects.create(eval_set=qa, number=1, source="t", case_count=0)
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend="scripted", status="done")
    page = operator.get(reverse("eval_run_detail", kwargs={"ws": "acme", "run_id": run.pk})).content.decode()
    assert 'id="run-diagnoses"' not in page
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head, run=run,
                                         created_by="operator", status="done")
    page = operator.get(reverse("eval_run_detail", kwargs={"ws": "acme", "run_id": run.pk})).content.decode()
    link = reverse("diagnosis_detail", kwargs={"ws": "acme", "diagnosis_id": diagnosis.pk})
    assert f'<a href="{link}">diagnosis #{diagnosis.pk}</a> (done,' in page


def test_accepting_a_proposal_updates_the_candidate_card_out_of_band(operator, workspace, harness):
    from evaluation.evolution.models import Proposal

    qa = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    set_version = EvalSetVersion.objects.create(eval_set=qa, number=1, source="t", case_count=0)
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend="scripted", status="done")
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head, run=run,
                                         created_by="operator", status="done")
    proposal = Proposal.objects.create(diagnosis=diagnosis, generator="rules:test", hypothesis="h", diff="",
                                       base_hash=harness.head.content_hash, fingerprint="f", valid=True)
    url = reverse("evolution_proposal_action", kwargs={"ws": "acme", "proposal_id": proposal.pk, "action": "accept"})
    html = operator.post(url, HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith(f'<div class="proposal grid2" id="proposal-{proposal.pk}" data-status="accepted"')
    card = html.split('<div class="card" id="round" hx-swap-oob="true"', 1)[1]
    assert "Create the candidate version from 1 accepted edit" in card and 'id="make-round"' in card
