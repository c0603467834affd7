"""Workspaces, memberships and the audit log."""

from django.conf import settings
from django.db import models

from workspaces.identifiers import validate_identifier


class Role(models.TextChoices):
    """Roles are ordered: each includes the powers of the ones before it."""

    VIEWER = "viewer", "Viewer (read)"
    OPERATOR = "operator", "Operator (edit drafts, run jobs)"
    APPROVER = "approver", "Approver (protected labels, approvals)"
    ADMIN = "admin", "Admin (members, keys)"


class Workspace(models.Model):
    """A merchant or an operator team; every object in HarnessOps belongs to one."""

    slug = models.SlugField(max_length=64, unique=True, validators=[validate_identifier])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    tool_hosts = models.JSONField(
        default=list, blank=True,
        help_text="HTTP tool bindings may call only these hosts (names or IP networks); empty: any public "
                  "host. Private, loopback and link-local addresses are refused unless listed here.")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")]


class ActorKind(models.TextChoices):
    USER = "user"
    API_KEY = "api_key"
    SYSTEM = "system"


class AuditEvent(models.Model):
    """An append-only record of who changed what, with before/after values."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="audit_events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_label = models.CharField(max_length=200)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_api_key_id = models.BigIntegerField(null=True, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64, blank=True)
    target_label = models.CharField(max_length=300, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["workspace", "-at"])]


class WebhookEndpoint(models.Model):
    """An operator's HTTPS endpoint that hears of a workspace's events (workspaces.webhooks)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    events = models.JSONField(default=list, help_text="the event names it receives")
    # Kept to sign each delivery (HMAC needs the key itself); shown once, when the endpoint is made.
    secret = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event sent (or to be sent) to one endpoint, with what the endpoint answered last."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # every attempt failed

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=64)
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)
    error = models.CharField(max_length=500, blank=True)
    replay_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["endpoint", "-created_at"])]
