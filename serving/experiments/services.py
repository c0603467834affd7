"""Experiments on the database: create/start/stop, sticky assignment for the reply API, event ingestion
with incremental rollups, and the auto-stop guardrail."""

import json
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from console.access import ADMIN, INGEST, WRITE, Actor, require
from console.identifiers import check_identifier
from console.models import Workspace
from console.services import archived_set, audit_record
from harness import selectors as harness_selectors
from harness.models import Harness
from harness.routing import NotRemembered, memory_only, remembered, routing_changed, token_replaced
from serving.experiments.assignment import assign
from serving.models import Arm, Event, Experiment, Exposure, Rollup
from serving.selection import DEFAULT_LABEL, Selection, label_version, register_experiment_selector

MAX_EVENTS = 1000
ROOM_ID_MAX = 100  # Room.room_id
CLOCK_SKEW = timedelta(seconds=60)
# Late events are accepted for a week (clients buffer offline); older ones, and any from the future, are refused.
MAX_EVENT_AGE = timedelta(days=7)
EVENT_TYPES = ("item_page_view", "impression", "click", "add_to_cart", "purchase")
_SQLITE_INGEST_LOCK = threading.Lock()  # SQLite (embedded mode) has no INSERT … RETURNING race guard


class ExperimentError(ValueError):
    pass


def _bucket(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@transaction.atomic
def experiment_create(*, actor: Actor, workspace: Workspace, key: str, harness: Harness, arms: list[dict],
                      coverage: float = 1.0, rooms: list[str] | None = None, guardrails: dict | None = None,
                      seed: str = "") -> Experiment:
    """A draft experiment. `arms`: [{"name", "weight", "kind": react|label|version, "label"?, "version"?,
    "backend"?}]; the first arm is the control. An arm's backend may be a training checkpoint
    (`checkpoint:<id>`) of this workspace that an approver promoted for live traffic."""
    require(actor, workspace, WRITE)
    check_identifier(key, field="experiment key")
    arms = [{**arm, "name": arm.get("name") or f"arm-{index}"} for index, arm in enumerate(arms)]
    for index, arm in enumerate(arms):
        check_identifier(arm["name"], field=f"arm {index + 1} name")
        if arm.get("kind", "label") == "label":
            check_identifier(arm.get("label", ""), field=f"arm {index + 1} label")
    if len({arm["name"] for arm in arms}) != len(arms):
        raise ExperimentError("Arm names must be different from each other.")
    for room in rooms or []:
        check_identifier(room, field="room", max_length=ROOM_ID_MAX)
    if harness.workspace_id != workspace.pk:
        raise ExperimentError("The harness belongs to another workspace.")
    if len(arms) < 2:
        raise ExperimentError("An experiment needs a control and at least one treatment.")
    if not 0 < coverage <= 1:
        raise ExperimentError("Coverage must be within (0, 1].")
    weights = [float(a.get("weight", 0)) for a in arms]
    if any(w <= 0 for w in weights):
        raise ExperimentError("Every arm needs a positive weight.")
    if Experiment.objects.filter(workspace=workspace, key=key).exists():
        raise ExperimentError(f"An experiment “{key}” already exists.")
    experiment = Experiment.objects.create(workspace=workspace, key=key, seed=seed or key, harness=harness,
                                           coverage=coverage, rooms=rooms or [], guardrails=guardrails or {},
                                           created_by=actor.label)
    total = sum(weights)
    for index, (arm, weight) in enumerate(zip(arms, weights, strict=True)):
        kind = arm.get("kind", "label")
        version = None
        if kind == "label":
            harness_selectors.version_by_label(harness, arm.get("label", ""))  # must exist now
        elif kind == "version":
            version = harness_selectors.version_get(harness, int(arm["version"]))
        elif kind != "react":
            raise ExperimentError(f"Arm kind must be react, label or version, not “{kind}”.")
        backend = _arm_backend(workspace, arm.get("backend") or "")
        Arm.objects.create(experiment=experiment, index=index, name=arm["name"],
                           weight=weight / total, kind=kind, label=arm.get("label", ""), version=version,
                           backend=backend)
    audit_record(actor=actor, workspace=workspace, action="experiment.create", target_type="experiment",
                 target_id=experiment.pk, target_label=key, after={"arms": arms, "coverage": coverage})
    return experiment


def _arm_backend(workspace: Workspace, name: str) -> str:
    """An arm's model must exist here; a checkpoint must be promoted (live traffic is an approver's call)."""
    from django.core.exceptions import ImproperlyConfigured

    from serving.model_config import backend_for

    if not name:
        return ""
    try:
        backend_for(name, workspace=workspace)
    except ImproperlyConfigured as exc:
        raise ExperimentError(str(exc)) from None
    if name.startswith("checkpoint:"):
        from training.selectors import checkpoint_for_backend

        if not checkpoint_for_backend(name).promoted:
            raise ExperimentError(f"{name} is not promoted for live traffic; an approver promotes it first.")
    return name


def experiment_start(*, actor: Actor, experiment: Experiment) -> Experiment:
    require(actor, experiment.workspace, WRITE)
    with transaction.atomic():
        # The harness row serialises starts: the same experiment started twice at once, or two experiments
        # of one harness, see each other's outcome instead of both passing the checks.
        Harness.objects.select_for_update().filter(pk=experiment.harness_id).first()
        status = Experiment.objects.filter(pk=experiment.pk).values_list("status", flat=True).first()
        if status != Experiment.Status.DRAFT:
            raise ExperimentError("Only a draft experiment can start.")
        if Experiment.objects.filter(harness_id=experiment.harness_id, status=Experiment.Status.RUNNING).exists():
            raise ExperimentError("Another experiment is already running on this harness.")
        Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.RUNNING, started_at=timezone.now())
        routing_changed(experiment.harness_id)
        token_replaced(running_token_key(experiment.workspace_id))
        audit_record(actor=actor, workspace=experiment.workspace, action="experiment.start",
                     target_type="experiment", target_id=experiment.pk, target_label=experiment.key)
    experiment.refresh_from_db()
    return experiment


