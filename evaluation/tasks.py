"""Celery tasks of the evaluation package: one task per job kind, ids in, early return if the row vanished."""

from celery import shared_task

from evaluation.models import EvalRun


@shared_task(name="evaluation.execute_run", acks_late=True, time_limit=6 * 3600,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def execute_run(run_id: int) -> str:
    """Evaluate every case of the run that has no result yet (so a re-delivered task resumes)."""
    from evaluation.services import run_execute

    if not EvalRun.objects.filter(pk=run_id).exists():
        return "vanished"
    return run_execute(run_id=run_id)
