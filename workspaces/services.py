"""Writes for workspaces, memberships and the audit log."""

import ipaddress
import re

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from workspaces.access import ADMIN, Actor, api_access_changed, require, require_workspace_creator
from workspaces.identifiers import identifier_problem
from workspaces.models import AuditEvent, Membership, Role, Workspace


def audit_record(
    *,
    actor: Actor,
    workspace: Workspace,
    action: str,
    target_type: str,
    target_id: str | int = "",
    target_label: str = "",
    before=None,
    after=None,
) -> AuditEvent:
    """Append one audit event. Call inside the transaction of the change it records."""
    return AuditEvent.objects.create(
        workspace=workspace,
        actor_kind=actor.kind,
        actor_label=actor.label[:200],
        actor_user_id=actor.user_id,
        actor_api_key_id=actor.api_key_id,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        target_label=target_label[:300],
        before=before,
        after=after,
    )


def archived_set(*, actor: Actor, obj, kind: str, label: str, archived: bool) -> None:
    """Archive `obj` (a row with `archived_at` and `workspace`) or bring it back, with its audit event."""
    with transaction.atomic():
        before = obj.archived_at
        obj.archived_at = timezone.now() if archived else None
        obj.save(update_fields=["archived_at"])
        audit_record(actor=actor, workspace=obj.workspace, action=f"{kind}.archive" if archived else f"{kind}.unarchive",
                     target_type=kind, target_id=obj.pk, target_label=label, before={"archived": before is not None},
                     after={"archived": archived})


class WorkspaceError(ValueError):
    pass


WORKSPACE_SLUG_MAX = 64
WORKSPACE_NAME_MAX = 200


def workspace_create(*, actor: Actor, slug: str, name: str, owner=None) -> Workspace:
    """Create a workspace (staff, superusers and the system only); `owner` becomes its first admin."""
    require_workspace_creator(actor)
    slug, name = slug.strip(), name.strip() or slug.strip()
    problem = identifier_problem(slug, field="workspace slug", max_length=WORKSPACE_SLUG_MAX)
    if problem:  # the one identifier rule; the page and the command show WorkspaceError
        raise WorkspaceError(problem)
    if len(name) > WORKSPACE_NAME_MAX:
        raise WorkspaceError(f"The workspace name is longer than {WORKSPACE_NAME_MAX} characters.")
    try:
        with transaction.atomic():
            workspace = Workspace.objects.create(slug=slug, name=name)
            audit_record(actor=actor, workspace=workspace, action="workspace.create", target_type="workspace",
                         target_id=workspace.pk, target_label=slug, after={"slug": slug, "name": name})
            if owner is not None:
                Membership.objects.create(workspace=workspace, user=owner, role=Role.ADMIN)
                audit_record(actor=actor, workspace=workspace, action="membership.add", target_type="membership",
                             target_id=owner.pk, target_label=owner.get_username(), after={"role": Role.ADMIN})
    except IntegrityError as exc:  # the unique slug, also when two creations race
        raise WorkspaceError(f"A workspace “{slug}” already exists.") from exc
    return workspace


class MembershipError(ValueError):
    pass


@transaction.atomic
def membership_set(*, actor: Actor, workspace: Workspace, username: str, role: str | None) -> Membership | None:
    """Add, change or (role=None) remove a member; the last admin cannot be removed or demoted."""
    # Membership changes of one workspace take turns (the workspace row is the lock), and the actor's own
    # role is checked after the wait: two admins demoting each other at once would otherwise each count
    # the other and leave the workspace with none.
    Workspace.objects.select_for_update().filter(pk=workspace.pk).first()
    require(actor, workspace, ADMIN)
    if role is not None and role not in Role.values:
        raise MembershipError(f"Unknown role “{role}”; choose one of {', '.join(Role.values)}.")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise MembershipError(f"No user named “{username}”.")
    current = Membership.objects.select_for_update().filter(workspace=workspace, user=user).first()
    before = {"role": current.role} if current else None
    if current and current.role == Role.ADMIN and role != Role.ADMIN:
        admins = Membership.objects.filter(workspace=workspace, role=Role.ADMIN).count()
        if admins <= 1:
            raise MembershipError("A workspace needs at least one admin.")
    if role is None:
        if current is None:
            raise MembershipError(f"{username} is not a member.")
        current.delete()
        result = None
    elif current is None:
        result = Membership.objects.create(workspace=workspace, user=user, role=role)
    else:
        current.role = role
        current.save(update_fields=["role"])
        result = current
    audit_record(actor=actor, workspace=workspace,
                 action="membership.remove" if role is None else ("membership.change" if current else "membership.add"),
                 target_type="membership", target_id=user.pk, target_label=username,
                 before=before, after={"role": role} if role else None)
    return result


@transaction.atomic
def member_invite(*, actor: Actor, workspace: Workspace, username: str, role: str) -> tuple[Membership, str]:
    """Create an account for someone new and add them with `role` (workspace admins).

    The account has no usable password; returns the membership and a one-time set-password token
    (`uidb64/token`, Django's password-reset token: it stops working once the password is set).
    """
    require(actor, workspace, ADMIN)
    User = get_user_model()
    username = username.strip()
    try:
        User._meta.get_field(User.USERNAME_FIELD).run_validators(username)
        if not username:
            raise ValidationError("empty")
    except ValidationError as exc:
        raise MembershipError(f"Username “{username}”: up to 150 letters, digits and @.+-_ only.") from exc
    if User.objects.filter(username=username).exists():
        raise MembershipError(f"{username} already has an account: add them as a member instead.")
    if role not in Role.values:
        raise MembershipError(f"Unknown role “{role}”; choose one of {', '.join(Role.values)}.")
    user = User(username=username)
    user.set_unusable_password()
    user.save()
    membership = Membership.objects.create(workspace=workspace, user=user, role=role)
    audit_record(actor=actor, workspace=workspace, action="membership.invite", target_type="membership",
                 target_id=user.pk, target_label=username, after={"role": role})
    token = f"{urlsafe_base64_encode(force_bytes(user.pk))}/{default_token_generator.make_token(user)}"
    return membership, token


class ToolHostsError(ValueError):
    pass


_HOST_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
MAX_TOOL_HOSTS = 50


@transaction.atomic
def workspace_tool_hosts_set(*, actor: Actor, workspace: Workspace, hosts: list[str]) -> Workspace:
    """Replace the workspace's HTTP tool allowlist (host names or IP networks), audited."""
    require(actor, workspace, ADMIN)
    cleaned: list[str] = []
    for raw in hosts:
        entry = raw.strip().lower()
        if not entry:
            continue
        try:
            entry = str(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            if not _HOST_NAME.match(entry):
                raise ToolHostsError(f"“{raw.strip()[:80]}” is neither a host name nor an IP network "
                                     "(e.g. api.shop.example, 10.0.0.0/8).") from None
        if entry not in cleaned:
            cleaned.append(entry)
    if len(cleaned) > MAX_TOOL_HOSTS:
        raise ToolHostsError(f"At most {MAX_TOOL_HOSTS} hosts.")
    locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
    before = list(locked.tool_hosts)
    locked.tool_hosts = cleaned
    locked.save(update_fields=["tool_hosts"])
    api_access_changed()  # remembered keys carry their workspace (serving.services.api_key_remembered)
    audit_record(actor=actor, workspace=locked, action="workspace.tool_hosts", target_type="workspace",
                 target_id=locked.pk, target_label=locked.slug, before={"hosts": before}, after={"hosts": cleaned})
    workspace.tool_hosts = cleaned
    return workspace
