"""The training forms (launch a job, evaluate checkpoints against harness versions) keep what the operator
typed and picked when they are refused: a 422 with the reason in a sentence, nothing created."""

import json
import re

import pytest
from django.urls import reverse

from evaluation.models import EvalRun, EvalSet, EvalSetVersion
from training.models import Checkpoint, CheckpointMatrix, TrainingJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, members, harness):
    client.force_login(members["operator"])
    return client


@pytest.fixture
def sets(workspace):
    """Two eval set versions: the Harness-Variant QA one is the matrix form's default."""
    qa = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    hv = EvalSet.objects.create(workspace=workspace, name="hv", suite="harness_variant")
    return (EvalSetVersion.objects.create(eval_set=qa, number=1, source="t", case_count=0),
            EvalSetVersion.objects.create(eval_set=hv, number=1, source="t", case_count=0))


def field_value(html: str, name: str) -> str:
    found = re.search(rf'<input name="{name}" value="([^"]*)"', html)
    assert found, name
    return found.group(1)


def form(html: str, form_id: str) -> str:
    return html.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]


def selected(html: str, select: str) -> list[str]:
    options = html.split(f'<select name="{select}"', 1)[1].split("</select>", 1)[0]
    return re.findall(r'<option value="([^"]*)" selected', options)


def launch(client, **changes):
    data = {"name": "first-run", "base_model": "my-base", "harness_versions": ["avatar@v1"],
            "excluded_sets": ["qa@v1"], "seed": "7", "size": "12", "config": json.dumps({"seed": 3})}
    return client.post(reverse("training_job_create", kwargs={"ws": "acme"}), {**data, **changes})


def test_a_refused_launch_keeps_everything_typed_and_picked(operator, sets):
    response = launch(operator, seed="abc")
    html = response.content.decode()
    assert response.status_code == 422
    assert '<ul class="errors" id="launch-error"><li>Not launched: Simulator seed: “abc” is not a whole number.' in html
    launch_form = form(html, "launch")
    assert field_value(launch_form, "name") == "first-run" and field_value(launch_form, "base_model") == "my-base"
    assert field_value(launch_form, "seed") == "abc" and field_value(launch_form, "size") == "12"
    assert selected(launch_form, "harness_versions") == ["avatar@v1"]
    assert selected(launch_form, "excluded_sets") == ["qa@v1"]
    assert '>{&quot;seed&quot;: 3}</textarea>' in launch_form
    assert not TrainingJob.objects.exists()


@pytest.mark.parametrize(("changes", "sentence"), [
    ({"harness_versions": []}, "Not launched: Harness versions: choose at least one to train under."),
    ({"harness_versions": ["ghost@v1"]}, "Not launched: Harness versions: no harness version “ghost@v1” here."),
    ({"excluded_sets": ["nope@v3"]}, "Not launched: Excluded eval sets: no eval set version “nope@v3” here"),
    ({"name": "bad name!"}, "Not launched: Name: use letters, digits, - and _ only."),
    ({"size": "lots"}, "Not launched: Simulator cases: “lots” is not a whole number."),
    ({"config": '{"seed": 1,\n "stages": ['}, "Not launched: Config: not valid JSON (line 2, column"),
])
def test_a_refused_launch_says_why_in_a_sentence(operator, sets, changes, sentence):
    response = launch(operator, **changes)
    html = response.content.decode()
    assert response.status_code == 422
    error = html.split('id="launch-error"', 1)[1].split("</ul>", 1)[0]
    assert sentence in error, error
    # The form's own field names (harness_versions, excluded_sets, …) are not how a sentence names a field.
    assert not re.search(r"\b[a-z]+_[a-z_]+:", error), error
    assert field_value(form(html, "launch"), "name") == changes.get("name", "first-run")
    if "config" in changes:
        assert '>{&quot;seed&quot;: 1,\n &quot;stages&quot;: [</textarea>' in html
    assert not TrainingJob.objects.exists()


@pytest.fixture
def checkpoints(workspace):
    return [Checkpoint.objects.create(workspace=workspace, stage=stage, base_model="m", path=f"/ckpt/{stage}")
            for stage in ("sft", "rl")]


def evaluate(client, **data):
    return client.post(reverse("matrix_create", kwargs={"ws": "acme"}), data)


def test_a_refused_matrix_keeps_the_checkpoints_versions_and_set_picked(operator, sets, checkpoints):
    first, second = checkpoints
    response = evaluate(operator, checkpoints=[str(second.pk)], harness_versions=[], set="qa@v1")
    html = response.content.decode()
    assert response.status_code == 422
    matrix_form = form(html, "new-matrix")
    assert '<ul class="errors" id="matrix-error"><li>No matrix started: Choose at least one harness version.' in matrix_form
    assert selected(matrix_form, "checkpoints") == [str(second.pk)]
    assert selected(matrix_form, "set") == ["qa@v1"]  # what was picked, not the Harness-Variant default
    assert 'id="launch-error"' not in html  # the launch form is untouched
    assert not CheckpointMatrix.objects.exists() and not EvalRun.objects.exists()

    response = evaluate(operator, checkpoints=[str(first.pk), str(second.pk)], harness_versions=["avatar@v1"],
                        set="gone@v2")
    matrix_form = form(response.content.decode(), "new-matrix")
    assert response.status_code == 422
    assert "No matrix started: Eval set: no eval set version “gone@v2” here (name@vN)." in matrix_form
    assert sorted(selected(matrix_form, "checkpoints")) == sorted([str(first.pk), str(second.pk)])
    assert selected(matrix_form, "harness_versions") == ["avatar@v1"]
    assert not CheckpointMatrix.objects.exists()


@pytest.mark.parametrize(("picked", "sentence"), [
    (["x1"], "No matrix started: Checkpoints: choose them from the list."),
    (["999999"], "No matrix started: Checkpoints: one of them is not in this workspace"),
    ([], "No matrix started: Choose at least one checkpoint."),
])
def test_a_refused_matrix_names_the_checkpoints_problem(operator, sets, checkpoints, picked, sentence):
    response = evaluate(operator, checkpoints=picked, harness_versions=["avatar@v1"], set="hv@v1")
    html = response.content.decode()
    assert response.status_code == 422 and sentence in form(html, "new-matrix")
    assert selected(form(html, "new-matrix"), "harness_versions") == ["avatar@v1"]
    assert not CheckpointMatrix.objects.exists()


def test_the_matrix_form_starts_on_the_harness_variant_set(operator, sets, checkpoints):
    html = operator.get(reverse("training_home", kwargs={"ws": "acme"})).content.decode()
    matrix_form = form(html, "new-matrix")
    assert selected(matrix_form, "set") == ["hv@v1"] and selected(matrix_form, "checkpoints") == []
