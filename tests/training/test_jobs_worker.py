"""Training jobs on a real Celery worker serving the `gpu` queue over Redis: a worker killed with SIGKILL
mid-stage leaves the job to the next worker, which resumes from the last checkpoint (not from step 1);
a cancel stops the job at its next step and keeps what it registered."""

import signal

import pytest
from django.urls import reverse

from tests.live_servers import requires_services, start_worker, stop, wait_for
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.models import TrainingJob, TrainingMetric
from training.tasks import run_job
from workspaces.access import Actor

pytestmark = [pytest.mark.django_db(transaction=True), requires_services]
SYSTEM = Actor.system("test")
# Long enough that the worker is still mid-stage when the kill lands: the poll sees step 3 up to 0.2 s late,
# and a fast host runs a tiny-model step in less than that (4 steps finished before the kill once, in CI).
STEPS = 12


def worker_env(tmp_path) -> dict:
    # Unacknowledged messages come back after 3 s; a holder whose heartbeat is 4 s old is presumed dead.
    return {"HARNESSOPS_BROKER_VISIBILITY_TIMEOUT_S": "3", "HARNESSOPS_TRAINING_LEASE_S": "4",
            "HARNESSOPS_TRAINING_ARTIFACTS_DIR": str(tmp_path)}


@pytest.mark.timeout(2400)  # real training steps on a shared 2-core machine
# The job comes back either way: the broker hands the unacknowledged message back once its visibility timeout has
# passed (3 s here), or, with the timeout an hour away as deployed, the next worker to start queues the job whose
# heartbeat stopped (training.tasks.resume_stalled_jobs).
@pytest.mark.parametrize("second_visibility_s", ["3", "3600"], ids=["broker-hands-it-back", "next-worker-queues-it"])
def test_killed_worker_resumes_from_the_last_checkpoint(workspace, purge_queue_fixture, tmp_path, client, members,
                                                        settings, second_visibility_s):
    settings.TRAINING_LEASE_S = 4  # as the workers'
    client.force_login(members["viewer"])

    def note() -> str:
        page = client.get(reverse("training_job_detail", kwargs={"ws": workspace.slug, "job_id": job.pk}))
        return page.content.decode().split('id="worker-note">', 1)[1].split("</p>", 1)[0]

    job = services.job_create(actor=SYSTEM, workspace=workspace, name="resume",
                              config=tiny_config(sft(STEPS, save_steps=2)),
                              harness_versions=[mini_harness(workspace).head], simulator={"seed": 1, "size": 4},
                              start=False)
    first = start_worker(queues="gpu", **worker_env(tmp_path))
    try:
        run_job.apply_async(args=[job.pk], queue="gpu")
        wait_for(lambda: TrainingMetric.objects.filter(job=job, step__gte=3).exists(), 900,
                 "step 3 (after the checkpoint at step 2)")
        first.send_signal(signal.SIGKILL)  # no warm shutdown, no acknowledgement
        first.wait(timeout=10)
    finally:
        stop(first)
    job.refresh_from_db()
    assert job.status == "running" and job.attempts == 1
    last_before = TrainingMetric.objects.filter(job=job).latest("id")
    assert last_before.step < STEPS  # killed mid-stage
    # The job page tells a stopped worker (no heartbeat past the lease) from a working one.
    wait_for(lambda: "the worker stopped" in note(), 30, "the page to say the worker stopped")
    assert note().startswith("No heartbeat from its worker for ")

    second = start_worker(queues="gpu", **{**worker_env(tmp_path),
                                           "HARNESSOPS_BROKER_VISIBILITY_TIMEOUT_S": second_visibility_s})
    try:
        wait_for(lambda: TrainingJob.objects.get(pk=job.pk).status not in ("queued", "running"), 900,
                 "the redelivered job to finish")
    finally:
        stop(second)
    job.refresh_from_db()
    assert job.status == "done", job.error
    assert job.attempts == 2 and any("resuming (attempt 2)" in line for line in job.log_tail)
    assert note() == "Resumed from its last checkpoint: its worker stopped 1 time (attempt 2)."
    resumed = list(TrainingMetric.objects.filter(job=job, id__gt=last_before.id).values_list("step", flat=True))
    # Resumed from a checkpoint (step 2 or later), not started over at step 1.
    assert resumed and resumed[0] >= 3 and resumed[-1] == STEPS
    checkpoint = job.checkpoints.get()
    assert checkpoint.stage == "sft" and (tmp_path / f"job-{job.pk}" / "stages" / "00-sft" / "model").is_dir()


@pytest.mark.timeout(2400)
def test_cancel_stops_at_the_next_step_and_keeps_registered_checkpoints(workspace, purge_queue_fixture, tmp_path):
    config = tiny_config(sft(1), sft(40, save_steps=50))
    job = services.job_create(actor=SYSTEM, workspace=workspace, name="cancel", config=config,
                              harness_versions=[mini_harness(workspace).head], simulator={"seed": 2, "size": 4},
                              start=False)
    worker = start_worker(queues="gpu", **worker_env(tmp_path))
    try:
        run_job.apply_async(args=[job.pk], queue="gpu")
        wait_for(lambda: TrainingMetric.objects.filter(job=job, stage="sft", total_steps=40, step__gte=1).exists(),
                 900, "the second stage's first step")
        services.job_cancel(actor=SYSTEM, job=job)
        wait_for(lambda: TrainingJob.objects.get(pk=job.pk).status != "running", 300, "the job to stop")
    finally:
        stop(worker)
    job.refresh_from_db()
    assert job.status == "cancelled", job.error
    assert job.step < 40  # it stopped, it did not run the stage out
    assert [c.stage for c in job.checkpoints.all()] == ["sft"]  # the first stage's checkpoint stays
    assert any("cancelled" in line for line in job.log_tail)
    # The stopped stage saved a checkpoint to resume from.
    assert list((tmp_path / f"job-{job.pk}" / "stages" / "01-sft").glob("**/checkpoint-*"))
