"""Celery tasks of the serving package: the experiments' auto-stop guardrail."""

from celery import shared_task

from serving.experiments.guardrails import stop_if_guardrail_trips
from serving.experiments.live import publish_experiment


@shared_task(name="serving.check_guardrails", time_limit=60)
def check_guardrails(experiment_id: int) -> str:
    """Stop a running experiment whose guardrail trips, routing every viewer to control (audited)."""
    experiment, reason = stop_if_guardrail_trips(experiment_id)
    if experiment is None:
        return "ok"
    publish_experiment(experiment)  # open dashboards show the stop (and reload their buttons)
    return reason
