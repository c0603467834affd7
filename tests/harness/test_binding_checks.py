"""A tool bound to a builtin that is not here is refused on every way into the store, not only in the editor:
version_commit, harness_create, the platform API and the zip import. Run-supplied targets (the evolution
proposer's read tools) validate for the proposer harness only: every other harness reports them as unknown."""

import io
import json
import zipfile

import pytest

from evaluation.evolution.diagnosing import _proposer_spec
from evaluation.evolution.proposer import PROPOSER_HARNESS, PROPOSER_NAME, READ_TOOLS
from harness import services
from harness.models import Harness, HarnessVersion
from harness.selectors import binding_targets
from harness.spec import SpecInvalid, parse_files, read_dir
from serving.services import api_key_create
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
TOOL = "tools/get_promotion.json"
MESSAGE = "no builtin binding named “demo.nope” is available here"


def unbound(files: dict[str, str]) -> dict[str, str]:
    tool = json.loads(files[TOOL])
    tool["x_harness"]["binding"] = {"kind": "builtin", "target": "demo.nope"}
    return {**files, TOOL: json.dumps(tool, indent=2)}


def test_version_commit_refuses_an_unknown_builtin_and_writes_nothing(harness):
    with pytest.raises(SpecInvalid) as refused:
        services.version_commit(actor=SYSTEM, harness=harness, files=unbound(harness.head.files),
                                base_version=harness.head, message="bind to nothing")
    assert [(e.file, e.location) for e in refused.value.errors] == [(TOOL, "x_harness.binding.target")]
    assert MESSAGE in refused.value.errors[0].message
    assert HarnessVersion.objects.filter(harness=harness).count() == 1


def test_harness_create_refuses_an_unknown_builtin(workspace, demo_files):
    with pytest.raises(SpecInvalid):
        services.harness_create(actor=SYSTEM, workspace=workspace, name="ghost", files=unbound(demo_files))
    assert not Harness.objects.filter(name="ghost").exists()


