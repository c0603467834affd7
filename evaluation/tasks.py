"""Celery tasks of the evaluation package: one task per job kind, ids in, early return if the row vanished."""

from celery import shared_task
from celery.signals import worker_ready

from console.jobs import job_is_running, single_flight
from evaluation.models import EvalRun

EXECUTE_RUN = "evaluation.execute_run"


# acks_late: a worker that dies mid-run hands the job back (after the broker's visibility timeout) and the
# next delivery resumes it. A run longer than that timeout is handed back too while it still runs: the
# single-flight lock makes that second delivery step aside instead of evaluating the run twice.
@shared_task(name=EXECUTE_RUN, acks_late=True, time_limit=6 * 3600,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def execute_run(run_id: int) -> str:
    """Evaluate every case of the run that has no result yet (so a re-delivered task resumes)."""
    from evaluation.services import run_execute

    if not EvalRun.objects.filter(pk=run_id).exists():
        return "vanished"
    with single_flight(EXECUTE_RUN, run_id) as mine:
        if not mine:
            return "already running"
        return run_execute(run_id=run_id)


@worker_ready.connect
def resume_orphaned_runs(sender=None, **kwargs) -> None:
    """A run marked running that no process holds was orphaned (its worker died after a second delivery had
    already stepped aside): queue it again when a worker starts."""
    for run in EvalRun.objects.filter(status=EvalRun.Status.RUNNING).only("pk", "queue"):
        if not job_is_running(EXECUTE_RUN, run.pk):
            execute_run.apply_async(args=[run.pk], queue=run.queue)
