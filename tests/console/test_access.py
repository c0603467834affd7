"""Every console URL and API endpoint × role × foreign workspace: no anonymous pages, no leaks."""

import json

import pytest
from django.urls import URLPattern, URLResolver, reverse
from django.utils import timezone

from console import urls as console_urls
from evaluation import services as eval_services
from evaluation.metrics.ifeval import mini_records
from evaluation.models import EvalResult, EvalRun
from harness import services
from serving.models import Experiment, Trace
from serving.services import api_key_create
from training.models import TrainingJob
from workspaces.access import Actor

pytestmark = pytest.mark.django_db

# url name → (method, capability needed). Every console URL must appear here (checked below).
CONSOLE = {
    "harness_list": ("GET", "read"),
    "member_list": ("GET", "read"),
    "member_set": ("POST", "admin"),
    "member_invite": ("POST", "admin"),
    "key_list": ("GET", "admin"),
    "key_revoke": ("POST", "admin"),
    "tool_hosts_set": ("POST", "admin"),
    "audit_log": ("GET", "read"),
    "harness_import": ("GET", "write"),
    "harness_detail": ("GET", "read"),
    "harness_archive": ("POST", "write"),
    "version_detail": ("GET", "read"),
    "version_export": ("GET", "read"),
    "version_diff": ("GET", "read"),
    "harness_edit": ("GET", "write"),
    "harness_edit_check": ("POST", "write"),
    "harness_edit_preview": ("GET", "write"),
    "harness_edit_add": ("POST", "write"),
    "harness_edit_remove": ("POST", "write"),
    "harness_commit": ("POST", "write"),
    "harness_draft_action": ("POST", "write"),
    "label_move": ("POST", "write"),
    "label_rollback": ("POST", "write"),
    "playground": ("GET", "write"),
    "playground_reset": ("POST", "write"),
    "trace_list": ("GET", "read"),
    "trace_detail": ("GET", "read"),
    "evaluation_home": ("GET", "read"),
    "eval_set_create": ("POST", "write"),
    "eval_set_detail": ("GET", "read"),
    "eval_set_archive": ("POST", "write"),
    "eval_set_delete": ("POST", "admin"),
    "eval_run_create": ("POST", "write"),
    "eval_run_detail": ("GET", "read"),
    "eval_run_cancel": ("POST", "write"),
    "eval_result_detail": ("GET", "read"),
    "annotate": ("GET", "write"),
    "agreement": ("GET", "read"),
    "eval_compare": ("GET", "read"),
    "version_augment": ("GET", "read"),
    "experiment_list": ("GET", "read"),
    "experiment_new": ("POST", "write"),
    "experiment_detail": ("GET", "read"),
    "experiment_action": ("POST", "write"),
    "evolution_diagnose": ("POST", "write"),
    "diagnosis_detail": ("GET", "read"),
    "evolution_round_create": ("POST", "write"),
    "evolution_round_evaluate": ("POST", "write"),
    "evolution_round_promote": ("POST", "write"),
    "evolution_keep": ("POST", "write"),
    "evolution_proposal_action": ("POST", "write"),
    "evolution_history": ("GET", "read"),
    "evolution_diagnose_live": ("POST", "write"),
    "experiment_archive": ("POST", "write"),
    "experiment_delete": ("POST", "admin"),
    "training_home": ("GET", "read"),
    "training_job_create": ("POST", "write"),
    "training_job_detail": ("GET", "read"),
    "training_job_cancel": ("POST", "write"),
    "checkpoint_promote": ("POST", "approve"),
    "matrix_create": ("POST", "write"),
    "matrix_detail": ("GET", "read"),
    "webhook_list": ("GET", "admin"),
    "webhook_delete": ("POST", "admin"),
    "webhook_replay": ("POST", "admin"),
}
EVOLUTION_IDS = ("diagnosis_id", "round_id", "proposal_id")
TRAINING_IDS = ("job_id", "checkpoint_id", "matrix_id")
WEBHOOK_IDS = ("endpoint_id", "delivery_id")
# /metrics answers a bearer scrape token, never a session (tests/serving/test_metrics.py checks it).
PUBLIC = {"login", "logout", "healthz", "password_reset_confirm", "password_reset_complete", "metrics"}
# URLs outside any workspace: name → who may use them.
GLOBAL = {"workspace_new": "staff"}
ROLE_CAPS = {"viewer": {"read"}, "operator": {"read", "write"}, "approver": {"read", "write", "approve"},
             "admin": {"read", "write", "approve", "admin"}}


