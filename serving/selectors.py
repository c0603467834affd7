"""Reads for rooms and traces, within one workspace."""

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import Q, QuerySet
from django.http import Http404

from harness.models import Harness
from serving.gathering import Gathering
from serving.models import PromptPart, Room, Trace
from serving.traces import joined_request, request_digests
from workspaces.models import Workspace


def rooms(workspace: Workspace) -> QuerySet[Room]:
    return Room.objects.filter(workspace=workspace).select_related("harness").order_by("room_id")


@dataclass(frozen=True)
class RoomRoute:
    """What a reply needs of a stored room: its context and the harness assigned to it (None: none)."""

    context: dict[str, Any]
    harness: Harness | None


# The harness columns a reply reads; a Harness built from them loads any other field on first access.
_ROUTE_HARNESS_FIELDS = ("id", "workspace_id", "name", "head_id")


@cache
def _room_route_sql() -> str:
    room, harness = Room._meta, Harness._meta
    q = connection.ops.quote_name
    columns = ", ".join(f"h.{q(harness.get_field(name).column)}" for name in _ROUTE_HARNESS_FIELDS)
    return (f"SELECT r.{q(room.get_field('context').column)}, {columns} FROM {q(room.db_table)} r "
            f"LEFT JOIN {q(harness.db_table)} h ON h.{q(harness.pk.column)} = r.{q(room.get_field('harness').column)} "
            f"WHERE r.{q(room.get_field('workspace').column)} = %s AND r.{q(room.get_field('room_id').column)} = %s")


def room_route(workspace_id: int, room_id: str) -> RoomRoute | None:
    """The room's context and harness in one statement the ORM does not compile: on the reply path the query
    compiler (a select_related .first()) cost about 20 times the CPU of the query itself."""
    with connection.cursor() as cursor:
        cursor.execute(_room_route_sql(), [workspace_id, room_id])
        return _room_route_from(cursor.fetchone())


@cache
def _room_route_on_loop_sql() -> str:
    """`_room_route_sql` that sends the context only when the room's row changed since the version the caller
    holds: `xmin` (the transaction that wrote the row version; every update writes a new one) and `ctid` (where)."""
    context = f"r.{connection.ops.quote_name(Room._meta.get_field('context').column)}"
    sql = _room_route_sql()
    assert sql.startswith(f"SELECT {context}, ")
    version = "r.xmin::text || ':' || r.ctid::text"  # ctid too: an xmin seen again after wraparound is not enough
    return sql.replace(f"SELECT {context}, ", f"SELECT CASE WHEN {version} = %s THEN NULL ELSE {context} END, "
                                              f"{version}, ", 1)


# The rooms this process read on the loop: (workspace id, room id) → (row version, context). A room's context
# (the demo's is 20 KB of jsonb) changes rarely; rendering and sending it cost PostgreSQL ≈ 0.2 ms a reply.
_LOOP_ROOMS_MAX = 256
_loop_rooms: dict[tuple[int, str], tuple[str, dict[str, Any]]] = {}


def _room_remembered(memo: dict, key, value) -> None:
    """`memo[key] = value` in a memo of the loop's that holds at most _LOOP_ROOMS_MAX rooms: the room read longest
    ago goes (a read puts its room last), so a worker with more live rooms than it keeps loses its coldest rooms,
    not every room at once."""
    memo.pop(key, None)
    while len(memo) >= _LOOP_ROOMS_MAX:
        del memo[next(iter(memo))]
    memo[key] = value


def room_token_key(workspace_id: int, room_id: str) -> str:
    """The shared cache's key (before its prefix) of a stored room's token (harness.routing's tokens, for a
    room): serving.services.room_changed replaces it whenever the room's row changes."""
    return f"room:{workspace_id}:{room_id}"


# How long the route on the loop keeps answering from a room it read while the room's tokens stay the same: a
# write that does not replace the room's token (psql, a restored database) is seen within this.
ROOM_KEPT_S = 1.0


@dataclass(frozen=True)
class _Kept:
    row: tuple  # (context, *the harness's columns)
    tokens: tuple[int, int]  # the room's token and its harness's routing token when it was read
    read_at: float  # time.monotonic(), taken before the read


_loop_kept: dict[tuple[int, str], _Kept] = {}  # (workspace id, room id) → the room as last read on the loop


