"""The Celery app. Workers run per queue: `cpu` (evaluation, seeding) and `gpu` (training)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("harnessops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
