"""Diagnoses of eval runs, their failure clusters, proposed edits with the operator's decisions, and rounds.

A Diagnosis reads one finished run of one harness version. Its Clusters keep a `cluster_id` that is stable
across diagnoses of the same harness (the console follows a cluster shrinking or coming back). A Proposal is
one generator's edit for a cluster, kept even when invalid (with its errors); the operator accepts, edits or
rejects it (with a reason, which later diagnoses read). A Round turns the accepted edits of one diagnosis
into one candidate version (authored by the AI, approved by the person), evaluated and gated against the
diagnosed version.
"""

from django.db import models

from console.models import Workspace
from evaluation.models import EvalRun, RunComparison
from harness.models import Harness, HarnessVersion


class Diagnosis(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="diagnoses")
    harness = models.ForeignKey(Harness, on_delete=models.CASCADE, related_name="diagnoses")
    version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="diagnoses")
    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="diagnoses")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    error = models.TextField(blank=True)
    config = models.JSONField(default=dict, help_text="the resolved DiagnosisConfig and proposer settings")
    summary = models.JSONField(default=dict, help_text="totals, noise case ids, exact signature groups")
    advice = models.JSONField(default=dict, help_text="stop advice: stop, rule, detail")
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"diagnosis {self.pk} of {self.harness.name}@v{self.version.number} (run {self.run_id})"


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
    """Accepted edits of one diagnosis as one candidate version, its dev-set eval and the gate."""

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
    run = models.ForeignKey(EvalRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    comparison = models.ForeignKey(RunComparison, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    attribution = models.JSONField(default=dict, help_text="per proposal: fixed and regressed case ids; fix rate")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
