"""Platform API for training: launch, list and cancel jobs (write/read scopes); list checkpoints."""

from ninja import Router, Status

from training import selectors, services
from training.models import Checkpoint, TrainingJob
from training.schemas import CheckpointOut, JobIn, JobOut
from workspaces.access import READ, WRITE, require
from workspaces.schemas import errors, links

router = Router(tags=["training"])

# A job is read and can be cancelled (OpenAPI links).
_NEW_JOB = {"job_id": "$response.body#/id"}
_FIRST_JOB = {"job_id": "$response.body#/0/id"}


def _job_out(job: TrainingJob) -> dict:
    return {
        "id": job.pk, "name": job.name, "status": job.status, "cancel_requested": job.cancel_requested,
        "base_model": job.base_model, "stages": list(job.stages), "stage": job.stage, "step": job.step,
        "total_steps": job.total_steps, "fraction": job.fraction, "tokens_per_s": job.tokens_per_s,
        "eta_s": job.eta_s, "harness_versions": [str(v) for v in job.harness_versions.all()],
        "excluded_sets": [str(s) for s in job.excluded_sets.all()], "data_sources": job.data_sources,
        "error": job.error, "created_by": job.created_by, "created_at": job.created_at,
        "checkpoints": [c.pk for c in job.checkpoints.all()],
    }


def _checkpoint_out(checkpoint: Checkpoint) -> dict:
    return {
        "id": checkpoint.pk, "backend": checkpoint.backend_name, "job": checkpoint.job_id,
        "parent": checkpoint.parent_id, "stage": checkpoint.stage, "base_model": checkpoint.base_model,
        "path": checkpoint.path, "metrics": checkpoint.metrics, "data_lineage": checkpoint.data_lineage,
        "harness_hashes": checkpoint.harness_hashes, "promoted": checkpoint.promoted,
        "created_at": checkpoint.created_at,
    }


def _jobs(request):
    return selectors.jobs(request.workspace).prefetch_related("excluded_sets__eval_set", "checkpoints")


@router.post("/training/jobs", response={201: JobOut, **errors(400, 401, 403, 404, 422)},
             openapi_extra=links(201, training_api_get_job=_NEW_JOB, training_api_cancel_job=_NEW_JOB))
def create_job(request, payload: JobIn):
    """Validate and queue a training job on the `gpu` queue. A bad field answers 422 naming it; nothing is queued."""
    require(request.actor, request.workspace, WRITE)
    workspace = request.workspace
    base_checkpoint = (selectors.checkpoints(workspace).filter(pk=payload.base_checkpoint).first()
                       if payload.base_checkpoint is not None else None)
    if payload.base_checkpoint is not None and base_checkpoint is None:
        raise services.TrainingError("No such checkpoint here.", field="base_checkpoint")
    job = services.job_create(
        actor=request.actor, workspace=workspace, name=payload.name, base_model=payload.base_model,
        config=payload.config,
        harness_versions=services.resolve_harness_versions(workspace, payload.harness_versions),
        excluded_sets=services.resolve_eval_sets(workspace, payload.excluded_sets),
        simulator=payload.simulator.dict() if payload.simulator else None,
        imported_jsonl=payload.imported_jsonl, imported_name="api", base_checkpoint=base_checkpoint)
    return Status(201, _job_out(_jobs(request).get(pk=job.pk)))


@router.get("/training/jobs", response={200: list[JobOut], **errors(401, 403)},
            openapi_extra=links(200, training_api_get_job=_FIRST_JOB, training_api_cancel_job=_FIRST_JOB))
def list_jobs(request):
    require(request.actor, request.workspace, READ)
    return [_job_out(job) for job in _jobs(request)[:200]]


@router.get("/training/jobs/{job_id}", response={200: JobOut, **errors(401, 403, 404, 422)})
def get_job(request, job_id: int):
    require(request.actor, request.workspace, READ)
    return _job_out(selectors.job_get(request.workspace, job_id))


@router.post("/training/jobs/{job_id}/cancel", response={200: JobOut, **errors(400, 401, 403, 404, 422)},
             openapi_extra=links(200, training_api_get_job=_NEW_JOB))
def cancel_job(request, job_id: int):
    """Stop a job at its next step; the checkpoints it registered stay."""
    require(request.actor, request.workspace, WRITE)
    job = services.job_cancel(actor=request.actor, job=selectors.job_get(request.workspace, job_id))
    return _job_out(job)


@router.get("/training/checkpoints", response={200: list[CheckpointOut], **errors(401, 403)})
def list_checkpoints(request):
    require(request.actor, request.workspace, READ)
    return [_checkpoint_out(c) for c in selectors.checkpoints(request.workspace)[:500]]