def url_names(patterns, prefix=""):
    for entry in patterns:
        if isinstance(entry, URLPattern) and entry.name:
            yield entry.name
        elif isinstance(entry, URLResolver) and not str(entry.pattern).startswith("api/"):
            yield from url_names(entry.url_patterns)


def console_url(name: str, ws: str, harness: str, key_id) -> str:
    """`key_id` is the key's id, or a dict of ids (key_id, run_id, result_id) of the objects to reach."""
    ids = key_id if isinstance(key_id, dict) else {"key_id": key_id}
    kwargs = {"ws": ws}
    route = next(p for p in console_urls.urlpatterns if getattr(p, "name", None) == name)
    params = set(route.pattern.converters)
    if "name" in params:
        kwargs["name"] = harness
    if "number" in params:
        kwargs["number"] = 1
    if "label" in params:
        kwargs["label"] = "staging"
    if "key_id" in params:
        kwargs["key_id"] = ids["key_id"]
    for param in ("run_id", "result_id", *EVOLUTION_IDS, *TRAINING_IDS, *WEBHOOK_IDS):
        if param in params:
            kwargs[param] = ids[param]
    if "action" in params:
        kwargs["action"] = {"experiment_action": "stop", "evolution_proposal_action": "accept"}.get(name, "discard")
    if "key" in params:
        kwargs["key"] = "exp-secret" if harness == "secret" else "exp-" + ws
    if "trace_id" in params:
        kwargs["trace_id"] = "t-rival" if harness == "secret" else "t-" + ws
    return reverse(name, kwargs=kwargs)


@pytest.fixture
def world(workspace, foreign_workspace, members, harness, foreign_harness):
    system = Actor.system("test")
    services.label_move(actor=system, harness=harness, name="staging", version=harness.head, reason="seed")
    own_key, _ = api_key_create(actor=system, workspace=workspace, name="own", scopes=["read"])
    for space, h in ((workspace, harness), (foreign_workspace, foreign_harness)):
        Trace.objects.create(workspace=space, trace_id=f"t-{space.slug}", room_id="r", viewer_id="v", harness=h,
                             harness_version=h.head, backend="scripted", outcome="replied", message="m",
                             latency_ms=1.0, data={"steps": []}, created_at=timezone.now())
    foreign_key, _ = api_key_create(actor=system, workspace=foreign_workspace, name="theirs", scopes=["read"])
    ids = {}
    for space, h, key in ((workspace, harness, own_key), (foreign_workspace, foreign_harness, foreign_key)):
        # Eval sets are named like the workspace's harness so one `name` URL argument serves both.
        version = eval_services.eval_set_add_version(actor=system, workspace=space, name=h.name, suite="ifeval",
                                                     cases=[{**mini_records()[0], "case_id": "k1",
                                                             "category": "ifeval"}], source="t")
        run = EvalRun.objects.create(workspace=space, set_version=version, harness=h, harness_version=h.head,
                                     backend="scripted", total=1, created_by="t", status="done")
        result = EvalResult.objects.create(run=run, case=version.cases.get(), category="ifeval", accuracy=1,
                                           effectiveness=1, judge_version="j", outcome="replied", latency_ms=1,
                                           trace={"steps": []})
        ids[space.slug] = {"key_id": key.pk, "run_id": run.pk, "result_id": result.pk, **evolution_objects(run),
                           **training_objects(space, h, run), **webhook_objects(space)}
        Experiment.objects.create(workspace=space, key="exp-secret" if h.name == "secret" else f"exp-{space.slug}",
                                  seed="s", harness=h, created_by="t")
    return {"own_key": ids["acme"], "foreign_key": ids["rival"]}


