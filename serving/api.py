"""The platform reply API: a viewer message in, the avatar's reply (or silence) out."""

import json

from django.conf import settings
from django.http import Http404, StreamingHttpResponse
from ninja import Router
from ninja.errors import AuthenticationError, HttpError

from harness.routing import tokens_read
from harness.runtime import TurnResult, reply_chunks
from serving import services
from serving.admission import HANDED_OVER_ADMISSION, reply_admit
from serving.auth import RememberedApiKeyAuth
from serving.observability import events_observed, reply_observed
from serving.schemas import EventsIn, EventsOut, ReplyIn, ReplyOut
from serving.selection import Selection
from workspaces.access import API_ACCESS_GENERATION
from workspaces.schemas import errors, reject_unknown_query
from workspaces.tokens import current_tokens

router = Router(tags=["replies"])


def _admit(request, room_id: str, harness_name: str | None) -> dict[int, int]:
    """Size, key and rate limit, with one Redis round trip; returns the routing tokens it read."""
    if len(request.body) > settings.REPLY_MAX_BODY_BYTES:
        raise HttpError(413, f"Request body is larger than {settings.REPLY_MAX_BODY_BYTES // 1024} KiB.")
    # Admitted already when the route on the event loop (serving.lean_reply) handed the request over.
    admission = getattr(request, "scope", {}).get(HANDED_OVER_ADMISSION) or reply_admit(
        key=f"key{request.api_key.pk}", limit_per_minute=settings.REPLY_RATE_PER_MINUTE,
        harness_id=services.room_harness_hint(request.workspace.pk, room_id, harness_name))
    _key_current(request, admission.keys_generation)
    if admission.over_limit:
        raise HttpError(429, f"Rate limit of {settings.REPLY_RATE_PER_MINUTE} replies per minute reached for this key.")
    return admission.routing_tokens


def _key_current(request, generation: int) -> None:
    """Refuse a key remembered by RememberedApiKeyAuth if it was revoked since: `generation` is the current
    API-access generation (workspaces.access); when it is not the one the key was remembered under (or the cache
    cannot say), the database decides."""
    if not generation or generation != request.key_generation:
        key, request.key_generation = services.api_key_checked(request.key_token)
        if key is None or key.pk != request.api_key.pk:
            raise AuthenticationError()


def _checked_backend(request, name: str | None) -> str | None:
    """A backend named in the request (a name the schema allows) must be here: a `checkpoint:<id>` of another
    workspace, or of none, is a 404; anything else this deployment cannot run is a 422 on the field."""
    from django.core.exceptions import ImproperlyConfigured
    from ninja.errors import ValidationError

    from serving.backends import backend_family
    from serving.model_config import backend_for

    if name:
        try:
            backend_for(name, workspace=request.workspace)
        except ImproperlyConfigured as exc:
            if backend_family(name) is not None:
                raise Http404(str(exc)) from None
            raise ValidationError([{"loc": ["body", "payload", "backend"], "msg": str(exc)}]) from None
    return name


# With ?stream=1 the reply comes as server-sent events: `delta` events carrying {"text"}, then one
# `final` event carrying the ReplyOut object. Each event's schema, as OpenAPI tools read SSE.
SSE_EVENT = {
    "type": "object", "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["delta", "final"]},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": {"anyOf": [
            {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
            {"$ref": "#/components/schemas/ReplyOut"},
        ]}},
    },
}
SSE_RESPONSE = {"responses": {200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}}


@router.post("/rooms/{room_id}/reply", response={200: ReplyOut, **errors(400, 401, 403, 404, 409, 413, 422, 429, 503)},
             openapi_extra=SSE_RESPONSE, auth=RememberedApiKeyAuth())
def reply(request, room_id: str, payload: ReplyIn, stream: bool = False):
    """Answer a viewer. `?stream=1` answers with server-sent events: `delta` events, then one `final` event.

    Deltas are sent only after the harness's reply hooks accepted the reply.
    """
    reject_unknown_query(request, "stream")
    with tokens_read(_admit(request, room_id, payload.harness)):
        outcome = services.room_reply(
            actor=request.actor, workspace=request.workspace, room_id=room_id, message=payload.message,
            viewer_id=payload.viewer_id, recent_dialogue=[(t.role, t.text) for t in payload.recent_dialogue],
            room_context=payload.room, harness_name=payload.harness, label=payload.label, version=payload.version,
            backend_name=_checked_backend(request, payload.backend),
        )
    reply_observed(outcome.result.trace, harness=outcome.harness.name, arm=outcome.selection.arm)
    body = reply_out(outcome.result, outcome.selection)
    if not stream:
        return body
    return StreamingHttpResponse(_sse(outcome.result.reply, body), content_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def reply_out(result: TurnResult, selection: Selection) -> dict:
    """The ReplyOut object of an answered reply (this route's and serving.lean_reply's)."""
    return {"reply": result.reply, "silent": result.silent, "trace_id": result.trace["trace_id"],
            "harness_version": selection.version.number, "arm": selection.arm, "latency_ms": result.latency_ms,
            "outcome": result.outcome, "model": result.trace.get("model")}


def _sse(reply: str, final: dict):
    for text in reply_chunks(reply):
        yield f"event: delta\ndata: {json.dumps({'text': text}, ensure_ascii=False)}\n\n"
    yield f"event: final\ndata: {json.dumps(final, ensure_ascii=False)}\n\n"


# Redis away, a batch still lands (its tokens read as "cannot say"); the database away, it is answered 503 with
# Retry-After (console/api.py), and the batch resent then reports what had been stored as duplicates.
@router.post("/events", response={200: EventsOut, **errors(400, 401, 403, 422, 503)}, auth=RememberedApiKeyAuth())
def ingest_events(request, payload: EventsIn):
    """Ingest a batch of platform events (ingest scope). Valid events are stored even when others in the
    batch are invalid; each invalid one is reported by its index. Duplicated event_ids count once. A 503
    (the database unreachable for a moment) says in Retry-After when to send the batch again: events it had
    stored are then answered as duplicates, never counted twice."""
    from serving.experiments.ingest import events_ingest
    from serving.experiments.lifecycle import running_token_key
    from serving.experiments.live import publish_experiment_updates

    # One cache read for two tokens: the API-access generation, which stands for the key's query (≈ 1.3 ms a
    # batch), and the workspace's running experiments', for their query.
    generation, running = current_tokens(API_ACCESS_GENERATION, running_token_key(request.workspace.pk))
    _key_current(request, generation)
    result = events_ingest(actor=request.actor, workspace=request.workspace, events=payload.events,
                           running_token=running)
    events_observed(accepted=result.accepted, duplicates=result.duplicates, rejected=len(result.errors))
    if result.accepted:
        publish_experiment_updates(result.running)
    return {"accepted": result.accepted, "duplicates": result.duplicates, "errors": result.errors}
