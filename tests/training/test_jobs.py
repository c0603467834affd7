"""Training jobs through the services, the API and the console: bad configs are refused naming the field
with nothing written or queued; launch, cancel and promotion are audited; a job runs the real pipeline
(tiny random SmolLM2) and registers its checkpoint with lineage and metrics."""

import json

import pytest

from evaluation import services as eval_services
from serving.services import api_key_create
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.models import Checkpoint, TrainingJob
from training.services import TrainingError
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


@pytest.fixture
def mini(workspace):
    return mini_harness(workspace)


def launch(workspace, mini, actor=SYSTEM, **overrides):
    kwargs = {"actor": actor, "workspace": workspace, "name": "hat-1", "config": tiny_config(sft(2)),
              "harness_versions": [mini.head], "simulator": {"seed": 1, "size": 4}, "start": False, **overrides}
    return services.job_create(**kwargs)


@pytest.mark.parametrize(("config", "field"), [
    (tiny_config(sft(0)), "stages[0].config.max_steps"),
    (tiny_config(("sft", {"learning_rate": "fast"})), "stages[0].config.learning_rate"),
    (tiny_config(("sft", {"max_steps": 2, "warmup_steps": 5})), "stages[0].config.warmup_steps"),
    (tiny_config(("dpo", {})), "stages[0].kind"),
    ({**tiny_config(sft(2)), "model": {"base": "tiny-random-smollm2", "finetune": "half"}}, "model.finetune"),
    ({**tiny_config(sft(2)), "optimiser": "adam"}, "optimiser"),
    ({**tiny_config(sft(2)), "stages": []}, "stages"),
])
def test_bad_config_names_the_field_and_leaves_nothing(workspace, mini, config, field, django_capture_on_commit_callbacks):
    audits = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks() as queued:
        with pytest.raises(TrainingError) as error:
            launch(workspace, mini, config=config, start=True)
    assert error.value.field == field
    assert field in str(error.value)
    assert TrainingJob.objects.count() == 0 and AuditEvent.objects.count() == audits and queued == []


def test_bad_request_parts_name_their_field(workspace, mini, foreign_harness):
    for overrides, field in [
        ({"name": "no spaces"}, "name"),
        ({"harness_versions": []}, "harness_versions"),
        ({"harness_versions": [foreign_harness.head]}, "harness_versions"),
        ({"simulator": {"seed": 1, "size": "many"}}, "simulator"),
        ({"imported_jsonl": '{"case_id": "x"}\nnot json'}, "imported_jsonl"),
        ({"config": {**tiny_config(sft(2)), "harnesses": []}}, "harnesses"),
        ({"simulator": None}, "data.simulator_cases"),  # sft without cases
    ]:
        with pytest.raises(TrainingError) as error:
            launch(workspace, mini, **overrides)
        assert error.value.field == field, (overrides, error.value)
    assert TrainingJob.objects.count() == 0


def test_launch_records_the_job_and_queues_it_after_commit(workspace, mini, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as queued:
        job = launch(workspace, mini, start=True)
    assert len(queued) == 1
    assert job.status == "queued" and job.stages == ["sft"] and job.base_model == "tiny-random-smollm2"
    assert list(job.harness_versions.all()) == [mini.head]
    assert job.data_sources == {"simulator": {"seed": 1, "size": 4}}
    audit = AuditEvent.objects.get(action="training_job.launch")
    assert audit.target_id == str(job.pk) and audit.after["harness_versions"] == ["mini@v1"]


def test_lineage_exclusions_are_passed_as_content_hashes(workspace, mini):
    from training.case_hashing import case_content_hash

    held_out = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hv", suite="harness_variant",
                                               seed=3, n=3)
    job = launch(workspace, mini, excluded_sets=[held_out])
    data = services.pipeline_input(config=job.config, base_model=job.base_model, harness_versions=[mini.head],
                                   excluded_sets=[held_out], data_sources=job.data_sources, imported_path=None)
    assert data["data"]["exclude"] == {"hv@v1": [case_content_hash(c.data) for c in held_out.cases.all()]}
    assert data["harnesses"] == [{"label": "mini@v1", "files": mini.head.files}]


