"""The training job's Celery task: ids in, on the `gpu` queue (served by the CPU worker where there is no GPU).

acks_late: a worker killed mid-job leaves the message unacknowledged, so the broker redelivers it and
the next worker resumes from the last checkpoint. The broker also redelivers a message whose job runs
longer than its visibility timeout while the first worker is still alive; `job_execute`'s heartbeat
lease makes that copy wait instead of training the same job twice.
"""

from datetime import timedelta

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.utils import timezone

from training.models import TrainingJob


@shared_task(name="training.run_job", acks_late=True, reject_on_worker_lost=True, time_limit=7 * 24 * 3600)
def run_job(job_id: int) -> str:
    from training.services import job_execute

    if not TrainingJob.objects.filter(pk=job_id).exists():
        return "vanished"
    return job_execute(job_id=job_id)


@worker_ready.connect
def resume_stalled_jobs(sender=None, **kwargs) -> None:
    """A running job whose heartbeat is older than the lease lost its worker (killed, out of memory): queue it
    again when a worker starts, instead of waiting for the broker to hand the message back (its visibility
    timeout, an hour by default). The next delivery resumes from the last checkpoint; a copy that meets a live
    holder waits (job_execute), one that meets a finished job returns."""
    stale = timezone.now() - timedelta(seconds=settings.TRAINING_LEASE_S)
    for job_id in TrainingJob.objects.filter(status=TrainingJob.Status.RUNNING, heartbeat_at__lt=stale) \
            .values_list("pk", flat=True):
        run_job.apply_async(args=[job_id], queue="gpu")
