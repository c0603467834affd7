"""Writes for API keys and rooms."""

import copy
import hashlib
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.core.cache import cache
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from harness import selectors as harness_selectors
from harness.models import Harness
from harness.runtime import (
    HttpPolicy,
    RoomContext,
    ToolRegistry,
    TurnInput,
    TurnResult,
    react_baseline_spec,
    run_turn,
)
from serving.model_config import backend_for
from serving.models import ApiKey, Room, Trace
from serving.selection import Selection, select_version
from serving.selectors import RoomRoute, room_route, room_token_key
from serving.traces import trace_row, trace_store
from workspaces.access import (
    ADMIN,
    API_KEY_SCOPES,
    READ,
    Actor,
    api_access_changed,
    api_access_generation,
    require,
)
from workspaces.identifiers import check_identifier, identifier_problem
from workspaces.models import Workspace
from workspaces.services import audit_record
from workspaces.tokens import token_replaced

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
    problem = identifier_problem(name, field="key name")
    if problem:  # the key page shows ApiKeyError as a form error
        raise ApiKeyError(problem)
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
        api_access_changed()
    return key


# Remembered keys (the reply route) --------------------------------------------------------------------
# The reply route authenticates from a per-process memo of token → key (and its workspace), each entry
# tagged with the API-access generation read before the key was (workspaces.access: every revocation and every
# change of a workspace's tool hosts replaces it after its commit). The route reads the current generation in
# its one Redis round trip (serving/admission.py); a changed one sends the request back to the database, so
# a revoked key is refused by the first request after the revocation returns, in every process. Entries also
# expire after KEY_MEMO_S, which bounds how long other changes to the workspace row (its name) go unseen.
KEY_MEMO_S = 2.0
_MEMO_MAX = 1024
_key_memo: dict[str, tuple[float, int, ApiKey]] = {}  # token digest → (loaded at, generation, key)
_key_memo_lock = threading.Lock()


def api_key_remembered(token: str) -> tuple[ApiKey | None, int]:
    """The key of `token` and the generation it was checked under, from the memo when fresh; the caller must
    compare that generation with the current one before trusting a remembered key (see above)."""
    return api_key_from_memory(token) or api_key_checked(token)


def api_key_from_memory(token: str, *, shared: bool = False) -> tuple[ApiKey, int] | None:
    """`api_key_remembered` without the database: None when the memo has no fresh entry for `token`.
    `shared`: the remembered objects themselves, for a caller that changes neither the key nor its workspace."""
    hit = _key_memo.get(_hash_secret(token))
    if hit is None or time.monotonic() - hit[0] >= KEY_MEMO_S:
        return None
    if shared:
        return hit[2], hit[1]
    key = copy.copy(hit[2])
    key.workspace = copy.copy(hit[2].workspace)  # a request may change its own copy, never another's
    return key, hit[1]


def api_key_checked(token: str) -> tuple[ApiKey | None, int]:
    """The key of `token` from the database (remembered for the next requests) and the generation read first."""
    digest = _hash_secret(token)
    generation = api_access_generation()
    key = api_key_authenticate(token)
    with _key_memo_lock:
        _key_memo.pop(digest, None)
        if key is not None and generation:
            if len(_key_memo) >= _MEMO_MAX:
                _key_memo.clear()
            remembered = copy.copy(key)
            remembered.workspace = copy.copy(key.workspace)
            _key_memo[digest] = (time.monotonic(), generation, remembered)
    return key, generation


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


def room_upsert(*, workspace: Workspace, context: dict, harness: Harness | None = None) -> Room:
    check_identifier(context.get("room_id"), field="room_id", max_length=100)
    defaults = {"title": context.get("title", context["room_id"]), "context": context}
    if harness is not None:
        defaults["harness"] = harness
    with transaction.atomic():
        room, _ = Room.objects.update_or_create(workspace=workspace, room_id=context["room_id"], defaults=defaults)
        room_changed(workspace.pk, room.room_id)
    return room


def room_changed(workspace_id: int, room_id: str) -> None:
    """Call inside the transaction that writes a room's row: the reply route on the loop reads it again."""
    token_replaced(room_token_key(workspace_id, room_id))


# Replies --------------------------------------------------------------------------------------------

class ReplyRequestError(ValueError):
    """The request cannot be answered as asked (unknown room, no harness, ...)."""


@dataclass(frozen=True)
class ReplyOutcome:
    result: TurnResult
    selection: Selection
    harness: Harness


def tool_registry_for(workspace: Workspace) -> ToolRegistry:
    """The tool bindings a workspace's turns run with: HTTP calls limited by its host allowlist."""
    return ToolRegistry(http_policy=HttpPolicy(allowed_hosts=tuple(workspace.tool_hosts or ())))


