"""One identifier rule at every entry (forms, API, CLI, JSONL import, services); rows stored before the
rule still open, escaped, and can be archived or deleted from the console."""

import io
import json
import zipfile

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import resolve, reverse
from django.utils import timezone

from evaluation import services as eval_services
from evaluation.models import EvalCase, EvalRun, EvalSet, EvalSetVersion
from harness import services
from harness.models import Harness, Label
from serving.experiments.lifecycle import experiment_create
from serving.models import ApiKey, Arm, Experiment, Room
from serving.services import ApiKeyError, api_key_create, room_upsert
from tests.conftest import DEMO_HARNESS
from workspaces.access import Actor
from workspaces.identifiers import (
    IDENTIFIER_MAX,
    IdentifierConverter,
    InvalidIdentifier,
    check_identifier,
    identifier_problem,
    validate_identifier,
)
from workspaces.models import AuditEvent, Workspace
from workspaces.services import WorkspaceError, workspace_create

pytestmark = pytest.mark.django_db

BAD_NAMES = ["<b>x</b> ü", "has space", "Upper", "-leading-hyphen", "trailing_", "double--hyphen", "a/b", "dot.ted", "", "x" * (IDENTIFIER_MAX + 1),
             "<script>alert(1)</script>"]
GOOD_NAMES = ["avatar", "lsqa-smoke", "skills_vs_react", "v2", "0day", "x" * IDENTIFIER_MAX]
SYSTEM = Actor.system("test")


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_pass(name):
    assert identifier_problem(name) == "" and check_identifier(name) == name
    validate_identifier(name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_fail_with_the_field_named(name):
    with pytest.raises(InvalidIdentifier) as error:
        check_identifier(name, field="eval set name")
    assert error.value.field == "eval set name" and "eval set name" in str(error.value)
    with pytest.raises(ValidationError):
        validate_identifier(name)


def test_model_fields_carry_the_validator(workspace, harness):
    # full_clean (ModelForms, the admin) refuses what the services refuse.
    bad = Harness(workspace=workspace, name="has space")
    with pytest.raises(ValidationError) as error:
        bad.full_clean()
    assert "name" in error.value.message_dict
    for model, field in ((Workspace, "slug"), (Harness, "name"), (Label, "name"), (EvalSet, "name"),
                         (EvalCase, "category"), (Experiment, "key"), (Arm, "name"), (Arm, "label"),
                         (Room, "room_id"), (ApiKey, "name")):
        assert validate_identifier in model._meta.get_field(field).validators, f"{model.__name__}.{field}"


@pytest.mark.parametrize("name", ["<b>x</b> ü", "a/b", "100%", "%2F", "with space", "avatar"])
def test_urls_reach_any_stored_name(name):
    """Rows stored before the rule existed still reverse (no NoReverseMatch, a 500) and resolve to themselves."""
    url = reverse("harness_detail", kwargs={"ws": "acme", "name": name})
    assert "<" not in url and " " not in url
    from urllib.parse import unquote

    match = resolve(unquote(url))  # the server decodes the path once, as here
    assert match.kwargs["name"] == name
    assert IdentifierConverter().to_python(IdentifierConverter().to_url(name)) == name


# --- every entry point ----------------------------------------------------------------------------------

def test_services_refuse_bad_names_and_write_nothing(workspace, harness, demo_files):
    audit_before = AuditEvent.objects.count()
    with pytest.raises(InvalidIdentifier, match="harness name"):
        services.harness_create(actor=SYSTEM, workspace=workspace, name="<b>x</b>", files=demo_files)
    with pytest.raises(InvalidIdentifier, match="label"):
        services.label_move(actor=SYSTEM, harness=harness, name="Prod uction", version=harness.head, reason="r")
    with pytest.raises(InvalidIdentifier, match="eval set name"):
        eval_services.eval_set_add_version(actor=SYSTEM, workspace=workspace, name="my set", suite="ifeval",
                                           cases=[], source="t")
    arms = [{"name": "control", "weight": 1, "kind": "react"}, {"name": "<i>t</i>", "weight": 1, "kind": "react"}]
    with pytest.raises(InvalidIdentifier, match="arm 2 name"):
        experiment_create(actor=SYSTEM, workspace=workspace, key="ok", harness=harness, arms=arms)
    with pytest.raises(InvalidIdentifier, match="experiment key"):
        experiment_create(actor=SYSTEM, workspace=workspace, key="a key", harness=harness, arms=arms[:1] * 2)
    with pytest.raises(InvalidIdentifier, match="room"):
        experiment_create(actor=SYSTEM, workspace=workspace, key="ok", harness=harness, rooms=["room 1"],
                          arms=[arms[0], {**arms[0], "name": "t"}])
    with pytest.raises(ApiKeyError, match="key name"):
        api_key_create(actor=SYSTEM, workspace=workspace, name="Prod key <1>", scopes=["read"])
    with pytest.raises(InvalidIdentifier, match="room_id"):
        room_upsert(workspace=workspace, context={"room_id": "<svg onload=x>", "title": "t"})
    with pytest.raises(WorkspaceError, match="workspace slug"):
        workspace_create(actor=SYSTEM, slug="Bad Slug", name="n")
    assert Harness.objects.count() == 1 and not Label.objects.exists() and not EvalSet.objects.exists()
    assert not Experiment.objects.exists() and not ApiKey.objects.exists() and not Room.objects.exists()
    assert Workspace.objects.count() == 1 and AuditEvent.objects.count() == audit_before


def test_jsonl_import_checks_case_categories():
    line = {"case_id": "c1", "category": "<img src=x onerror=alert(1)>", "message": "hi", "viewer_id": "v",
            "room": {}, "expected": {}}
    with pytest.raises(eval_services.EvalError, match="line 1: category"):
        eval_services.parse_cases("live_stream_qa", [json.dumps(line)])


def test_console_forms_show_the_rule(client, members, harness):
    client.force_login(members["operator"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in harness.head.files.items():
            archive.writestr(path, text)
    buffer.seek(0)
    buffer.name = "h.zip"
    response = client.post("/w/acme/harnesses/import/", {"name": "<b>x</b> ü", "archive": buffer})
    assert response.status_code == 422 and "harness name" in response.content.decode()
    assert b"<b>x</b>" not in response.content  # the refused name comes back escaped

    response = client.post("/w/acme/eval/sets/", {"name": "My Set", "suite": "live_stream_qa", "n": "2"}, follow=True)
    assert "No set created: eval set name" in response.content.decode()

    response = client.post("/w/acme/experiments/new/", {"key": "a b", "harness": "avatar",
                                                        "arms": "control 0.5 react\nt 0.5 react"}, follow=True)
    assert "Not created: experiment key" in response.content.decode()

    response = client.post("/w/acme/harnesses/avatar/labels/move/", {"label": "Bad Label", "version": "1",
                                                                      "reason": "r"}, follow=True)
    assert "label “Bad Label” is not allowed" in response.content.decode()
    assert not EvalSet.objects.exists() and not Experiment.objects.exists() and not Label.objects.exists()
    assert Harness.objects.count() == 1


def test_api_answers_422_naming_the_field(client, harness):
    token = api_key_create(actor=SYSTEM, workspace=harness.workspace, name="w", scopes=["approve"])[1]
    response = client.put("/api/v1/harnesses/avatar/labels/Bad%20Label", json.dumps({"version": 1, "reason": "r"}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 422
    assert any(e["path"].endswith("label") for e in response.json()["errors"])
    assert not Label.objects.exists()


def test_cli_imports_refuse_bad_names(workspace, tmp_path):
    with pytest.raises(CommandError, match="harness name"):
        call_command("harness_import", str(DEMO_HARNESS), workspace="acme", harness="<b>x</b> ü")
    with pytest.raises(CommandError, match="eval set name"):
        call_command("eval_set", "My Set", workspace="acme", suite="live_stream_qa", n=2)
    bad = tmp_path / "cases.jsonl"
    bad.write_text(json.dumps({"case_id": "c1", "category": "a b", "message": "m", "viewer_id": "v", "room": {},
                               "expected": {}}) + "\n")
    with pytest.raises(CommandError, match="category"):
        call_command("eval_set", "ok-set", workspace="acme", suite="live_stream_qa", jsonl=str(bad))
    assert not Harness.objects.exists() and not EvalSet.objects.exists()


# --- rows stored before the rule: pages render them escaped, and they can be removed --------------------

LEGACY = "<b>x</b> ü/1"


@pytest.fixture
def legacy(workspace, harness, demo_files):
    """Bad names written straight to the database, as older releases (and a careless script) allowed."""
    bad_harness = services.harness_create(actor=SYSTEM, workspace=workspace, name="tmp", files=demo_files)
    Harness.objects.filter(pk=bad_harness.pk).update(name=LEGACY)
    eval_set = EvalSet.objects.create(workspace=workspace, name=LEGACY, suite="ifeval")
    version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="t", case_count=1, created_by="t")
    EvalCase.objects.create(set_version=version, case_id="<i>c</i>", category="<u>cat</u>", data={"prompt": "p"})
    experiment = Experiment.objects.create(workspace=workspace, key="exp key <b>", seed="s", harness=harness,
                                           created_by="t")
    Arm.objects.create(experiment=experiment, index=0, name="<b>arm</b>", weight=1, kind="react")
    return {"harness": Harness.objects.get(pk=bad_harness.pk), "eval_set": eval_set, "experiment": experiment}


def test_pages_with_legacy_names_answer_200_escaped(client, members, legacy):
    client.force_login(members["admin"])
    urls = ["/w/acme/", "/w/acme/eval/", "/w/acme/experiments/",
            reverse("harness_detail", kwargs={"ws": "acme", "name": LEGACY}),
            reverse("version_detail", kwargs={"ws": "acme", "name": LEGACY, "number": 1}),
            reverse("eval_set_detail", kwargs={"ws": "acme", "name": LEGACY, "number": 1}),
            reverse("experiment_detail", kwargs={"ws": "acme", "key": "exp key <b>"}),
            "/w/acme/playground/", "/w/acme/audit/"]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert b"<b>x</b>" not in response.content and b"<b>arm</b>" not in response.content, url
    assert "&lt;b&gt;x&lt;/b&gt; ü/1" in client.get("/w/acme/").content.decode()
    # Downloads name their file from a slug of the stored name, never the raw text.
    download = client.get(reverse("eval_set_detail", kwargs={"ws": "acme", "name": LEGACY, "number": 1}) + "?format=jsonl")
    assert download.status_code == 200 and download["Content-Disposition"] == 'attachment; filename="bxb-u1-v1.jsonl"'
    export = client.get(reverse("version_export", kwargs={"ws": "acme", "name": LEGACY, "number": 1}))
    assert export.status_code == 200 and 'filename="bxb-u1-v1.zip"' in export["Content-Disposition"]


def test_legacy_rows_can_be_archived_and_deleted_with_audit(client, members, legacy):
    client.force_login(members["operator"])
    url = reverse("harness_archive", kwargs={"ws": "acme", "name": LEGACY})
    assert client.post(url).status_code == 302
    harness = Harness.objects.get(pk=legacy["harness"].pk)
    assert harness.archived_at is not None
    assert [h.name for h in client.get("/w/acme/").context["harnesses"]] == ["avatar"]
    assert [h.name for h in client.get("/w/acme/?archived=1").context["harnesses"]] == [LEGACY]
    assert client.post(url, {"archived": "0"}).status_code == 302
    assert Harness.objects.get(pk=harness.pk).archived_at is None

    # Deleting needs the admin role.
    set_delete = reverse("eval_set_delete", kwargs={"ws": "acme", "name": LEGACY})
    assert client.post(set_delete).status_code == 403
    client.force_login(members["admin"])
    assert client.post(set_delete).status_code == 302
    assert not EvalSet.objects.filter(pk=legacy["eval_set"].pk).exists()
    experiment_delete = reverse("experiment_delete", kwargs={"ws": "acme", "key": "exp key <b>"})
    assert client.post(experiment_delete).status_code == 302
    assert not Experiment.objects.filter(pk=legacy["experiment"].pk).exists()
    actions = list(AuditEvent.objects.filter(actor_label__in=["operator", "admin"]).values_list("action", "actor_label"))
    assert ("harness.archive", "operator") in actions and ("harness.unarchive", "operator") in actions
    assert ("eval_set.delete", "admin") in actions and ("experiment.delete", "admin") in actions


def test_evidence_is_archived_not_deleted(client, members, workspace, harness):
    """A set a run used, and a running experiment, refuse deletion with a reason; nothing changes."""
    version = eval_services.eval_set_add_version(actor=SYSTEM, workspace=workspace, name="used", suite="ifeval",
                                                 cases=[{"key": 1, "prompt": "p", "instruction_id_list": [],
                                                         "kwargs": [], "case_id": "1", "category": "ifeval"}],
                                                 source="t")
    EvalRun.objects.create(workspace=workspace, set_version=version, harness=harness, harness_version=harness.head,
                           backend="scripted", created_by="t")
    experiment = Experiment.objects.create(workspace=workspace, key="live", seed="s", harness=harness, created_by="t",
                                           status="running", started_at=timezone.now())
    client.force_login(members["admin"])
    page = client.post("/w/acme/eval/sets/used/delete/", follow=True).content.decode()
    assert "1 run(s) used this set; archive it instead" in page and EvalSet.objects.filter(name="used").exists()
    page = client.post("/w/acme/experiments/live/delete/", follow=True).content.decode()
    assert "Stop the experiment before deleting it" in page and Experiment.objects.filter(pk=experiment.pk).exists()
    page = client.post("/w/acme/harnesses/avatar/archive/", follow=True).content.decode()
    assert "stop it before archiving" in page and Harness.objects.get(pk=harness.pk).archived_at is None
    # Archiving the set hides it from the run form and the list, and keeps its run.
    assert client.post("/w/acme/eval/sets/used/archive/").status_code == 302
    home = client.get("/w/acme/eval/").content.decode()
    assert 'value="used@v1"' not in home and "Archived sets (1)" in home
    assert EvalRun.objects.filter(set_version=version).exists()


def test_operator_archives_and_restores_an_experiment(client, members, harness):
    experiment = Experiment.objects.create(workspace=harness.workspace, key="old-test", seed="s", harness=harness,
                                           created_by="t", status="stopped")
    client.force_login(members["operator"])
    assert client.post("/w/acme/experiments/old-test/archive/").status_code == 302
    assert list(client.get("/w/acme/experiments/").context["experiments"]) == []
    assert list(client.get("/w/acme/experiments/?archived=1").context["experiments"]) == [experiment]
    assert client.post("/w/acme/experiments/old-test/delete/").status_code == 403  # deleting is for admins
    assert client.post("/w/acme/experiments/old-test/archive/", {"archived": "0"}).status_code == 302
    assert Experiment.objects.get(pk=experiment.pk).archived_at is None
    assert list(AuditEvent.objects.filter(target_type="experiment").values_list("action", flat=True)) == [
        "experiment.unarchive", "experiment.archive"]
