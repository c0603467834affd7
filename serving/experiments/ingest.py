"""Event ingestion: a batch checked item by item, stored once per event id, folded into running experiments."""

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from serving.experiments.event_checks import earliest_counted, outside_window, validated_event
from serving.experiments.lifecycle import ExperimentError
from serving.experiments.rollups import bound_cursor, fold_views
from serving.models import Event, Experiment
from workspaces.access import INGEST, Actor, require
from workspaces.models import Workspace

MAX_EVENTS = 1000
_SQLITE_INGEST_LOCK = threading.Lock()  # SQLite (embedded mode) has no INSERT … RETURNING race guard


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    errors: list[dict] = field(default_factory=list)
    running: list[int] = field(default_factory=list)  # the workspace's running experiments, read for this batch


# A workspace's running experiments as last read here, under the token read before the read and the time of
# the read: a batch takes them without a query while the token stands, for at most RUNNING_KEPT_S (a change made
# around the services, in psql, is seen within it). Read-only to everyone who takes them.
RUNNING_KEPT_S = 5.0
_RUNNING_KEPT_MAX = 1024
_running_kept: dict[int, tuple[int, float, list[Experiment]]] = {}


def _running_experiments(workspace: Workspace, token: int) -> list[Experiment]:
    kept = _running_kept.get(workspace.pk)
    if token and kept is not None and kept[0] == token and time.monotonic() - kept[1] < RUNNING_KEPT_S:
        return kept[2]
    read_at = time.monotonic()
    running = list(Experiment.objects.filter(workspace=workspace, status=Experiment.Status.RUNNING).order_by("pk"))
    if token:
        _running_kept.pop(workspace.pk, None)
        if len(_running_kept) >= _RUNNING_KEPT_MAX:  # the workspace read longest ago goes
            _running_kept.pop(next(iter(_running_kept)), None)
        _running_kept[workspace.pk] = (token, read_at, running)
    return running


def events_ingest(*, actor: Actor, workspace: Workspace, events: list, running_token: int = 0) -> IngestResult:
    """Store a batch; count each event_id once ever; fold new item-page views into experiment rollups.

    Each invalid item is reported by its index and left out; the valid ones are stored with their rollups in
    one transaction (all of them or, on any failure, none). `running_token`: the workspace's running token
    (`running_token_key`), read from the shared cache before this call; given, the running experiments read by
    an earlier batch under it are used without a query."""
    require(actor, workspace, INGEST)
    if len(events) > MAX_EVENTS:
        raise ExperimentError(f"At most {MAX_EVENTS} events per batch.")
    result, valid, seen = IngestResult(), [], set()
    now = timezone.now()
    running = _running_experiments(workspace, running_token)
    result.running = [experiment.pk for experiment in running]
    earliest: dict[str, datetime | None] = {}  # by room
    for index, raw in enumerate(events):
        event, error = validated_event(raw, now)
        if not error and running:
            room_id = event["room_id"]
            if room_id not in earliest:
                earliest[room_id] = earliest_counted(room_id, running)
            if earliest[room_id] is not None and event["ts"] < earliest[room_id]:
                error = outside_window(event, running)  # which experiment, for the message
        if error:
            result.errors.append({"index": index, "message": error})
        elif event["event_id"] in seen:
            result.duplicates += 1
        else:
            seen.add(event["event_id"])
            valid.append(event)
    if not valid:
        return result
    # One global lock order, so concurrent batches cannot deadlock: event ids (sorted), then per running
    # experiment (by pk) its exposures by viewer, then its rollups by (arm, bucket).
    valid.sort(key=lambda e: e["event_id"])  # code point order = UTF-8 byte order = COLLATE "C"
    try:
        new = _store_and_fold(workspace, valid, running, now, copy=connection.vendor == "postgresql")
    except _IdStoredBefore:  # the COPY met an id stored before (a retry, an overlapping batch): nothing was kept
        new = _store_and_fold(workspace, valid, running, now, copy=False)
    result.accepted = len(new)
    result.duplicates += len(valid) - len(new)
    return result


class _IdStoredBefore(Exception):
    pass


