"""Celery tasks of the evaluation package: one task per job kind, ids in, early return if the row vanished."""

from celery import shared_task
from celery.signals import worker_ready

from evaluation import live_judging
from evaluation.models import EvalRun
from evaluation.services import run_execute
from serving.models import Trace
from workspaces.jobs import job_is_running, single_flight

EXECUTE_RUN = "evaluation.execute_run"


# acks_late: a worker that dies mid-run hands the job back (after the broker's visibility timeout) and the
# next delivery resumes it. A run longer than that timeout is handed back too while it still runs: the
# single-flight lock makes that second delivery step aside instead of evaluating the run twice.
@shared_task(name=EXECUTE_RUN, acks_late=True, time_limit=6 * 3600,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def execute_run(run_id: int) -> str:
    """Evaluate every case of the run that has no result yet (so a re-delivered task resumes)."""
    if not EvalRun.objects.filter(pk=run_id).exists():
        return "vanished"
    with single_flight(EXECUTE_RUN, run_id) as mine:
        if not mine:
            return "already running"
        return run_execute(run_id=run_id)


@shared_task(name=live_judging.JUDGE_LIVE_TRACE, acks_late=True, time_limit=300,
             autoretry_for=(Trace.DoesNotExist,), retry_backoff=1, max_retries=5)
def judge_live_trace(trace_id: str) -> str:
    """Score one sampled live reply (retried while the buffered trace writer has not stored it yet)."""
    return live_judging.judge_live_trace(trace_id)


@worker_ready.connect
def resume_orphaned_runs(sender=None, **kwargs) -> None:
    """A run marked running that no process holds was orphaned (its worker died after a second delivery had
    already stepped aside): queue it again when a worker starts."""
    for run in EvalRun.objects.filter(status=EvalRun.Status.RUNNING).only("pk", "queue"):
        if not job_is_running(EXECUTE_RUN, run.pk):
            execute_run.apply_async(args=[run.pk], queue=run.queue)
