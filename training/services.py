"""Writes for training: launch, cancel and run jobs; register and promote checkpoints; fan out the
checkpoint × harness-version matrix.

The pure pipeline (`training.pipeline`) knows nothing of Django. `job_execute` turns a job's rows into
a `PipelineConfig`, hands it a `JobReporter` that stores and publishes what it reports, and a
`should_stop` that reads the job's cancel flag.
"""

import copy
import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from evaluation.models import EvalSetVersion
from harness.models import HarnessVersion
from training.models import Checkpoint, CheckpointMatrix, TrainingJob, TrainingMetric
from training.progress import publish_job_event
from training.selectors import checkpoint_summary, job_state, metric_point
from workspaces import webhooks
from workspaces.access import APPROVE, WRITE, Actor, require
from workspaces.jobs import enqueue
from workspaces.models import Workspace
from workspaces.services import audit_record

log = logging.getLogger(__name__)
LOG_TAIL = 200
MAX_ATTEMPTS = 5
MAX_IMPORT_BYTES = 50 * 1024 * 1024


class TrainingError(ValueError):
    """A request training refuses. `field` names the part of the request that is wrong."""

    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.field = field


def job_dir(job: TrainingJob) -> Path:
    return Path(settings.TRAINING_ARTIFACTS_DIR) / f"job-{job.pk}"


# Launch -----------------------------------------------------------------------------------------------

def parse_imported_cases(text: str) -> list[dict]:
    """Imported cases (one `Case.to_dict()` per line); every bad line is reported with its number."""
    from evaluation.services import EvalError, parse_cases

    if len(text.encode()) > MAX_IMPORT_BYTES:
        raise TrainingError("The imported file is larger than 50 MiB.", field="imported_jsonl")
    try:
        return parse_cases("live_stream_qa", text.splitlines())
    except EvalError as exc:
        raise TrainingError(f"imported_jsonl: {exc}", field="imported_jsonl") from None


def pipeline_input(*, config: dict, base_model: str, harness_versions: list[HarnessVersion],
                   excluded_sets: list[EvalSetVersion], data_sources: dict, imported_path: Path | None) -> dict:
    """The dict `PipelineConfig.from_dict` reads: the submitted config (model, trajectories, stages, seed)
    plus what the job's rows say (harness versions, simulator cases, imported cases, eval-set exclusions)."""
    from training.case_hashing import case_content_hash

    if "harnesses" in config:
        raise TrainingError("harnesses: choose harness versions instead of giving them in the config.",
                            field="harnesses")
    data = copy.deepcopy(config)
    if base_model:
        data["model"] = {**(data.get("model") or {}), "base": base_model}
    data["harnesses"] = [{"label": str(v), "files": dict(v.files)} for v in harness_versions]
    simulator = data_sources.get("simulator") or {}
    data["data"] = {
        **(data.get("data") or {}),
        "simulator_seed": simulator.get("seed", 0), "simulator_cases": simulator.get("size", 0),
        "cases_jsonl": [str(imported_path)] if imported_path else [],
        "exclude": {str(s): [case_content_hash(c) for c in s.cases.values_list("data", flat=True)]
                    for s in excluded_sets},
    }
    return data


def config_validate(data: dict):
    """Validate through the pipeline's own config class; any error becomes a TrainingError naming the field."""
    from training.pipeline_config import PipelineConfig

    try:
        return PipelineConfig.from_dict(data)
    except KeyError as exc:  # str(KeyError) is the key's repr
        raise TrainingError(f"Invalid training config: the field “{exc.args[0]}” is missing", field="config") from None
    except (ValueError, TypeError) as exc:
        field = getattr(exc, "field", "") or "config"
        raise TrainingError(f"Invalid training config: {exc}", field=str(field)) from None


