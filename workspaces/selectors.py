"""Reads for workspaces, scoped to the person asking."""

from django.db.models import QuerySet
from django.http import Http404

from workspaces.models import AuditEvent, Membership, Workspace


def workspaces_for_user(user) -> QuerySet[Workspace]:
    return Workspace.objects.filter(memberships__user=user).order_by("name")


def workspace_for_user(user, slug: str) -> tuple[Workspace, str]:
    """The workspace and the user's role in it; 404 (not 403) when not a member, so existence does not leak."""
    membership = Membership.objects.select_related("workspace").filter(workspace__slug=slug, user=user).first()
    if membership is None:
        raise Http404("No such workspace.")
    return membership.workspace, membership.role


def audit_events(workspace: Workspace, *, action: str = "", actor: str = "", target: str = "") -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.filter(workspace=workspace)
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor_label__icontains=actor)
    if target:
        events = events.filter(target_label__icontains=target)
    return events


def members(workspace: Workspace) -> QuerySet[Membership]:
    return Membership.objects.filter(workspace=workspace).select_related("user").order_by("user__username")
