"""Reads for training: jobs, their progress and curves, checkpoints, checkpoint × harness matrices."""

from django.conf import settings
from django.http import Http404
from django.utils import timezone

from training.models import Checkpoint, CheckpointMatrix, TrainingJob, TrainingMetric
from workspaces.models import Workspace

MAX_POINTS = 5000  # curve points sent in a snapshot; a longer job sends its latest ones


def jobs(workspace: Workspace):
    return TrainingJob.objects.filter(workspace=workspace).prefetch_related("harness_versions__harness")


def job_get(workspace: Workspace, job_id: int) -> TrainingJob:
    job = jobs(workspace).filter(pk=job_id).first()
    if job is None:
        raise Http404("No such training job.")
    return job


def job_state(job: TrainingJob) -> dict:
    """The progress fields of a job, as the live page and the API show them."""
    return {
        "id": job.pk, "name": job.name, "status": job.status, "cancel_requested": job.cancel_requested,
        "stage": job.stage, "stage_index": job.stage_index, "stages": list(job.stages), "step": job.step,
        "total_steps": job.total_steps, "fraction": round(job.fraction, 4), "tokens_per_s": job.tokens_per_s,
        "eta_s": job.eta_s, "error": job.error, "attempts": job.attempts, "worker_note": worker_note(job),
    }


def worker_note(job: TrainingJob) -> str:
    """What became of the job's worker, in words: stopped (its heartbeat is older than the lease, so the next
    delivery takes the job over) or resumed after stopping; empty when neither."""
    if job.status == TrainingJob.Status.RUNNING and job.heartbeat_at is not None:
        silent = (timezone.now() - job.heartbeat_at).total_seconds()
        if silent > settings.TRAINING_LEASE_S:
            return (f"No heartbeat from its worker for {silent:.0f} s: the worker stopped (killed, or out of "
                    "memory). The job resumes from its last checkpoint when a worker takes it up again.")
    if job.attempts > 1:
        stopped = job.attempts - 1
        return (f"Resumed from its last checkpoint: its worker stopped {stopped} time{'s' if stopped > 1 else ''} "
                f"(attempt {job.attempts}).")
    return ""


def metric_point(row: TrainingMetric) -> dict:
    return {"id": row.pk, "stage": row.stage, "stage_index": row.stage_index, "step": row.step, "total_steps": row.total_steps, "values": row.values,
            "at": row.created_at.isoformat()}


def job_snapshot(job_id: int) -> dict:
    """Everything the live page needs on (re)connect: state, the curve points so far (the latest
    MAX_POINTS), log lines, checkpoints (each with its stage's data figures, `data_reports` counting those
    that have some). `total_points` counts every point the job stored: each live
    update numbers its point the same way (`points`), so a page sees when it missed one."""
    job = TrainingJob.objects.get(pk=job_id)
    metrics = TrainingMetric.objects.filter(job_id=job_id)
    rows = list(metrics.order_by("-id")[:MAX_POINTS])[::-1]
    checkpoints_ = [checkpoint_summary(c) for c in job.checkpoints.all()]
    return {"kind": "snapshot", "job": job_state(job), "points": [metric_point(r) for r in rows],
            "total_points": metrics.count(), "lines": list(job.log_tail), "checkpoints": checkpoints_,
            "data_reports": sum(1 for c in checkpoints_ if c["data_report"])}


def checkpoint_summary(checkpoint: Checkpoint) -> dict:
    return {"id": checkpoint.pk, "stage": checkpoint.stage, "backend": checkpoint.backend_name,
            "path": checkpoint.path, "parent": checkpoint.parent_id, "metrics": checkpoint.metrics,
            "promoted": checkpoint.promoted,
            "data_report": trajectory_figures((checkpoint.data_lineage or {}).get("report")),
            "selection": selection_summary(checkpoint.resolved_config)}


def _score(value) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) and not isinstance(value, bool) else "—"


def selection_summary(resolved_config) -> str:
    """How a stage's model was chosen, in words, from its record (`training.selection`): the checkpoint step and
    its validation score beside the others', the learning rate among the candidates tried, and the reasoning-length
    penalty's state. Empty for records from before validation existed."""
    if not isinstance(resolved_config, dict) or not isinstance(resolved_config.get("selection"), dict):
        return ""
    selection, parts = resolved_config["selection"], []
    checkpoint = selection.get("checkpoint") if isinstance(selection.get("checkpoint"), dict) else {}
    scores = checkpoint.get("scores") if isinstance(checkpoint.get("scores"), dict) else {}
    if scores:
        others = ", ".join(f"step {s}: {_score(v)}" for s, v in scores.items() if str(s) != str(checkpoint.get("step")))
        parts.append(f"step {checkpoint.get('step')} by validation score {_score(checkpoint.get('score'))}"
                     + (f" (other checkpoints: {others})" if others else ""))
    elif checkpoint.get("rule"):
        parts.append(str(checkpoint["rule"]))
    rate = selection.get("learning_rate")
    if isinstance(rate, dict) and isinstance(rate.get("chosen"), int | float):
        tried = ", ".join(f"{c.get('learning_rate')}: {_score((c.get('score') or {}).get('score'))}"
                          for c in rate.get("candidates") or () if isinstance(c, dict))
        parts.append(f"learning rate {rate['chosen']:g} by validation score (tried {tried})")
    if resolved_config.get("reasoning_penalty"):
        parts.append(f"reasoning-length penalty {resolved_config['reasoning_penalty']}")
    return "; ".join(parts)