def lineage_check(config) -> None:
    """Refuse, before anything is queued, data that contains a case of an eval set the job excludes, and a
    validation split (`data.validation`) that cannot be drawn apart from the training data and the eval sets."""
    from training.holdout import draw_validation
    from training.lineage import LineageError, check_disjoint, planned_case_hashes
    from training.validation import ConfigError

    try:
        if config.data.exclude:
            check_disjoint(planned_case_hashes(config), config.data.exclude)
        draw_validation(config)
    except LineageError as exc:
        raise TrainingError(f"excluded_sets: {exc}", field="excluded_sets") from None
    except ConfigError as exc:
        raise TrainingError(f"Invalid training config: {exc}", field=exc.field) from None


def job_create(*, actor: Actor, workspace: Workspace, name: str, config: dict, harness_versions: list[HarnessVersion],
               excluded_sets: list[EvalSetVersion] = (), simulator: dict | None = None, imported_jsonl: str = "",
               imported_name: str = "", base_model: str = "", base_checkpoint: Checkpoint | None = None,
               start: bool = True) -> TrainingJob:
    """Validate everything, then create the job and (unless start=False) queue it after the commit.

    `config` is the pipeline config without harnesses and data sources (model, trajectories, stages,
    seed); `base_model` or `base_checkpoint` override its model. A bad request raises TrainingError
    naming the field and leaves nothing behind: no row, no task.
    """

    require(actor, workspace, WRITE)
    try:
        validate_slug(name)
    except ValidationError:
        raise TrainingError("name: use letters, digits, - and _ only.", field="name") from None
    if len(name) > 64:
        raise TrainingError("name: at most 64 characters.", field="name")
    if not isinstance(config, dict):
        raise TrainingError("config: must be a JSON object.", field="config")
    if not harness_versions:
        raise TrainingError("harness_versions: choose at least one to train under.", field="harness_versions")
    if any(v.harness.workspace_id != workspace.pk for v in harness_versions):
        raise TrainingError("harness_versions: must belong to this workspace.", field="harness_versions")
    if any(s.eval_set.workspace_id != workspace.pk for s in excluded_sets):
        raise TrainingError("excluded_sets: must belong to this workspace.", field="excluded_sets")
    if base_checkpoint is not None:
        if base_checkpoint.workspace_id != workspace.pk:
            raise TrainingError("base_checkpoint: must belong to this workspace.", field="base_checkpoint")
        base_model = base_checkpoint.path
    sources: dict = {}
    if simulator:
        try:
            sources["simulator"] = {"seed": int(simulator["seed"]), "size": int(simulator["size"])}
        except (KeyError, TypeError, ValueError):
            raise TrainingError("simulator: needs an integer seed and size.", field="simulator") from None
        if not 0 <= sources["simulator"]["size"] <= 100_000:
            raise TrainingError("simulator.size: must be between 0 and 100000.", field="simulator.size")
    if imported_jsonl:
        sources["imported"] = {"name": imported_name[:200] or "upload.jsonl",
                               "cases": len(parse_imported_cases(imported_jsonl))}
    with tempfile.TemporaryDirectory() as scratch:
        imported_path = None
        if imported_jsonl:
            imported_path = Path(scratch) / "imported.jsonl"
            imported_path.write_text(imported_jsonl)
        resolved = config_validate(pipeline_input(
            config=config, base_model=base_model, harness_versions=list(harness_versions),
            excluded_sets=list(excluded_sets), data_sources=sources, imported_path=imported_path))
        lineage_check(resolved)
    stages = [stage.kind for stage in resolved.stages]
    with transaction.atomic():
        job = TrainingJob.objects.create(
            workspace=workspace, name=name, base_model=resolved.model.base, base_checkpoint=base_checkpoint,
            stages=stages, config=config, data_sources=sources, imported_jsonl=imported_jsonl,
            created_by=actor.label)
        job.harness_versions.set(harness_versions)
        job.excluded_sets.set(excluded_sets)
        audit_record(actor=actor, workspace=workspace, action="training_job.launch", target_type="training_job",
                     target_id=job.pk, target_label=name,
                     after={"base_model": job.base_model, "stages": stages, "config": config, "data": sources,
                            "harness_versions": [str(v) for v in harness_versions],
                            "excluded_sets": [str(s) for s in excluded_sets]})
        if start:
            transaction.on_commit(lambda: enqueue("training.run_job", args=[job.pk], queue="gpu"))
    return job


