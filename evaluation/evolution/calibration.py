"""How far a diagnosis may trust its judge, per failure category: a cluster in a category where the judge
disagrees with people is flagged as possibly the judge's fault rather than the harness's.

Kept apart from `evaluation.calibration` (the annotation queue and its report): this reads the same labels,
but answers one question the pure core asks (kappa per category), for a run or for a live window.
"""

import math
from collections import defaultdict

from evaluation.models import EvalResult, EvalRun

MIN_CALIBRATION_LABELS = 5  # fewer human labels than this say nothing about a category


def category_calibration(run: EvalRun | None = None, *, workspace=None, judge_versions=None,
                         pooled_as: str = "") -> dict[str, float]:
    """Per category: Cohen's kappa of this run's judge against human labels (majority per case) on accuracy,
    over every annotated result judged by the same judge in the workspace; categories with too few labels
    or an undefined kappa are left out. Live traffic has no category: with `pooled_as` every category's
    labels are pooled under that one name (the judge's agreement overall)."""
    from evaluation.metrics.agreement import cohen_kappa

    if run is not None:
        workspace = run.workspace
        judge_versions = set(run.results.values_list("judge_version", flat=True).distinct())
    pairs: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    annotated = (EvalResult.objects.filter(run__workspace=workspace, judge_version__in=set(judge_versions or ()),
                                           annotations__isnull=False, accuracy__isnull=False)
                 .distinct().prefetch_related("annotations"))
    for result in annotated:
        values = [float(a.accuracy) for a in result.annotations.all()]
        human = max(sorted(set(values)), key=values.count)
        judge, people = pairs[pooled_as or result.category]
        judge.append(float(result.accuracy))
        people.append(human)
    out = {}
    for category, (judge, people) in pairs.items():
        if len(judge) >= MIN_CALIBRATION_LABELS:
            kappa = cohen_kappa(judge, people)
            if not math.isnan(kappa):
                out[category] = kappa
    return out
