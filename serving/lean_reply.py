"""The reply route on the event loop: the platform's everyday reply request without Django's request cycle.

Through Django, a reply spent most of its CPU outside the turn: the handler and middleware, ninja's
authentication and body model, and two hops between the event loop and a worker thread (docs/performance.md).
This ASGI layer answers the everyday request itself, on the loop: a remembered key, a stored room with its
harness, a route remembered under the token just read (harness.routing), the deployment's model. Its admission
goes through the loop's own Redis connection (serving.redis_loop), and reads the room's token too: a room read
on this loop under the same tokens a moment ago answers without a query (serving.selectors). Its room reads and
trace writes go through the loop's own PostgreSQL connections (serving.loop_db): a warm reply is one Redis round
trip and one statement, its trace.

Every other request, and every reply it cannot answer from memory, it hands to Django unchanged (its body
replayed) - after the admission, with the admission, so a request is counted once. Each rule and each error
therefore has one implementation, Django's route; this one only takes the path where nothing is missing.
It is on where the deployment has PostgreSQL and Redis (`enabled`); embedded mode is Django's route alone.
"""

import asyncio
import json
import logging
import re
from functools import cache

import psycopg
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import Http404
from django.http.request import split_domain_port, validate_host

from harness import selectors as harness_selectors
from harness.routing import NotRemembered, from_memory, tokens_read
from harness.runtime import TurnInput, react_baseline_spec
from serving import loop_db, redis_loop
from serving.admission import HANDED_OVER_ADMISSION, Admission, reply_admit_async, routing_token_async
from serving.api import reply_out
from serving.backends import backend_family
from serving.experiments.routing import experiment_routing
from serving.model_config import backend_for
from serving.models import Room, Trace
from serving.observability import reply_observed
from serving.schemas import ReplyIn, ReplyOut
from serving.selection import DEFAULT_LABEL, label_version, select_version
from serving.selectors import room_harness_kept, room_route_on_loop
from serving.services import (
    KEY_PREFIX,
    answer_turn,
    api_key_checked,
    api_key_from_memory,
    tool_registry_for,
    turn_room,
)
from serving.traces import trace_row, trace_store_on_loop
from workspaces.access import READ, Actor, capabilities

log = logging.getLogger(__name__)

# The loop's own PostgreSQL pool or Redis client failing (unreachable, a pool timeout): before the admission
# Django's route takes the request with its own connections, and answers or reports the failure as it does.
_UNREACHABLE = (psycopg.Error, redis.RedisError, OSError)


class _HandOver(Exception):  # noqa: N818 (not an error: Django's route answers this request)
    def __init__(self, admission: Admission | None = None):
        self.admission = admission  # once counted, Django's route must not count the request again


def enabled() -> bool:
    # A checkpoint as the deployment's model is checked against the database per request: Django's route.
    return bool(settings.REDIS_URL) and loop_db.available() and backend_family(settings.MODEL_BACKEND) != "checkpoint"


@cache
def reply_path() -> re.Pattern:
    """The reply route's path (Django's URLconf, reversed once; console.asgi reverses it at start-up, where the
    first request otherwise paid ≈ 17 ms of CPU for the resolver's reverse map)."""
    from django.urls import reverse

    before, _, after = reverse("api:reply", kwargs={"room_id": "ROOM"}).partition("ROOM")
    return re.compile(f"{re.escape(before)}([^/]+){re.escape(after)}")


def lean_reply(django_app):
    """ASGI middleware around Django's application (console.asgi)."""

    async def app(scope, receive, send):
        match = (scope["type"] == "http" and scope["method"] == "POST" and not scope.get("query_string")
                 and not scope.get("root_path") and enabled() and reply_path().fullmatch(scope["path"]))
        if not match:
            return await django_app(scope, receive, send)
        received = await _body(receive, settings.REPLY_MAX_BODY_BYTES)
        if received is None:  # the client went away
            return None
        body, more = received
        try:
            if more:
                raise _HandOver()  # larger than a reply may be: Django's 413 (its body spooled, not held here)
            status, answer, headers = await _answer(scope, match[1], body)
        except _HandOver as handover:
            if handover.admission is not None:
                scope = {**scope, HANDED_OVER_ADMISSION: handover.admission}
            return await django_app(scope, _replayed(body, more, receive), send)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})
        return None

    return app


