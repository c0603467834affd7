"""A create form that fails comes back as the operator typed it, with the reason and a 422, not reset by a
redirect; messages that name things quote them as text (“x”), never as Python's repr ('x')."""

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from evaluation.models import EvalRun, EvalSet, EvalSetVersion
from serving.models import Experiment
from serving.services import api_key_create
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def operator(client, members, harness):
    client.force_login(members["operator"])
    return client


def field_value(html: str, name: str) -> str:
    found = re.search(rf'<input name="{name}" value="([^"]*)"', html)
    assert found, name
    return found.group(1)


def test_the_experiment_form_keeps_what_was_typed(operator):
    arms = "control 0.5 react\ncandidate 0.5 label:staging\nthird x v2"
    response = operator.post(reverse("experiment_new", kwargs={"ws": "acme"}), {
        "key": "skills-vs-react", "harness": "avatar", "coverage": "0.4", "rooms": "room-a room-b", "arms": arms,
        "latency_p95_ms": "4000", "accuracy_drop": "0.05", "min_samples": "120"})
    html = response.content.decode()
    assert response.status_code == 422
    assert 'id="experiment-error"' in html and "Not created: Arm line 3, weight: “x” is not a number." in html
    assert field_value(html, "key") == "skills-vs-react" and field_value(html, "coverage") == "0.4"
    assert field_value(html, "rooms") == "room-a room-b" and field_value(html, "latency_p95_ms") == "4000"
    assert field_value(html, "accuracy_drop") == "0.05" and field_value(html, "min_samples") == "120"
    assert ">control 0.5 react\ncandidate 0.5 label:staging\nthird x v2</textarea>" in html
    assert "<option selected>avatar</option>" in html
    assert not Experiment.objects.exists()
    # The page was answered at the form's POST address: its links must not lead back to it.
    assert 'href="/w/acme/experiments/?archived=1"' in html


def test_a_fresh_experiment_form_has_its_defaults(operator):
    html = operator.get(reverse("experiment_list", kwargs={"ws": "acme"})).content.decode()
    assert field_value(html, "coverage") == "1.0" and field_value(html, "min_samples") == "50"
    assert ">control 0.5 react\nharness 0.5 label:production</textarea>" in html


def test_the_eval_set_form_keeps_what_was_typed(operator):
    response = operator.post(reverse("eval_set_create", kwargs={"ws": "acme"}),
                             {"name": "smoke", "suite": "harness_variant", "seed": "abc", "n": "12"})
    html = response.content.decode()
    assert response.status_code == 422
    assert "No set created: Seed: “abc” is not a whole number." in html and 'id="set-error"' in html
    assert field_value(html, "name") == "smoke" and field_value(html, "seed") == "abc"
    assert field_value(html, "n") == "12" and "<option selected>harness_variant</option>" in html
    assert not EvalSet.objects.exists()


def test_the_eval_run_form_keeps_what_was_typed(operator, workspace):
    eval_set = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="test", case_count=0)
    EvalSetVersion.objects.create(eval_set=eval_set, number=2, source="test", case_count=0)
    response = operator.post(reverse("eval_run_create", kwargs={"ws": "acme"}), {
        "set": "qa@v2", "harness": "avatar", "version": "v1", "backend": "scripted", "judge": "reference",
        "concurrency": "many", "queue": "gpu"})
    html = response.content.decode()
    assert response.status_code == 422
    assert "Run not started: Concurrency: “many” is not a whole number." in html and 'id="run-error"' in html
    assert '<option value="qa@v2" selected>' in html and '<option value="qa@v1" >' in html
    assert 'name="version" value="v1"' in html and field_value(html, "concurrency") == "many"
    assert '<option value="gpu" selected>' in html
    assert not EvalRun.objects.exists()


