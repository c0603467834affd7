"""Stored rows as the pure core reads them: an eval run's results, or a window of judged live traces, become
`CaseRecord`s, so that `diagnosis.py` never sees a model or a query set.

Live judging only samples replies, and a judge may abstain; both are read here in one place so that the
request (which refuses an empty window) and the job (which clusters it) agree on what "judged" means.
"""

from datetime import datetime

from django.db.models import Avg

from evaluation.evolution.models import Diagnosis
from evaluation.evolution.signatures import CaseRecord
from evaluation.models import Annotation, EvalResult, EvalRun
from harness.models import HarnessVersion

MAX_LIVE_TRACES = 2000  # the most recent judged traces of a window; a bigger window is read in part (said so)


def live_traces(version: HarnessVersion, start: datetime, end: datetime):
    """The live traffic of one version in [start, end): API replies only (not the playground or evals)."""
    from serving.models import Trace

    return Trace.objects.filter(workspace_id=version.harness.workspace_id, harness_version=version,
                                source=Trace.Source.API, created_at__gte=start, created_at__lt=end)


def judged(traces):
    """Traces the live judge scored (an abstention keeps null scores: the judge's "don't know")."""
    return traces.filter(judge_accuracy__isnull=False, judge_effectiveness__isnull=False)


def live_records(diagnosis: Diagnosis) -> tuple[list[CaseRecord], dict]:
    """The window's judged live traces as the pure core reads them (live traffic has no expected answer:
    no expected skills), and counts of what was left out."""
    traces = live_traces(diagnosis.version, diagnosis.window_start, diagnosis.window_end)
    rows = list(judged(traces).order_by("-created_at", "-id")[:MAX_LIVE_TRACES])
    records = [CaseRecord(case_id=t.trace_id, category="live", accuracy=t.judge_accuracy,
                          effectiveness=t.judge_effectiveness, reasons=tuple(str(r) for r in t.judge_reasons or ()),
                          reply=t.reply, message=t.message, trace=t.data or {},
                          judge_votes=tuple((str(v.get("judge", "")), v.get("accuracy")) for v in (t.data or {}).get(
                              "judge_votes") or () if isinstance(v, dict)))
               for t in reversed(rows)]
    counts = {"traces": traces.count(), "judged": len(records),
              "abstained": traces.filter(judge_accuracy__isnull=True).exclude(judge_version="").count(),
              "unjudged": traces.filter(judge_version="").count(),
              "read_in_part": judged(traces).count() > MAX_LIVE_TRACES}
    return records, counts


def case_records(run: EvalRun, case_ids=None) -> list[CaseRecord]:
    """The run's results as the pure core reads them (only `case_ids` when given: the diagnosis split)."""
    records = []
    # An abstention is the judge's "don't know", not a harness failure: it is left out (and counted apart).
    rows = EvalResult.objects.filter(run=run, accuracy__isnull=False, effectiveness__isnull=False)
    if case_ids is not None:
        rows = rows.filter(case__case_id__in=list(case_ids))
    # People's labels of these results: a label that contradicts the verdict makes the judge suspect.
    humans = dict(Annotation.objects.filter(result__in=rows).values("result_id").annotate(mean=Avg("accuracy"))
                  .values_list("result_id", "mean"))
    for result in rows.select_related("case").order_by("id"):
        data = result.case.data or {}
        dialogue = tuple(str(turn.get("text", "")) for turn in data.get("dialogue") or () if isinstance(turn, dict))
        records.append(CaseRecord(
            case_id=result.case.case_id, category=result.category, accuracy=result.accuracy,
            effectiveness=result.effectiveness, reasons=tuple(result.reasons or ()), reply=result.reply,
            message=str(data.get("message", "")), expected_skills=tuple((data.get("expected") or {}).get("skills") or ()),
            trace=result.trace or {}, texts=dialogue, human_accuracy=humans.get(result.pk),
            judge_votes=tuple((str(v.get("judge", "")), v.get("accuracy")) for v in (result.trace or {}).get(
                "judge_votes") or () if isinstance(v, dict))))
    return records