def job_cancel(*, actor: Actor, job: TrainingJob) -> TrainingJob:
    """Ask a job to stop: a queued one is cancelled now, a running one stops at its next step and keeps
    the checkpoints it registered."""
    require(actor, job.workspace, WRITE)
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().get(pk=job.pk)
        if locked.status in TrainingJob.ACTIVE and not locked.cancel_requested:
            locked.cancel_requested = True
            fields = ["cancel_requested"]
            if locked.status == TrainingJob.Status.QUEUED:
                locked.status, locked.finished_at = TrainingJob.Status.CANCELLED, timezone.now()
                fields += ["status", "finished_at"]
            locked.save(update_fields=fields)
            audit_record(actor=actor, workspace=job.workspace, action="training_job.cancel",
                         target_type="training_job", target_id=job.pk, target_label=job.name,
                         after={"status": locked.status})
            state = job_state(locked)
            transaction.on_commit(lambda: publish_job_event(job.pk, {"kind": "update", "job": state}))
    job.refresh_from_db()
    return job


def checkpoint_promote(*, actor: Actor, checkpoint: Checkpoint, promoted: bool = True) -> Checkpoint:
    """Approve (or withdraw) a checkpoint for live traffic; needs the approve capability; audited."""
    require(actor, checkpoint.workspace, APPROVE)
    with transaction.atomic():
        before = checkpoint.promoted
        Checkpoint.objects.filter(pk=checkpoint.pk).update(promoted=promoted)
        audit_record(actor=actor, workspace=checkpoint.workspace,
                     action="checkpoint.promote" if promoted else "checkpoint.demote", target_type="checkpoint",
                     target_id=checkpoint.pk, target_label=checkpoint.backend_name,
                     before={"promoted": before}, after={"promoted": promoted})
    checkpoint.refresh_from_db()
    return checkpoint


# Execution (inside the worker) -------------------------------------------------------------------------

class JobReporter:
    """The pipeline's Reporter: stores every logged step and finished stage, and publishes it live."""

    def __init__(self, job: TrainingJob):
        self.job = job
        self.lines = list(job.log_tail)
        self._stage_start: tuple[str, float, int] | None = None  # (stage, monotonic time, step)
        self._last_tokens: tuple[float, float] | None = None  # (monotonic time, cumulative tokens)

    def _rates(self, stage: str, step: int, total: int, metrics: dict) -> tuple[float | None, float | None]:
        now = time.monotonic()
        if self._stage_start is None or self._stage_start[0] != stage:
            self._stage_start, self._last_tokens = (stage, now, step), None
        _, started, first_step = self._stage_start
        eta = metrics.get("eta_s")  # the pipeline's own estimate when it gives one
        if eta is None and step > first_step and total:
            eta = (now - started) / (step - first_step) * (total - step)
        tokens_per_s = metrics.get("tokens_per_s")
        tokens = metrics.get("num_tokens")
        if tokens_per_s is None and tokens is not None:
            if self._last_tokens is not None and now > self._last_tokens[0] and tokens >= self._last_tokens[1]:
                tokens_per_s = (tokens - self._last_tokens[1]) / (now - self._last_tokens[0])
            self._last_tokens = (now, float(tokens))
        return eta, tokens_per_s

    def _stage_index(self, stage: str, step: int) -> int:
        """Which of the job's stages is reporting (a job may run the same kind twice): the current one
        while its steps go on, else the next stage of that kind."""
        job, stages = self.job, list(self.job.stages)
        current = job.stage_index
        if current < len(stages) and stages[current] == stage and (job.stage != stage or step >= job.step):
            return current
        later = [i for i in range(current + 1, len(stages)) if stages[i] == stage]
        return later[0] if later else (stages.index(stage) if stage in stages else current)

    def log(self, stage: str, step: int, total_steps: int, metrics: dict) -> None:
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        eta, tokens_per_s = self._rates(stage, step, total_steps, values)
        job = self.job
        job.stage_index = self._stage_index(stage, step)
        job.stage, job.step, job.total_steps, job.eta_s = stage, step, total_steps, eta
        row = TrainingMetric.objects.create(job=job, stage=stage, stage_index=job.stage_index, step=step,
                                            total_steps=total_steps, values=_finite(values))
        if tokens_per_s is not None:
            job.tokens_per_s = tokens_per_s
        job.save(update_fields=["stage", "stage_index", "step", "total_steps", "eta_s", "tokens_per_s"])
        # The update numbers its point (points stored so far), so a page that missed an update asks for a
        # snapshot instead of drawing a curve with a hole.
        points = TrainingMetric.objects.filter(job=job).count()
        publish_job_event(job.pk, {"kind": "update", "job": job_state(job), "point": metric_point(row),
                                   "points": points})

    def line(self, text: str) -> None:
        self.lines = (self.lines + [str(text)[:2000]])[-LOG_TAIL:]
        TrainingJob.objects.filter(pk=self.job.pk).update(log_tail=self.lines)
        publish_job_event(self.job.pk, {"kind": "update", "job": job_state(self.job), "lines": [str(text)[:2000]]})

    def checkpoint(self, result) -> None:
        """Register a finished stage (idempotent: a resumed job re-reporting a stage updates its row)."""
        job = self.job
        parent = (Checkpoint.objects.filter(workspace=job.workspace, path=str(result.parent_path)).first()
                  if result.parent_path else None)
        checkpoint, _ = Checkpoint.objects.update_or_create(
            job=job, path=str(result.path),
            defaults={"workspace": job.workspace, "parent": parent, "base_model": str(result.base_model),
                      "stage": result.stage, "parent_path": str(result.parent_path or ""),
                      "metrics": _finite(dict(result.metrics)), "data_lineage": _jsonable(result.data_lineage),
                      "harness_hashes": list(result.harness_hashes),
                      "resolved_config": _jsonable(result.resolved_config)})
        self.line(f"registered {checkpoint.backend_name} ({result.stage}) at {result.path}")
        publish_job_event(job.pk, {"kind": "update", "job": job_state(job),
                                   "checkpoint": checkpoint_summary(checkpoint)})