def test_a_missing_harness_is_named_in_plain_quotes(client, workspace):
    token = api_key_create(actor=Actor.system("test"), workspace=workspace, name="p", scopes=["read"])[1]
    response = client.get("/api/v1/harnesses/ghost/versions", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 404
    assert json.dumps(response.json(), ensure_ascii=False).count("No harness named “ghost”.") == 1


# Code whose messages reach an operator (pages, API answers, CLI output). Python's repr quotes with ' or ",
# escapes what it likes and shows None/True as themselves, so these quote names as “name” instead.
USER_FACING = [
    "workspaces/identifiers.py", "workspaces/services.py", "harness/services.py", "harness/selectors.py",
    "harness/spec/validate.py", "harness/spec/files.py", "serving/model_config.py", "serving/services.py",
    "serving/experiments/lifecycle.py", "serving/experiments/ingest.py", "serving/experiments/event_checks.py",
    "serving/experiments/guardrails.py", "evaluation/services.py", "evaluation/judges/reference.py",
    "evaluation/evolution/patches.py", "evaluation/evolution/validation.py", "evaluation/evolution/judging.py",
    "evaluation/evolution/proposals.py", "serving/experiments/assignment.py",
    "training/services.py", "training/validation.py", "training/pipeline.py", "training/rl_config.py",
    *(str(p.relative_to(ROOT)) for p in ROOT.glob("*/management/commands/*.py")),
    *(str(p.relative_to(ROOT)) for p in ROOT.glob("console/views/*.py")),
    *(str(p.relative_to(ROOT)) for p in ROOT.glob("*/api.py")),
]


@pytest.mark.parametrize("path", USER_FACING)
def test_user_facing_messages_do_not_quote_with_repr(path):
    source = (ROOT / path).read_text()
    # {x!r}, repr(x), or a list/set printed whole inside an f-string ({sorted(x)} rather than a joined text)
    found = re.findall(r".*(?:!r\}|\brepr\(|\{(?:list|sorted|set|tuple)\().*", source)
    assert not found, f"{path}: {found}"


def test_an_uploaded_case_missing_a_field_is_named_in_a_sentence():
    from evaluation.services import EvalError, parse_cases

    with pytest.raises(EvalError) as refused:
        parse_cases("live_stream_qa", ['{"case_id": "c1", "category": "price"}', "[1, 2]"])
    message = str(refused.value)
    assert "line 1: the field “room” is missing" in message
    assert "line 2: a case must be a JSON object" in message
    assert "'room'" not in message and "list indices" not in message


def test_compare_opens_on_two_different_runs_and_a_refused_pair_stays_picked(operator, workspace, harness):
    eval_set = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    v1, v2 = (EvalSetVersion.objects.create(eval_set=eval_set, number=n, source="t", case_count=0) for n in (1, 2))
    older, newer, lonely = (EvalRun.objects.create(workspace=workspace, set_version=sv, harness=harness,
                                                   harness_version=harness.head, backend="scripted", status="done")
                            for sv in (v1, v1, v2))

    def selected(html):
        baseline, candidate = html.split('name="candidate"', 1)
        return (re.findall(r'<option value="(\d+)" selected', baseline),
                re.findall(r'<option value="(\d+)" selected', candidate.split("</select>")[0]))

    page = operator.get(reverse("eval_compare", kwargs={"ws": "acme"})).content.decode()
    # The newest run (lonely) has no partner on its set version: the newest pair that can be compared.
    assert selected(page) == ([str(older.pk)], [str(newer.pk)])
    refused = operator.post(reverse("eval_compare", kwargs={"ws": "acme"}),
                            {"baseline": lonely.pk, "candidate": newer.pk})
    assert refused.status_code == 422 and "same eval set version" in refused.content.decode()
    assert selected(refused.content.decode()) == ([str(lonely.pk)], [str(newer.pk)])


def test_the_member_forms_keep_what_was_typed(client, members):
    client.force_login(members["admin"])
    added = client.post(reverse("member_set", kwargs={"ws": "acme"}),
                        {"form": "add", "username": "ghost", "role": "approver"})
    html = added.content.decode()
    assert added.status_code == 422 and "Not added: No user named “ghost”." in html
    add_form = html.split('id="add-member"')[1].split("</form>")[0]
    assert 'value="ghost"' in add_form and '<option value="approver" selected>' in add_form
    invited = client.post(reverse("member_invite", kwargs={"ws": "acme"}), {"username": "bad name!", "role": "viewer"})
    html = invited.content.decode()
    assert invited.status_code == 422 and "Not invited: Username “bad name!”" in html
    assert 'value="bad name!"' in html.split('id="invite-member"')[1].split("</form>")[0]
