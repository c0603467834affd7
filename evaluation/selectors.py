"""Reads for evaluation: sets, runs, progress, results."""

from collections import defaultdict

from django.http import Http404

from console.models import Workspace
from evaluation.models import EvalResult, EvalRun, EvalSet, EvalSetVersion


def summarise(results) -> dict:
    """Overall and per-category means of every score, with counts.

    IFEval's instruction-level accuracy is pooled over instructions (not a mean of per-prompt
    fractions), as the official definition has it.
    """
    sums, counts = defaultdict(lambda: defaultdict(float)), defaultdict(int)
    for result in results:
        for key in ("overall", result.category):
            counts[key] += 1
            for metric, value in {**result.scores, "accuracy": result.accuracy,
                                  "effectiveness": result.effectiveness}.items():
                sums[key][metric] += value
    summary = {}
    for key in sorted(counts, key=lambda k: (k != "overall", k)):
        n, totals = counts[key], sums[key]
        row = {"n": n, **{m: round(v / n, 4) for m, v in sorted(totals.items())
                          if m not in ("instructions", "followed_strict", "followed_loose")}}
        if totals.get("instructions"):
            row["instruction_level_strict"] = round(totals["followed_strict"] / totals["instructions"], 4)
            row["instruction_level_loose"] = round(totals["followed_loose"] / totals["instructions"], 4)
        summary[key] = row
    return summary


def run_progress(run_id: int) -> dict:
    run = EvalRun.objects.get(pk=run_id)
    results = list(EvalResult.objects.filter(run_id=run_id).only("category", "accuracy", "effectiveness", "scores"))
    return {"run": run_id, "status": run.status, "done": len(results), "total": run.total,
            "summary": summarise(results)}


def eval_sets(workspace: Workspace, *, archived: bool = False):
    """The workspace's eval sets: the active ones, or (archived=True) only the archived ones."""
    return EvalSet.objects.filter(workspace=workspace, archived_at__isnull=not archived).prefetch_related("versions")


def eval_set_get(workspace: Workspace, name: str) -> EvalSet:
    eval_set = EvalSet.objects.filter(workspace=workspace, name=name).first()
    if eval_set is None:
        raise Http404("No such eval set.")
    return eval_set


def set_version_get(workspace: Workspace, name: str, number: int) -> EvalSetVersion:
    version = EvalSetVersion.objects.select_related("eval_set").filter(
        eval_set__workspace=workspace, eval_set__name=name, number=number).first()
    if version is None:
        raise Http404("No such eval set version.")
    return version


def runs(workspace: Workspace):
    return EvalRun.objects.filter(workspace=workspace).select_related(
        "harness", "harness_version", "set_version__eval_set")


def run_get(workspace: Workspace, run_id: int) -> EvalRun:
    run = runs(workspace).filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


def run_replay(run: EvalRun) -> dict:
    """Deployment-replay statistics of a run's traces, plus the run's wall time and throughput."""
    from evaluation.metrics.latency import replay_stats
    from harness.selectors import version_spec

    deadline = version_spec(run.harness_version).settings.deadline_s
    stats = replay_stats(run.results.values_list("trace", flat=True), deadline_s=deadline)
    if run.started_at and run.finished_at:
        wall = (run.finished_at - run.started_at).total_seconds()
        stats.update(run_wall_s=wall, turns_per_s=stats["n"] / wall if wall else None)
    stats["concurrency"] = run.concurrency
    return stats