def test_data_with_a_case_of_an_excluded_eval_set_is_refused_before_queueing(workspace, mini,
                                                                            django_capture_on_commit_callbacks):
    held_out = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                               seed=3, n=3)
    leaked = held_out.cases.order_by("pk").first().data
    audits = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks() as queued:
        with pytest.raises(TrainingError) as error:
            launch(workspace, mini, excluded_sets=[held_out], imported_jsonl=json.dumps(leaked) + "\n", start=True)
    assert error.value.field == "excluded_sets"
    assert "lsqa@v1" in str(error.value) and f"sft:{leaked['case_id']}" in str(error.value)
    assert TrainingJob.objects.count() == 0 and queued == [] and AuditEvent.objects.count() == audits
    assert launch(workspace, mini, excluded_sets=[held_out]).pk  # the simulator's own cases do not overlap


def test_cancel_a_queued_job_is_immediate_and_audited(workspace, mini, actors):
    job = launch(workspace, mini)
    with pytest.raises(Exception, match="write"):
        services.job_cancel(actor=actors["viewer"], job=job)
    job = services.job_cancel(actor=actors["operator"], job=job)
    assert job.status == "cancelled" and job.cancel_requested
    assert AuditEvent.objects.filter(action="training_job.cancel", target_id=str(job.pk)).count() == 1
    # The task finds nothing to do.
    assert services.job_execute(job_id=job.pk) == "cancelled"


def test_promotion_needs_approve_and_is_audited(workspace, actors):
    checkpoint = Checkpoint.objects.create(workspace=workspace, stage="sft", base_model="m", path="/x")
    with pytest.raises(Exception, match="approve"):
        services.checkpoint_promote(actor=actors["operator"], checkpoint=checkpoint)
    services.checkpoint_promote(actor=actors["approver"], checkpoint=checkpoint)
    assert Checkpoint.objects.get(pk=checkpoint.pk).promoted
    event = AuditEvent.objects.get(action="checkpoint.promote")
    assert event.target_label == f"checkpoint:{checkpoint.pk}" and event.after == {"promoted": True}


# --- API ---------------------------------------------------------------------------------------------------

