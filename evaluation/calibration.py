"""Calibration of judges against human labels: the annotation queue and the agreement report."""

import math
from collections import defaultdict
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Count, Q

from evaluation.models import Annotation, EvalResult, EvalRun
from workspaces.access import WRITE, Actor, require
from workspaces.models import Workspace


class CalibrationError(ValueError):
    pass


def annotation_queue(workspace: Workspace, user, *, run: EvalRun | None = None, per_case: int = 3):
    """Results this user has not labelled yet that have fewer than `per_case` labels, oldest runs first."""
    results = EvalResult.objects.filter(run__workspace=workspace).exclude(annotations__annotator=user)
    if run is not None:
        results = results.filter(run=run)
    return (results.annotate(labels=Count("annotations")).filter(labels__lt=per_case)
            .select_related("case", "run").order_by("run_id", "id"))


def annotation_add(*, actor: Actor, workspace: Workspace, user, result: EvalResult, accuracy: int,
                   effectiveness: float, comment: str = "") -> Annotation:
    require(actor, workspace, WRITE)
    if result.run.workspace_id != workspace.pk:
        raise CalibrationError("That case belongs to another workspace.")
    if accuracy not in (0, 1) or effectiveness not in (0.0, 0.5, 1.0):
        raise CalibrationError("Accuracy is 0 or 1; effectiveness is 0, 0.5 or 1.")
    try:
        with transaction.atomic():
            return Annotation.objects.create(result=result, annotator=user, accuracy=accuracy,
                                             effectiveness=effectiveness, comment=comment[:1000])
    except IntegrityError:
        raise CalibrationError("You already labelled this case.") from None


@dataclass(frozen=True)
class AgreementRow:
    judge_version: str
    metric: str
    n: int
    percent: float
    kappa: float | None
    confusion: dict
    labels: tuple


def agreement_report(workspace: Workspace) -> dict:
    """Judge vs human (majority of annotators) per judge version and metric, and inter-annotator agreement."""
    from evaluation.metrics.agreement import (
        cohen_kappa,
        confusion_matrix,
        inter_annotator_agreement,
        percent_agreement,
    )

    annotated = (EvalResult.objects.filter(run__workspace=workspace)
                 .filter(Q(annotations__isnull=False)).distinct().prefetch_related("annotations"))
    by_judge = defaultdict(lambda: {"accuracy": ([], []), "effectiveness": ([], [])})
    raters = {"accuracy": [], "effectiveness": []}
    for result in annotated:
        labels = list(result.annotations.all())
        for metric in ("accuracy", "effectiveness"):
            values = [float(getattr(a, metric)) for a in labels]
            human = max(sorted(set(values)), key=values.count)  # majority; ties go to the lower label
            if not result.abstained:  # an abstention has no judge label to agree or disagree with
                judge_values, human_values = by_judge[result.judge_version][metric]
                judge_values.append(float(getattr(result, metric)))
                human_values.append(human)
            if len(values) >= 2:
                raters[metric].append(values)
    rows = []
    for judge_version, metrics in sorted(by_judge.items()):
        for metric, (judge_values, human_values) in metrics.items():
            labels = tuple(sorted(set(judge_values) | set(human_values)))
            matrix = confusion_matrix(judge_values, human_values, labels=labels)
            kappa = cohen_kappa(judge_values, human_values)
            rows.append(AgreementRow(
                judge_version=judge_version, metric=metric, n=len(judge_values),
                percent=percent_agreement(judge_values, human_values),
                kappa=None if math.isnan(kappa) else kappa,  # undefined when both sides use one label only
                confusion={"labels": list(matrix.labels), "counts": [list(row) for row in matrix.counts]},
                labels=labels))
    inter = {}
    for metric, items in raters.items():
        value = inter_annotator_agreement(items) if items else float("nan")
        inter[metric] = None if math.isnan(value) else value
    return {"rows": rows, "inter_annotator": inter}