MISTAKE_LABELS = {"skipped_skill": "replied before loading a skill", "wrong_skill": "loaded the wrong skill",
                  "wrong_field": "stated the wrong field", "missed_tool": "skipped the tool call"}


def trajectory_figures(report) -> list[dict]:
    """An SFT stage's prepared-data report (`training.trajectories.TrajectoryReport.to_dict`, stored in the
    checkpoint's lineage) as table rows {label, value, sub}: generated, kept, rejected by the judge and why,
    retries kept whole or cut. Empty for other stages' reports. Older reports lack some keys: what they
    hold is shown."""
    if not isinstance(report, dict) or "kept" not in report:
        return []

    def count(key, default=0) -> int:
        value = report.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    generated = count("generated", count("turns"))
    rows = [{"label": "Trajectories generated", "value": generated, "sub": False},
            {"label": "Kept for training", "value": count("kept"), "sub": False},
            {"label": "Rejected by the judge", "value": count("rejected"), "sub": False}]
    reasons = report.get("rejected_by_reason") or report.get("top_rejection_reasons") or {}
    if isinstance(reasons, dict):
        rows += [{"label": str(reason), "value": n, "sub": True} for reason, n in reasons.items()
                 if isinstance(n, int)]
    if count("not_called"):
        rows.append({"label": "Answered by an input hook (no teacher call)", "value": count("not_called"),
                     "sub": False})
    retried, whole = count("retried"), count("full_retry_kept")
    rows += [{"label": "Kept with a hook retry", "value": retried, "sub": False},
             {"label": "kept whole (rejected reply and feedback as context)", "value": whole, "sub": True},
             {"label": "cut to the final behaviour", "value": count("retries_cut", retried - whole), "sub": True}]
    mistakes = report.get("teacher_mistakes") or {}
    if isinstance(mistakes, dict) and mistakes:
        rows.append({"label": "Oracle teacher's deliberate slips", "value": sum(
            n for n in mistakes.values() if isinstance(n, int)), "sub": False})
        rows += [{"label": MISTAKE_LABELS.get(kind, str(kind).replace("_", " ")), "value": n, "sub": True}
                 for kind, n in mistakes.items() if isinstance(n, int)]
    return rows


def checkpoints(workspace: Workspace):
    return Checkpoint.objects.filter(workspace=workspace).select_related("job", "parent")


def checkpoint_get(workspace: Workspace, checkpoint_id: int) -> Checkpoint:
    checkpoint = checkpoints(workspace).filter(pk=checkpoint_id).first()
    if checkpoint is None:
        raise Http404("No such checkpoint.")
    return checkpoint


def checkpoint_for_backend(name: str) -> Checkpoint | None:
    """The checkpoint a `checkpoint:<id>` backend name refers to (None for other names or unknown ids)."""
    prefix, _, ref = name.partition(":")
    if prefix != "checkpoint" or not ref.isdigit():
        return None
    return Checkpoint.objects.filter(pk=int(ref)).first()


def backend_choices(workspace: Workspace) -> list[str]:
    """Backend names of this workspace's checkpoints, newest first, for the forms that pick a model."""
    return [f"checkpoint:{pk}" for pk in Checkpoint.objects.filter(workspace=workspace).values_list("pk", flat=True)]


def matrices(workspace: Workspace):
    return CheckpointMatrix.objects.filter(workspace=workspace).select_related("set_version__eval_set")


def matrix_get(workspace: Workspace, matrix_id: int) -> CheckpointMatrix:
    matrix = matrices(workspace).filter(pk=matrix_id).first()
    if matrix is None:
        raise Http404("No such matrix.")
    return matrix


def matrix_cells(matrix: CheckpointMatrix, metric: str = "accuracy") -> dict:
    """Rows (checkpoints) × columns (harness versions) of one metric's overall mean, with each cell's run."""
    checkpoints_ = list(matrix.checkpoints.order_by("pk"))
    versions = list(matrix.harness_versions.select_related("harness").order_by("harness__name", "number"))
    by_cell = {}
    for run in matrix.runs.all():
        by_cell[(run.backend, run.harness_version_id)] = run
    cells, grid = [], []
    for checkpoint in checkpoints_:
        grid.append({"label": f"checkpoint:{checkpoint.pk} ({checkpoint.stage})", "cells": []})
        for version in versions:
            run = by_cell.get((checkpoint.backend_name, version.pk))
            overall = (run.summary or {}).get("overall", {}) if run else {}
            cells.append({"checkpoint": checkpoint.pk, "version": str(version), "run": run.pk if run else None,
                          "status": run.status if run else "missing", "n": overall.get("n", 0),
                          "value": overall.get(metric) if run and run.status == "done" else None})
            grid[-1]["cells"].append(cells[-1])
    return {"grid": grid, "rows": [f"checkpoint:{c.pk} ({c.stage})" for c in checkpoints_], "row_ids": [c.pk for c in checkpoints_],
            "columns": [str(v) for v in versions], "cells": cells, "metric": metric,
            "pending": sum(c["status"] in ("queued", "running") for c in cells),  # a count: the page polls while > 0
            "finished": sum(c["value"] is not None for c in cells),
            "height": 90 + 48 * len(checkpoints_)}
