"""Celery tasks of harness evolution: one per job kind, ids in, early return if the row vanished."""

from celery import shared_task
from celery.signals import worker_ready

from evaluation.evolution.diagnosing import DIAGNOSE
from evaluation.evolution.models import Diagnosis, Round
from workspaces.jobs import job_is_running, single_flight


# acks_late: a killed worker's diagnosis comes back from the broker (after its visibility timeout), and the next
# worker to start queues a running diagnosis that no process holds at once (resume_orphaned_diagnoses). The
# single-flight lock tells the two apart from a diagnosis still under way; the attempt is counted on the row.
@shared_task(name=DIAGNOSE, acks_late=True, time_limit=1800,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def diagnose(diagnosis_id: int) -> str:
    """Cluster the run's failures and propose edits; each proposal is tried on a few diagnosis cases with the run's
    model (propose-try-keep), so a diagnosis is no longer CPU-only analysis."""
    from evaluation.evolution.diagnosing import diagnosis_execute

    if not Diagnosis.objects.filter(pk=diagnosis_id).exists():
        return "vanished"
    with single_flight(DIAGNOSE, diagnosis_id) as mine:
        if not mine:
            return "already running"
        return diagnosis_execute(diagnosis_id=diagnosis_id)


@worker_ready.connect
def resume_orphaned_diagnoses(sender=None, **kwargs) -> None:
    """A diagnosis marked running that no process holds lost its worker: queue it again when a worker starts."""
    for diagnosis_id in Diagnosis.objects.filter(status=Diagnosis.Status.RUNNING).values_list("pk", flat=True):
        if not job_is_running(DIAGNOSE, diagnosis_id):
            diagnose.apply_async(args=[diagnosis_id], queue="cpu")


@shared_task(name="evolution.evaluate_round", acks_late=True, time_limit=6 * 3600,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def evaluate_round(round_id: int) -> str:
    """Evaluate a round's candidate version, then compare it with the diagnosed run and apply the gate."""
    from evaluation.evolution.rounds import round_finish

    if not Round.objects.filter(pk=round_id).exists():
        return "vanished"
    return round_finish(round_id=round_id)
