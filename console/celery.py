"""The Celery app. Workers run per queue: `cpu` (evaluation, seeding) and `gpu` (training)."""

import gc
import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("harnessops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def freeze_what_start_up_loaded(**kwargs) -> None:
    """Load CEL's parser now, then move what the worker's start-up made (Django, the task modules) to the
    collector's permanent generation, as console.asgi does for a server: every full collection of an eval
    run would otherwise walk it all again, and pool processes forked after this inherit it frozen."""
    from harness.spec.validate import cel_environment

    cel_environment()
    gc.collect()  # garbage now would otherwise be frozen with the rest, never freed
    gc.freeze()