def _finite(value):
    import math

    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _jsonable(value):
    return _finite(json.loads(json.dumps(value, default=str)))


class Lease:
    """This worker's hold on a job: a heartbeat thread keeps it fresh; losing it (another worker took
    over, believing this one dead) makes the pipeline stop."""

    def __init__(self, job_id: int, owner: str):
        self.job_id, self.owner = job_id, owner
        self.lost = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{job_id}", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def _beat(self) -> None:
        try:
            while not self._done.wait(settings.TRAINING_LEASE_S / 4):
                held = TrainingJob.objects.filter(pk=self.job_id, lease_owner=self.owner).update(
                    heartbeat_at=timezone.now())
                if not held:
                    self.lost.set()
                    return
        finally:
            connection.close()


def _claim(job_id: int, owner: str) -> str:
    """'claimed', 'wait' (another live worker holds it) or the job's final status."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return "vanished"
        if not job.active:
            return job.status
        if job.cancel_requested and job.status == TrainingJob.Status.QUEUED:
            job.status, job.finished_at = TrainingJob.Status.CANCELLED, timezone.now()
            job.save(update_fields=["status", "finished_at"])
            return job.status
        if job.attempts >= MAX_ATTEMPTS:  # a job that kills its worker every time must not loop forever
            job.status, job.finished_at = TrainingJob.Status.FAILED, timezone.now()
            job.error = f"gave up after {job.attempts} attempts (the worker died each time)"
            job.save(update_fields=["status", "finished_at", "error"])
            webhooks.emit(job.workspace_id, "training.failed", {"job": job.pk, "name": job.name, "error": job.error})
            return job.status
        fresh = job.heartbeat_at and (timezone.now() - job.heartbeat_at).total_seconds() < settings.TRAINING_LEASE_S
        if job.lease_owner and job.lease_owner != owner and fresh:
            return "wait"
        job.lease_owner, job.heartbeat_at = owner, timezone.now()
        job.status, job.attempts = TrainingJob.Status.RUNNING, job.attempts + 1
        job.started_at = job.started_at or timezone.now()
        job.save(update_fields=["lease_owner", "heartbeat_at", "status", "attempts", "started_at"])
        return "claimed"


def failure_sentence(exc: Exception) -> str:
    """Why a job failed, for its page and log: training's own refusals say it in words; anything else is a
    fault whose Python text (class, repr'd arguments) means nothing to an operator, so it is named in words
    and left, with its traceback, to the worker's log."""
    if type(exc).__module__.split(".")[0] == "training":  # StageFailed, ConfigError, LineageError, …
        return str(exc)
    if isinstance(exc, MemoryError) or "OutOfMemory" in type(exc).__name__:
        return "The worker ran out of memory: try fewer cases, a shorter max_length or a smaller batch."
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"A file the job needs is missing: {exc.filename}."
    return "The training worker hit an unexpected error; the worker process's own log has the details."


def job_execute(*, job_id: int) -> str:
    """Run (or resume) a job in this worker; returns its final status.

    A copy of the task delivered while another worker still holds the job waits for it: it returns when
    the job ends, and takes over (resuming from the last checkpoint) if the holder's heartbeat stops.
    """
    from training.results import TrainingCancelled

    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    while (claim := _claim(job_id, owner)) == "wait":
        time.sleep(settings.TRAINING_LEASE_S / 4)
        close_old_connections()
    if claim != "claimed":
        return claim
    job = TrainingJob.objects.select_related("workspace").get(pk=job_id)
    reporter = JobReporter(job)
    if job.attempts > 1:
        reporter.line(f"resuming (attempt {job.attempts}) from the last checkpoint in {job_dir(job)}")
    publish_job_event(job_id, {"kind": "update", "job": job_state(job)})
    with Lease(job_id, owner) as lease:
        try:
            results = _run(job, reporter, lease)
        except TrainingCancelled as stopped:
            reporter.line(str(stopped))
            results = None
        except Exception as exc:
            log.exception("training job %s failed", job_id)
            error = failure_sentence(exc)
            TrainingJob.objects.filter(pk=job_id, lease_owner=owner).update(
                status=TrainingJob.Status.FAILED, error=error[:4000], finished_at=timezone.now(), eta_s=None)
            reporter.line(f"failed: {error}")
            job.refresh_from_db()
            publish_job_event(job_id, {"kind": "update", "job": job_state(job)})
            webhooks.emit(job.workspace, "training.failed", {"job": job.pk, "name": job.name, "error": error})
            return TrainingJob.Status.FAILED
    if lease.lost.is_set():
        return "lost"  # another worker took the job over; it records the outcome
    job.refresh_from_db()
    status = TrainingJob.Status.CANCELLED if results is None else TrainingJob.Status.DONE
    TrainingJob.objects.filter(pk=job_id).update(status=status, finished_at=timezone.now(), eta_s=None,
                                                 lease_owner="")
    reporter.line(f"{status}: {job.checkpoints.count()} checkpoint(s) registered")
    job.refresh_from_db()
    publish_job_event(job_id, {"kind": "update", "job": job_state(job)})
    if status == TrainingJob.Status.DONE:
        webhooks.emit(job.workspace, "training.finished", {
            "job": job.pk, "name": job.name, "checkpoints": list(job.checkpoints.values_list("pk", flat=True))})
    return status


def _run(job: TrainingJob, reporter: JobReporter, lease: Lease) -> list:
    from training.pipeline import run_pipeline

    artifacts = job_dir(job)
    artifacts.mkdir(parents=True, exist_ok=True)
    imported_path = None
    if job.imported_jsonl:
        imported_path = artifacts / "imported.jsonl"
        imported_path.write_text(job.imported_jsonl)
    data = pipeline_input(config=job.config, base_model=job.base_model,
                          harness_versions=list(job.harness_versions.select_related("harness").order_by("pk")),
                          excluded_sets=list(job.excluded_sets.select_related("eval_set").order_by("pk")),
                          data_sources=job.data_sources, imported_path=imported_path)
    config = config_validate(data)
    TrainingJob.objects.filter(pk=job.pk).update(resolved_config=_jsonable(config.to_dict(with_files=False)))
    last_check = [0.0, False]

    def should_stop() -> bool:
        # Checked every step; the database is asked at most once a second.
        if lease.lost.is_set():
            return True
        now = time.monotonic()
        if now - last_check[0] >= 1.0:
            last_check[0] = now
            last_check[1] = TrainingJob.objects.filter(pk=job.pk, cancel_requested=True).exists()
        return last_check[1]

    if settings.TRAINING_LAUNCH is None:
        return run_pipeline(config, artifacts_dir=artifacts, reporter=reporter, should_stop=should_stop)
    from training.launch import LaunchConfig, run_launched

    return run_launched(config, LaunchConfig.from_dict(settings.TRAINING_LAUNCH), artifacts_dir=artifacts,
                        reporter=reporter, should_stop=should_stop)


# Checkpoint × harness-version matrix -------------------------------------------------------------------

def matrix_create(*, actor: Actor, workspace: Workspace, checkpoints: list[Checkpoint],
                  harness_versions: list[HarnessVersion], set_version: EvalSetVersion,
                  judge: str = "reference", concurrency: int = 2) -> CheckpointMatrix:
    """One eval run per (checkpoint, harness version) on `set_version`, created and queued together."""
    from evaluation.services import run_create

    require(actor, workspace, WRITE)
    if not checkpoints:
        raise TrainingError("Choose at least one checkpoint.", field="checkpoints")
    if not harness_versions:
        raise TrainingError("Choose at least one harness version.", field="harness_versions")
    if len(checkpoints) * len(harness_versions) > 64:
        raise TrainingError("At most 64 cells (checkpoints × harness versions) per matrix.", field="checkpoints")
    if any(c.workspace_id != workspace.pk for c in checkpoints):
        raise TrainingError("Checkpoints must belong to this workspace.", field="checkpoints")
    with transaction.atomic():
        matrix = CheckpointMatrix.objects.create(workspace=workspace, set_version=set_version, created_by=actor.label)
        matrix.checkpoints.set(checkpoints)
        matrix.harness_versions.set(harness_versions)
        runs = [run_create(actor=actor, workspace=workspace, set_version=set_version, harness=version.harness,
                           version=version, backend=checkpoint.backend_name, judge=judge,
                           concurrency=concurrency)
                for checkpoint in checkpoints for version in harness_versions]
        matrix.runs.set(runs)
        audit_record(actor=actor, workspace=workspace, action="checkpoint_matrix.create",
                     target_type="checkpoint_matrix", target_id=matrix.pk, target_label=str(matrix),
                     after={"checkpoints": [c.pk for c in checkpoints], "set": str(set_version),
                            "harness_versions": [str(v) for v in harness_versions], "runs": [r.pk for r in runs]})
    return matrix


# References as requests name them -----------------------------------------------------------------------

def resolve_harness_versions(workspace: Workspace, refs: list[str]) -> list[HarnessVersion]:
    """`avatar@v3`, `avatar@production`, `avatar` (its production label) → versions of this workspace."""
    from django.http import Http404

    from harness import selectors as harness_selectors

    versions = []
    for ref in refs:
        name, _, version_ref = ref.strip().partition("@")
        try:
            harness = harness_selectors.harness_get(workspace, name)
            versions.append(harness_selectors.version_resolve(harness, version_ref or "production"))
        except Http404:
            raise TrainingError(f"harness_versions: no harness version “{ref}” here.", field="harness_versions") from None
    return versions


def resolve_eval_sets(workspace: Workspace, refs: list[str]) -> list[EvalSetVersion]:
    """`lsqa@v2` → that eval set version of this workspace."""
    found = []
    for ref in refs:
        name, _, number = ref.strip().partition("@v")
        version = (EvalSetVersion.objects.select_related("eval_set")
                   .filter(eval_set__workspace=workspace, eval_set__name=name, number=int(number) if number.isdigit() else -1)
                   .first())
        if version is None:
            raise TrainingError(f"excluded_sets: no eval set version “{ref}” here (name@vN).", field="excluded_sets")
        found.append(version)
    return found