def _store_and_fold(workspace: Workspace, events: list[dict], running: list[Experiment], now: datetime, *,
                    copy: bool) -> list[dict]:
    """One transaction: the events stored (all of them by COPY, which fails on an id stored before; or the new
    ones only) and the new item-page views folded into the running experiments; the events stored returned."""
    with transaction.atomic():
        if copy:
            _copy_all(workspace, events, now)
            new = events
        else:
            new = _insert_new(workspace, events, now)
        views = [e for e in new if e["type"] == "item_page_view"]
        for experiment in running if views else ():
            mine = [e for e in views if not experiment.rooms or e["room_id"] in experiment.rooms]
            if mine:
                fold_views(experiment, mine)
    return new


_EVENT_COLUMNS = "workspace_id, event_id, type, viewer_id, room_id, item_id, ts, received_at"


def _copy_all(workspace: Workspace, events: list[dict], now: datetime) -> None:
    """COPY every event into the table, or raise _IdStoredBefore, the transaction then being lost.

    Usually every id is new, and PostgreSQL batches COPY's heap and WAL writes (an INSERT … ON CONFLICT inserts
    row by row, 4–5× slower here). The COPY comes first in its transaction, so an id stored before costs a
    second transaction rather than every batch a savepoint's two round trips. Rows go in id order, so batches
    sharing ids wait on each other's index entries in one order."""
    import psycopg

    try:
        with bound_cursor() as cursor, cursor.copy(f"COPY serving_event ({_EVENT_COLUMNS}) FROM STDIN") as copy:
            copy.write(_copy_text(workspace.pk, events, now))
    except psycopg.errors.UniqueViolation as error:
        raise _IdStoredBefore from error


def _insert_new(workspace: Workspace, events: list[dict], now: datetime) -> list[dict]:
    """Insert the events whose id is new (`events` sorted by id); return exactly those (duplicates and
    retries drop out here)."""
    if connection.vendor != "postgresql":
        with _SQLITE_INGEST_LOCK:
            existing = set(Event.objects.filter(workspace=workspace, event_id__in=[e["event_id"] for e in events])
                           .values_list("event_id", flat=True))
            new = [e for e in events if e["event_id"] not in existing]
            Event.objects.bulk_create([Event(workspace=workspace, received_at=now, event_id=e["event_id"],
                                             type=e["type"], viewer_id=e["viewer_id"], room_id=e["room_id"],
                                             item_id=e["item_id"], ts=e["ts"]) for e in new])
            return new
    with bound_cursor() as cursor:
        cursor.execute(
            f"INSERT INTO serving_event ({_EVENT_COLUMNS}) "
            "SELECT %s, e->>0, e->>1, e->>2, e->>3, e->>4, (e->>5)::timestamptz, %s "
            "FROM json_array_elements(%s::json) AS e ORDER BY (e->>0) COLLATE \"C\" "
            "ON CONFLICT (workspace_id, event_id) DO NOTHING RETURNING event_id",
            [workspace.pk, now, json.dumps([[e["event_id"], e["type"], e["viewer_id"], e["room_id"], e["item_id"],
                                             e["ts_text"]] for e in events])])
        inserted = {row[0] for row in cursor.fetchall()}
    return [e for e in events if e["event_id"] in inserted]


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(workspace_id: int, events: list[dict], now: datetime) -> str:
    """The rows in COPY's text format, built as one string (psycopg's write_row per row was a third of the
    batch's Python time). Text that holds a separator or a backslash is escaped; checking the whole payload
    once finds out whether any does."""
    head, tail = f"{workspace_id}\t", f"\t{now.isoformat()}\n"
    text = "".join([f"{head}{e['event_id']}\t{e['type']}\t{e['viewer_id']}\t{e['room_id']}\t{e['item_id']}\t"
                     f"{e['ts_text']}{tail}" for e in events])
    if (text.count("\t") == 7 * len(events) and text.count("\n") == len(events)
            and "\\" not in text and "\r" not in text):
        return text
    return "".join([f"{head}{e['event_id'].translate(_COPY_ESCAPES)}\t{e['type']}\t"
                    f"{e['viewer_id'].translate(_COPY_ESCAPES)}\t{e['room_id'].translate(_COPY_ESCAPES)}\t"
                    f"{e['item_id'].translate(_COPY_ESCAPES)}\t{e['ts_text']}{tail}" for e in events])
