"""The training job page says what became of the job's worker: stopped (its heartbeat older than the lease) while
the job waits to be taken up again, resumed after a stop, or nothing when neither. The real kill is in
test_jobs_worker.py; these pin the words for each state without a worker."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.models import TrainingJob
from workspaces.access import Actor

pytestmark = pytest.mark.django_db


def note(client, job) -> str:
    page = client.get(reverse("training_job_detail", kwargs={"ws": job.workspace.slug, "job_id": job.pk}))
    assert page.status_code == 200
    return page.content.decode().split('id="worker-note">', 1)[1].split("</p>", 1)[0]


def test_the_job_page_tells_a_stopped_worker_from_a_working_one_and_says_when_it_resumed(client, workspace, members,
                                                                                          settings):
    settings.TRAINING_LEASE_S = 120
    client.force_login(members["viewer"])
    job = services.job_create(actor=Actor.system("t"), workspace=workspace, name="note", config=tiny_config(sft(2)),
                              harness_versions=[mini_harness(workspace).head], simulator={"seed": 1, "size": 4},
                              start=False)
    assert note(client, job) == ""  # queued, never started

    TrainingJob.objects.filter(pk=job.pk).update(status="running", attempts=1, lease_owner="w1",
                                                 heartbeat_at=timezone.now() - timedelta(seconds=30))
    assert note(client, job) == ""  # a heartbeat within the lease: working

    TrainingJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=300))
    assert note(client, job) == ("No heartbeat from its worker for 300 s: the worker stopped (killed, or out of "
                                 "memory). The job resumes from its last checkpoint when a worker takes it up again.")

    TrainingJob.objects.filter(pk=job.pk).update(attempts=2, heartbeat_at=timezone.now())
    assert note(client, job) == "Resumed from its last checkpoint: its worker stopped 1 time (attempt 2)."
    TrainingJob.objects.filter(pk=job.pk).update(status="done", attempts=3)
    assert note(client, job) == "Resumed from its last checkpoint: its worker stopped 2 times (attempt 3)."