def evolution_objects(run) -> dict:
    """A diagnosis of `run` with one cluster, one pending valid proposal and a round (ids by URL parameter)."""
    from evaluation.evolution.models import Cluster, Diagnosis, Proposal, Round
    from evaluation.models import EvalSet, EvalSetVersion

    diagnosis = Diagnosis.objects.create(workspace=run.workspace, harness=run.harness, version=run.harness_version,
                                         run=run, status="done", created_by="t")
    cluster = Cluster.objects.create(diagnosis=diagnosis, cluster_id="c-1", rank=1, title="t", core="c", size=2,
                                     share=1.0, accuracy_lost=0.5, effectiveness_lost=0.5, data={})
    proposal = Proposal.objects.create(diagnosis=diagnosis, cluster=cluster, generator="rules:t", hypothesis="h",
                                       diff="", base_hash=run.harness_version.content_hash, fingerprint="f", valid=True)
    other = Diagnosis.objects.create(workspace=run.workspace, harness=run.harness, version=run.harness_version,
                                     run=run, status="done", created_by="t")
    evolution_round = Round.objects.create(diagnosis=other, harness=run.harness, candidate=run.harness_version,
                                           approved_by="t")
    live_set = EvalSet.objects.create(workspace=run.workspace, name=f"{run.harness.name}-live", suite="live_stream_qa")
    live_version = EvalSetVersion.objects.create(eval_set=live_set, number=1, source="t", case_count=0, created_by="t")
    live_run = EvalRun.objects.create(workspace=run.workspace, set_version=live_version, harness=run.harness,
                                      harness_version=run.harness_version, backend="scripted", created_by="t",
                                      status="done")
    return {"diagnosis_id": diagnosis.pk, "round_id": evolution_round.pk, "proposal_id": proposal.pk,
            "live_run_id": live_run.pk}


def training_objects(space, harness, run) -> dict:
    """A finished training job with one checkpoint, and a matrix holding `run`, in `space`."""
    from training.models import Checkpoint, CheckpointMatrix

    job = TrainingJob.objects.create(workspace=space, name="j", base_model="m", stages=["sft"], config={},
                                     status="done", created_by="t")
    checkpoint = Checkpoint.objects.create(workspace=space, job=job, stage="sft", base_model="m",
                                           path=f"/nowhere/{space.slug}")
    matrix = CheckpointMatrix.objects.create(workspace=space, set_version=run.set_version, created_by="t")
    matrix.runs.set([run])
    return {"job_id": job.pk, "checkpoint_id": checkpoint.pk, "matrix_id": matrix.pk}


def webhook_objects(space) -> dict:
    """An endpoint of `space` with one delivery (ids by URL parameter)."""
    from workspaces.models import WebhookDelivery, WebhookEndpoint

    endpoint = WebhookEndpoint.objects.create(workspace=space, url=f"https://hooks.{space.slug}.example/in",
                                              events=["label.moved"], secret="s", created_by="t")
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, event="label.moved", payload={})
    return {"endpoint_id": endpoint.pk, "delivery_id": delivery.pk}


def url_params(name: str) -> set[str]:
    route = next(p for p in console_urls.urlpatterns if getattr(p, "name", None) == name)
    return set(route.pattern.converters)


def test_every_console_url_is_in_the_matrix():
    names = set(url_names(console_urls.urlpatterns))
    assert set(GLOBAL) <= names
    names = names - PUBLIC - {"home"} - set(GLOBAL)
    assert names == set(CONSOLE), "add new console URLs to the access matrix"


def request(client, method, url):
    return client.post(url) if method == "POST" else client.get(url)


@pytest.mark.parametrize("name", sorted(CONSOLE))
def test_anonymous_is_sent_to_login(client, world, name):
    method, _ = CONSOLE[name]
    response = request(client, method, console_url(name, "acme", "avatar", world["own_key"]))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


@pytest.mark.parametrize("role", ["viewer", "operator", "approver", "admin"])
@pytest.mark.parametrize("name", sorted(CONSOLE))
def test_role_matrix_on_own_workspace(client, members, world, role, name):
    client.force_login(members[role])
    method, capability = CONSOLE[name]
    status = request(client, method, console_url(name, "acme", "avatar", world["own_key"])).status_code
    if capability in ROLE_CAPS[role]:
        assert status not in (401, 403, 404), f"{role} should reach {name}"
    else:
        assert status == 403, f"{role} must not reach {name}"