def experiment_stop(*, actor: Actor, experiment: Experiment, reason: str, control_only: bool = False) -> Experiment:
    """Stop: viewers go back to the label default, or with control_only (a guardrail stop) all to control."""
    require(actor, experiment.workspace, WRITE)
    with transaction.atomic():
        Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.STOPPED, stopped_at=timezone.now(),
                                                           stop_reason=reason[:500], control_only=control_only)
        routing_changed(experiment.harness_id)
        token_replaced(running_token_key(experiment.workspace_id))
        audit_record(actor=actor, workspace=experiment.workspace, action="experiment.stop", target_type="experiment",
                     target_id=experiment.pk, target_label=experiment.key,
                     after={"reason": reason, "control_only": control_only})
    experiment.refresh_from_db()
    return experiment


def experiment_archive(*, actor: Actor, experiment: Experiment, archived: bool = True) -> Experiment:
    """Hide an experiment from the list (or bring it back); a running one must be stopped first."""
    require(actor, experiment.workspace, WRITE)
    if archived and experiment.status == Experiment.Status.RUNNING:
        raise ExperimentError("Stop the experiment before archiving it.")
    archived_set(actor=actor, obj=experiment, kind="experiment", label=experiment.key, archived=archived)
    return experiment


def experiment_delete(*, actor: Actor, experiment: Experiment) -> None:
    """Delete an experiment that is not running (admin): its arms, exposures and rollups go with it;
    traces keep their arm label."""
    require(actor, experiment.workspace, ADMIN)
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if locked.status == Experiment.Status.RUNNING:
            raise ExperimentError("Stop the experiment before deleting it.")
        audit_record(actor=actor, workspace=locked.workspace, action="experiment.delete", target_type="experiment",
                     target_id=locked.pk, target_label=locked.key,
                     before={"status": locked.status, "arms": list(locked.arms.values_list("name", flat=True)),
                             "exposures": locked.exposures.count()}, after=None)
        locked.delete()
        routing_changed(locked.harness_id)
        token_replaced(running_token_key(locked.workspace_id))


# Assignment for the reply API ---------------------------------------------------------------------

def experiment_arm_label(key: str, arm: str) -> str:
    """How traces name an experiment's arm (`exp:<key>:<arm>`), so guardrails can find them."""
    return f"exp:{key}:{arm}"


def experiment_key_of(arm_label: str) -> str | None:
    kind, _, rest = arm_label.partition(":")
    return rest.partition(":")[0] if kind == "exp" else None


