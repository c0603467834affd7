"""The registry's platform API: reads, commits with conflict checks, label moves, clear 4xx errors."""

import json

import pytest

from serving.services import api_key_create
from workspaces.access import Actor

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(workspace):
    return api_key_create(actor=Actor.system("t"), workspace=workspace, name="platform",
                          scopes=["read", "write", "approve"])[1]


def call(client, method, url, token, body=None):
    kwargs = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if body is not None:
        kwargs.update(data=json.dumps(body), content_type="application/json")
    return getattr(client, method)(url, **kwargs)


def test_read_version_by_label_and_number(client, token, harness):
    call(client, "put", "/api/v1/harnesses/avatar/labels/production", token, {"version": 1, "reason": "go"})
    by_label = call(client, "get", "/api/v1/harnesses/avatar/labels/production", token).json()
    by_number = call(client, "get", "/api/v1/harnesses/avatar/versions/v1", token).json()
    assert by_label["number"] == by_number["number"] == 1
    assert by_label["content_hash"] == harness.head.content_hash
    assert by_label["labels"] == ["production"]
    assert by_label["files"] == harness.head.files
    assert {s["name"] for s in by_label["spec"]["skills"]}  # the structured spec is served too


def test_commit_conflict_and_validation_errors(client, token, harness):
    files = dict(harness.head.files)
    path = next(p for p in sorted(files) if p.endswith("SKILL.md"))
    changed = {**files, path: files[path] + "- extra rule\n"}
    ok = call(client, "post", "/api/v1/harnesses/avatar/versions", token,
              {"base_version": 1, "message": "extra rule", "files": changed})
    assert ok.status_code == 201 and ok.json()["version"]["number"] == 2

    stale = call(client, "post", "/api/v1/harnesses/avatar/versions", token,
                 {"base_version": 1, "message": "stale", "files": {**files, path: files[path] + "- other\n"}})
    assert stale.status_code == 409
    assert stale.json()["head"] == 2 and stale.json()["errors"][0]["path"] == path

    tool = next(p for p in sorted(files) if p.startswith("tools/"))
    bad_schema = json.loads(files[tool])
    bad_schema["function"]["parameters"]["properties"] = {"x": {"type": "strin"}}
    invalid = call(client, "post", "/api/v1/harnesses/avatar/versions", token,
                   {"base_version": 2, "message": "bad", "files": {**changed, tool: json.dumps(bad_schema)}})
    assert invalid.status_code == 422
    assert any(e["path"].startswith(tool) and "parameters" in e["message"] + e["path"]
               for e in invalid.json()["errors"])


def test_diff_endpoint_and_whitespace_only_commits(client, token, harness):
    files = dict(harness.head.files)
    path = next(p for p in sorted(files) if p.endswith("SKILL.md"))
    # A whitespace-only change is the same content: no new version.
    same = call(client, "post", "/api/v1/harnesses/avatar/versions", token,
                {"base_version": 1, "message": "spaces", "files": {**files, path: files[path] + "\n\n"}})
    assert same.status_code == 200 and same.json()["created"] is False
    call(client, "post", "/api/v1/harnesses/avatar/versions", token,
         {"base_version": 1, "message": "rule", "files": {**files, path: files[path] + "- new rule\n"}})
    diff = call(client, "get", "/api/v1/harnesses/avatar/diff?from_ref=v1&to_ref=v2", token).json()
    assert [(c["path"], c["status"]) for c in diff["changes"]] == [(path, "changed")]
    assert "+- new rule" in diff["changes"][0]["unified"]


def test_malformed_requests_get_clear_errors(client, token, harness):
    missing = call(client, "post", "/api/v1/harnesses/avatar/versions", token, {"message": "no files"})
    assert missing.status_code == 422 and any("files" in e["path"] for e in missing.json()["errors"])
    unknown = call(client, "get", "/api/v1/harnesses/nope/versions", token)
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    bad_ref = call(client, "get", "/api/v1/harnesses/avatar/versions/v99", token)
    assert bad_ref.status_code == 404
    empty_reason = call(client, "put", "/api/v1/harnesses/avatar/labels/staging", token, {"version": 1, "reason": " "})
    assert empty_reason.status_code == 422 and empty_reason.json()["errors"][0]["path"].endswith("reason")


def test_revoked_key_is_refused(client, workspace, harness):
    from serving.models import ApiKey
    from serving.services import api_key_revoke

    key_token = api_key_create(actor=Actor.system("t"), workspace=workspace, name="tmp", scopes=["read"])[1]
    assert call(client, "get", "/api/v1/harnesses", key_token).status_code == 200
    key = ApiKey.objects.get(name="tmp")
    assert key.last_used_at is not None and key.secret_hash not in key_token
    api_key_revoke(actor=Actor.system("t"), key=key)
    assert call(client, "get", "/api/v1/harnesses", key_token).status_code == 401


def test_openapi_docs_are_served(client):
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200
    assert "/api/v1/harnesses/{name}/versions" in schema.json()["paths"]
