"""Console harness pages: zip round trip, editor conflict page, query counts on hot pages."""

import io
import zipfile

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from harness import services
from harness.models import Harness
from workspaces.access import Actor

pytestmark = pytest.mark.django_db


def test_zip_download_then_upload_is_lossless(client, members, harness):
    client.force_login(members["operator"])
    archive = client.get("/w/acme/harnesses/avatar/v/1/export.zip")
    assert archive.status_code == 200 and archive["Content-Type"] == "application/zip"
    upload = io.BytesIO(archive.content)
    upload.name = "avatar.zip"
    response = client.post("/w/acme/harnesses/import/", {"name": "copy", "archive": upload, "message": "copy"})
    assert response.status_code == 302
    copy = Harness.objects.get(name="copy")
    assert copy.head.content_hash == harness.head.content_hash and copy.head.files == harness.head.files


def test_bad_zip_is_refused_with_paths_and_nothing_written(client, members, harness):
    client.force_login(members["operator"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in harness.head.files.items():
            archive.writestr(f"wrapped/{path}", text)
        archive.writestr("wrapped/hooks/broken.yaml", "event: nonsense\n")
    buffer.seek(0)
    buffer.name = "broken.zip"
    response = client.post("/w/acme/harnesses/import/", {"name": "broken", "archive": buffer})
    assert response.status_code == 422 and b"hooks/broken.yaml" in response.content
    assert not Harness.objects.filter(name="broken").exists()
    garbage = io.BytesIO(b"not a zip")
    garbage.name = "x.zip"
    response = client.post("/w/acme/harnesses/import/", {"name": "broken", "archive": garbage})
    assert response.status_code == 422 and b"not a valid zip" in response.content


def test_commit_of_stale_draft_shows_conflict_page(client, members, actors, harness):
    client.force_login(members["operator"])
    client.get("/w/acme/harnesses/avatar/edit/")  # opens a draft on v1
    path = next(p for p in sorted(harness.head.files) if p.endswith("SKILL.md"))
    text = harness.head.files[path] + "- mine\n"
    assert client.post("/w/acme/harnesses/avatar/edit/", {"path": path, "text": text}).status_code == 302
    theirs = {**harness.head.files, path: harness.head.files[path] + "- theirs\n"}
    services.version_commit(actor=actors["approver"], harness=harness, files=theirs, base_version=harness.head,
                            message="theirs")
    response = client.post("/w/acme/harnesses/avatar/edit/commit/", {"message": "mine"})
    assert response.status_code == 409
    assert b"Commit refused" in response.content and b"- theirs" in response.content
    assert harness.versions.count() == 2


def test_editor_check_returns_errors_partial(client, members, harness):
    client.force_login(members["operator"])
    response = client.post("/w/acme/harnesses/avatar/edit/check/",
                           {"path": "tools/new_tool.json", "text": "{\"type\": \"function\"}"},
                           HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert b"tools/new_tool.json" in response.content and b"<html" not in response.content


@pytest.mark.parametrize("url", ["/w/acme/", "/w/acme/harnesses/avatar/", "/w/acme/audit/"])
def test_hot_pages_use_a_bounded_number_of_queries(client, members, harness, url):
    system = Actor.system("t")
    head = harness.head
    path = next(p for p in sorted(head.files) if p.endswith("SKILL.md"))
    for i in range(5):
        files = {**head.files, path: head.files[path] + f"- rule {i}\n"}
        head = services.version_commit(actor=system, harness=harness, files=files, base_version=head,
                                       message=f"v{i}").version
        services.label_move(actor=system, harness=harness, name=f"l{i}", version=head, reason="r")
    client.force_login(members["viewer"])
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    assert len(queries) <= 15, [q["sql"] for q in queries]


def test_hsa_preview_shows_mapping_and_diff(client, members, harness):
    client.force_login(members["viewer"])
    page = client.get("/w/acme/harnesses/avatar/v/1/augment/", {"dimension": "tool_definitions", "seed": "3"})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="mapping"' in html
    assert 'data-path="tools/' in html  # tool modules changed, shown as a diff
    assert 'data-path="harness.yaml"' not in html  # limits belong to another dimension, not asked for
