"""Platform-facing objects: API keys and live rooms."""

from django.db import models

from console.models import Workspace
from harness.models import Harness, HarnessVersion


class ApiKey(models.Model):
    """A platform credential. Only a SHA-256 of the secret is stored; the secret is shown once."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
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
    room_id = models.SlugField(max_length=100)
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

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="traces")
    trace_id = models.CharField(max_length=32, unique=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.API)
    room_id = models.CharField(max_length=100, db_index=True)
    viewer_id = models.CharField(max_length=128)
    harness = models.ForeignKey(Harness, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    harness_version = models.ForeignKey(HarnessVersion, null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="traces")
    arm = models.CharField(max_length=100, blank=True)
    backend = models.CharField(max_length=50)
    outcome = models.CharField(max_length=16, db_index=True)
    silent = models.BooleanField(default=False)
    message = models.TextField()
    reply = models.TextField(blank=True)
    latency_ms = models.FloatField()
    model_calls = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    hooks_fired = models.JSONField(default=list)
    data = models.JSONField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "-created_at"]),
                   models.Index(fields=["workspace", "harness_version", "-created_at"])]