def arm_selection(experiment: Experiment, arm: Arm, harness: Harness) -> Selection:
    if arm.kind == Arm.Kind.VERSION:
        version = arm.version
    elif arm.kind == Arm.Kind.LABEL:
        version = label_version(harness, arm.label)
    else:  # the ReAct control runs on the production version's tools
        try:
            version = label_version(harness, DEFAULT_LABEL)
        except Http404:
            version = harness.head
    return Selection(version=version, arm=experiment_arm_label(experiment.key, arm.name),
                     baseline=arm.kind == Arm.Kind.REACT, backend=arm.backend, experiment=experiment)


def assign_viewer(experiment: Experiment, viewer_id: str, *, arms: list[Arm] | None = None) -> Arm | None:
    """The viewer's arm: sticky once exposed; otherwise hashed (GrowthBook v2) and recorded once.
    `arms`: the experiment's arms in order, when the caller has them already."""
    if arms is None:
        arms = list(experiment.arms.all())
    exposed = Exposure.objects.filter(experiment=experiment, viewer_id=viewer_id).values_list("arm_id", flat=True)
    arm_id = exposed.first()
    if arm_id is not None:
        return next(a for a in arms if a.pk == arm_id)
    index = assign(experiment.seed, viewer_id, [a.weight for a in arms], coverage=experiment.coverage)
    if index is None or index < 0:
        return None
    arm, now = arms[index], timezone.now()
    try:
        with transaction.atomic():
            Exposure.objects.create(experiment=experiment, arm=arm, viewer_id=viewer_id, bucket=_bucket(now),
                                    first_seen_at=now)
            rollup, _ = Rollup.objects.get_or_create(experiment=experiment, arm=arm, bucket=_bucket(now))
            Rollup.objects.filter(pk=rollup.pk).update(users=F("users") + 1)
    except IntegrityError:  # a concurrent request exposed this viewer first: use that arm
        return Exposure.objects.select_related("arm").get(experiment=experiment, viewer_id=viewer_id).arm
    from serving.experiments.live import publish_experiment

    publish_experiment(experiment)
    return arm


def _routing_experiment(harness: Harness) -> tuple[Experiment, list[Arm]] | None:
    """The experiment that routes this harness's viewers (running, or stopped to control only), with its arms."""
    experiment = (Experiment.objects.filter(harness=harness).filter(status=Experiment.Status.RUNNING).first()
                  or Experiment.objects.filter(harness=harness, status=Experiment.Status.STOPPED, control_only=True)
                  .order_by("-stopped_at").first())
    return (experiment, list(experiment.arms.select_related("version"))) if experiment is not None else None


def experiment_routing(harness: Harness):
    """The harness's running experiment and its arms, or None; remembered per process until the harness's routing
    changes (start, stop, delete: harness.routing)."""
    return remembered(harness.pk, "experiment", lambda: _routing_experiment(harness))


@register_experiment_selector
def experiment_selector(harness: Harness, viewer_id: str, room_id: str) -> Selection | None:
    routing = experiment_routing(harness)
    if routing is None:
        return None
    experiment, arms = routing
    if experiment.rooms and room_id not in experiment.rooms:
        return None
    if memory_only():  # an arm's reply records exposures and publishes: the request cycle's work
        raise NotRemembered("experiment arm")
    if experiment.control_only:
        return arm_selection(experiment, arms[0], harness)
    arm = assign_viewer(experiment, viewer_id, arms=arms)
    return arm_selection(experiment, arm, harness) if arm is not None else None


# Events ---------------------------------------------------------------------------------------------

@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    errors: list[dict] = field(default_factory=list)
    running: list[int] = field(default_factory=list)  # the workspace's running experiments, read for this batch


def _parse_ts(value) -> datetime | None:
    """ISO-8601 text or epoch seconds; None for anything else (a bad time is the item's error, never a 500)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, tz=UTC)
        ts = parse_datetime(str(value))
    except (ValueError, OverflowError, OSError):  # well-formed but impossible (month 13), or out of range
        return None
    if ts is not None and timezone.is_naive(ts):
        ts = timezone.make_aware(ts, UTC)
    return ts


# A time with its offset in RFC 3339's one form, which PostgreSQL and Python read alike. (Python also reads an
# offset of "+05:99" as +06:39, which PostgreSQL refuses: such a time is sent as Python read it.)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)",
                      re.ASCII).fullmatch
_REQUIRED = ("event_id", "type", "viewer_id", "room_id", "ts")
_TEXT_LIMITS = (("event_id", 100), ("viewer_id", 128), ("room_id", 100), ("item_id", 100))


def _text_error(key: str, value: str, limit: int) -> str:
    """Why PostgreSQL could not store `value` as this column, or "": checked here so that a bad item is that
    item's error (never a failed statement halfway through a batch)."""
    if len(value) > limit:
        return f"{key} longer than {limit} characters"
    if "\x00" in value:
        return f"{key} contains a NUL character"
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800")
            return f"{key} is not valid Unicode text"
    return ""


