"""Celery tasks of the serving package: judging sampled live traffic, the experiments' auto-stop guardrail."""

import asyncio

from celery import shared_task

from serving.models import Trace


@shared_task(name="serving.judge_live_trace", acks_late=True, time_limit=300,
             autoretry_for=(Trace.DoesNotExist,), retry_backoff=1, max_retries=5)
def judge_live_trace(trace_id: str) -> str:
    """Score one sampled live reply with the Agent-as-a-Judge (there is no ground truth for live traffic)."""
    from evaluation.services import resolve_judge
    from harness.simulator.cases import Case, Expected
    from serving.experiments.live import publish_experiment
    from serving.models import Experiment, Room

    trace = Trace.objects.get(trace_id=trace_id)  # the buffered writer may not have stored it yet: retried
    if trace.judge_version:
        return "already judged"
    room = Room.objects.filter(workspace=trace.workspace, room_id=trace.room_id).first()
    case = Case(case_id=trace.trace_id, category="live", room=room.context if room else {"room_id": trace.room_id},
                viewer_id=trace.viewer_id, message=trace.message, expected=Expected())
    judge = resolve_judge("harness", None)
    verdict = asyncio.run(judge(case, trace.data))
    # An abstention keeps the scores null (judged, no verdict): guardrails count it apart, never as a 0.
    Trace.objects.filter(pk=trace.pk).update(judge_accuracy=verdict.accuracy,
                                             judge_effectiveness=verdict.effectiveness,
                                             judge_version=verdict.judge[:100],
                                             judge_reasons=[str(r)[:1000] for r in verdict.reasons][:20])
    from serving.experiments.services import experiment_key_of

    experiment = Experiment.objects.filter(workspace=trace.workspace, key=experiment_key_of(trace.arm)).first()
    if experiment is not None:
        check_guardrails.delay(experiment.pk)
        publish_experiment(experiment)
    return verdict.judge


@shared_task(name="serving.check_guardrails", time_limit=60)
def check_guardrails(experiment_id: int) -> str:
    """Stop a running experiment whose guardrail trips, routing every viewer to control (audited)."""
    from console.access import Actor
    from serving.experiments.live import publish_experiment
    from serving.experiments.selectors import _guardrails, guardrail_violation
    from serving.experiments.services import experiment_stop
    from serving.models import Experiment

    experiment = Experiment.objects.filter(pk=experiment_id, status=Experiment.Status.RUNNING).first()
    if experiment is None:
        return "not running"
    reason = guardrail_violation(experiment, _guardrails(experiment, list(experiment.arms.all())))
    if not reason:
        return "ok"
    experiment = experiment_stop(actor=Actor.system("system:guardrail"), experiment=experiment,
                                 reason=f"auto-stop guardrail: {reason}", control_only=True)
    publish_experiment(experiment)  # open dashboards show the stop (and reload their buttons)
    return reason

