"""Persisting traces so that every trace id handed to a caller resolves.

A trace is written in the request's unit of work, before the reply (and its
`trace_id`) is returned: one INSERT and commit (benchmarks/trace_writes.py)
next to a model turn of hundreds of milliseconds or more, where an in-memory
queue would lose traces whose ids were already given out when the process dies. Several rows go in one bulk insert;
if that fails, row by row, each in its own savepoint, so one bad row never
takes the others with it. A row PostgreSQL still refuses is stored as a stub
(its id, outcome and the storage error), so even its id resolves.
"""

import json
import logging
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, IntegrityError, connection, connections, transaction

from serving.models import Trace

log = logging.getLogger(__name__)


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
        hooks_fired=data["hooks_fired"], data=data, created_at=datetime.fromtimestamp(data["started_at"], UTC),
    )
    row.data_json = text  # `data` encoded once: the lone insert sends this text (`_insert_values`)
    return row


@cache
def _insert_sql() -> tuple[str, tuple[Any, ...]]:
    fields = tuple(f for f in Trace._meta.concrete_fields if not f.primary_key)
    q = connection.ops.quote_name
    columns = ", ".join(q(f.column) for f in fields)
    return f"INSERT INTO {q(Trace._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})", fields


def _insert_one(row: Trace) -> None:
    """`row.save(force_insert=True)` without the ORM's insert compiler (a third of the insert's CPU on the reply
    path); values are prepared by the fields themselves, as the compiler would. The row gets no primary key."""
    sql, fields = _insert_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, _insert_values(row, fields, connections[DEFAULT_DB_ALIAS]))


async def trace_store_on_loop(row: Trace) -> None:
    """`trace_store` from the event loop (serving.loop_db): the lone INSERT on a loop connection; if PostgreSQL
    refuses it (a trace id stored already, a value it cannot hold), the sync path's row-by-row rescue, in a thread."""
    import psycopg
    from asgiref.sync import sync_to_async

    from serving.loop_db import loop_connection, preparing_connection

    sql, fields = _insert_sql()
    values = _insert_values(row, fields, preparing_connection())
    try:
        async with loop_connection() as conn:
            await conn.execute(sql, values)
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
            _insert_one(rows[0])
            return 0
        with transaction.atomic():
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
