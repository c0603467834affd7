"""Celery tasks of harness evolution: one per job kind, ids in, early return if the row vanished."""

from celery import shared_task

from evaluation.evolution.models import Diagnosis, Round


@shared_task(name="evolution.diagnose", acks_late=True, time_limit=1800,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def diagnose(diagnosis_id: int) -> str:
    """Cluster the run's failures and propose edits (the analysis is CPU-only: scikit-learn, no model)."""
    from evaluation.evolution.diagnosing import diagnosis_execute

    if not Diagnosis.objects.filter(pk=diagnosis_id).exists():
        return "vanished"
    return diagnosis_execute(diagnosis_id=diagnosis_id)


@shared_task(name="evolution.evaluate_round", acks_late=True, time_limit=6 * 3600,
             autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=3)
def evaluate_round(round_id: int) -> str:
    """Evaluate a round's candidate version, then compare it with the diagnosed run and apply the gate."""
    from evaluation.evolution.rounds import round_finish

    if not Round.objects.filter(pk=round_id).exists():
        return "vanished"
    return round_finish(round_id=round_id)