async def _body(receive, limit: int) -> tuple[bytes, bool] | None:
    """The request body, or its first part once past `limit` bytes (then True: more is still to come)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = bool(message.get("more_body"))
        if not more or size > limit:
            return b"".join(chunks), more


def _replayed(body: bytes, more: bool, receive):
    """`receive` for Django: the part of the body read here, then whatever the client still sends."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replay


async def _answer(scope, room_id: str, body: bytes) -> tuple[int, bytes, list]:
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:  # a repeated header is joined, as Django's ASGIRequest joins it
        headers[name] = headers[name] + b"," + value if name in headers else value
    secure = _is_secure(scope, headers)
    if not _host_allowed(headers) or (settings.SECURE_SSL_REDIRECT and not secure):
        raise _HandOver()  # Django's 400 or redirect
    if len(body) > settings.REPLY_MAX_BODY_BYTES or "\x00" in room_id or b"\\u0000" in body or b"\x00" in body:
        raise _HandOver()  # Django's 413, or its NUL replacement
    token = _bearer(headers.get(b"authorization", b""))
    remembered = api_key_from_memory(token, shared=True) or await _key_checked(token)  # read here, never changed
    if remembered is None:
        raise _HandOver()  # no such key: Django's route answers 401
    key, generation = remembered
    try:
        payload = ReplyIn.model_validate(json.loads(body))
    except ValueError:  # malformed JSON or a schema error (pydantic's ValidationError is a ValueError)
        raise _HandOver() from None
    actor, workspace = Actor.for_api_key(key), key.workspace
    if payload.harness or payload.backend or payload.version is not None or READ not in capabilities(actor,
                                                                                                     workspace):
        raise _HandOver()  # a harness, backend or version named is looked up in the database; 403
    try:
        admission = await reply_admit_async(key=f"key{key.pk}", limit_per_minute=settings.REPLY_RATE_PER_MINUTE,
                                            harness_id=room_harness_kept(workspace.pk, room_id),
                                            room=(workspace.pk, room_id))
    except _UNREACHABLE:
        raise _HandOver() from None  # not counted yet: Django's route admits it
    if admission.over_limit or not admission.keys_generation or admission.keys_generation != generation:
        raise _HandOver(admission)  # Django's 429, or its check of a key whose access may have changed
    try:
        room = await room_route_on_loop(workspace.pk, room_id, room_token=admission.room_token,
                                        routing_tokens=admission.routing_tokens)
    except _UNREACHABLE:
        raise _HandOver(admission) from None
    if room is None or room.harness is None:
        raise _HandOver(admission)  # Django's 404, or the harness chosen from the workspace's
    tokens = admission.routing_tokens
    if room.harness.pk not in tokens:  # a room not read here before (or no longer kept), or its harness changed
        try:
            tokens = {**tokens, room.harness.pk: await routing_token_async(room.harness.pk)}
        except _UNREACHABLE:
            raise _HandOver(admission) from None
    try:
        with tokens_read(tokens), from_memory():
            selection = select_version(harness=room.harness, viewer_id=payload.viewer_id, room_id=room_id,
                                       label=payload.label)
    except NotRemembered:  # a label or experiment not read since it last changed (or an experiment's arm)
        raise _HandOver(admission) from None
    spec = harness_selectors.version_spec(selection.version)
    if selection.baseline:
        spec = react_baseline_spec(spec)
    try:
        backend = backend_for(None, workspace=workspace)
        turn = TurnInput(message=payload.message, viewer_id=payload.viewer_id,
                         room=turn_room(room_id, stored=payload.room is None,
                                        context=room.context if payload.room is None else payload.room),
                         recent_dialogue=tuple((t.role, t.text) for t in payload.recent_dialogue))
    except Exception:  # noqa: BLE001 (Django's route answers, or reports, the same failure)
        raise _HandOver(admission) from None
    result = await answer_turn(spec, turn, backend, selection.arm, tool_registry_for(workspace))
    await _trace_stored(workspace.pk, result.trace, room.harness.pk, selection.version.pk)
    reply_observed(result.trace, harness=room.harness.name, arm=selection.arm)
    answer = json.dumps(ReplyOut.model_validate(reply_out(result, selection)).model_dump()).encode()
    return 200, answer, _json_headers(len(answer), secure)


_checking: dict = {}  # (event loop, token) → the check of that key under way


