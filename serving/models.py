"""Platform-facing objects: API keys and live rooms."""

from django.db import models

from harness.models import Harness, HarnessVersion
from workspaces.identifiers import validate_identifier
from workspaces.models import Workspace


class ApiKey(models.Model):
    """A platform credential. Only a SHA-256 of the secret is stored; the secret is shown once."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, validators=[validate_identifier])
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"


class Room(models.Model):
    """A live-stream room: its catalogue, FAQ, promotions and orders, as the platform describes it."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="rooms")
    room_id = models.SlugField(max_length=100, validators=[validate_identifier])
    title = models.CharField(max_length=200)
    context = models.JSONField()
    harness = models.ForeignKey(Harness, null=True, blank=True, on_delete=models.SET_NULL, related_name="rooms",
                                help_text="The harness that answers this room unless a request names another.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "room_id"], name="room_id_per_workspace")]

    def __str__(self) -> str:
        return self.title


class Trace(models.Model):
    """One answered (or refused) viewer message: the summary columns filter, `data` holds the full trace."""

    class Source(models.TextChoices):
        API = "api"
        PLAYGROUND = "playground"
        EVALUATION = "evaluation"

    # Its own index would repeat the composite ones that begin with it: each index is written by every insert.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="traces", db_index=False)
    trace_id = models.CharField(max_length=32, unique=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.API)
    room_id = models.CharField(max_length=100)
    viewer_id = models.CharField(max_length=128)
    harness = models.ForeignKey(Harness, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    harness_version = models.ForeignKey(HarnessVersion, null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="traces")
    arm = models.CharField(max_length=100, blank=True)
    backend = models.CharField(max_length=50)
    outcome = models.CharField(max_length=16)
    silent = models.BooleanField(default=False)
    message = models.TextField()
    reply = models.TextField(blank=True)
    latency_ms = models.FloatField()
    model_calls = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    tokens_cached = models.PositiveIntegerField(default=0, help_text="of tokens_in, served from the prefix cache")
    hooks_fired = models.JSONField(default=list)
    judge_accuracy = models.FloatField(null=True, blank=True, help_text="live-traffic judge, when sampled")
    judge_effectiveness = models.FloatField(null=True, blank=True)
    judge_version = models.CharField(max_length=100, blank=True)
    judge_reasons = models.JSONField(default=list, blank=True, help_text="the live judge's reasons for its scores")
    data = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        # What the console asks: a workspace's newest traces, of a version, an arm or an outcome.
        indexes = [models.Index(fields=["workspace", "-created_at"]),
                   models.Index(fields=["workspace", "outcome", "-created_at"]),
                   models.Index(fields=["workspace", "harness_version", "-created_at"]),
                   models.Index(fields=["workspace", "arm", "-created_at"])]


class PromptPart(models.Model):
    """A part of what traces sent to the model, stored once per workspace and referred to by its digest.

    A reply's system message and tool schemas are the same for every turn of a room's harness version (the
    prompt keeps its prefix stable for the model's cache), ≈ 16 KB of a ≈ 19 KB trace: each trace keeps
    their SHA-256 instead (serving.traces). Parts go only with their workspace, as its traces do.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", db_index=False)  # unique below
    digest = models.CharField(max_length=64, help_text="SHA-256 of `content`, hex")
    content = models.TextField(help_text="the part as JSON text: a message's content or the list of tool schemas")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "digest"], name="prompt_part_per_workspace")]


class Experiment(models.Model):
    """A live A/B test of harness versions: viewers are hashed into arms with the experiment's seed."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        RUNNING = "running"
        STOPPED = "stopped"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="experiments")
    key = models.SlugField(max_length=64, validators=[validate_identifier])
    seed = models.CharField(max_length=64, help_text="hash seed; defaults to the key")
    harness = models.ForeignKey(Harness, on_delete=models.PROTECT, related_name="experiments")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT, db_index=True)
    coverage = models.FloatField(default=1.0, help_text="share of viewers in the experiment, 0..1")
    rooms = models.JSONField(default=list, blank=True, help_text="room ids in scope; empty = every room")
    guardrails = models.JSONField(default=dict, blank=True,
                                  help_text="auto-stop thresholds: latency_p95_ms, accuracy_drop, min_samples")
    control_only = models.BooleanField(default=False, help_text="after a guardrail stop: everyone gets control")
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=500, blank=True)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    archived_at = models.DateTimeField(null=True, blank=True, help_text="hidden from the experiment list")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "key"], name="experiment_key_per_workspace")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.key


class Arm(models.Model):
    class Kind(models.TextChoices):
        REACT = "react", "ReAct baseline"
        LABEL = "label", "Harness label"
        VERSION = "version", "Harness version"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    index = models.PositiveSmallIntegerField()
    name = models.SlugField(max_length=64, validators=[validate_identifier])
    weight = models.FloatField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    label = models.CharField(max_length=64, blank=True, validators=[validate_identifier])
    version = models.ForeignKey(HarnessVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    backend = models.CharField(max_length=64, blank=True,
                               help_text="the model this arm answers with (e.g. checkpoint:12); empty: the default")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "index"], name="arm_index_per_experiment")]
        ordering = ["index"]

    def __str__(self) -> str:
        return self.name


class Exposure(models.Model):
    """The first time a viewer was assigned: sticky, one per viewer per experiment."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="exposures",
                                   db_index=False)  # the unique constraint below begins with it
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="exposures")
    viewer_id = models.CharField(max_length=128)
    bucket = models.DateTimeField(help_text="the minute of first exposure (rollup bucket)")
    ipv = models.PositiveIntegerField(default=0, help_text="item-page views counted for this viewer")
    first_seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "viewer_id"], name="one_exposure_per_viewer")]


class Event(models.Model):
    """A platform event (item_page_view, impression, …); unique by event_id so retries never count twice."""

    # No index of its own: the unique constraint below begins with it (each index is written by every event).
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", db_index=False)
    event_id = models.CharField(max_length=100)
    type = models.CharField(max_length=32)
    viewer_id = models.CharField(max_length=128)
    room_id = models.CharField(max_length=100)
    item_id = models.CharField(max_length=100, blank=True)
    ts = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "event_id"], name="event_id_per_workspace")]


class Rollup(models.Model):
    """Sufficient statistics per experiment × arm × minute of first exposure: users, Σy, Σy² (y = IPV per user)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="rollups",
                                   db_index=False)  # the unique constraint below begins with it
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="rollups")
    bucket = models.DateTimeField()
    users = models.PositiveIntegerField(default=0)
    sum_y = models.FloatField(default=0)
    sum_y2 = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "arm", "bucket"], name="one_rollup_per_bucket")]
        ordering = ["bucket"]