def _validate(raw, now: datetime) -> tuple[dict | None, str]:
    """The event as stored, or why it cannot be. The usual event (an object of short ASCII text and an
    ISO-8601 time) takes the first path; anything else takes `_invalid` or the field-by-field checks, for the
    message. Validation was a quarter of the server's time on a batch."""
    try:
        event_id, kind, viewer_id, room_id, when = (raw["event_id"], raw["type"], raw["viewer_id"], raw["room_id"],
                                                    raw["ts"])
    except (KeyError, TypeError):  # not an object, or a field missing
        return None, _invalid(raw)
    if not (event_id and kind and viewer_id and room_id and when) or kind not in EVENT_TYPES:
        return None, _invalid(raw)
    ts = ts_text = None
    if when.__class__ is str:
        try:
            ts = datetime.fromisoformat(when)  # what Django's parse_datetime tries first, without its wrapping
        except ValueError:
            pass
        else:
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
            elif _RFC3339(when):  # PostgreSQL reads this form as Python does: sent as written (isoformat: 0.8 µs)
                ts_text = when
    if ts is None:
        ts = _parse_ts(when)
        if ts is None:
            return None, "ts must be an ISO-8601 time or epoch seconds"
    if ts > now + CLOCK_SKEW:
        return None, f"ts is in the future (more than {CLOCK_SKEW.seconds} s ahead of the server)"
    if ts < now - MAX_EVENT_AGE:
        return None, f"ts is older than {MAX_EVENT_AGE.days} days"
    item = raw.get("item_id")
    event = {"event_id": str(event_id), "type": kind, "viewer_id": str(viewer_id), "room_id": str(room_id),
             "item_id": "" if item is None else str(item), "ts": ts,
             "ts_text": ts_text or ts.isoformat()}  # what PostgreSQL is sent (COPY, the fold), made once
    # The four texts checked at once: short ASCII without NUL is the usual event.
    text = f"{event['event_id']}{event['viewer_id']}{event['room_id']}{event['item_id']}"
    if (len(event["event_id"]) > 100 or len(event["viewer_id"]) > 128 or len(event["room_id"]) > 100
            or len(event["item_id"]) > 100 or not text.isascii() or "\x00" in text):
        for key, limit in _TEXT_LIMITS:
            error = _text_error(key, event[key], limit)
            if error:
                return None, error
    return event, ""


def _invalid(raw) -> str:
    """Why an item is not an event of a known type with every required field."""
    if not isinstance(raw, dict):
        return "must be an object"
    missing = [key for key in _REQUIRED if not raw.get(key)]
    if missing:
        return f"missing {', '.join(missing)}"
    return f"type must be one of {', '.join(EVENT_TYPES)}"


def _outside_window(event: dict, experiments: list[Experiment]) -> str:
    """Why an event cannot count for the running experiment of its room, or "" when it can (or none runs)."""
    for experiment in experiments:
        if experiment.rooms and event["room_id"] not in experiment.rooms:
            continue
        if experiment.started_at and event["ts"] < experiment.started_at - CLOCK_SKEW:
            return f"ts is before experiment {experiment.key} started ({experiment.started_at.isoformat()})"
    return ""


def _earliest_counted(room_id: str, experiments: list[Experiment]) -> datetime | None:
    """The earliest time an event of the room may have for every running experiment of the room to count it
    (`_outside_window` holds for an event at or after it); None: any time. Worked out once a room a batch."""
    starts = [experiment.started_at for experiment in experiments
              if experiment.started_at and (not experiment.rooms or room_id in experiment.rooms)]
    return max(starts) - CLOCK_SKEW if starts else None


def running_token_key(workspace_id: int) -> str:
    """The shared cache's key of the token of a workspace's running experiments (harness.routing's tokens):
    replaced whenever one of them starts, stops or goes."""
    return f"running:{workspace_id}"


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
        event, error = _validate(raw, now)
        if not error and running:
            room_id = event["room_id"]
            if room_id not in earliest:
                earliest[room_id] = _earliest_counted(room_id, running)
            if earliest[room_id] is not None and event["ts"] < earliest[room_id]:
                error = _outside_window(event, running)  # which experiment, for the message
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
                (_fold_postgresql if connection.vendor == "postgresql" else _fold_python)(experiment, mine)
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
        with _bound_cursor() as cursor, cursor.copy(f"COPY serving_event ({_EVENT_COLUMNS}) FROM STDIN") as copy:
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
    with _bound_cursor() as cursor:
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


