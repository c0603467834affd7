"""A Celery worker killed (SIGKILL) in the middle of a diagnosis: the diagnosis page says its worker stopped, the
next worker to start runs it again from the start, and it ends done, stored once, its page saying it was resumed.

The worker and this test share the test database; the broker is a Redis of this test's own (a spare port), so no
other test's worker takes the job. The diagnosis calls the model proposer, a scripted model that takes 2 s a call,
so the kill lands while it works.
"""

import signal
import time

import pytest
from django.urls import reverse

from evaluation.evolution.models import Cluster, Diagnosis, Proposal
from tests.live_servers import free_port, requires_services, start_worker, stop, wait_for
from tests.serving.test_fault_redis import start_redis

pytestmark = [pytest.mark.django_db(transaction=True), requires_services]


def send(broker: str, task_name: str, args: list) -> None:
    """Queue `task_name` on the `cpu` queue of the Redis at `broker` (not the test settings' own)."""
    from console.celery import app

    with app.connection_for_write(broker) as connection:
        app.send_task(task_name, args=args, queue="cpu", connection=connection)


def status_text(client, diagnosis: Diagnosis) -> str:
    page = client.get(reverse("diagnosis_detail", kwargs={"ws": diagnosis.workspace.slug,
                                                          "diagnosis_id": diagnosis.pk}))
    assert page.status_code == 200
    return page.content.decode()


def test_a_killed_workers_diagnosis_runs_again_and_its_page_says_so(client, workspace, harness, members,
                                                                    finished_run, tmp_path):
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t", config={"proposer": "scripted"})
    client.force_login(members["viewer"])
    redis_port = free_port()
    redis = start_redis(redis_port)
    broker = f"redis://127.0.0.1:{redis_port}/0"
    slow = {"REDIS_URL": broker, "HARNESSOPS_SCRIPTED_DELAY_S": "2"}
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    first = start_worker(log_file=logs[0], **slow)
    try:
        wait_for(lambda: logs[0].exists() and " ready." in logs[0].read_text(), 120, "the worker")
        send(broker, "evolution.diagnose", [diagnosis.pk])
        wait_for(lambda: Diagnosis.objects.get(pk=diagnosis.pk).status == "running", 120, "the diagnosis to start")
        time.sleep(1)
        first.send_signal(signal.SIGKILL)  # no warm shutdown, no acknowledgement
        first.wait(timeout=10)
        diagnosis.refresh_from_db()
        assert diagnosis.status == "running" and diagnosis.summary == {"attempts": 1}
        # Nothing of the interrupted attempt was stored (the result is written in one transaction).
        assert not Cluster.objects.filter(diagnosis=diagnosis).exists()
        # The page tells a stopped worker from one still working (its lock ended with its database session).
        wait_for(lambda: "Its worker stopped before it finished" in status_text(client, diagnosis), 30,
                 "the page to say the worker stopped")

        second = start_worker(log_file=logs[1], **slow)  # on start it queues the running diagnosis that no process holds
        try:
            wait_for(lambda: Diagnosis.objects.get(pk=diagnosis.pk).status in ("done", "failed"), 180,
                     "the diagnosis to end")
        finally:
            stop(second)
    finally:
        stop(first)
        stop(redis)
    diagnosis.refresh_from_db()
    assert diagnosis.status == "done", diagnosis.error
    assert diagnosis.summary["attempts"] == 2 and diagnosis.summary["failures"] > 0
    clusters = list(Cluster.objects.filter(diagnosis=diagnosis).values_list("cluster_id", flat=True))
    assert clusters and len(clusters) == len(set(clusters))  # stored once
    assert Proposal.objects.filter(diagnosis=diagnosis).count() == diagnosis.summary["proposals"]
    text = status_text(client, diagnosis)
    assert "Its worker stopped before it finished" not in text
    assert "Resumed: its worker stopped 1 time, and attempt 2 ran it again from the start." in text


def test_a_diagnosis_that_stops_its_worker_every_time_fails_saying_why(workspace, harness, finished_run, client,
                                                                      members):
    from evaluation.evolution.diagnosing import MAX_ATTEMPTS, diagnosis_execute

    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t", status="running",
                                         summary={"attempts": MAX_ATTEMPTS})
    assert diagnosis_execute(diagnosis_id=diagnosis.pk) == "failed"
    diagnosis.refresh_from_db()
    assert diagnosis.status == "failed" and not diagnosis.clusters.exists()
    client.force_login(members["viewer"])
    assert (f"Gave up after {MAX_ATTEMPTS} attempts: the worker running this diagnosis stopped each time"
            in status_text(client, diagnosis))
