"""Training jobs, their logged metrics, and the checkpoint registry.

A TrainingJob is what an operator launched: a base model, the stages with their configs, the harness
versions and augmentation settings, the data sources and the eval sets it must not train on. The
worker runs the pure pipeline (`training.pipeline`) for it and reports every logged step (one
TrainingMetric row each) and every finished stage (one Checkpoint row each). A checkpoint names its
parent checkpoint, so the chain base → SFT → OPD → RL is the registry's lineage.
"""

from django.db import models

from evaluation.models import EvalRun, EvalSetVersion
from harness.models import HarnessVersion
from workspaces.models import Workspace


class TrainingJob(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="training_jobs")
    name = models.SlugField(max_length=64)
    base_model = models.CharField(max_length=500, help_text="a model name the pipeline knows, or a checkpoint")
    base_checkpoint = models.ForeignKey("Checkpoint", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="+", help_text="when training continues from a checkpoint")
    stages = models.JSONField(help_text="stage names in order, e.g. ['sft', 'opd', 'rl']")
    config = models.JSONField(help_text="the pipeline config as submitted (validated before queueing)")
    resolved_config = models.JSONField(default=dict, help_text="the config the pipeline ran with")
    harness_versions = models.ManyToManyField(HarnessVersion, related_name="training_jobs")
    data_sources = models.JSONField(default=dict, help_text="simulator seed and size; the imported file's name")
    imported_jsonl = models.TextField(blank=True, help_text="imported trajectories (JSONL), validated at launch")
    excluded_sets = models.ManyToManyField(EvalSetVersion, related_name="training_jobs", blank=True,
                                           help_text="eval sets the job must not train on (lineage guard)")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    # Progress, as the worker last reported it.
    stage = models.CharField(max_length=32, blank=True)
    stage_index = models.PositiveSmallIntegerField(default=0)
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    tokens_per_s = models.FloatField(null=True, blank=True)
    eta_s = models.FloatField(null=True, blank=True)
    log_tail = models.JSONField(default=list, help_text="the last log lines, oldest first")
    attempts = models.PositiveSmallIntegerField(default=0, help_text="times a worker started (or resumed) it")
    # A worker holds the job while its heartbeat is fresh; a redelivered copy waits instead of racing it.
    lease_owner = models.CharField(max_length=100, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"job {self.pk}: {self.name}"

    @property
    def active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def fraction(self) -> float:
        """Overall progress 0..1: finished stages plus the share of the current one."""
        if self.status == self.Status.DONE:
            return 1.0
        n = max(1, len(self.stages or []))
        within = self.step / self.total_steps if self.total_steps else 0.0
        return min(1.0, (self.stage_index + within) / n)


class TrainingMetric(models.Model):
    """One logged step of one stage: loss, rewards, KL, learning rate, … as the trainer reported them."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="metric_rows")
    stage = models.CharField(max_length=32)
    stage_index = models.PositiveSmallIntegerField(default=0, help_text="position in the job's stages")
    step = models.PositiveIntegerField()
    total_steps = models.PositiveIntegerField()
    values = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["job", "id"], name="training_metric_job_id")]


class Checkpoint(models.Model):
    """A registered model: the output of one finished stage of one job."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="checkpoints")
    job = models.ForeignKey(TrainingJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="checkpoints")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    stage = models.CharField(max_length=32)
    base_model = models.CharField(max_length=500)
    path = models.CharField(max_length=1000, help_text="the model (or adapter) directory on the workers' storage")
    parent_path = models.CharField(max_length=1000, blank=True)
    metrics = models.JSONField(default=dict)
    data_lineage = models.JSONField(default=dict, help_text="what it trained on: sources, counts, content hashes")
    harness_hashes = models.JSONField(default=list, help_text="content hashes of the harness versions it saw")
    resolved_config = models.JSONField(default=dict)
    promoted = models.BooleanField(default=False, help_text="approved for serving in live traffic")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # A resumed job reports its finished stages again: the output directory identifies the checkpoint.
        constraints = [models.UniqueConstraint(fields=["job", "path"], name="one_checkpoint_per_job_path")]

    def __str__(self) -> str:
        return f"checkpoint {self.pk} ({self.stage})"

    @property
    def backend_name(self) -> str:
        """How replies, the playground, eval runs and experiments name this checkpoint as a model."""
        return f"checkpoint:{self.pk}"


class CheckpointMatrix(models.Model):
    """Chosen checkpoints × chosen harness versions, evaluated on one eval set as one fan-out of runs."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="checkpoint_matrices")
    set_version = models.ForeignKey(EvalSetVersion, on_delete=models.PROTECT, related_name="+")
    checkpoints = models.ManyToManyField(Checkpoint, related_name="matrices")
    harness_versions = models.ManyToManyField(HarnessVersion, related_name="+")
    runs = models.ManyToManyField(EvalRun, related_name="+")
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"matrix {self.pk}"