def room_harness_kept(workspace_id: int, room_id: str) -> int | None:
    """The harness of the room as last read on the loop: the admission reads its routing token with the room's."""
    kept = _loop_kept.get((workspace_id, room_id))
    return None if kept is None else kept.row[1]  # the harness's id, the first of _ROUTE_HARNESS_FIELDS


async def room_route_on_loop(workspace_id: int, room_id: str, *, room_token: int = 0,
                             routing_tokens: Mapping[int, int] = MappingProxyType({})) -> RoomRoute | None:
    """`room_route` from the event loop (serving.loop_db; PostgreSQL only).

    Given the tokens just read (serving.admission: the room's token, and its harness's routing token), a room
    read on this loop less than ROOM_KEPT_S ago under the same tokens answers without a query. Otherwise the
    room is read, its context again only when the room's row changed; the requests for a room that arrive while
    its read runs share the next read (serving.gathering: a read that started after each of them asked), and
    each builds its own route from it."""
    key = (workspace_id, room_id)
    kept = _loop_kept.get(key)
    if (kept is not None and room_token and kept.tokens == (room_token, routing_tokens.get(kept.row[1], 0))
            and time.monotonic() - kept.read_at < ROOM_KEPT_S):
        _loop_kept[key] = _loop_kept.pop(key)  # read last
        return _room_route_from(kept.row)
    read_at = time.monotonic()
    loop = asyncio.get_running_loop()
    reads = _loop_room_reads.get((loop, key))
    if reads is None:
        if len(_loop_room_reads) >= 4 * _LOOP_ROOMS_MAX:  # rooms seen long ago, and loops that ended
            for stale in [k for k, gathering in _loop_room_reads.items() if not gathering.running]:
                del _loop_room_reads[stale]
        reads = _loop_room_reads[loop, key] = Gathering(lambda asked: _room_read_on_loop(key, len(asked)))
    row = await reads.submit(None)
    if row is None:
        _loop_kept.pop(key, None)
        return None
    if room_token:
        _room_remembered(_loop_kept, key, _Kept(row, (room_token, routing_tokens.get(row[1], 0)), read_at))
    return _room_route_from(row)


_loop_room_reads: dict = {}  # (event loop, (workspace id, room id)) → the room's reads on that loop


async def _room_read_on_loop(key: tuple[int, str], asked: int) -> list:
    """One read of a room for `asked` requests: its row (the context decoded, then the harness's columns) or None,
    or the error each of them gets (a request then hands over to Django's route)."""
    from serving.loop_db import loop_connection

    known = _loop_rooms.get(key)
    try:
        async with loop_connection() as conn:
            cursor = await conn.execute(_room_route_on_loop_sql(), [known[0] if known else "", *key])
            row = await cursor.fetchone()
    except Exception as error:  # noqa: BLE001 (PostgreSQL or its pool: each request hands over)
        return [error] * asked
    if row is None:
        _loop_rooms.pop(key, None)
        return [None] * asked
    context, version, *harness = row
    if context is None:  # unchanged since `known`
        _room_remembered(_loop_rooms, key, known)  # read last
        return [(known[1], *harness)] * asked
    decoded = _context(context.decode() if isinstance(context, bytes) else context)
    _room_remembered(_loop_rooms, key, (version, decoded))
    return [(decoded, *harness)] * asked


# A room's context, decoded, by its JSON text: a stored room answers many replies and its context (the demo's is
# 20 KB) changes rarely, so its decoding is shared. Read-only, as everything downstream treats it (RoomContext
# keeps it as given; the builtin tools copy what they return).
_CONTEXTS_MAX = 256
_contexts: dict[str, dict[str, Any]] = {}


def _context(text: str) -> dict[str, Any]:
    context = _contexts.get(text)
    if context is None:
        context = json.loads(text)
        if len(_contexts) >= _CONTEXTS_MAX:  # the one decoded longest ago goes, not every room's at once
            del _contexts[next(iter(_contexts))]
        _contexts[text] = context
    return context


def _room_route_from(row) -> RoomRoute | None:
    if row is None:
        return None
    context, *harness = row
    if isinstance(context, bytes):
        context = context.decode()
    if isinstance(context, str):  # JSON as text: Django's cursors (PostgreSQL, SQLite) and serving.loop_db's
        context = _context(context)
    return RoomRoute(context=context, harness=None if harness[0] is None else
                     Harness.from_db(DEFAULT_DB_ALIAS, list(_ROUTE_HARNESS_FIELDS), harness))