@pytest.mark.parametrize("role", ["viewer", "admin", "outsider"])
@pytest.mark.parametrize("name", sorted(CONSOLE))
def test_foreign_workspace_answers_404(client, members, world, role, name):
    client.force_login(members[role])
    method, _ = CONSOLE[name]
    # Their workspace, by slug.
    assert request(client, method, console_url(name, "rival", "secret", world["foreign_key"])).status_code == 404
    # Their objects (harness, key), reached through our workspace's URL.
    url = console_url(name, "acme", "secret", world["foreign_key"])
    foreign_object = "secret" in url or "t-rival" in url or "exp-rival" in url or any(
        f"/{world['foreign_key'][k]}/" in url for k in ("key_id", "run_id", "result_id", *EVOLUTION_IDS, *TRAINING_IDS, *WEBHOOK_IDS)
        if k in url_params(name))
    if role != "outsider" and foreign_object:
        status = request(client, method, url).status_code
        _, capability = CONSOLE[name]
        assert status == (404 if capability in ROLE_CAPS[role] else 403)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_workspace_creation_is_for_staff(client, members, method):
    url = reverse("workspace_new")
    assert request(client, method, url).status_code == 302  # to login
    client.force_login(members["admin"])  # a workspace admin is not staff
    assert request(client, method, url).status_code == 403
    members["outsider"].is_staff = True
    members["outsider"].save()
    client.force_login(members["outsider"])
    assert request(client, method, url).status_code in (200, 422)


def test_home_needs_login(client, members):
    assert client.get(reverse("home")).status_code == 302
    client.force_login(members["viewer"])
    assert client.get(reverse("home")).status_code == 302  # straight to the only workspace


# --- API -----------------------------------------------------------------------------------------

# Every API operation (from the OpenAPI schema, checked below) → the scope it needs, a request body, and
# whether it addresses an object by name in the URL (a foreign key then gets 404, not data).
API = {
    ("GET", "/api/v1/harnesses"): ("read", None, False),
    ("GET", "/api/v1/harnesses/{name}/versions"): ("read", None, True),
    ("GET", "/api/v1/harnesses/{name}/versions/{ref}"): ("read", None, True),
    ("GET", "/api/v1/harnesses/{name}/labels/{label}"): ("read", None, True),
    ("GET", "/api/v1/harnesses/{name}/diff"): ("read", None, True),
    ("POST", "/api/v1/harnesses/{name}/versions"): ("write", "commit", True),
    ("PUT", "/api/v1/harnesses/{name}/labels/{label}"): ("write", {"version": 1, "reason": "ship"}, True),
    ("POST", "/api/v1/rooms/{room_id}/reply"): ("read", {"message": "hi", "viewer_id": "v1"}, True),
    ("POST", "/api/v1/events"): ("ingest", {"events": []}, False),
    ("POST", "/api/v1/eval/runs/{run_id}/diagnoses"): ("write", None, True),
    ("POST", "/api/v1/harnesses/{name}/diagnoses"): ("write", {"version": 1, "start": "2026-11-01T00:00:00Z",
                                                              "end": "2026-11-02T00:00:00Z"}, True),
    ("GET", "/api/v1/diagnoses/{diagnosis_id}"): ("read", None, True),
    ("GET", "/api/v1/diagnoses/{diagnosis_id}/clusters"): ("read", None, True),
    ("GET", "/api/v1/diagnoses/{diagnosis_id}/proposals"): ("read", None, True),
    ("POST", "/api/v1/proposals/{proposal_id}/accept"): ("write", None, True),
    ("POST", "/api/v1/proposals/{proposal_id}/reject"): ("write", {"reason": "too broad"}, True),
    ("GET", "/api/v1/training/jobs"): ("read", None, False),
    ("GET", "/api/v1/training/jobs/{job_id}"): ("read", None, True),
    ("POST", "/api/v1/training/jobs/{job_id}/cancel"): ("write", {}, True),
    ("GET", "/api/v1/training/checkpoints"): ("read", None, False),
    ("POST", "/api/v1/training/jobs"): ("write", {
        "name": "api-job", "harness_versions": ["avatar@v1"], "simulator": {"seed": 1, "size": 2},
        "config": {"model": {"base": "tiny-random-smollm2"}, "stages": [{"kind": "sft", "config": {"max_steps": 1}}]},
    }, False),
}
# A key whose scopes do not include the one needed.
WITHOUT = {"read": "ingest", "write": "read", "ingest": "read"}
QUERIES = {"/api/v1/harnesses/{name}/diff": "?from_ref=1&to_ref=1"}


def test_every_api_operation_is_in_the_matrix():
    from console.api import api

    paths = api.get_openapi_schema()["paths"]
    operations = {(method.upper(), path) for path, item in paths.items() for method in item}
    assert operations == set(API), "add new API operations to the access matrix"