# New item-page views of exposed viewers (from a minute before their exposure on, for clock skew) add k to
# the viewer's count c and, to the rollup of their arm and exposure minute, k to Σy and (c+k)² − c² to Σy².
# In one statement: the exposures are locked in viewer order, updated, and what changed is summed into
# one upsert of the rollups, in (arm, bucket) order. c is read back as the updated count minus k, so a
# concurrent batch that updated the viewer first (read committed re-reads the row) is counted on top.
# The table's fillfactor (migration 0007) keeps the update on the row's page (a HOT update, no index writes).
# (Finding the locked rows again by ctid instead of id lost counts under concurrent batches: test_races.)
_FOLD = """
WITH v AS (SELECT e->>0 AS viewer_id, (e->>1)::timestamptz AS ts FROM json_array_elements(%(views)s::json) AS e),
locked AS (SELECT id, viewer_id, first_seen_at FROM serving_exposure
           WHERE experiment_id = %(experiment)s AND viewer_id = ANY(ARRAY(SELECT DISTINCT viewer_id FROM v))
           ORDER BY viewer_id FOR UPDATE),
counted AS (SELECT l.id, count(*) AS k FROM locked l
            JOIN v ON v.viewer_id = l.viewer_id AND v.ts >= l.first_seen_at - %(skew)s GROUP BY l.id),
folded AS (UPDATE serving_exposure x SET ipv = x.ipv + c.k FROM counted c WHERE x.id = c.id
           RETURNING x.arm_id, x.bucket, x.ipv::float8 AS y, c.k::float8 AS k)
INSERT INTO serving_rollup AS r (experiment_id, arm_id, bucket, users, sum_y, sum_y2)
SELECT %(experiment)s, arm_id, bucket, 0, sum(k), sum(y * y - (y - k) * (y - k)) FROM folded
GROUP BY arm_id, bucket ORDER BY arm_id, bucket
ON CONFLICT (experiment_id, arm_id, bucket) DO UPDATE
SET sum_y = r.sum_y + excluded.sum_y, sum_y2 = r.sum_y2 + excluded.sum_y2
"""


def _fold_postgresql(experiment: Experiment, views: list[dict]) -> None:
    with _bound_cursor() as cursor:
        # The views travel as one JSON text: psycopg quotes array elements in Python, 3-4× the CPU.
        cursor.execute(_FOLD, {"experiment": experiment.pk, "skew": CLOCK_SKEW,
                               "views": json.dumps([(e["viewer_id"], e["ts_text"]) for e in views])})


def _fold_python(experiment: Experiment, views: list[dict]) -> None:
    """The same fold for SQLite (embedded mode, one writer at a time)."""
    times = defaultdict(list)
    for event in views:
        times[event["viewer_id"]].append(event["ts"])
    exposures = (Exposure.objects.select_for_update().filter(experiment=experiment, viewer_id__in=list(times))
                 .order_by("viewer_id"))
    updated, deltas = [], defaultdict(lambda: [0.0, 0.0])
    for exposure in exposures:
        # Only views after the viewer met the arm count (with a minute's grace for clock skew).
        k = sum(ts >= exposure.first_seen_at - CLOCK_SKEW for ts in times[exposure.viewer_id])
        if not k:
            continue
        old, exposure.ipv = exposure.ipv, exposure.ipv + k
        updated.append(exposure)
        delta = deltas[(exposure.arm_id, exposure.bucket)]
        delta[0] += k
        delta[1] += (old + k) ** 2 - old ** 2
    Exposure.objects.bulk_update(updated, ["ipv"])
    for (arm_id, bucket), (dy, dy2) in sorted(deltas.items()):
        Rollup.objects.filter(experiment=experiment, arm_id=arm_id, bucket=bucket).update(
            sum_y=F("sum_y") + dy, sum_y2=F("sum_y2") + dy2)


def _bound_cursor():
    """A cursor that sends parameters separately from the SQL (server-side binding) on the request's
    connection and transaction. Django's default psycopg cursor quotes every value into the SQL text in
    Python, which for a batch's arrays of a thousand values cost more than the statements themselves."""
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)
