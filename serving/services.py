"""Writes for API keys and rooms."""

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from console.access import ADMIN, API_KEY_SCOPES, Actor, require
from console.models import Workspace
from console.services import audit_record
from serving.models import ApiKey, Room

KEY_PREFIX = "hok"


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKeyError(ValueError):
    pass


@transaction.atomic
def api_key_create(*, actor: Actor, workspace: Workspace, name: str, scopes: list[str]) -> tuple[ApiKey, str]:
    """Create a key and return it with its full token; the token is never retrievable again."""
    require(actor, workspace, ADMIN)
    name = name.strip()
    if not name:
        raise ApiKeyError("Give the key a name.")
    unknown = sorted(set(scopes) - set(API_KEY_SCOPES))
    if unknown or not scopes:
        raise ApiKeyError(f"Scopes must be a non-empty subset of {', '.join(API_KEY_SCOPES)}; got {scopes}.")
    prefix = secrets.token_hex(4)
    secret = secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        workspace=workspace, name=name, prefix=prefix, secret_hash=_hash_secret(secret),
        scopes=sorted(set(scopes)), created_by=actor.label,
    )
    audit_record(actor=actor, workspace=workspace, action="api_key.create", target_type="api_key",
                 target_id=key.pk, target_label=str(key), after={"scopes": key.scopes})
    return key, f"{KEY_PREFIX}_{prefix}_{secret}"


@transaction.atomic
def api_key_revoke(*, actor: Actor, key: ApiKey) -> ApiKey:
    require(actor, key.workspace, ADMIN)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, workspace=key.workspace, action="api_key.revoke", target_type="api_key",
                     target_id=key.pk, target_label=str(key), before={"active": True}, after={"active": False})
    return key


def api_key_authenticate(token: str) -> ApiKey | None:
    """Resolve a bearer token to an active key (constant-time compare) and stamp its last use."""
    try:
        kind, prefix, secret = token.split("_", 2)
    except ValueError:
        return None
    if kind != KEY_PREFIX:
        return None
    key = ApiKey.objects.select_related("workspace").filter(prefix=prefix, revoked_at__isnull=True).first()
    if key is None or not secrets.compare_digest(key.secret_hash, _hash_secret(secret)):
        return None
    now = timezone.now()
    # Stamp at most once a minute so hot keys do not write on every request.
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def room_upsert(*, workspace: Workspace, context: dict) -> Room:
    room, _ = Room.objects.update_or_create(
        workspace=workspace, room_id=context["room_id"],
        defaults={"title": context.get("title", context["room_id"]), "context": context},
    )
    return room