def test_the_api_answers_422_with_the_binding_error(client, workspace, harness):
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read", "write"])[1]
    response = client.post("/api/v1/harnesses/avatar/versions", data=json.dumps(
        {"base_version": 1, "message": "bind to nothing", "files": unbound(harness.head.files)}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 422
    assert any(MESSAGE in e["message"] for e in response.json()["errors"])
    assert HarnessVersion.objects.filter(harness=harness).count() == 1


def test_the_zip_import_shows_the_binding_error(client, members, demo_files):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in unbound(demo_files).items():
            archive.writestr(path, text)
    buffer.seek(0)
    buffer.name = "ghost.zip"
    client.force_login(members["operator"])
    response = client.post("/w/acme/harnesses/import/", {"name": "ghost", "archive": buffer})
    assert response.status_code == 422 and MESSAGE in response.content.decode()
    assert not Harness.objects.filter(name="ghost").exists()


SUPPLIED = "no sandbox binding named “evolution.fetch_case” is available here"


def with_read_tool(files: dict[str, str]) -> dict[str, str]:
    """`files` plus the proposer's fetch_case tool, bound to its run-supplied sandbox target."""
    return {**files, "tools/fetch_case.json": read_dir(PROPOSER_HARNESS)["tools/fetch_case.json"]}


def zip_of(files: dict[str, str]) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    buffer.seek(0)
    buffer.name = "upload.zip"
    return buffer


def test_run_supplied_targets_belong_to_the_proposer_harness_only():
    assert set(READ_TOOLS) <= binding_targets(PROPOSER_NAME)["sandbox"]
    for other in ("avatar", "proposer", f"{PROPOSER_NAME}-copy"):
        assert not set(READ_TOOLS) & binding_targets(other)["sandbox"], other
        assert "demo.get_promotion" in binding_targets(other)["builtin"]  # the shared targets stay


def test_the_proposer_harness_imports_and_versions_under_its_name(workspace):
    files = read_dir(PROPOSER_HARNESS)
    harness = services.harness_create(actor=SYSTEM, workspace=workspace, name=PROPOSER_NAME, files=files)
    assert harness.head.number == 1
    edited = {**files, "harness.yaml": files["harness.yaml"].replace("max_turns: 6", "max_turns: 5")}
    assert services.version_commit(actor=SYSTEM, harness=harness, files=edited, base_version=harness.head,
                                   message="one turn fewer").version.number == 2
    assert services.draft_check(edited, harness=harness) == []


def test_any_other_harness_refuses_the_proposers_read_tools_on_every_way_in(client, workspace, members, harness):
    # version commit
    with pytest.raises(SpecInvalid) as refused:
        services.version_commit(actor=SYSTEM, harness=harness, files=with_read_tool(harness.head.files),
                                base_version=harness.head, message="borrow a read tool")
    assert [(e.file, e.location) for e in refused.value.errors] == [("tools/fetch_case.json", "x_harness.binding.target")]
    assert SUPPLIED in refused.value.errors[0].message
    # a new harness made of the proposer's files under another name
    with pytest.raises(SpecInvalid) as refused:
        services.harness_create(actor=SYSTEM, workspace=workspace, name="proposer",
                                files=read_dir(PROPOSER_HARNESS))
    assert len(refused.value.errors) == len(READ_TOOLS) and SUPPLIED in str(refused.value.errors)
    # the editor (its check and its save)
    assert any(SUPPLIED in e.message for e in services.draft_check(with_read_tool(harness.head.files),
                                                                   harness=harness))
    client.force_login(members["operator"])
    text = read_dir(PROPOSER_HARNESS)["tools/fetch_case.json"]
    checked = client.post("/w/acme/harnesses/avatar/edit/check/", {"path": "tools/fetch_case.json", "text": text},
                          HTTP_HX_REQUEST="true")
    assert SUPPLIED in checked.content.decode()
    saved = client.post("/w/acme/harnesses/avatar/edit/", {"path": "tools/fetch_case.json", "text": text})
    assert saved.status_code == 422 and SUPPLIED in saved.content.decode()
    # the platform API
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="platform", scopes=["read", "write"])[1]
    response = client.post("/api/v1/harnesses/avatar/versions", data=json.dumps(
        {"base_version": 1, "message": "borrow a read tool", "files": with_read_tool(harness.head.files)}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 422 and any(SUPPLIED in e["message"] for e in response.json()["errors"])
    # the zip import, as a new harness and as a new version of an existing one
    for name in ("my-proposer", "avatar"):
        imported = client.post("/w/acme/harnesses/import/", {"name": name, "archive": zip_of(read_dir(PROPOSER_HARNESS))})
        assert imported.status_code == 422 and SUPPLIED in imported.content.decode(), name
    assert not Harness.objects.filter(name="my-proposer").exists()
    assert HarnessVersion.objects.filter(harness=harness).count() == 1


def test_the_zip_import_takes_the_proposer_under_its_own_name(client, members):
    client.force_login(members["operator"])
    response = client.post("/w/acme/harnesses/import/", {"name": PROPOSER_NAME, "archive": zip_of(read_dir(PROPOSER_HARNESS))})
    assert response.status_code == 302
    assert Harness.objects.get(name=PROPOSER_NAME).head.number == 1


def test_a_diagnosis_runs_the_workspaces_proposer_harness(workspace):
    """The harness that may bind the read tools is the one the diagnosis runs with them."""
    assert _proposer_spec(workspace) is None  # none stored: the shipped proposer runs
    files = read_dir(PROPOSER_HARNESS)
    stored = services.harness_create(actor=SYSTEM, workspace=workspace, name=PROPOSER_NAME, files=files)
    edited = {**files, "harness.yaml": files["harness.yaml"].replace("max_turns: 6", "max_turns: 5")}
    second = services.version_commit(actor=SYSTEM, harness=stored, files=edited, base_version=stored.head,
                                     message="v2").version
    assert _proposer_spec(workspace).settings.max_turns == 5  # no production label: the head
    services.label_move(actor=SYSTEM, harness=stored, name="production", version=stored.versions.get(number=1),
                        reason="the first one")
    assert _proposer_spec(workspace) == parse_files(files) and second.number == 2