async def _key_checked(token: str):
    """The key of `token` from the database, in a thread, when the memo has none (a new key, or its entry
    expired): one check a key at a time, which the requests that arrive meanwhile share."""
    if not token.startswith(f"{KEY_PREFIX}_"):
        return None
    loop = asyncio.get_running_loop()
    check = _checking.get((loop, token))
    if check is None:
        check = _checking[loop, token] = loop.create_task(sync_to_async(_key_row)(token))
        check.add_done_callback(lambda _task: _checking.pop((loop, token), None))
    key, generation = await asyncio.shield(check)
    return (key, generation) if key is not None else None


def _key_row(token: str):
    try:
        return api_key_checked(token)
    finally:
        connection.close()  # back to the pool, as at the end of Django's requests


async def _trace_stored(workspace_id: int, trace: dict, harness_id: int, version_id: int) -> None:
    await trace_store_on_loop(trace_row(workspace_id=workspace_id, data=trace, source=Trace.Source.API,
                                        harness_id=harness_id, version_id=version_id))


def _bearer(value: bytes) -> str:
    """The token of `Authorization: Bearer <token>`, read as ninja's HttpBearer reads it ('' for none)."""
    scheme, _, token = value.decode("latin-1").partition(" ")
    return token if scheme.lower() == "bearer" else ""


def _host_allowed(headers: dict) -> bool:
    """Django's `request.get_host()` check, for the plain case (else Django's route decides)."""
    if settings.USE_X_FORWARDED_HOST and b"x-forwarded-host" in headers:
        return False
    domain, _port = split_domain_port(headers.get(b"host", b"").decode("latin-1"))
    allowed = settings.ALLOWED_HOSTS or ([".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    return bool(domain) and validate_host(domain, allowed)


def _is_secure(scope, headers: dict) -> bool:
    """Django's `request.is_secure()`: the proxy's header when one is configured, else the scheme."""
    if settings.SECURE_PROXY_SSL_HEADER:
        name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        value = headers.get(name.removeprefix("HTTP_").lower().replace("_", "-").encode())
        if value is not None:
            return value.decode("latin-1").split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "https"


def _json_headers(length: int, secure: bool) -> list[tuple[bytes, bytes]]:
    """The headers Django's route sends with a JSON answer (ninja, CommonMiddleware, SecurityMiddleware and
    XFrameOptionsMiddleware, as settings configure them)."""
    headers = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(length).encode())]
    if settings.SECURE_HSTS_SECONDS and secure:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        hsts += "; includeSubDomains" if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS else ""
        hsts += "; preload" if settings.SECURE_HSTS_PRELOAD else ""
        headers.append((b"strict-transport-security", hsts.encode()))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        headers.append((b"referrer-policy", (policy if isinstance(policy, str) else ",".join(policy)).encode()))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append((b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()))
    headers.append((b"x-frame-options", getattr(settings, "X_FRAME_OPTIONS", "DENY").upper().encode()))
    return headers


# A starting worker reads the routes of this many rooms, the most recently updated, before its first request.
WARMED_ROOMS = 32


async def lifespan(scope, receive, send):
    """The ASGI lifespan (console.asgi; uvicorn sends it, Daphne does not): the reply route warmed before the
    first request, and the loop's PostgreSQL connections closed at shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await warm_up()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await loop_db.close_loop_pool()
            except Exception:  # noqa: BLE001 (the process ends anyway, and its connections with it)
                log.warning("could not close the loop's connections", exc_info=True)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def warm_up() -> None:
    """Open this loop's PostgreSQL pool and Redis connection, and read, parse and remember the production version
    of the harnesses of the WARMED_ROOMS most recently updated rooms, so that a fresh worker's first reply stays
    on the loop and pays none of it. An optimisation: a failure is logged and start-up goes on."""
    if not enabled():
        return
    try:
        async with loop_db.loop_connection():
            pass
        if redis_loop.supported(settings.REDIS_URL):
            await redis_loop.loop_redis(settings.REDIS_URL)
        await sync_to_async(_routes_read, thread_sensitive=False)()
    except Exception:  # noqa: BLE001 (the first requests just pay it, as without warming)
        log.warning("could not warm the reply route", exc_info=True)


def _routes_read() -> None:
    try:
        harnesses = {room.harness_id: room.harness for room in Room.objects.exclude(harness=None)
                     .select_related("harness").order_by("-updated_at")[:WARMED_ROOMS]}
        for harness in harnesses.values():
            experiment_routing(harness)  # what select_version asks first: whether an experiment runs
            try:
                harness_selectors.version_spec(label_version(harness, DEFAULT_LABEL))
            except Http404:  # no production label: its requests name one, or Django's route answers them
                continue
    finally:
        connection.close()  # back to the pool, as at the end of Django's requests
