"""Eval runs on a real Celery worker over Redis: a killed worker loses no finished case and counts none twice;
the run page follows progress over a real websocket (Daphne + Redis channel layer) in headless Chromium."""

import signal

import pytest

from evaluation import services
from evaluation.models import EvalResult, EvalRun
from evaluation.tasks import execute_run
from tests.live_servers import log_in, requires_services, start_daphne, start_worker, stop, wait_for
from workspaces.access import Actor

pytestmark = [pytest.mark.django_db(transaction=True), requires_services]


def test_killed_worker_resumes_without_losing_or_repeating_cases(workspace, harness, purge_queue_fixture):
    system = Actor.system("test")
    version = services.eval_set_generate(actor=system, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=9, n=10)
    run = services.run_create(actor=system, workspace=workspace, set_version=version, harness=harness,
                              version=harness.head, backend="scripted", concurrency=1, start=False)
    # Each case takes ~0.4 s of emulated model time; unacknowledged jobs come back after 3 s.
    slow = {"HARNESSOPS_SCRIPTED_DELAY_S": "0.4", "HARNESSOPS_BROKER_VISIBILITY_TIMEOUT_S": "3"}
    first = start_worker(**slow)
    try:
        execute_run.apply_async(args=[run.pk], queue="cpu")
        wait_for(lambda: EvalResult.objects.filter(run=run).count() >= 3, 60, "three finished cases")
        first.send_signal(signal.SIGKILL)  # no warm shutdown, no acknowledgement
        first.wait(timeout=10)
    finally:
        stop(first)
    finished_before = EvalResult.objects.filter(run=run).count()
    assert 3 <= finished_before < 10
    assert EvalRun.objects.get(pk=run.pk).status == "running"

    second = start_worker(**slow)
    try:
        wait_for(lambda: EvalRun.objects.get(pk=run.pk).status == "done", 120, "the redelivered run to finish")
    finally:
        stop(second)
    results = EvalResult.objects.filter(run=run)
    assert results.count() == 10 == len(set(results.values_list("case_id", flat=True)))
    assert EvalRun.objects.get(pk=run.pk).summary["overall"]["n"] == 10


@pytest.mark.browser
def test_browser_launches_a_run_and_watches_progress(page, workspace, harness, members, purge_queue_fixture):
    daphne, base = start_daphne()
    worker = start_worker(HARNESSOPS_SCRIPTED_DELAY_S="0.3")
    try:
        log_in(page, base, members["operator"])
        page.goto(f"{base}/w/acme/eval/")
        page.fill("#new-set input[name=name]", "smoke")
        page.fill("#new-set input[name=n]", "8")
        page.click("#new-set button[type=submit]")
        page.wait_for_selector("text=Created smoke@v1 with 8 cases")
        frames: list[str] = []  # progress the run page received over its websocket
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
        page.select_option("#new-run select[name=backend]", "scripted")
        page.fill("#new-run input[name=concurrency]", "1")
        page.fill("#new-run input[name=version]", "v1")
        page.click("#new-run button[type=submit]")
        page.wait_for_url("**/eval/runs/*/")
        page.wait_for_function("document.getElementById('status').textContent === 'done'", timeout=90_000)
        assert page.locator("#count").inner_text() == "8 / 8"
        assert page.locator("#bar").get_attribute("value") == "8"
        # Progress arrived over the websocket while the run went (the page reloads once when it ends, to redraw
        # its buttons and cases, so the count of updates is taken from the socket, not the page).
        assert len(frames) >= 2 and any('"status": "done"' in f or '"status":"done"' in f for f in frames), frames[-3:]
        assert "overall" in page.locator("#summary").inner_text()
    finally:
        stop(worker)
        stop(daphne)



def test_a_run_longer_than_the_visibility_timeout_runs_once(workspace, harness, purge_queue_fixture, tmp_path):
    """Two real workers, a 2 s visibility timeout and a ~20 s run: Redis hands the unacknowledged job to the idle
    worker (its sweep runs every second here) while the first still runs; that delivery must step aside, not
    evaluate the run again."""
    system = Actor.system("test")
    version = services.eval_set_generate(actor=system, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=11, n=40)
    run = services.run_create(actor=system, workspace=workspace, set_version=version, harness=harness,
                              version=harness.head, backend="scripted", concurrency=1, start=False)
    slow = {"HARNESSOPS_SCRIPTED_DELAY_S": "0.5", "HARNESSOPS_BROKER_VISIBILITY_TIMEOUT_S": "2",
            "HARNESSOPS_BROKER_RESTORE_INTERVAL_S": "1"}
    logs = [tmp_path / "first.log", tmp_path / "second.log"]

    def log() -> str:
        return "".join(path.read_text() for path in logs if path.exists())

    workers = [start_worker(log_file=path, **slow) for path in logs]
    try:
        wait_for(lambda: log().count(" ready.") == 2, 120, "both workers")
        execute_run.apply_async(args=[run.pk], queue="cpu")
        wait_for(lambda: "already running" in log(), 60, "the handed-back delivery to step aside")
        assert EvalRun.objects.get(pk=run.pk).status == "running"  # it stepped aside while the run went on
        wait_for(lambda: EvalRun.objects.get(pk=run.pk).status == "done", 120, "the run to finish")
        wait_for(lambda: "'done'" in log(), 30, "the worker to log its result")
    finally:
        for worker in workers:
            stop(worker)
    assert log().count("'done'") == 1  # one execution evaluated the run
    results = EvalResult.objects.filter(run=run)
    assert results.count() == 40 == len(set(results.values_list("case_id", flat=True)))
