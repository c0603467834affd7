"""Who is asking and what they may do.

An `Actor` is a user, a platform API key or the system (seeding, AI proposals).
Capabilities are the unit of permission: roles grant them cumulatively and API
keys carry them as scopes, so services check one thing whatever the caller.
"""

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Q

from workspaces.models import ActorKind, Membership, Role, Workspace
from workspaces.tokens import current_tokens, token_replaced

READ, WRITE, APPROVE, ADMIN, INGEST = "read", "write", "approve", "admin", "ingest"
# Committing a version off the head (a candidate no label points at) and writing proposals: all the AI actor
# may do besides reading. Writing implies it, so people and keys that may write may also propose.
PROPOSE = "propose"

ROLE_CAPABILITIES: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({READ}),
    Role.OPERATOR: frozenset({READ, WRITE, PROPOSE}),
    Role.APPROVER: frozenset({READ, WRITE, PROPOSE, APPROVE}),
    Role.ADMIN: frozenset({READ, WRITE, PROPOSE, APPROVE, ADMIN}),
}
API_KEY_SCOPES = (READ, WRITE, APPROVE, INGEST)
# A key's scopes imply the weaker ones, as roles do: writing needs reading what you write.
_SCOPE_IMPLIES = {READ: {READ}, WRITE: {READ, WRITE, PROPOSE}, APPROVE: {READ, WRITE, PROPOSE, APPROVE},
                  INGEST: {INGEST}}


@dataclass(frozen=True)
class Actor:
    kind: str
    label: str
    user_id: int | None = None
    api_key_id: int | None = None
    # Only API keys and the system carry fixed capabilities; users' come from memberships.
    workspace_id: int | None = None
    scopes: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def for_user(cls, user) -> "Actor":
        return cls(kind=ActorKind.USER, label=user.get_username(), user_id=user.pk)

    @classmethod
    def for_api_key(cls, api_key) -> "Actor":
        return cls(
            kind=ActorKind.API_KEY,
            label=f"key:{api_key.prefix} ({api_key.name})",
            api_key_id=api_key.pk,
            workspace_id=api_key.workspace_id,
            scopes=frozenset().union(*(_SCOPE_IMPLIES[s] for s in api_key.scopes if s in _SCOPE_IMPLIES)),
        )

    @classmethod
    def system(cls, label: str = "system") -> "Actor":
        return cls(kind=ActorKind.SYSTEM, label=label)

    @classmethod
    def ai(cls, label: str, workspace: Workspace) -> "Actor":
        """The AI author of proposals and candidate versions: it reads and proposes in one workspace, and
        nothing else (no head or label moves, no members or keys). Its label starts with "ai:"."""
        label = label if label.startswith("ai:") else f"ai:{label}"
        return cls(kind=ActorKind.SYSTEM, label=label[:200], workspace_id=workspace.pk,
                   scopes=frozenset({READ, PROPOSE}))

    @property
    def limited(self) -> bool:
        """A system actor with fixed scopes (the AI): it holds those, not the system's full powers."""
        return self.kind == ActorKind.SYSTEM and bool(self.scopes)


def capabilities(actor: Actor, workspace: Workspace) -> frozenset[str]:
    if actor.limited:
        return actor.scopes if actor.workspace_id == workspace.pk else frozenset()
    if actor.kind == ActorKind.SYSTEM:
        return ROLE_CAPABILITIES[Role.ADMIN] | {PROPOSE, INGEST}
    if actor.kind == ActorKind.API_KEY:
        return actor.scopes if actor.workspace_id == workspace.pk else frozenset()
    role = Membership.objects.filter(workspace=workspace, user_id=actor.user_id).values_list("role", flat=True).first()
    return ROLE_CAPABILITIES.get(role, frozenset())


def require_workspace_creator(actor: Actor) -> None:
    """Creating workspaces is for the system (seeding, CLI) and staff users, not a workspace role."""
    if actor.kind == ActorKind.SYSTEM and not actor.limited:
        return
    if actor.kind == ActorKind.USER:
        if get_user_model().objects.filter(pk=actor.user_id).filter(
                Q(is_staff=True) | Q(is_superuser=True), is_active=True).exists():
            return
    raise PermissionDenied(f"{actor.label} may not create workspaces (staff only).")


def require(actor: Actor, workspace: Workspace, capability: str) -> None:
    """Raise PermissionDenied unless `actor` holds `capability` in `workspace`."""
    if capability not in capabilities(actor, workspace):
        raise PermissionDenied(f"{actor.label} lacks the '{capability}' permission in {workspace.slug}.")


# What a remembered API key may still do ------------------------------------------------------------------
# The reply route remembers keys and their workspace per process (serving.services.api_key_remembered). Every
# change that must reach those requests at once (a key revoked, the workspace's tool hosts) replaces this
# shared-cache integer after its commit; a remembered key is trusted only while the generation it was loaded
# under is still the current one.
API_ACCESS_GENERATION = "api-access:generation"


def api_access_changed() -> None:
    """Call inside the transaction that revokes a key or changes what a workspace's requests may do.

    Replaced now and again after the commit, as every workspaces.tokens token is: a key read from the database
    between the two (before the commit is visible) is tagged with the first replacement, which the second
    retires."""
    token_replaced(API_ACCESS_GENERATION)


def api_access_generation() -> int:
    """The current generation (made on first use; 0 when the cache cannot say)."""
    return current_tokens(API_ACCESS_GENERATION)[0]
