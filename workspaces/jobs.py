"""Starting background jobs: a Celery queue in production, a thread in the embedded mode.

Embedded mode has no broker; its "in-process worker" is a daemon thread per
job, so a console request that starts a long evaluation returns at once and the
page can follow the job's progress like it would with a real worker.

Jobs are named by their Celery task name (`evaluation.execute_run`), not by the task object: a service starts
its app's jobs without importing its tasks module, which imports the services (tasks call services).
"""

import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, connections


def enqueue(task_name: str, *, args: list, queue: str, countdown: float = 0.0) -> None:
    """Start the job `task_name` with `args` on `queue` (call it after the commit that makes its rows), or
    `countdown` seconds from now (a retry's backoff)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        task = registered_task(task_name)

        def run():
            if countdown > 0:
                time.sleep(countdown)
            try:
                task.apply(args=args)
            finally:
                connections.close_all()  # this thread's connections back to the pool (Celery's fixup skips eager)

        threading.Thread(target=run, name=f"job-{task_name}", daemon=True).start()
    else:
        current_app.send_task(task_name, args=args, queue=queue, countdown=countdown or None)


def registered_task(task_name: str):
    """The task registered under `task_name`, importing the apps' tasks modules on first need (a web process
    imports them only here; a worker at start-up). KeyError for a name no app defines."""
    if task_name not in current_app.tasks:
        current_app.loader.import_default_modules()  # runs the app's autodiscovery of `<app>.tasks`
    return current_app.tasks[task_name]


def _lock_keys(name: str, object_id: int) -> tuple[int, int]:
    namespace = zlib.crc32(name.encode())
    return namespace - 2**32 if namespace >= 2**31 else namespace, object_id % 2**31


@contextmanager
def single_flight(name: str, object_id: int) -> Iterator[bool]:
    """Run a job at most once at a time: yields True while this process holds the job's lock, False when
    another process already runs it.

    Why: Celery jobs are acknowledged late, so a worker that dies mid-job hands the job back after the
    broker's visibility timeout; but Redis hands it back just the same when the job merely runs longer than
    that timeout, while its first worker is still busy. The lock (a PostgreSQL session advisory lock, released
    when the holder's connection ends, so also when its process is killed) tells the two cases apart: a
    second delivery of a running job finds the lock held and steps aside; one of a dead worker's job takes it
    and resumes. Embedded mode (SQLite, one process) needs no lock.
    """
    if connection.vendor != "postgresql":
        yield True
        return
    keys = _lock_keys(name, object_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", keys)
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s, %s)", keys)
            except DatabaseError:
                # The session is gone (PostgreSQL restarted) and its lock with it; closing makes sure a
                # half-broken session does not keep holding it.
                connection.close()


def job_is_running(name: str, object_id: int) -> bool:
    """Whether some process holds the job's `single_flight` lock now."""
    with single_flight(name, object_id) as held:
        return connection.vendor == "postgresql" and not held