def turn_room(room_id: str, *, stored: bool, context: Mapping[str, Any]) -> RoomContext:
    """The room of a turn: a stored room's context is shared by its turns (RoomContext.shared keeps its
    catalogue lines), one sent with the request is this turn's alone."""
    if stored:
        return RoomContext.shared(context, room_id)
    return RoomContext.from_dict({**context, "room_id": room_id})


async def answer_turn(spec, turn, backend, arm: str, tools: ToolRegistry) -> TurnResult:
    """One turn through the agent loop, closing the backend's client after it."""
    try:
        return await run_turn(spec, turn, backend, tools, arm=arm)
    finally:
        close = getattr(backend, "aclose", None)
        if close is not None:
            await close()


def _harness_for(workspace: Workspace, room: RoomRoute | None, name: str | None) -> Harness:
    if name:
        return harness_selectors.harness_get(workspace, name)
    if room is not None and room.harness is not None:
        return room.harness
    harnesses = list(Harness.objects.filter(workspace=workspace)[:2])
    if len(harnesses) == 1:
        return harnesses[0]
    raise ReplyRequestError("Name the harness: this room has none assigned and the workspace has several.")


_room_harness: dict[tuple[int, str, str | None], int] = {}


def _remember_room_harness(workspace_id: int, room_id: str, harness_name: str | None, harness_id: int) -> None:
    key = (workspace_id, room_id, harness_name)
    if _room_harness.get(key) != harness_id:
        if len(_room_harness) >= 4096:
            _room_harness.clear()
        _room_harness[key] = harness_id


def room_harness_hint(workspace_id: int, room_id: str, harness_name: str | None) -> int | None:
    """The harness that last answered this room here: the reply route reads its routing token in advance
    (a wrong or missing hint only costs the route one more cache read)."""
    return _room_harness.get((workspace_id, room_id, harness_name))


def room_reply(
    *, actor: Actor, workspace: Workspace, room_id: str, message: str, viewer_id: str,
    recent_dialogue: list[tuple[str, str]] | None = None, room_context: dict | None = None,
    harness_name: str | None = None, label: str | None = None, version: int | None = None,
    backend_name: str | None = None, source: str = Trace.Source.API, spec_override=None,
) -> ReplyOutcome:
    """Answer one viewer message through the agent loop and record its trace (stored before this returns).

    `spec_override` runs an unsaved spec (the playground's draft) and records the trace without a version.
    """
    require(actor, workspace, READ)
    room = room_route(workspace.pk, room_id)
    context = room_context if room_context is not None else (room.context if room else None)
    if context is None:
        raise Http404(f"No room “{room_id}” in this workspace; send its context with the request.")
    harness = _harness_for(workspace, room, harness_name)
    _remember_room_harness(workspace.pk, room_id, harness_name, harness.pk)
    if spec_override is not None:
        selection, spec = None, spec_override
    else:
        selection = select_version(harness=harness, viewer_id=viewer_id, room_id=room_id, label=label,
                                   version=version)
        spec = harness_selectors.version_spec(selection.version)
        if selection.baseline:
            spec = react_baseline_spec(spec)
    # A backend named in the request wins; else the experiment arm's model; else the deployment's default.
    backend = backend_for(backend_name or (selection.backend if selection else "") or None, workspace=workspace)
    turn = TurnInput(message=message, viewer_id=viewer_id, room=turn_room(room_id, stored=room_context is None,
                                                                          context=context),
                     recent_dialogue=tuple(recent_dialogue or ()))
    arm = selection.arm if selection else "draft"
    result = async_to_sync(answer_turn)(spec, turn, backend, arm, tool_registry_for(workspace))
    # Written before the trace id is returned, in this request's unit of work (see serving/traces.py).
    trace_store(trace_row(workspace_id=workspace.pk, data=result.trace, source=source, harness_id=harness.pk,
                                  version_id=selection.version.pk if selection else None))
    if selection is not None and selection.experiment is not None:  # an experiment's arm
        from serving.experiments.live import after_experiment_reply

        after_experiment_reply(experiment=selection.experiment, trace_id=result.trace["trace_id"])
    return ReplyOutcome(result=result, selection=selection, harness=harness)


def rate_limit_hit(*, key: str, limit_per_minute: int) -> bool:
    """Fixed one-minute window per key in the shared cache; True when this request is over the limit."""
    window = int(time.time() // 60)
    cache_key = f"ratelimit:{key}:{window}"
    cache.add(cache_key, 0, timeout=90)
    try:
        count = cache.incr(cache_key)
    except ValueError:  # evicted between add and incr
        cache.set(cache_key, 1, timeout=90)
        count = 1
    return count > limit_per_minute