def bearer(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def tokens(workspace, foreign_workspace, world):
    system = Actor.system("test")
    out = {}
    for scope in ("read", "write", "approve", "ingest"):
        out[scope] = api_key_create(actor=system, workspace=workspace, name=scope, scopes=[scope])[1]
    out["foreign"] = api_key_create(actor=system, workspace=foreign_workspace, name="f", scopes=["read", "write", "approve"])[1]
    return out


def api_call(client, method, path, body, token=None, harness=None, ids=None):
    label = "canary" if method == "PUT" else "staging"  # a move to where a label already is would be a 409
    ids = {**(ids or {}), "run_id": (ids or {}).get("live_run_id")}  # the API diagnoses a simulator-suite run
    ids["job_id"] = TrainingJob.objects.filter(workspace__slug="acme").values_list("pk", flat=True).first()
    url = path.format(name="avatar", ref="1", label=label, room_id="demo-room", **ids) + QUERIES.get(path, "")
    if body == "commit":
        body = {"base_version": 1, "message": "m", "files": harness.head.files}
    headers = bearer(token) if token else {}
    data = json.dumps(body) if body is not None else None
    return getattr(client, method.lower())(url, data, content_type="application/json", **headers)


@pytest.mark.parametrize(("method", "path"), sorted(API))
def test_api_access(client, tokens, world, harness, settings, method, path):
    from serving.services import room_upsert
    from tests.serving.test_reply_api import ROOM

    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS, settings.TRACE_WRITES = "scripted", ["Hi!"], "sync"
    services.label_move(actor=Actor.system("t"), harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=harness.workspace, context=ROOM, harness=harness)
    scope, body, names_an_object = API[(method, path)]
    if path == "/api/v1/harnesses/{name}/diagnoses":  # a live diagnosis needs a judged live trace in its window
        _judged_live_trace(client, tokens["read"])
    call = lambda token: api_call(client, method, path, body, token, harness, world["own_key"])  # noqa: E731
    assert call(None).status_code == 401
    assert call("hok_deadbeef_nope").status_code == 401
    assert call(tokens[WITHOUT[scope]]).status_code == 403
    allowed = call(tokens[scope])
    assert allowed.status_code in (200, 201), allowed.content
    # A key of another workspace never reaches our objects: they do not exist for it.
    foreign = call(tokens["foreign"])
    if names_an_object:
        assert foreign.status_code == 404
    elif path.startswith("/api/v1/training/"):  # lists hold only the foreign workspace's objects; no avatar there
        assert foreign.status_code == 422 if method == "POST" else "acme" not in foreign.content.decode()
    elif scope == "read":
        assert [h["name"] for h in foreign.json()] == ["secret"]
    else:
        assert foreign.status_code == 403  # the foreign key has no ingest scope


def _judged_live_trace(client, token) -> None:
    from datetime import UTC, datetime

    from serving.models import Trace

    reply = client.post("/api/v1/rooms/demo-room/reply", json.dumps({"message": "hi", "viewer_id": "v1"}),
                        content_type="application/json", **bearer(token))
    assert reply.status_code == 200, reply.content
    Trace.objects.filter(trace_id=reply.json()["trace_id"]).update(
        judge_accuracy=0, judge_effectiveness=0.0, created_at=datetime(2026, 11, 1, 12, tzinfo=UTC))


def test_api_writes_need_scopes(client, tokens, harness):
    body = json.dumps({"base_version": 1, "message": "m", "files": harness.head.files})
    url = "/api/v1/harnesses/avatar/versions"
    assert client.post(url, body, content_type="application/json", **bearer(tokens["read"])).status_code == 403
    assert client.post(url, body, content_type="application/json", **bearer(tokens["foreign"])).status_code == 404
    assert client.post(url, body, content_type="application/json", **bearer(tokens["write"])).status_code == 200
    move = json.dumps({"version": 1, "reason": "ship"})
    url = "/api/v1/harnesses/avatar/labels/production"
    assert client.put(url, move, content_type="application/json", **bearer(tokens["write"])).status_code == 403
    assert client.put(url, move, content_type="application/json", **bearer(tokens["foreign"])).status_code == 404
    assert client.put(url, move, content_type="application/json", **bearer(tokens["approve"])).status_code == 200

