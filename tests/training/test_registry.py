"""The model registry serves: a registered checkpoint is a backend (`checkpoint:<id>`) for the reply API,
the playground and eval runs, within its workspace only; the checkpoint × harness-version matrix fans
out one eval run per cell and shows them as a heat map."""

import asyncio
import json
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from evaluation import services as eval_services
from evaluation.models import EvalRun
from serving.model_config import available_backends, backend_for
from serving.models import Room, Trace
from serving.services import api_key_create
from training import services
from training.models import Checkpoint, CheckpointMatrix
from training.services import TrainingError
from workspaces.access import Actor
from workspaces.models import AuditEvent

# The model loads (and finds its checkpoint row) in a worker thread with its own database connection.
pytestmark = pytest.mark.django_db(transaction=True)
SYSTEM = Actor.system("test")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random SmolLM2-shaped model directory with the training chat template (no training needed)."""
    from training.base_models import TINY, materialize_base

    return materialize_base(TINY, tmp_path_factory.mktemp("models"))


@pytest.fixture
def checkpoint(workspace, tiny_model_dir):
    return Checkpoint.objects.create(workspace=workspace, stage="sft", base_model="tiny-random-smollm2",
                                     path=tiny_model_dir, harness_hashes=["h"], metrics={"loss": 1.0})


def test_a_checkpoint_is_a_backend_of_its_workspace_only(workspace, foreign_workspace, checkpoint):
    name = f"checkpoint:{checkpoint.pk}"
    assert name in available_backends(workspace) and name not in available_backends(foreign_workspace)
    backend = backend_for(name, workspace=workspace)
    response = asyncio.run(backend.complete([{"role": "user", "content": "Is the red dress in stock?"}], [],
                                            max_tokens=8))
    assert response.tokens_in > 0 and 0 < response.tokens_out <= 8
    assert response.raw["model"] == name and backend.name == name
    with pytest.raises(ImproperlyConfigured, match="No checkpoint"):
        backend_for(name, workspace=foreign_workspace)
    with pytest.raises(ImproperlyConfigured, match="No checkpoint"):
        backend_for("checkpoint:999999", workspace=workspace)
    with pytest.raises(ImproperlyConfigured, match="Unknown model backend"):
        backend_for("transformers", workspace=workspace)


def test_reply_api_answers_with_a_named_checkpoint(client, workspace, foreign_workspace, harness, checkpoint,
                                                    settings):
    settings.TRACE_WRITES = "sync"
    token = api_key_create(actor=SYSTEM, workspace=workspace, name="k", scopes=["read"])[1]
    room = json.loads((Path(__file__).resolve().parents[2] / "harness" / "demo" / "room.json").read_text())
    Room.objects.create(workspace=workspace, room_id="r1", harness=harness, context=room)
    url = "/api/v1/rooms/r1/reply"
    body = {"message": "hello there", "viewer_id": "v1", "version": 1,
            "backend": f"checkpoint:{checkpoint.pk}"}
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = client.post(url, json.dumps(body), content_type="application/json", **headers)
    assert response.status_code == 200, response.content
    trace = Trace.objects.get(trace_id=response.json()["trace_id"])
    assert trace.backend == f"checkpoint:{checkpoint.pk}"
    foreign = Checkpoint.objects.create(workspace=foreign_workspace, stage="sft", base_model="m", path="/x")
    response = client.post(url, json.dumps({**body, "backend": f"checkpoint:{foreign.pk}"}),
                           content_type="application/json", **headers)
    assert response.status_code == 404 and "No checkpoint" in response.json()["detail"]  # none with that id here
    response = client.post(url, json.dumps({**body, "backend": "checkpoint:first"}), content_type="application/json",
                           **headers)
    assert response.status_code == 422 and response.json()["errors"][0]["path"].endswith("backend")


def test_an_eval_run_evaluates_a_checkpoint(workspace, harness, checkpoint):
    set_version = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hv",
                                                  suite="harness_variant", seed=4, n=2)
    run = eval_services.run_create(actor=SYSTEM, workspace=workspace, set_version=set_version, harness=harness,
                                   version=harness.head, backend=f"checkpoint:{checkpoint.pk}", concurrency=1,
                                   start=False)
    assert eval_services.run_execute(run_id=run.pk) == "done"
    run.refresh_from_db()
    assert run.summary["overall"]["n"] == 2
    model_steps = [s for r in run.results.all() for s in r.trace["steps"] if s.get("kind") == "model"]
    assert model_steps and {s.get("backend") for s in model_steps} == {f"checkpoint:{checkpoint.pk}"}


@pytest.mark.django_db  # no model loads here; the runs' tasks are captured, not sent
def test_matrix_fans_out_one_run_per_cell_and_renders_a_heat_map(client, members, workspace, harness, checkpoint,
                                                                 django_capture_on_commit_callbacks):
    other = Checkpoint.objects.create(workspace=workspace, stage="rl", base_model="m", path=checkpoint.path,
                                      parent=checkpoint)
    set_version = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hv",
                                                  suite="harness_variant", seed=5, n=2)
    with django_capture_on_commit_callbacks() as queued:
        matrix = services.matrix_create(actor=SYSTEM, workspace=workspace, checkpoints=[checkpoint, other],
                                        harness_versions=[harness.head], set_version=set_version)
    runs = list(matrix.runs.order_by("pk"))
    assert len(runs) == 2 == len(queued)
    assert {r.backend for r in runs} == {f"checkpoint:{checkpoint.pk}", f"checkpoint:{other.pk}"}
    assert AuditEvent.objects.filter(action="checkpoint_matrix.create", target_id=str(matrix.pk)).exists()
    EvalRun.objects.filter(pk=runs[0].pk).update(status="done", summary={"overall": {"n": 2, "accuracy": 0.5,
                                                                                    "effectiveness": 0.25}})
    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/training/matrix/{matrix.pk}/").content.decode()
    assert "vendor/chartjs-chart-matrix/chartjs-chart-matrix.min.js" in page and "0.500" in page and "queued" in page


@pytest.mark.django_db
def test_matrix_refuses_bad_requests_whole(workspace, foreign_workspace, harness, checkpoint):
    set_version = eval_services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hv",
                                                  suite="harness_variant", seed=6, n=1)
    foreign = Checkpoint.objects.create(workspace=foreign_workspace, stage="sft", base_model="m", path="/x")
    for checkpoints, versions, field in [([], [harness.head], "checkpoints"), ([checkpoint], [], "harness_versions"),
                                         ([checkpoint, foreign], [harness.head], "checkpoints")]:
        with pytest.raises(TrainingError) as error:
            services.matrix_create(actor=SYSTEM, workspace=workspace, checkpoints=checkpoints,
                                   harness_versions=versions, set_version=set_version)
        assert error.value.field == field
    assert CheckpointMatrix.objects.count() == 0 and EvalRun.objects.count() == 0


def test_an_experiment_arm_answers_with_a_promoted_checkpoint(workspace, harness, checkpoint, settings):
    from serving.experiments.lifecycle import ExperimentError, experiment_create, experiment_start
    from serving.services import room_reply
    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS = "scripted", ["Hello from the default model!"]
    settings.TRACE_WRITES = "sync"
    name = f"checkpoint:{checkpoint.pk}"
    arms = [{"name": "control", "weight": 0.001, "kind": "version", "version": 1},
            {"name": "tuned", "weight": 0.999, "kind": "version", "version": 1, "backend": name}]
    with pytest.raises(ExperimentError, match="not promoted"):
        experiment_create(actor=SYSTEM, workspace=workspace, key="tuned-model", harness=harness, arms=arms)
    services.checkpoint_promote(actor=SYSTEM, checkpoint=checkpoint)
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="tuned-model", harness=harness, arms=arms)
    assert experiment.arms.get(name="tuned").backend == name
    experiment_start(actor=SYSTEM, experiment=experiment)
    room = json.loads((Path(__file__).resolve().parents[2] / "harness" / "demo" / "room.json").read_text())
    outcome = room_reply(actor=SYSTEM, workspace=workspace, room_id="r1", message="hi!", viewer_id="viewer-7",
                         room_context=room)
    trace = Trace.objects.get(trace_id=outcome.result.trace["trace_id"])
    assert trace.arm == "exp:tuned-model:tuned" and trace.backend == name
