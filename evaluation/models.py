"""Eval sets, runs and per-case results.

An EvalSet is a named line of immutable versions, like a harness: once a run
used a version, its cases never change. A run evaluates one harness version on
one set version; each finished case is one EvalResult row (unique per run and
case), which is what makes a run resumable without counting a case twice.
"""

from django.conf import settings
from django.db import models

from harness.models import Harness, HarnessVersion
from workspaces.identifiers import validate_identifier
from workspaces.models import Workspace

SUITES = (
    ("live_stream_qa", "Live-Stream QA"),
    ("harness_variant", "Harness-Variant QA"),
    ("robustness", "Tool & Prompt Robustness"),
    ("ifeval", "IFEval"),
)


class EvalSet(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="eval_sets")
    name = models.SlugField(max_length=64, validators=[validate_identifier])
    suite = models.CharField(max_length=32, choices=SUITES)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    archived_at = models.DateTimeField(null=True, blank=True, help_text="hidden from lists and pickers")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="eval_set_name_per_workspace")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EvalSetVersion(models.Model):
    eval_set = models.ForeignKey(EvalSet, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    source = models.CharField(max_length=200, help_text="simulator seed, file name, or log export")
    case_count = models.PositiveIntegerField()
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["eval_set", "number"], name="eval_set_version_number")]
        ordering = ["-number"]

    @property
    def used(self) -> bool:
        return self.runs.exists()

    def __str__(self) -> str:
        return f"{self.eval_set.name}@v{self.number}"


class EvalCase(models.Model):
    set_version = models.ForeignKey(EvalSetVersion, on_delete=models.CASCADE, related_name="cases")
    case_id = models.CharField(max_length=100)
    category = models.CharField(max_length=40, db_index=True, validators=[validate_identifier])
    data = models.JSONField(help_text="harness.simulator.cases.Case.to_dict(), or an IFEval record")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["set_version", "case_id"], name="case_id_per_set_version")]
        ordering = ["id"]


class EvalRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="eval_runs")
    set_version = models.ForeignKey(EvalSetVersion, on_delete=models.PROTECT, related_name="runs")
    harness = models.ForeignKey(Harness, on_delete=models.PROTECT, related_name="eval_runs")
    harness_version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="eval_runs")
    backend = models.CharField(max_length=50)
    judge = models.CharField(max_length=200, default="reference")
    concurrency = models.PositiveSmallIntegerField(default=4)
    queue = models.CharField(max_length=8, default="cpu")
    config = models.JSONField(default=dict, help_text="the resolved run configuration")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    error = models.TextField(blank=True)
    total = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.harness.name}@v{self.harness_version.number} on {self.set_version}"


class EvalResult(models.Model):
    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results",
                            db_index=False)  # the unique constraint below begins with it
    case = models.ForeignKey(EvalCase, on_delete=models.PROTECT, related_name="results")
    category = models.CharField(max_length=40)
    accuracy = models.FloatField(null=True, blank=True, help_text="null when the judge abstained")
    effectiveness = models.FloatField(null=True, blank=True, help_text="null when the judge abstained")
    abstained = models.BooleanField(default=False, help_text="the judge could not produce a verdict")
    scores = models.JSONField(default=dict, help_text="every metric of the suite for this case")
    reasons = models.JSONField(default=list)
    judge_version = models.CharField(max_length=200)
    judge_models = models.JSONField(default=list, blank=True, help_text="model id of every judge model that voted")
    judge_hash = models.CharField(max_length=64, blank=True, help_text="content hash of the judge harness")
    outcome = models.CharField(max_length=16)
    latency_ms = models.FloatField()
    reply = models.TextField(blank=True)
    trace = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "case"], name="one_result_per_case_per_run")]
        ordering = ["id"]

    @property
    def reasons_text(self) -> str:
        """The judge's reasons as one plain string; truncate THIS in templates, never the escaped output
        of `join` (cutting escaped text leaves "&#x…" fragments on the page)."""
        return "; ".join(str(r) for r in self.reasons or ())


class Annotation(models.Model):
    """A person's label of one evaluated case, for calibrating judges against humans."""

    result = models.ForeignKey(EvalResult, on_delete=models.CASCADE, related_name="annotations")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotations")
    accuracy = models.PositiveSmallIntegerField(choices=[(0, "0 — wrong"), (1, "1 — correct")])
    effectiveness = models.FloatField(choices=[(0.0, "0"), (0.5, "0.5"), (1.0, "1")])
    comment = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["result", "annotator"], name="one_label_per_annotator")]


class RunComparison(models.Model):
    """Two runs on the same set version compared, with the regression gate's verdict kept beside them."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="run_comparisons")
    baseline = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="+")
    candidate = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="comparisons")
    gate = models.JSONField(help_text="the gate rule: metrics, max_drop, confidence, method, rule, min_cases")
    passed = models.BooleanField(help_text="True only for the verdict 'pass'")
    verdict = models.CharField(max_length=24, default="", help_text="pass, fail or not enough evidence")
    reasons = models.JSONField(default=list)
    metrics = models.JSONField(help_text="per metric: means, delta, CI, regressed and improved case ids")
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