class TraceFilterError(ValueError):
    """A trace filter value that cannot mean anything; the message says what would."""


def _version_filter(workspace: Workspace, text: str) -> Q:
    """`avatar@v3` / `avatar@production` / `avatar@1a2b3c4d` (one harness), `v3` (any harness's v3),
    `production` (whatever each harness's production label points at now) or a harness name."""
    from harness import selectors as harness_selectors
    from harness.models import Harness, Label

    name, at, ref = text.partition("@")
    if at:
        harness = Harness.objects.filter(workspace=workspace, name=name.strip()).first()
        if harness is None:
            raise TraceFilterError(f"Version: there is no harness named “{name.strip()}”.")
        try:
            version = harness_selectors.version_resolve(harness, ref)
        except Http404 as exc:
            raise TraceFilterError(f"Version: {exc}") from None
        return Q(harness_version=version)
    if text[:1] == "v" and text[1:].isascii() and text[1:].isdigit() and len(text) <= 10:
        return Q(harness_version__number=int(text[1:]))
    if Harness.objects.filter(workspace=workspace, name=text).exists():
        return Q(harness__name=text)
    pointed = list(Label.objects.filter(harness__workspace=workspace, name=text).values_list("version_id", flat=True))
    if pointed:
        return Q(harness_version_id__in=pointed)
    raise TraceFilterError(f"Version: “{text}” is not a harness, a label, vN or harness@vN.")


def trace_list(workspace: Workspace, *, version: str = "", outcome: str = "", hook: str = "", source: str = "",
               min_latency_ms: float | None = None) -> QuerySet[Trace]:
    """Traces matching every filter given; a version filter that names nothing raises TraceFilterError."""
    traces = Trace.objects.filter(workspace=workspace).select_related("harness", "harness_version").defer("data")
    if version:
        traces = traces.filter(_version_filter(workspace, version))
    if outcome:
        traces = traces.filter(outcome=outcome)
    if hook:
        # JSON lists are searched as text so the filter works on SQLite and PostgreSQL alike.
        traces = traces.filter(hooks_fired__icontains=f'"{hook}"')
    if source:
        traces = traces.filter(source=source)
    if min_latency_ms is not None:
        traces = traces.filter(latency_ms__gte=min_latency_ms)
    return traces


def trace_get(workspace: Workspace, trace_id: str) -> Trace:
    trace = Trace.objects.select_related("harness", "harness_version").filter(workspace=workspace,
                                                                            trace_id=trace_id).first()
    if trace is None:
        raise Http404("No such trace.")
    return trace


def trace_sent_request(trace: Trace) -> dict[str, Any] | None:
    """What the trace's turn sent to the model, its prompt parts put back (serving.traces); None when the
    trace kept no request or a part is missing."""
    request = trace.data.get("request") if isinstance(trace.data, dict) else None
    digests = request_digests(request)
    parts = dict(PromptPart.objects.filter(workspace_id=trace.workspace_id, digest__in=digests)
                 .values_list("digest", "content")) if digests else {}
    return joined_request(request, parts)


# Live replies a version's token and latency figures read: its most recent ones (one query for all versions).
VERSION_USAGE_WINDOW = 2000


def version_usage(version_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per harness version: P50/P95 of the tokens a turn (harness.runtime.latency.token_stats) and of the latency
    of its latest VERSION_USAGE_WINDOW replies through the API. Versions without replies are left out."""
    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    from harness.runtime.latency import percentile, token_stats

    rows = (Trace.objects.filter(harness_version_id__in=version_ids, source=Trace.Source.API)
            .annotate(recent=Window(RowNumber(), partition_by=[F("harness_version_id")],
                                    order_by=F("created_at").desc()))
            .filter(recent__lte=VERSION_USAGE_WINDOW)
            .values("harness_version_id", "latency_ms", "tokens_in", "tokens_cached", "tokens_out"))
    by_version: dict[int, list[dict]] = {}
    for row in rows:
        by_version.setdefault(row["harness_version_id"], []).append(row)
    usage = {}
    for version_id, turns in by_version.items():
        latencies = [turn["latency_ms"] for turn in turns]
        usage[version_id] = {**token_stats(turns), "latency_p50_ms": percentile(latencies, 50),
                             "latency_p95_ms": percentile(latencies, 95)}
    return usage
