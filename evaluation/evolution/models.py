"""Diagnoses of eval runs, their failure clusters, proposed edits with the operator's decisions, and rounds.

A Diagnosis reads one harness version's failures: a finished eval run (per-case verdicts, reasons, traces),
or a window of its live traces that carry live judge scores (`source` says which). Its Clusters keep a `cluster_id` that is stable
across diagnoses of the same harness (the console follows a cluster shrinking or coming back). A Proposal is
one generator's edit for a cluster, kept even when invalid (with its errors); the operator accepts, edits or
rejects it (with a reason, which later diagnoses read). A Round turns the accepted edits of one diagnosis
into one candidate version (authored by the AI, approved by the person), evaluated and gated against the
diagnosed version (its `baseline` run: the diagnosed run, or for a live diagnosis a dev-set run of the
diagnosed version).
"""

from django.db import models

from evaluation.models import EvalRun, RunComparison
from harness.models import Harness, HarnessVersion
from workspaces.models import Workspace


class Diagnosis(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Source(models.TextChoices):
        RUN = "run"  # one finished eval run
        LIVE = "live"  # live traces of the version in [window_start, window_end) with live judge scores

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="diagnoses")
    harness = models.ForeignKey(Harness, on_delete=models.CASCADE, related_name="diagnoses")
    version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="diagnoses")
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.RUN)
    run = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.CASCADE, related_name="diagnoses")
    window_start = models.DateTimeField(null=True, blank=True, help_text="live: first instant of the window")
    window_end = models.DateTimeField(null=True, blank=True, help_text="live: end of the window (exclusive)")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    error = models.TextField(blank=True)
    config = models.JSONField(default=dict, help_text="the resolved DiagnosisConfig and proposer settings")
    summary = models.JSONField(default=dict, help_text="totals, noise case ids, exact signature groups")
    advice = models.JSONField(default=dict, help_text="stop advice: stop, rule, detail, and which round to keep")
    split = models.JSONField(default=dict, help_text="the diagnosis and gate splits: kind (seeded | sets | live | "
                                                     "none), seed, gate share, case ids, the gate set")
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.CheckConstraint(
            name="diagnosis_reads_a_run_or_a_window",
            condition=models.Q(source="run", run__isnull=False)
            | models.Q(source="live", run__isnull=True, window_start__isnull=False, window_end__isnull=False))]

    @property
    def is_live(self) -> bool:
        return self.source == self.Source.LIVE

    def __str__(self) -> str:
        what = f"live traces {self.window_start:%Y-%m-%d %H:%M}–{self.window_end:%Y-%m-%d %H:%M} UTC" \
            if self.is_live else f"run {self.run_id}"
        return f"diagnosis {self.pk} of {self.harness.name}@v{self.version.number} ({what})"


class Cluster(models.Model):
    diagnosis = models.ForeignKey(Diagnosis, on_delete=models.CASCADE, related_name="clusters")
    cluster_id = models.CharField(max_length=40, db_index=True, help_text="stable across diagnoses of the harness")
    rank = models.PositiveIntegerField(help_text="1 = most accuracy and effectiveness lost")
    title = models.CharField(max_length=300)
    core = models.CharField(max_length=500)
    size = models.PositiveIntegerField()
    share = models.FloatField()
    accuracy_lost = models.FloatField()
    effectiveness_lost = models.FloatField()
    judge_suspect = models.BooleanField(default=False)
    data = models.JSONField(help_text="FailureCluster.to_dict(): signature, component, terms, representatives")

    class Meta:
        ordering = ["diagnosis", "rank"]
        constraints = [models.UniqueConstraint(fields=["diagnosis", "cluster_id"], name="cluster_id_per_diagnosis")]


class Proposal(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        ACCEPTED = "accepted"
        EDITED = "edited"  # taken to the file editor instead
        REJECTED = "rejected"
        CONFLICT = "conflict"  # accepted, but did not combine with the other accepted edits

    diagnosis = models.ForeignKey(Diagnosis, on_delete=models.CASCADE, related_name="proposals")
    cluster = models.ForeignKey(Cluster, null=True, on_delete=models.CASCADE, related_name="proposals")
    generator = models.CharField(max_length=120, help_text="rules:<rule> or proposer:<hash>/<model>")
    hypothesis = models.TextField()
    rationale = models.TextField(blank=True)
    diff = models.TextField()
    target = models.CharField(max_length=300, blank=True)
    base_hash = models.CharField(max_length=64)
    evidence = models.JSONField(default=list)
    fingerprint = models.CharField(max_length=32, db_index=True)
    errors = models.JSONField(default=list, help_text="validation errors; an invalid proposal is never a candidate")
    valid = models.BooleanField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    reason = models.CharField(max_length=1000, blank=True, help_text="why it was rejected (or did not combine)")
    decided_by = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["diagnosis", "-valid", "id"]


class Round(models.Model):
    """Accepted edits of one diagnosis as one candidate version (off the head: no label points at it and it is
    not the head until it passed the gate and a person promoted it), its eval and the gate on the gate split."""

    class Status(models.TextChoices):
        DRAFTED = "drafted"
        EVALUATING = "evaluating"
        GATED = "gated"
        FAILED = "failed"

    diagnosis = models.OneToOneField(Diagnosis, on_delete=models.CASCADE, related_name="round")
    harness = models.ForeignKey(Harness, on_delete=models.CASCADE, related_name="evolution_rounds")
    candidate = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="evolution_rounds")
    approved_by = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFTED)
    error = models.TextField(blank=True)
    baseline = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                 help_text="the diagnosed version's run the gate compares against")
    run = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    comparison = models.ForeignKey(RunComparison, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    attribution = models.JSONField(default=dict, help_text="per proposal: fixed and regressed case ids; fix rate")
    diagnosis_run = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                      help_text="the candidate on the diagnosis set, when the gate is another set")
    figures = models.JSONField(default=dict, help_text="per split (diagnosis, gate): metrics with CIs; fitted")
    promoted_by = models.CharField(max_length=200, blank=True, help_text="who made the candidate the head")
    promoted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
