"""Celery tasks of the evaluation package: one task per job kind, ids in, early return if the row vanished."""

import logging

from celery import shared_task
from celery.signals import worker_ready
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from evaluation import live_judging
from evaluation.models import EvalRun
from evaluation.services import run_execute
from serving.models import Trace
from workspaces.jobs import job_is_running, single_flight

EXECUTE_RUN = "evaluation.execute_run"
log = logging.getLogger(__name__)


# PostgreSQL away (a restart, a failover): the run's task is retried with a growing pause (DATABASE_AWAY_RETRIES
# times, about five minutes in all), and each retry resumes from the stored rows (one per case, unique), so no
# case counts twice and the run is marked done only when every case is stored. Still away after that: the run is
# marked failed, saying so, if the database is back to record it; if not, it stays running and the next worker
# to start queues it again (resume_orphaned_runs).
DATABASE_AWAY = (OperationalError, InterfaceError)
DATABASE_AWAY_RETRIES = 10  # pauses of 1, 2, 4 … 60 s


# acks_late: a worker that dies mid-run hands the job back (after the broker's visibility timeout) and the
# next delivery resumes it. A run longer than that timeout is handed back too while it still runs: the
# single-flight lock makes that second delivery step aside instead of evaluating the run twice.
@shared_task(name=EXECUTE_RUN, bind=True, acks_late=True, time_limit=6 * 3600,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def execute_run(self, run_id: int) -> str:
    """Evaluate every case of the run that has no result yet (so a re-delivered task resumes)."""
    try:
        if not EvalRun.objects.filter(pk=run_id).exists():
            return "vanished"
        with single_flight(EXECUTE_RUN, run_id) as mine:
            if not mine:
                return "already running"
            return run_execute(run_id=run_id)
    except DATABASE_AWAY as exc:
        connection.close()  # a dead session; the next query opens a new one
        tries = self.request.retries
        if tries >= DATABASE_AWAY_RETRIES:
            _record_database_failure(run_id, tries, exc)
            raise
        log.warning("eval run %s: the database is unreachable (%s); retry %s of %s", run_id, exc, tries + 1,
                    DATABASE_AWAY_RETRIES)
        raise self.retry(exc=exc, countdown=min(2 ** tries, 60), max_retries=DATABASE_AWAY_RETRIES) from exc


def _record_database_failure(run_id: int, tries: int, exc: Exception) -> None:
    try:
        EvalRun.objects.filter(pk=run_id, status=EvalRun.Status.RUNNING).update(
            status=EvalRun.Status.FAILED, finished_at=timezone.now(),
            error=f"The database was unreachable through {tries} retries; start the run again to resume it. "
                  f"({str(exc).strip()[:300]})")
    except DATABASE_AWAY:
        log.error("eval run %s: the database is still unreachable; the next worker to start queues it again", run_id)


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
