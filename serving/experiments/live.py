"""Dashboard updates over Channels: the experiment's group name and a throttled publisher."""

import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache
from django.db import connection, transaction

from serving.models import Experiment

PUBLISH_EVERY_S = 1
log = logging.getLogger(__name__)


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


_trailing: set[int] = set()
_trailing_lock = threading.Lock()


def _send(experiment_id: int) -> None:
    from serving.experiments.selectors import experiment_snapshot

    layer = get_channel_layer()
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if layer is not None and experiment is not None:
        async_to_sync(layer.group_send)(experiment_group(experiment_id),
                                        {"type": "experiment.update", "payload": experiment_snapshot(experiment)})


def _send_trailing(experiment_id: int) -> None:
    with _trailing_lock:
        _trailing.discard(experiment_id)
    try:
        _send(experiment_id)
    except Exception:  # a dashboard refresh must never break anything else
        log.exception("could not publish experiment %s", experiment_id)
    finally:
        connection.close()  # this timer thread's own connection


def publish_experiment(experiment: Experiment) -> None:
    """Send a fresh snapshot to the dashboard at most once a second per experiment (after commit).

    A change inside the quiet second is not dropped: one trailing update per process follows it, so the
    dashboard always ends on the latest state.
    """
    if cache.add(f"experiment-publish:{experiment.pk}", 1, timeout=PUBLISH_EVERY_S):
        transaction.on_commit(lambda: _send(experiment.pk))
        return
    with _trailing_lock:
        if experiment.pk in _trailing:
            return
        _trailing.add(experiment.pk)
    timer = threading.Timer(PUBLISH_EVERY_S, _send_trailing, args=[experiment.pk])
    timer.daemon = True
    transaction.on_commit(timer.start)


def publish_experiment_updates(workspace) -> None:
    for experiment in Experiment.objects.filter(workspace=workspace, status=Experiment.Status.RUNNING):
        publish_experiment(experiment)


GUARDRAIL_CHECK_EVERY_S = 10


def after_experiment_reply(*, workspace, arm: str, trace_id: str) -> None:
    """After a reply inside an experiment: maybe queue its judging, check guardrails now and then, publish."""
    import random

    from django.conf import settings

    from console.jobs import enqueue
    from serving.experiments.services import experiment_key_of
    from serving.tasks import check_guardrails, judge_live_trace

    experiment = Experiment.objects.filter(workspace=workspace, key=experiment_key_of(arm)).first()
    if experiment is None:
        return
    if random.random() < settings.LIVE_JUDGE_RATE:
        transaction.on_commit(lambda: enqueue(judge_live_trace, args=[trace_id], queue="cpu"))
    if experiment.status == Experiment.Status.RUNNING and cache.add(
            f"guardrail-check:{experiment.pk}", 1, timeout=GUARDRAIL_CHECK_EVERY_S):
        transaction.on_commit(lambda: enqueue(check_guardrails, args=[experiment.pk], queue="cpu"))
    publish_experiment(experiment)
