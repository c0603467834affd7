"""One platform event checked: its fields, its time, and whether a running experiment of its room counts it."""

import re
from datetime import UTC, datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from serving.models import Experiment

CLOCK_SKEW = timedelta(seconds=60)
# Late events are accepted for a week (clients buffer offline); older ones, and any from the future, are refused.
MAX_EVENT_AGE = timedelta(days=7)
EVENT_TYPES = ("item_page_view", "impression", "click", "add_to_cart", "purchase")


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


def validated_event(raw, now: datetime) -> tuple[dict | None, str]:
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


def outside_window(event: dict, experiments: list[Experiment]) -> str:
    """Why an event cannot count for the running experiment of its room, or "" when it can (or none runs)."""
    for experiment in experiments:
        if experiment.rooms and event["room_id"] not in experiment.rooms:
            continue
        if experiment.started_at and event["ts"] < experiment.started_at - CLOCK_SKEW:
            return f"ts is before experiment {experiment.key} started ({experiment.started_at.isoformat()})"
    return ""


def earliest_counted(room_id: str, experiments: list[Experiment]) -> datetime | None:
    """The earliest time an event of the room may have for every running experiment of the room to count it
    (`outside_window` holds for an event at or after it); None: any time. Worked out once a room a batch."""
    starts = [experiment.started_at for experiment in experiments
              if experiment.started_at and (not experiment.rooms or room_id in experiment.rooms)]
    return max(starts) - CLOCK_SKEW if starts else None
