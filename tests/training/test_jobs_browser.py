"""The console end to end: launch a training job from the form in headless Chromium, watch its loss curve
grow over a real websocket (Daphne + Redis channel layer) while a real Celery worker trains the tiny
model on the `gpu` queue, then cancel it from the page."""

import json

import pytest

from tests.live_servers import log_in, requires_services, start_daphne, start_worker, stop
from tests.training.jobs_builders import mini_harness, sft, tiny_config
from training.models import TrainingJob, TrainingMetric

pytestmark = [pytest.mark.django_db(transaction=True), requires_services, pytest.mark.browser]


@pytest.mark.timeout(2400)  # real training steps on a shared 2-core machine
# Known failure, under investigation: the worker stores the steps, but the page did not receive them in
# two runs on the shared machine (the consumer + reporter path passes in test_jobs_live.py, and a page
# fed by a reporter in the test process updates). Not strict, so a fix shows up as XPASS.
@pytest.mark.xfail(strict=False, reason="known bug (issue 11): curve updates from a real Celery worker do not reach the page; "
                   "the websocket closes while the worker trains (suspect: Daphne ping timeout under CPU starvation, no reconnect)")
def test_browser_launches_a_job_and_watches_its_curve_move(page, workspace, members, purge_queue_fixture, tmp_path):
    mini_harness(workspace)
    artifacts = {"HARNESSOPS_TRAINING_ARTIFACTS_DIR": str(tmp_path)}
    daphne, base = start_daphne(**artifacts)
    worker = start_worker(queues="gpu", **artifacts)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("websocket", lambda ws: ws.on("close", lambda _: errors.append("websocket closed")))
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
                                   timeout=180_000)
        except Exception:
            raise AssertionError(f"no curve points on the page; page errors: {errors}; points stored: "
                                 f"{list(TrainingMetric.objects.values_list('step', flat=True))}") from None
        before = page.evaluate("Chart.getChart('chart-loss').data.datasets[0].data.length")
        page.wait_for_function(f"Chart.getChart('chart-loss').data.datasets[0].data.length > {before}",
                               timeout=300_000)
        losses = page.evaluate("Chart.getChart('chart-loss').data.datasets[0].data.map(p => p.y)")
        assert all(isinstance(v, float) for v in losses) and len(set(losses)) > 1
        assert int(page.locator("#progress").get_attribute("data-updates")) > loaded_updates + 2
        assert page.locator("#status").inner_text() == "running"
        assert page.locator("#stage").inner_text().startswith("sft")
        assert "/ 40" in page.locator("#step").inner_text()
        assert page.evaluate("Chart.getChart('chart-lr').data.datasets.length") == 1
        assert page.locator("#log").inner_text().strip() != ""

        page.click("#cancel")
        page.wait_for_function("document.getElementById('status').textContent === 'cancelled'", timeout=300_000)
        job = TrainingJob.objects.get(name="browser-job")
        assert job.status == "cancelled" and job.step < 40
    finally:
        stop(worker)
        stop(daphne)
