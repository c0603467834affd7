"""Live A/B judging: the Agent-as-a-Judge scores a sample of the replies served inside experiments.

Serving samples the replies and announces each (`serving.signals.live_trace_sampled`); this app subscribes
at start-up (apps.py) and queues the judging, so serving never calls evaluation. There is no ground truth
for live traffic: the judge reads the harness and the trace alone.
"""

import asyncio

from evaluation.services import resolve_judge
from harness.simulator.cases import Case, Expected
from serving.experiments.lifecycle import experiment_key_of
from serving.experiments.live import publish_experiment
from serving.models import Experiment, Room, Trace
from workspaces.jobs import enqueue
from workspaces.tokens import cache_failed

JUDGE_LIVE_TRACE = "evaluation.judge_live_trace"


def queue_live_judging(sender, *, trace_id: str, experiment_id: int, **kwargs) -> None:
    """The `live_trace_sampled` receiver: judge the trace off the request path, on the `cpu` queue. Sent after
    a reply's commit: when the broker (Redis) is away the sample is not judged, and the reply still answers."""
    try:
        enqueue(JUDGE_LIVE_TRACE, args=[trace_id], queue="cpu")
    except Exception as error:  # noqa: BLE001
        cache_failed("queueing a live judging sample", error)


def judge_live_trace(trace_id: str) -> str:
    """Score one sampled live reply and store the verdict on its trace; then re-check the experiment's
    guardrails and refresh its dashboard. Trace.DoesNotExist while the buffered writer has not stored it."""
    trace = Trace.objects.get(trace_id=trace_id)
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
                                             judge_reasons=[str(r)[:1000] for r in verdict.reasons][:20],
                                             # each judge's say, when several voted: a diagnosis of live
                                             # traffic sees them disagree or abstain (judge-suspect)
                                             **({"data": {**(trace.data or {}), "judge_votes": [
                                                 {"judge": j, "accuracy": a} for j, a in verdict.votes]}}
                                                if verdict.votes else {}))
    experiment = Experiment.objects.filter(workspace=trace.workspace, key=experiment_key_of(trace.arm)).first()
    if experiment is not None:
        enqueue("serving.check_guardrails", args=[experiment.pk], queue="cpu")
        publish_experiment(experiment)
    return verdict.judge
