"""Platform-facing objects: API keys and live rooms."""

from django.db import models

from console.models import Workspace


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
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "room_id"], name="room_id_per_workspace")]

    def __str__(self) -> str:
        return self.title
