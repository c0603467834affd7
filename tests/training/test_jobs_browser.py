"""The job page in headless Chromium over a real websocket (Daphne + Redis channel layer).

- The page never loses a point: an update lost in transit is noticed by its number and the page asks for a
  snapshot; a dropped socket (here: the server restarted) reconnects with backoff and the snapshot it gets
  on connect brings the points stored meanwhile.
- End to end: launch a job from the form, watch its loss curve grow while a real Celery worker trains the
  tiny model on the `gpu` queue, then cancel it from the page.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from tests.live_servers import log_in, requires_services, start_daphne, start_worker, stop
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training import services
from training.models import TrainingJob, TrainingMetric
from training.services import JobReporter
from workspaces.access import Actor

pytestmark = [pytest.mark.django_db(transaction=True), requires_services, pytest.mark.browser]
LOADED = 120_000  # ms; generous waits: the machine running the tests may be busy


def worker_side(call, *args) -> None:
    """Run a reporter call as the worker would: outside Playwright's event loop (its own thread and
    database connection), so its publish can use async_to_sync."""
    def run():
        try:
            call(*args)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(run).result()


def points(page) -> int:
    return int(page.locator("#progress").get_attribute("data-points"))


def wait_points(page, n: int) -> None:
    page.wait_for_function(f"Number(document.getElementById('progress').dataset.points) === {n}", timeout=LOADED)


def losses(page) -> list[tuple[float, float]]:
    return page.evaluate("Chart.getChart('chart-loss').data.datasets.flatMap(d => d.data.map(p => [p.x, p.y]))")


@pytest.mark.timeout(600)
def test_page_catches_up_after_a_lost_update_and_a_server_restart(page, workspace, members, monkeypatch):
    job = services.job_create(actor=Actor.system("test"), workspace=workspace, name="live", start=False,
                              config=tiny_config(sft(10)), harness_versions=[mini_harness(workspace).head],
                              simulator={"seed": 1, "size": 4})
    TrainingJob.objects.filter(pk=job.pk).update(status=TrainingJob.Status.RUNNING)
    job.refresh_from_db()
    reporter = JobReporter(job)
    daphne, base = start_daphne()
    port = int(base.rsplit(":", 1)[1])
    try:
        log_in(page, base, members["viewer"])
        page.goto(f"{base}/w/acme/training/jobs/{job.pk}/")
        page.wait_for_function("document.getElementById('connection').dataset.state === 'live'", timeout=LOADED)
        worker_side(reporter.log, "sft", 1, 10, {"loss": 3.0, "learning_rate": 1e-5})
        wait_points(page, 1)

        # Step 2's update is lost on its way (stored, never delivered); step 3's is numbered 3, so the page
        # notices the hole and asks for a snapshot instead of drawing 1, 3.
        with monkeypatch.context() as lost:
            lost.setattr("training.services.publish_job_event", lambda *args, **kwargs: None)
            worker_side(reporter.log, "sft", 2, 10, {"loss": 2.5, "learning_rate": 1e-5})
        worker_side(reporter.log, "sft", 3, 10, {"loss": 2.0, "learning_rate": 1e-5})
        wait_points(page, 3)
        assert losses(page) == [[1, 3.0], [2, 2.5], [3, 2.0]]

        # The server goes away: the page says so and keeps trying; what is stored meanwhile arrives with
        # the snapshot on reconnect, and the live updates carry on.
        stop(daphne)
        page.wait_for_function("document.getElementById('connection').dataset.state === 'reconnecting'",
                               timeout=LOADED)
        worker_side(reporter.log, "sft", 4, 10, {"loss": 1.5, "learning_rate": 1e-5})
        daphne, _ = start_daphne(port=port)
        wait_points(page, 4)
        page.wait_for_function("document.getElementById('connection').dataset.state === 'live'", timeout=LOADED)
        worker_side(reporter.log, "sft", 5, 10, {"loss": 1.0, "learning_rate": 1e-5})
        wait_points(page, 5)
        assert losses(page) == [[1, 3.0], [2, 2.5], [3, 2.0], [4, 1.5], [5, 1.0]]
        assert page.locator("#step").inner_text() == "5 / 10"
        assert int(page.locator("#progress").get_attribute("data-reconnects")) >= 1
    finally:
        stop(daphne)


@pytest.mark.timeout(1200)  # real training steps on a shared 2-core machine
def test_browser_launches_a_job_and_watches_its_curve_move(page, workspace, members, purge_queue_fixture, tmp_path):
    mini_harness(workspace)
    artifacts = {"HARNESSOPS_TRAINING_ARTIFACTS_DIR": str(tmp_path)}
    daphne, base = start_daphne(**artifacts)
    worker = start_worker(queues="gpu", **artifacts)
    errors, closed = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("websocket", lambda ws: ws.on("close", lambda _: closed.append(ws.url)))
    try:
        log_in(page, base, members["operator"])
        page.goto(f"{base}/w/acme/training/")
        page.fill("#launch input[name=name]", "browser-job")
        page.select_option("#launch select[name=harness_versions]", ["mini@v1"])
        page.fill("#launch input[name=size]", "4")
        page.fill("#launch textarea[name=config]", json.dumps(tiny_config(sft(40, save_steps=50))))
        page.click("#launch button[type=submit]")
        page.wait_for_url("**/training/jobs/*/")
        loaded_updates = int(page.locator("#progress").get_attribute("data-updates"))

        # The first points arrive over the websocket, then the curve keeps growing without a reload.
        try:
            page.wait_for_function("Number(document.getElementById('progress').dataset.points) >= 2",
                                   timeout=600_000)
        except Exception:
            raise AssertionError(f"no curve points on the page; page errors: {errors}; sockets closed: {closed}; "
                                 f"points stored: {list(TrainingMetric.objects.values_list('step', flat=True))}"
                                 ) from None
        before = page.evaluate("Chart.getChart('chart-loss').data.datasets[0].data.length")
        page.wait_for_function(f"Chart.getChart('chart-loss').data.datasets[0].data.length > {before}",
                               timeout=300_000)
        curve = [y for _, y in losses(page)]
        assert all(isinstance(v, float) for v in curve) and len(set(curve)) > 1
        assert int(page.locator("#progress").get_attribute("data-updates")) > loaded_updates + 2
        assert page.locator("#status").inner_text() == "running"
        assert page.locator("#stage").inner_text().startswith("sft")
        assert "/ 40" in page.locator("#step").inner_text()
        assert page.evaluate("Chart.getChart('chart-lr').data.datasets.length") == 1
        assert page.locator("#log").inner_text().strip() != ""
        assert not errors

        page.click("#cancel")
        page.wait_for_function("document.getElementById('status').textContent === 'cancelled'", timeout=300_000)
        job = TrainingJob.objects.get(name="browser-job")
        assert job.status == "cancelled" and job.step < 40
        # Every point the worker stored is on the page (none lost on the way).
        assert points(page) == TrainingMetric.objects.filter(job=job).count()
    finally:
        stop(worker)
        stop(daphne)
