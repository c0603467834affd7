"""Persisting traces so that every trace id handed to a caller resolves.

A trace is written in the request's unit of work, before the reply (and its
`trace_id`) is returned: one INSERT and commit (benchmarks/trace_writes.py)
next to a model turn of hundreds of milliseconds or more, where an in-memory
queue would lose traces whose ids were already given out when the process dies. Several rows go in one bulk insert;
if that fails, row by row, each in its own savepoint, so one bad row never
takes the others with it. A row PostgreSQL still refuses is stored as a stub
(its id, outcome and the storage error), so even its id resolves.

What the turn sent to the model (`data["request"]`) is mostly the same for every turn of a room's harness
version: the system message and the tool schemas, ≈ 16 KB of a ≈ 19 KB trace. They are stored once per
workspace as prompt parts (serving.models.PromptPart) and the trace keeps their digests (`split_request`);
the trace page puts them back (`joined_request`). Stored in every trace they were about half of PostgreSQL's
CPU an insert, and a reply's PostgreSQL CPU fell by about 30 % without them (docs/performance.md). A process
remembers which parts it has stored, so a reply writes a part only the first time this process sees it (and
again every ten minutes, in case a restore lost it).
"""

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, IntegrityError, connection, connections, transaction

from serving.gathering import Gathering
from serving.models import PromptPart, Trace

log = logging.getLogger(__name__)

# Stored once, referred to by digest: a message of these roles, and the tool schemas.
_SHARED_ROLES = frozenset({"system"})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The parts' encodings, by content for a message (each turn assembles an equal string anew) and by identity for
# the tool schemas (one list per spec version, read-only): encoding and hashing them took ≈ 60 µs a turn.
_ENCODED: OrderedDict[Any, tuple[Any, str, str]] = OrderedDict()
_ENCODED_MAX = 128
_ENCODED_MAX_CHARS = 64 * 1024
_encoded_lock = threading.Lock()


def _encoded_part(value: Any) -> tuple[str, str]:
    """(digest, JSON text) of a prompt part; the text is UTF-8 (a part is text, not jsonb: escaping `·` or `¥`
    would only make it longer)."""
    key = value if isinstance(value, str) else id(value)
    with _encoded_lock:
        known = _ENCODED.get(key)
        if known is not None and (isinstance(value, str) or known[0] is value):
            _ENCODED.move_to_end(key)
            return known[1], known[2]
    text = json.dumps(value, default=str, ensure_ascii=False)
    digest = _digest(text)
    if isinstance(value, str) and len(value) > _ENCODED_MAX_CHARS:  # kept only while this trace is
        return digest, text
    with _encoded_lock:
        _ENCODED[key] = (value, digest, text)  # the value kept: its id is not reused while remembered
        while len(_ENCODED) > _ENCODED_MAX:
            _ENCODED.popitem(last=False)
    return digest, text


