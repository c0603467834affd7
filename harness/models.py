"""The versioned harness store.

A Harness is a named line of immutable HarnessVersions. Each version holds the
canonical files of one HarnessSpec (see docs/harness-format.md) and their
content hash. Edits happen in Drafts; Labels point at versions and every move
is kept as a LabelMove, so rollback is just a move back.
"""

from django.conf import settings
from django.db import models

from workspaces.identifiers import validate_identifier
from workspaces.models import ActorKind, Workspace


class ImmutableRowError(RuntimeError):
    pass


class Harness(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="harnesses")
    name = models.SlugField(max_length=64, validators=[validate_identifier])
    description = models.CharField(max_length=500, blank=True)
    head = models.ForeignKey("HarnessVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    archived_at = models.DateTimeField(null=True, blank=True,
                                       help_text="hidden from lists and pickers; its history is kept")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="harness_name_per_workspace")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class HarnessVersion(models.Model):
    harness = models.ForeignKey(Harness, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64, db_index=True)
    files = models.JSONField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    author_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    author_label = models.CharField(max_length=200)
    author_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["harness", "number"], name="version_number_per_harness")]
        ordering = ["-number"]

    def save(self, *args, **kwargs):
        # Versions are history: once written they are never updated (a PostgreSQL trigger enforces it too).
        if self.pk is not None:
            raise ImmutableRowError("Harness versions are immutable; commit a new version instead.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ImmutableRowError("Harness versions are never deleted.")

    @property
    def short_hash(self) -> str:
        return self.content_hash[:12]

    def __str__(self) -> str:
        return f"{self.harness.name}@v{self.number}"


class Draft(models.Model):
    """One user's working copy of a harness, based on a version. Always holds a valid spec."""

    harness = models.ForeignKey(Harness, on_delete=models.CASCADE, related_name="drafts")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="harness_drafts")
    base_version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="+")
    files = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["harness", "author"], name="one_draft_per_author")]


class Label(models.Model):
    harness = models.ForeignKey(Harness, on_delete=models.CASCADE, related_name="labels")
    name = models.SlugField(max_length=64, validators=[validate_identifier])
    version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="labels")
    protected = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["harness", "name"], name="label_name_per_harness")]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.harness.name}@{self.name}"


class LabelMove(models.Model):
    label = models.ForeignKey(Label, on_delete=models.CASCADE, related_name="moves")
    from_version = models.ForeignKey(HarnessVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    to_version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="+")
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_label = models.CharField(max_length=200)
    reason = models.CharField(max_length=500)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]
