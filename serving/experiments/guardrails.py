"""The auto-stop guardrail: per-arm latency and live-judge scores, the thresholds, and the stop when one trips."""

from harness.runtime.latency import latency_histogram, percentile, token_stats
from serving.experiments import statistics as stats
from serving.experiments.lifecycle import experiment_arm_label, experiment_stop
from serving.models import Experiment, Trace
from workspaces.access import Actor
from workspaces.metrics import GUARDRAIL_STOPS

GUARDRAIL_WINDOW = 5000  # latest replies per arm used for latency percentiles
MIN_USERS_PER_ARM = 100


def guardrail_thresholds(experiment: Experiment) -> dict:
    """The auto-stop thresholds as stored, with the defaults the check uses when one is left blank."""
    rules = experiment.guardrails or {}
    return {"latency_p95_ms": rules.get("latency_p95_ms"), "accuracy_drop": rules.get("accuracy_drop"),
            "min_samples": int(rules.get("min_samples", 50)), "min_users": MIN_USERS_PER_ARM}


def arm_guardrails(experiment: Experiment, arms) -> list[dict]:
    """Per arm: latency, and the live judge's accuracy/effectiveness over judged replies. A judge abstention
    (judged, but no verdict: judge_version set, scores null) is counted apart and left out of the means.
    Treatment rows carry the judge-accuracy difference to control with its peeking-safe interval (binomial
    variance p(1 − p), as gbstats' proportion metrics)."""
    rows = []
    since = experiment.started_at or experiment.created_at
    for arm in arms:
        traces = Trace.objects.filter(workspace=experiment.workspace, arm=experiment_arm_label(experiment.key, arm.name),
                                      created_at__gte=since).order_by("-created_at")
        turns = list(traces.values("latency_ms", "tokens_in", "tokens_cached", "tokens_out")[:GUARDRAIL_WINDOW])
        latencies = [turn["latency_ms"] for turn in turns]
        verdicts = list(traces.exclude(judge_version="").values_list("judge_accuracy", "judge_effectiveness")
                        [:GUARDRAIL_WINDOW])
        judged = [(a, e) for a, e in verdicts if a is not None]
        rows.append({
            "arm": arm.name, "replies": len(latencies),
            "latency_p50_ms": percentile(latencies, 50), "latency_p95_ms": percentile(latencies, 95),
            "within_deadline": sum(v <= 15_000 for v in latencies) / len(latencies) if latencies else None,
            "latency_histogram": latency_histogram(latencies),
            "tokens": token_stats(turns),
            "judged": len(judged), "abstained": len(verdicts) - len(judged),
            "accuracy": sum(a for a, _ in judged) / len(judged) if judged else None,
            "effectiveness": sum(e for _, e in judged) / len(judged) if judged else None,
        })
    control = rows[0] if rows else None
    for row in rows[1:]:
        difference = stats.sequential_uplift(_proportion(control), _proportion(row), relative=False)
        row.update(accuracy_diff=None if difference.error else difference.delta,
                   accuracy_diff_low=None if difference.error else difference.ci_low,
                   accuracy_diff_high=None if difference.error else difference.ci_high)
    return rows


def _proportion(row: dict) -> stats.ProportionArmStats:
    return stats.ProportionArmStats(n=row["judged"], successes=round((row["accuracy"] or 0) * row["judged"]))


def guardrail_violation(experiment: Experiment, guardrails: list[dict]) -> str:
    """Why the auto-stop guardrail trips, or "" — thresholds from experiment.guardrails, compared per arm."""
    rules = experiment.guardrails or {}
    minimum = int(rules.get("min_samples", 50))
    control = guardrails[0] if guardrails else None
    for row in guardrails[1:]:
        limit = rules.get("latency_p95_ms")
        if limit and row["replies"] >= minimum and row["latency_p95_ms"] > float(limit):
            return f"{row['arm']}: latency P95 {row['latency_p95_ms']:.0f} ms above {float(limit):.0f} ms"
        drop = rules.get("accuracy_drop")
        if (drop is not None and control and row["judged"] >= minimum and control["judged"] >= minimum
                and row["accuracy"] < control["accuracy"] - float(drop)):
            return (f"{row['arm']}: judge accuracy {row['accuracy']:.3f} below control {control['accuracy']:.3f} "
                    f"by more than {float(drop)}")
    return ""


def stop_if_guardrail_trips(experiment_id: int) -> tuple[Experiment | None, str]:
    """Stop a running experiment whose guardrail trips, routing every viewer to control (audited): the
    experiment as stopped and why, or (None, "") when it is not running or nothing trips."""
    experiment = Experiment.objects.filter(pk=experiment_id, status=Experiment.Status.RUNNING).first()
    if experiment is None:
        return None, ""
    reason = guardrail_violation(experiment, arm_guardrails(experiment, list(experiment.arms.all())))
    if not reason:
        return None, ""
    stopped = experiment_stop(actor=Actor.system("system:guardrail"), experiment=experiment,
                              reason=f"auto-stop guardrail: {reason}", control_only=True)
    GUARDRAIL_STOPS.inc()
    return stopped, reason
