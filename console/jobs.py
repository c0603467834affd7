"""Starting background jobs: a Celery queue in production, a thread in the embedded mode.

Embedded mode has no broker; its "in-process worker" is a daemon thread per
job, so a console request that starts a long evaluation returns at once and the
page can follow the job's progress like it would with a real worker.
"""

import threading

from django.conf import settings


def enqueue(task, *, args: list, queue: str) -> None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        threading.Thread(target=task.apply, kwargs={"args": args}, name=f"job-{task.name}", daemon=True).start()
    else:
        task.apply_async(args=args, queue=queue)
