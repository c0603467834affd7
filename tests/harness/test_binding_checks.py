"""A tool bound to a builtin that is not here is refused on every way into the store, not only in the editor:
version_commit, harness_create, the platform API and the zip import. Run-supplied targets still validate."""

import io
import json
import zipfile

import pytest

from console.access import Actor
from evaluation.evolution.proposer import PROPOSER_HARNESS, READ_TOOLS
from harness import services
from harness.models import Harness, HarnessVersion
from harness.selectors import binding_targets
from harness.spec import SpecInvalid, read_dir
from serving.services import api_key_create

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


def test_the_proposer_harness_binds_run_supplied_targets_and_still_imports(workspace):
    assert set(READ_TOOLS) <= binding_targets()["sandbox"]
    harness = services.harness_create(actor=SYSTEM, workspace=workspace, name="proposer",
                                      files=read_dir(PROPOSER_HARNESS))
    assert harness.head.number == 1
