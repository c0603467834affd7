"""Reads for evaluation: sets, runs, progress, results."""

from collections import defaultdict

from django.http import Http404

from evaluation.models import EvalResult, EvalRun, EvalSet, EvalSetVersion
from serving.selectors import version_usage
from workspaces.models import Workspace


class Tally:
    """Running sums behind `summarise`: results are added one at a time, the summary read at any point
    (a run's live progress adds each finished case instead of re-reading every result so far)."""

    def __init__(self, results=()) -> None:
        self.sums = defaultdict(lambda: defaultdict(float))
        self.present = defaultdict(lambda: defaultdict(int))
        self.counts, self.abstained = defaultdict(int), defaultdict(int)
        for result in results:
            self.add(result)

    def add(self, result) -> None:
        values = {**result.scores, "accuracy": result.accuracy, "effectiveness": result.effectiveness}
        for key in ("overall", result.category):
            self.counts[key] += 1
            self.abstained[key] += int(bool(getattr(result, "abstained", False)))
            for metric, value in values.items():
                if value is not None:
                    self.sums[key][metric] += value
                    self.present[key][metric] += 1

    @property
    def done(self) -> int:
        return self.counts.get("overall", 0)

    def summary(self) -> dict:
        summary = {}
        for key in sorted(self.counts, key=lambda k: (k != "overall", k)):
            totals = self.sums[key]
            row = {"n": self.counts[key], "abstained": self.abstained[key],
                   **{m: round(v / self.present[key][m], 4) for m, v in sorted(totals.items())
                      if m not in ("instructions", "followed_strict", "followed_loose")}}
            for metric in ("accuracy", "effectiveness"):
                row.setdefault(metric, None)  # every case abstained: no mean, not 0
            if totals.get("instructions"):
                row["instruction_level_strict"] = round(totals["followed_strict"] / totals["instructions"], 4)
                row["instruction_level_loose"] = round(totals["followed_loose"] / totals["instructions"], 4)
            summary[key] = row
        return summary


def summarise(results) -> dict:
    """Overall and per-category means of every score, with counts.

    Each metric is averaged over the cases that have it: a judge's abstention (accuracy and
    effectiveness None) is left out of the means and counted in `abstained`; a robustness metric that
    does not apply to a case is absent from it. `n` counts every evaluated case.
    IFEval's instruction-level accuracy is pooled over instructions (not a mean of per-prompt
    fractions), as the official definition has it.
    """
    return Tally(results).summary()


def run_tally(run_id: int) -> Tally:
    """The tally of a run's results stored so far (one read; a resumed run starts from it)."""
    results = EvalResult.objects.filter(run_id=run_id).only("category", "accuracy", "effectiveness", "scores",
                                                             "abstained")
    return Tally(results.iterator(chunk_size=2000))


def progress_payload(run_id: int, status: str, total: int, tally: Tally) -> dict:
    return {"run": run_id, "status": status, "done": tally.done, "total": total, "summary": tally.summary()}


def run_progress(run_id: int) -> dict:
    """A run's progress read from the database (a page or socket opening; the runner keeps its own tally)."""
    run = EvalRun.objects.get(pk=run_id)
    return progress_payload(run_id, run.status, run.total, run_tally(run_id))


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


def run_latency_distribution(run: EvalRun) -> dict:
    """How long the run's cases took, as counts per latency band and outcome (replied, fallback, deadline, …)."""
    from harness.runtime.latency import latency_band_labels, latency_histogram

    by_outcome = defaultdict(list)
    for latency, outcome in run.results.values_list("latency_ms", "outcome"):
        by_outcome[outcome or "unknown"].append(latency)
    return {"bands": latency_band_labels(), "n": sum(len(v) for v in by_outcome.values()),
            "outcomes": {outcome: latency_histogram(values) for outcome, values in sorted(by_outcome.items())}}


RUN_HISTORY_LIMIT = 100


def run_history(workspace: Workspace) -> list[dict]:
    """The workspace's latest finished runs, oldest first, with their overall scores, for the run-history chart."""
    finished = (runs(workspace).filter(status=EvalRun.Status.DONE, finished_at__isnull=False)
                .order_by("-finished_at", "-id")[:RUN_HISTORY_LIMIT])
    history = []
    for run in reversed(finished):
        overall = (run.summary or {}).get("overall", {})
        history.append({"id": run.pk, "set": str(run.set_version),
                        "harness": f"{run.harness.name}@v{run.harness_version.number}",
                        "finished": run.finished_at.isoformat(timespec="minutes"),
                        "accuracy": overall.get("accuracy"), "effectiveness": overall.get("effectiveness")})
    return history


def run_replay(run: EvalRun) -> dict:
    """Deployment-replay statistics of a run's traces, plus the run's wall time and throughput."""
    from harness.runtime.latency import replay_stats
    from harness.selectors import version_spec

    deadline = version_spec(run.harness_version).settings.deadline_s
    stats = replay_stats(run.results.values_list("trace", flat=True), deadline_s=deadline)
    if run.started_at and run.finished_at:
        wall = (run.finished_at - run.started_at).total_seconds()
        stats.update(run_wall_s=wall, turns_per_s=stats["n"] / wall if wall else None)
    stats["concurrency"] = run.concurrency
    return stats


def version_evidence(versions) -> list[dict]:
    """Per harness version (in the given order): its latest finished eval run and its latest comparison as the
    candidate (the gate's verdict), and its live replies' tokens and latency, for the label panel. Three queries
    whatever the number of versions."""
    from evaluation.models import RunComparison

    versions = list(versions)
    ids = [v.pk for v in versions]
    latest_run, latest_comparison = {}, {}
    for run in (EvalRun.objects.filter(harness_version_id__in=ids, status=EvalRun.Status.DONE)
                .select_related("set_version__eval_set").order_by("-finished_at", "-id")):
        latest_run.setdefault(run.harness_version_id, run)
    for comparison in (RunComparison.objects.filter(candidate__harness_version_id__in=ids)
                       .select_related("candidate").order_by("-created_at", "-id")):
        latest_comparison.setdefault(comparison.candidate.harness_version_id, comparison)
    live = version_usage(ids)  # tokens and latency of its live replies, beside the eval's accuracy
    return [{"version": v, "run": latest_run.get(v.pk), "comparison": latest_comparison.get(v.pk),
             "live": live.get(v.pk)} for v in versions]
