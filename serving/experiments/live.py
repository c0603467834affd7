"""Dashboard updates over Channels: the experiment's group name and a throttled publisher."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache
from django.db import transaction

from serving.models import Experiment

PUBLISH_EVERY_S = 1


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def publish_experiment(experiment: Experiment) -> None:
    """Send a fresh snapshot to the dashboard, at most once a second per experiment (after commit)."""
    if not cache.add(f"experiment-publish:{experiment.pk}", 1, timeout=PUBLISH_EVERY_S):
        return

    def send():
        from serving.experiments.selectors import experiment_snapshot

        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(experiment_group(experiment.pk),
                                            {"type": "experiment.update", "payload": experiment_snapshot(experiment)})

    transaction.on_commit(send)


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
