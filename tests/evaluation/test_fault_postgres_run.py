"""PostgreSQL restarted in the middle of an eval run on a real Celery worker: the run resumes from the cases it had
stored and ends done with every case counted once; it is never marked done with cases missing.

The worker runs against a PostgreSQL cluster of this test's own (tests/serving/test_fault_postgres.py) and a Redis
of its own (its broker), so the restart disturbs nothing else. Needs root, runuser and PostgreSQL 15's initdb.
"""

import time

import psycopg

from tests.live_servers import free_port, requires_services, start_worker, stop, wait_for
from tests.serving.test_fault_postgres import OWN_CLUSTER, manage, own_postgres  # noqa: F401  (a fixture)
from tests.serving.test_fault_redis import start_redis

pytestmark = [requires_services, OWN_CLUSTER]
CASES = 40

# The run is queued through the product's own path (run_create with start=True: on commit, to the broker).
SETUP = f"""
from pathlib import Path
from evaluation import services
from harness import services as harness_services
from harness.spec import read_dir
from workspaces.access import Actor
from workspaces.models import Workspace
system = Actor.system("test")
workspace = Workspace.objects.create(slug="acme", name="Acme Live")
harness = harness_services.harness_create(actor=system, workspace=workspace, name="avatar",
                                          files=read_dir(Path("harness/demo/avatar")), message="first")
version = services.eval_set_generate(actor=system, workspace=workspace, name="lsqa", suite="live_stream_qa", seed=9,
                                     n={CASES})
run = services.run_create(actor=system, workspace=workspace, set_version=version, harness=harness,
                          version=harness.head, backend="scripted", concurrency=1)
print(run.pk)
"""


def test_an_eval_run_resumes_after_a_postgres_restart_and_counts_each_case_once(own_postgres, tmp_path):  # noqa: F811
    redis_port = free_port()
    redis = start_redis(redis_port)
    broker = f"redis://127.0.0.1:{redis_port}/0"
    log = tmp_path / "worker.log"
    worker = None
    try:
        manage(own_postgres.url, "migrate", "-v0")
        run_id = int(manage(own_postgres.url, "shell", "-c", SETUP, REDIS_URL=broker).strip().splitlines()[-1])

        def stored() -> tuple[int, int]:
            with psycopg.connect(own_postgres.url) as conn:
                return conn.execute("SELECT count(*), count(DISTINCT case_id) FROM evaluation_evalresult "
                                    "WHERE run_id = %s", [run_id]).fetchone()

        def run_row() -> tuple[str, dict, str]:
            with psycopg.connect(own_postgres.url) as conn:
                return conn.execute("SELECT status, summary, error FROM evaluation_evalrun WHERE id = %s",
                                    [run_id]).fetchone()

        # Each case takes ~0.3 s of emulated model time: the run lasts ~15 s, the restart lands in its middle.
        worker = start_worker(log_file=log, DATABASE_URL=own_postgres.url, REDIS_URL=broker,
                              HARNESSOPS_SCRIPTED_DELAY_S="0.3")
        wait_for(lambda: stored()[0] >= 5, 120, "five finished cases")
        own_postgres.stop()
        down_at = time.monotonic()
        time.sleep(3)
        own_postgres.start()
        wait_for(lambda: run_row()[0] in ("done", "failed", "cancelled"), 120, "the run to end")
        status, summary, error = run_row()
    finally:
        if worker is not None:
            stop(worker)
        stop(redis)

    text = log.read_text()
    assert "the database is unreachable" in text, "the restart hit the run while it went"
    assert status == "done", error
    # Every case stored once, and the summary counts exactly the stored cases.
    assert stored() == (CASES, CASES)
    assert summary["overall"]["n"] == CASES
    assert time.monotonic() - down_at < 120