def split_request(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """`data` with its request's system messages and tool schemas replaced by digests, and the parts by
    digest (each as JSON text). Data without a request (a turn blocked before its first model call) is kept."""
    request = data.get("request")
    if not isinstance(request, Mapping):
        return dict(data), {}
    parts: dict[str, str] = {}

    def part(value: Any) -> str:
        digest, text = _encoded_part(value)
        parts[digest] = text
        return digest

    messages = []
    for message in request.get("messages") or ():
        if isinstance(message, Mapping) and message.get("role") in _SHARED_ROLES and "content" in message:
            stored = {key: value for key, value in message.items() if key != "content"}
            stored["content_digest"] = part(message["content"])
            message = stored
        messages.append(message)
    split = {key: value for key, value in request.items() if key not in ("messages", "tools")}
    split["messages"] = messages
    if "tools" in request:
        split["tools_digest"] = part(request["tools"])
    return {**data, "request": split}, parts


def request_digests(request: Any) -> set[str]:
    """The digests a stored trace's request refers to."""
    if not isinstance(request, Mapping):
        return set()
    found = {m["content_digest"] for m in request.get("messages") or () if isinstance(m, Mapping)
             and isinstance(m.get("content_digest"), str)}
    if isinstance(request.get("tools_digest"), str):
        found.add(request["tools_digest"])
    return found


def joined_request(request: Any, parts: Mapping[str, str]) -> dict[str, Any] | None:
    """A stored trace's request with its parts put back (`parts`: digest → JSON text); None when a part it
    refers to is missing. A request stored whole (before prompt parts) comes back as it is."""
    if not isinstance(request, Mapping):
        return None
    joined: dict[str, Any] = {key: value for key, value in request.items() if key not in ("messages", "tools_digest")}
    messages = []
    for message in request.get("messages") or ():
        if isinstance(message, Mapping) and "content_digest" in message:
            text = parts.get(message["content_digest"])
            if text is None:
                return None
            message = {key: value for key, value in message.items() if key != "content_digest"}
            message["content"] = json.loads(text)
        messages.append(message)
    joined["messages"] = messages
    if "tools_digest" in request:
        if request["tools_digest"] not in parts:
            return None
        joined["tools"] = json.loads(parts[request["tools_digest"]])
    return joined


def _clean(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold NUL characters; a viewer can still type one."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def trace_row(*, workspace_id: int, data: dict, source: str, harness_id: int | None, version_id: int | None) -> Trace:
    data, parts = split_request(data)
    text = json.dumps(data, default=str)
    if "\\u0000" in text:  # the C encoder finds a NUL (escaped so) faster than a walk
        data = _clean(data)
        text = json.dumps(data, default=str)
    row = Trace(
        workspace_id=workspace_id, trace_id=data["trace_id"], source=source, room_id=data["input"]["room_id"][:100],
        viewer_id=data["input"]["viewer_id"][:128], harness_id=harness_id, harness_version_id=version_id,
        arm=data.get("arm", "")[:100], backend=data.get("backend", "")[:50], outcome=data["outcome"],
        silent=data["silent"], message=data["input"]["message"], reply=data["reply"], latency_ms=data["duration_ms"],
        model_calls=data["model_calls"], tokens_in=data["tokens_in"], tokens_out=data["tokens_out"],
        tokens_cached=data.get("tokens_cached", 0),
        hooks_fired=data["hooks_fired"], data=data, created_at=datetime.fromtimestamp(data["started_at"], UTC),
    )
    row.data_json = text  # `data` encoded once: the lone insert sends this text (`_insert_values`)
    row.prompt_parts = parts  # digest → JSON text, stored before the row (`_parts_store`)
    return row


# (workspace id, digest) of the prompt parts this process stored or found stored → when, most recent last.
# Parts are deleted only with their workspace, whose id is not reused, so a remembered part is there - unless
# the database was restored from a backup older than the part. A part is therefore written again (ON CONFLICT
# DO NOTHING: one statement) once it has been remembered for PARTS_RECHECK_S, so a restore heals by itself.
_STORED_PARTS: OrderedDict[tuple[int, str], float] = OrderedDict()
_STORED_PARTS_MAX = 4096
PARTS_RECHECK_S = 600.0
_stored_parts_lock = threading.Lock()


def _parts_missing(rows: Iterable[Trace]) -> dict[tuple[int, str], str]:
    """The prompt parts of `rows` this process has not stored lately: (workspace id, digest) → JSON text."""
    return _owned_parts_missing((row.workspace_id, getattr(row, "prompt_parts", {})) for row in rows)


def _owned_parts_missing(owned: Iterable[tuple[int, Mapping[str, str]]]) -> dict[tuple[int, str], str]:
    missing = {}
    fresh_since = time.monotonic() - PARTS_RECHECK_S
    with _stored_parts_lock:
        for workspace_id, parts in owned:
            for digest, text in parts.items():
                key = (workspace_id, digest)
                if _STORED_PARTS.get(key, fresh_since) > fresh_since:
                    _STORED_PARTS.move_to_end(key)
                else:
                    missing[key] = text
    return missing


def _parts_remember(keys: Iterable[tuple[int, str]]) -> None:
    now = time.monotonic()
    with _stored_parts_lock:
        for key in keys:
            _STORED_PARTS[key] = now
            _STORED_PARTS.move_to_end(key)
        while len(_STORED_PARTS) > _STORED_PARTS_MAX:
            _STORED_PARTS.popitem(last=False)


def prompt_parts_store(workspace_id: int, parts: Mapping[str, str]) -> None:
    """Store `parts` (`split_request`'s digest → JSON text) for a workspace, as a trace's are: in the caller's
    transaction, each once (evaluation results keep their requests split too)."""
    _missing_parts_stored(_owned_parts_missing([(workspace_id, parts)]))


def _parts_store(rows: list[Trace]) -> None:
    """Store the prompt parts `rows` refer to, in the caller's transaction (a part stored already is kept);
    remembered once that transaction commits."""
    _missing_parts_stored(_parts_missing(rows))


def _missing_parts_stored(missing: dict[tuple[int, str], str]) -> None:
    if not missing:
        return
    PromptPart.objects.bulk_create(  # in key order: two writers of the same new parts never wait on each other
        [PromptPart(workspace_id=workspace_id, digest=digest, content=text)
         for (workspace_id, digest), text in sorted(missing.items())], ignore_conflicts=True)
    transaction.on_commit(lambda: _parts_remember(missing))


@cache
def _parts_insert_sql() -> str:
    q = connection.ops.quote_name
    return (f"INSERT INTO {q(PromptPart._meta.db_table)} ({q('workspace_id')}, {q('digest')}, {q('content')}, "
            f"{q('created_at')}) VALUES (%s, %s, %s, now()) ON CONFLICT DO NOTHING")


@cache
def _insert_sql(rows: int = 1) -> tuple[str, tuple[Any, ...]]:
    fields = tuple(f for f in Trace._meta.concrete_fields if not f.primary_key)
    q = connection.ops.quote_name
    columns = ", ".join(q(f.column) for f in fields)
    one = f"({', '.join(['%s'] * len(fields))})"
    return f"INSERT INTO {q(Trace._meta.db_table)} ({columns}) VALUES {', '.join([one] * rows)}", fields


def _insert_one(row: Trace) -> None:
    """`row.save(force_insert=True)` without the ORM's insert compiler (a third of the insert's CPU on the reply
    path); values are prepared by the fields themselves, as the compiler would. The row gets no primary key."""
    sql, fields = _insert_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, _insert_values(row, fields, connections[DEFAULT_DB_ALIAS]))


async def trace_store_on_loop(row: Trace) -> None:
    """`trace_store` from the event loop (serving.loop_db), returning once the row is committed.

    The rows of replies that finish while an insert is under way go together in the next one: one statement
    and one commit for all of them (serving.gathering). Alone (concurrency 1), a row goes as before: the lone
    INSERT on a loop connection. A gathered insert that PostgreSQL refuses is retried row by row, and a row it
    still refuses (a trace id stored already, a value it cannot hold) takes the sync path's rescue."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        for ended in [other for other in _writers if other.is_closed()]:
            del _writers[ended]
        writer = _writers[loop] = Gathering(_gathered_stored, most=GATHERED_MAX)
    await writer.submit(row)


_writers: dict = {}  # event loop → its trace writer
GATHERED_MAX = 64  # rows in one insert (25 parameters each)


async def _gathered_stored(rows: list[Trace]) -> list:
    """Store `rows` (in one insert when there are several); for each, None or the exception its reply gets (not
    even a stub could be stored). A reply's trace cost its process ≈ 330 µs of CPU in a lone INSERT's round trip
    and PostgreSQL ≈ 0.1 ms in its commit: gathered, both are shared (docs/performance.md)."""
    import psycopg

    if len(rows) > 1:
        try:
            await _inserted_on_loop(rows)
            return [None] * len(rows)
        except psycopg.Error:
            log.warning("%d traces: their insert on the event loop failed; storing each alone", len(rows),
                        exc_info=True)
    return await asyncio.gather(*(_stored_alone(row) for row in rows), return_exceptions=True)


async def _inserted_on_loop(rows: list[Trace]) -> None:
    """`rows` in one INSERT on a loop connection (autocommit: one commit), their new prompt parts first."""
    from serving.loop_db import loop_connection, preparing_connection

    sql, fields = _insert_sql(len(rows))
    db = preparing_connection()
    values = [value for row in rows for value in _insert_values(row, fields, db)]
    missing = _parts_missing(rows)
    async with loop_connection() as conn:
        if missing:  # autocommit: each part is stored (and may be remembered) before a row refers to it
            async with conn.cursor() as cursor:
                await cursor.executemany(_parts_insert_sql(), [(workspace_id, digest, text) for
                                                               (workspace_id, digest), text in sorted(missing.items())])
            _parts_remember(missing)
        await conn.execute(sql, values)


async def _stored_alone(row: Trace) -> None:
    """One row: its lone INSERT on the loop; if PostgreSQL refuses it, the sync path's rescue in a thread."""
    import psycopg
    from asgiref.sync import sync_to_async

    try:
        await _inserted_on_loop([row])
        return
    except psycopg.Error:
        log.warning("trace %s: the insert on the event loop failed; storing it row by row", row.trace_id,
                    exc_info=True)
    await sync_to_async(_rescued)(row)


def _rescued(row: Trace) -> None:
    try:
        traces_store([row])
    finally:
        connection.close()  # this thread's connection goes back to the pool, as at the end of Django's requests


def _insert_values(row: Trace, fields, db) -> list:
    values = [field.get_db_prep_save(field.pre_save(row, True), db) for field in fields]
    text = getattr(row, "data_json", None)
    if text is not None and db.vendor == "postgresql":  # psycopg's Jsonb: send the text encoded already
        from psycopg.types.json import Jsonb

        values[fields.index(Trace._meta.get_field("data"))] = Jsonb(row.data, dumps=lambda _data: text)
    return values


def trace_store(row: Trace) -> None:
    """Write one trace now, in the caller's transaction (see the module docstring)."""
    traces_store([row])


def traces_store(rows: list[Trace]) -> int:
    """Write `rows`; returns how many were stored as stubs because PostgreSQL refused them.

    Raises only when not even a stub can be written (the caller must not hand out that id then).
    """
    if not rows:
        return 0
    try:
        if len(rows) == 1 and connection.get_autocommit():
            # One INSERT outside a transaction commits by itself: no BEGIN and COMMIT round trips. A trace id
            # already stored fails it; the row-by-row path below tells that apart from a real failure.
            _parts_store(rows)
            _insert_one(rows[0])
            return 0
        with transaction.atomic():
            _parts_store(rows)
            Trace.objects.bulk_create(rows, ignore_conflicts=True)
        return 0
    except DatabaseError:
        log.warning("bulk insert of %d traces failed; writing them one by one", len(rows), exc_info=True)
    stubs = 0
    with transaction.atomic():  # one commit; each row in its own savepoint
        for row in rows:
            row.pk = None
            try:
                with transaction.atomic():
                    _parts_store([row])
                    row.save(force_insert=True)
            except IntegrityError:
                if not Trace.objects.filter(trace_id=row.trace_id).exists():  # a real constraint, not a re-insert
                    stubs += _store_stub(row)
            except DatabaseError:
                stubs += _store_stub(row)
    return stubs


def _store_stub(row: Trace) -> int:
    error = "the full trace could not be stored"
    log.exception("trace %s could not be stored; keeping a stub", row.trace_id)
    with transaction.atomic():
        Trace.objects.create(
            workspace_id=row.workspace_id, trace_id=row.trace_id, source=row.source, room_id=str(row.room_id)[:100],
            viewer_id=str(row.viewer_id)[:128], harness_id=row.harness_id, harness_version_id=row.harness_version_id,
            arm=str(row.arm)[:100], backend=str(row.backend)[:50], outcome=str(row.outcome)[:16], silent=row.silent,
            message="", reply="", latency_ms=row.latency_ms or 0.0, hooks_fired=[], created_at=row.created_at,
            data={"trace_id": row.trace_id, "outcome": row.outcome, "storage_error": error},
        )
    return 1
