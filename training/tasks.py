"""The training job's Celery task: ids in, on the `gpu` queue (served by the CPU worker where there is no GPU).

acks_late: a worker killed mid-job leaves the message unacknowledged, so the broker redelivers it and
the next worker resumes from the last checkpoint. The broker also redelivers a message whose job runs
longer than its visibility timeout while the first worker is still alive; `job_execute`'s heartbeat
lease makes that copy wait instead of training the same job twice.
"""

from celery import shared_task

from training.models import TrainingJob


@shared_task(name="training.run_job", acks_late=True, reject_on_worker_lost=True, time_limit=7 * 24 * 3600)
def run_job(job_id: int) -> str:
    from training.services import job_execute

    if not TrainingJob.objects.filter(pk=job_id).exists():
        return "vanished"
    return job_execute(job_id=job_id)