def bearer(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def tokens(workspace, foreign_workspace):
    keys = {scope: api_key_create(actor=SYSTEM, workspace=workspace, name=scope, scopes=[scope])[1]
            for scope in ("read", "write", "ingest")}
    keys["foreign"] = api_key_create(actor=SYSTEM, workspace=foreign_workspace, name="f", scopes=["write"])[1]
    return keys


def post(client, url, body, token):
    return client.post(url, json.dumps(body), content_type="application/json", **bearer(token))


def test_api_creates_lists_and_cancels_jobs_with_scopes(client, workspace, mini, tokens):
    body = {"name": "api-job", "config": tiny_config(sft(2)), "harness_versions": ["mini@v1"],
            "simulator": {"seed": 2, "size": 4}}
    assert post(client, "/api/v1/training/jobs", body, tokens["read"]).status_code == 403
    assert post(client, "/api/v1/training/jobs", body, tokens["foreign"]).status_code == 422  # no mini there
    created = post(client, "/api/v1/training/jobs", body, tokens["write"])
    assert created.status_code == 201, created.content
    job = created.json()
    assert job["status"] == "queued" and job["stages"] == ["sft"] and job["harness_versions"] == ["mini@v1"]

    listed = client.get("/api/v1/training/jobs", **bearer(tokens["read"]))
    assert [j["id"] for j in listed.json()] == [job["id"]]
    assert client.get("/api/v1/training/jobs", **bearer(tokens["ingest"])).status_code == 403
    assert client.get(f"/api/v1/training/jobs/{job['id']}", **bearer(tokens["foreign"])).status_code == 404
    assert client.get("/api/v1/training/jobs", **bearer(tokens["foreign"])).json() == []

    cancel = f"/api/v1/training/jobs/{job['id']}/cancel"
    assert post(client, cancel, {}, tokens["read"]).status_code == 403
    assert post(client, cancel, {}, tokens["foreign"]).status_code == 404
    cancelled = post(client, cancel, {}, tokens["write"])
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_api_bad_config_is_422_with_the_field(client, workspace, mini, tokens):
    body = {"name": "bad", "config": tiny_config(sft(2, learning_rate=5)), "harness_versions": ["mini@v1"],
            "simulator": {"seed": 2, "size": 4}}
    response = post(client, "/api/v1/training/jobs", body, tokens["write"])
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "stages[0].config.learning_rate"
    response = post(client, "/api/v1/training/jobs", {**body, "config": tiny_config(sft(2)),
                                                       "harness_versions": ["mini@v9"]}, tokens["write"])
    assert response.status_code == 422 and response.json()["errors"][0]["path"] == "harness_versions"
    assert TrainingJob.objects.count() == 0


def test_api_lists_checkpoints_of_its_workspace_only(client, workspace, foreign_workspace, tokens):
    own = Checkpoint.objects.create(workspace=workspace, stage="sft", base_model="m", path="/a",
                                    harness_hashes=["abc"], data_lineage={"cases": 4})
    Checkpoint.objects.create(workspace=foreign_workspace, stage="sft", base_model="m", path="/b")
    listed = client.get("/api/v1/training/checkpoints", **bearer(tokens["read"])).json()
    assert [(c["id"], c["backend"], c["data_lineage"]) for c in listed] == [(own.pk, f"checkpoint:{own.pk}",
                                                                               {"cases": 4})]


def test_training_endpoints_are_in_the_openapi_docs(client, tokens):
    paths = client.get("/api/openapi.json").json()["paths"]
    assert {"/api/v1/training/jobs", "/api/v1/training/jobs/{job_id}/cancel",
            "/api/v1/training/checkpoints"} <= set(paths)


# --- Console -----------------------------------------------------------------------------------------------

def test_console_launch_form_shows_the_field_of_a_bad_config(client, members, workspace, mini):
    client.force_login(members["operator"])
    form = {"name": "console-job", "harness_versions": ["mini@v1"], "seed": "1", "size": "4",
            "config": json.dumps(tiny_config(sft(2, lr_scheduler_type="wavy")))}
    response = client.post("/w/acme/training/jobs/", form)
    assert response.status_code == 422
    assert "stages[0].config.lr_scheduler_type" in response.content.decode()
    assert TrainingJob.objects.count() == 0
    response = client.post("/w/acme/training/jobs/", {**form, "config": "{not json"})
    assert response.status_code == 422 and "Not launched: Config: not valid JSON (line 1, column 2" in response.content.decode()
    response = client.post("/w/acme/training/jobs/", {**form, "config": json.dumps(tiny_config(sft(2)))})
    job = TrainingJob.objects.get()
    assert response.status_code == 302 and response.url == f"/w/acme/training/jobs/{job.pk}/"
    page = client.get("/w/acme/training/").content.decode()
    assert "console-job" in page and "<progress" in page
    # While a job is active the table refreshes itself as an htmx fragment.
    fragment = client.get("/w/acme/training/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="jobs-table"') and 'hx-trigger="every 3s"' in fragment
    assert "<form" not in fragment and "console-job" in fragment


def test_job_page_embeds_the_snapshot_and_loads_chart_js(client, members, workspace, mini):
    job = launch(workspace, mini)
    job.metric_rows.create(stage="sft", step=1, total_steps=2, values={"loss": 3.5, "learning_rate": 1e-5})
    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/training/jobs/{job.pk}/").content.decode()
    assert "vendor/chart.js/chart.umd.min.js" in page and '"loss": 3.5' in page
    assert "innerHTML" not in page


# --- Running the real pipeline in this process --------------------------------------------------------------

@pytest.mark.timeout(1200)
@pytest.mark.django_db(transaction=True)  # the job's heartbeat thread has its own database connection
def test_a_job_runs_the_pipeline_and_registers_its_checkpoint(workspace, mini, settings, tmp_path):
    settings.TRAINING_ARTIFACTS_DIR = tmp_path
    held_out = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hv", suite="harness_variant",
                                               seed=77, n=2)
    job = launch(workspace, mini, config=tiny_config(sft(3)), excluded_sets=[held_out])
    assert services.job_execute(job_id=job.pk) == "done"
    job.refresh_from_db()
    assert job.status == "done" and job.attempts == 1 and job.step == 3 and job.total_steps == 3
    losses = [row.values["loss"] for row in job.metric_rows.order_by("id")]
    assert len(losses) == 3 and all(isinstance(v, float) for v in losses) and len(set(losses)) > 1
    checkpoint = job.checkpoints.get()
    assert checkpoint.stage == "sft" and checkpoint.parent is None and checkpoint.base_model == "tiny-random-smollm2"
    assert (tmp_path / f"job-{job.pk}" / "stages" / "00-sft" / "model" / "config.json").is_file()
    # The version it was given and the HSA variants made from it.
    assert mini.head.content_hash in checkpoint.harness_hashes and len(checkpoint.harness_hashes) > 1
    assert "hv@v1" in json.dumps(checkpoint.data_lineage)  # the exclusion it was checked against
    assert job.resolved_config["stages"][0]["config"]["max_steps"] == 3
    assert any("registered checkpoint:" in line for line in job.log_tail)
