"""After a change to an experiment: dashboard updates over Channels (debounced, off the request path), and what
a reply inside it starts (live judging's sample, the guardrail check)."""

import logging
import random
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from serving.experiments.selectors import experiment_snapshot
from serving.models import Experiment
from serving.signals import live_trace_sampled
from workspaces.jobs import enqueue
from workspaces.tokens import cache_failed

PUBLISH_EVERY_S = 1
log = logging.getLogger(__name__)


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def _debounce_key(experiment_id: int) -> str:
    return f"experiment-publish:{experiment_id}"


def experiment_send(experiment_id: int) -> None:
    """Compute the experiment's snapshot and push it to its dashboard group."""
    # Cleared before reading, so a change committed from now on schedules a new task (nothing is missed).
    cache.delete(_debounce_key(experiment_id))
    layer = get_channel_layer()
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if layer is not None and experiment is not None:
        async_to_sync(layer.group_send)(experiment_group(experiment_id),
                                        {"type": "experiment.update", "payload": experiment_snapshot(experiment)})


def _publish_after_delay(experiment_id: int) -> None:
    """Runs on a timer thread of this process, off every request; its own connection is closed after."""
    try:
        experiment_send(experiment_id)
    except Exception:  # a dashboard refresh must never break anything else
        log.exception("could not publish experiment %s", experiment_id)
    finally:
        connection.close()


def _publish_later(experiment_id: int) -> None:
    timer = threading.Timer(PUBLISH_EVERY_S, _publish_after_delay, args=[experiment_id])
    timer.daemon = True
    timer.start()


def _schedule(experiment_id: int) -> None:
    try:
        if cache.add(_debounce_key(experiment_id), 1, timeout=PUBLISH_EVERY_S * 30):
            _publish_later(experiment_id)
    except Exception as error:  # noqa: BLE001 (a dashboard refresh must never break the request that changed data)
        cache_failed(f"scheduling a dashboard update of experiment {experiment_id}", error)


def publish_experiment(experiment: Experiment) -> None:
    """Push a fresh snapshot to the dashboard about a second after a change, at most about once a second per
    experiment across every process, and never inside the request that made the change.

    After commit, the first change (a Redis key shared by all processes) starts a timer thread here that
    computes and sends the snapshot PUBLISH_EVERY_S later; changes until then are covered by it (it clears
    the key, then reads, so a change committed after the read schedules the next one). Not a Celery task:
    on the `cpu` queue it would wait behind eval runs and judging, and the dashboard would freeze meanwhile.
    The key's timeout only matters if a process dies before its timer fires.
    """
    experiment_id = experiment.pk
    transaction.on_commit(lambda: _schedule(experiment_id))


def publish_experiment_updates(experiment_ids: list[int]) -> None:
    """After an ingest: publish the experiments that were running during it (`IngestResult.running`)."""
    for experiment_id in experiment_ids:
        transaction.on_commit(lambda experiment_id=experiment_id: _schedule(experiment_id))


GUARDRAIL_CHECK_EVERY_S = 10


def after_experiment_reply(*, experiment: Experiment, trace_id: str) -> None:
    """After a reply inside `experiment`: maybe announce it for live judging, check guardrails now and then,
    publish."""
    if random.random() < settings.LIVE_JUDGE_RATE:
        experiment_id = experiment.pk
        transaction.on_commit(lambda: live_trace_sampled.send(sender=Experiment, trace_id=trace_id,
                                                              experiment_id=experiment_id))
    if experiment.status == Experiment.Status.RUNNING and _guardrail_check_due(experiment.pk):
        transaction.on_commit(lambda: _check_guardrails_later(experiment.pk))
    publish_experiment(experiment)


def _guardrail_check_due(experiment_id: int) -> bool:
    """At most one check every GUARDRAIL_CHECK_EVERY_S across processes; none while the shared cache is away
    (the reply still answers; the next reply after it is back checks)."""
    try:
        return bool(cache.add(f"guardrail-check:{experiment_id}", 1, timeout=GUARDRAIL_CHECK_EVERY_S))
    except Exception as error:  # noqa: BLE001
        cache_failed("timing a guardrail check", error)
        return False


def _check_guardrails_later(experiment_id: int) -> None:
    try:
        enqueue("serving.check_guardrails", args=[experiment_id], queue="cpu")
    except Exception as error:  # noqa: BLE001 (the broker is Redis: a reply never fails for a missed check)
        cache_failed("queueing a guardrail check", error)
