"""Eval runs on a real Celery worker over Redis: a killed worker loses no finished case and counts none twice;
the run page follows progress over a real websocket (Daphne + Redis channel layer) in headless Chromium."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from console.access import Actor
from evaluation import services
from evaluation.models import EvalResult, EvalRun
from evaluation.tasks import execute_run
from tests.conftest import PASSWORD

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not (os.environ.get("REDIS_URL") and os.environ.get("DATABASE_URL", "").startswith("postgres")),
                       reason="needs PostgreSQL and Redis (set DATABASE_URL and REDIS_URL; CI does)"),
]
STEPS = json.dumps(["Thanks for asking! Let me check that for you."])


def child_env(**extra) -> dict:
    """The environment of a server or worker process that shares this test's database and Redis."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "REDIS_URL": os.environ["REDIS_URL"],
            "HARNESSOPS_MODEL_BACKEND": "scripted", "HARNESSOPS_SCRIPTED_STEPS": STEPS,
            "HARNESSOPS_TRACE_WRITES": "sync", "PYTHONUNBUFFERED": "1", **extra}


def start_worker(**extra) -> subprocess.Popen:
    celery = str(Path(sys.executable).parent / "celery")
    return subprocess.Popen([celery, "-A", "console", "worker", "-Q", "cpu", "--pool", "solo", "-l", "warning",
                             "--without-gossip", "--without-mingle", "--without-heartbeat"],
                            cwd=ROOT, env=child_env(**extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def purge_queue():
    from console.celery import app

    app.control.purge()
    yield
    app.control.purge()


def test_killed_worker_resumes_without_losing_or_repeating_cases(workspace, harness, purge_queue):
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.browser
def test_browser_launches_a_run_and_watches_progress(page, workspace, harness, members, purge_queue):
    # The server runs with the default (slow, salted) hasher; this test process uses a fast one.
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    operator = members["operator"]
    operator.password = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt())
    operator.save(update_fields=["password"])
    port = free_port()
    daphne = subprocess.Popen([str(Path(sys.executable).parent / "daphne"), "-p", str(port), "console.asgi:application"],
                              cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = start_worker(HARNESSOPS_SCRIPTED_DELAY_S="0.3")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), 30, "daphne")
        page.goto(f"{base}/accounts/login/")
        page.fill("input[name=username]", "operator")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{base}/w/acme/eval/")
        page.fill("#new-set input[name=name]", "smoke")
        page.fill("#new-set input[name=n]", "8")
        page.click("#new-set button[type=submit]")
        page.wait_for_selector("text=Created smoke@v1 with 8 cases")
        page.select_option("#new-run select[name=backend]", "scripted")
        page.fill("#new-run input[name=concurrency]", "1")
        page.fill("#new-run input[name=version]", "v1")
        page.click("#new-run button[type=submit]")
        page.wait_for_url("**/eval/runs/*/")
        page.wait_for_function("document.getElementById('status').textContent === 'done'", timeout=90_000)
        assert page.locator("#count").inner_text() == "8 / 8"
        assert page.locator("#bar").get_attribute("value") == "8"
        # Updates arrived over the websocket: the page was not reloaded to get there.
        assert int(page.locator("#progress").get_attribute("data-updates")) >= 2
        assert "overall" in page.locator("#summary").inner_text()
    finally:
        stop(worker)
        stop(daphne)


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
