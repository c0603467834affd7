"""Shared-cache tokens: what lets a process trust what it remembered.

A process that keeps something read from the database (a harness's routing, a room, an API key) keeps it beside
the token it read under a key in the shared cache (Redis). Every writer that changes what the key stands for
replaces the token, so every process sees the change on its next read of the token instead of asking the
database each time.

The token is replaced twice: inside the writer's transaction (a reader of a new token must not keep what it read
before the commit, so the second replacement after the commit invalidates that too) and after the commit. A
change is therefore visible to every request that starts after the writer returns. Without a shared cache
(embedded mode, one process serving) the local cache plays the same role.

A token is a random integer, which Django's Redis cache stores as plain digits, so the reply API can read tokens
with its rate limit in one Redis round trip.

When the shared cache cannot be reached, every token reads as 0 ("cannot say"), so nothing remembered is
trusted and the database answers instead; the outage is logged (once a minute at most) and shown by /healthz
(`cache_health`). Redis keeps nothing on disk here: when it comes back every token is made anew, which retires
what any process remembered before.
"""

import logging
import secrets
import threading
import time

from django.core.cache import cache
from django.db import transaction

logger = logging.getLogger(__name__)
_LOG_EVERY_S = 60.0
_outage = {"since": 0.0, "logged": 0.0, "error": ""}
_outage_lock = threading.Lock()


def cache_failed(what: str, error: Exception) -> None:
    """Record that the shared cache failed `what` (and log it, once a minute at most): callers then fall back to
    the database or to this process's own counts."""
    now = time.monotonic()
    with _outage_lock:
        if not _outage["since"]:
            _outage["since"] = now
        _outage["error"] = f"{type(error).__name__}: {error}"[:300]
        if now - _outage["logged"] >= _LOG_EVERY_S:
            _outage["logged"] = now
            logger.warning("shared cache unavailable (%s: %s); reading the database instead", what, _outage["error"])


def cache_answered() -> None:
    """The shared cache answered: an outage, if one was recorded, is over."""
    if _outage["since"]:
        with _outage_lock:
            if _outage["since"]:
                logger.warning("shared cache reachable again after %.0f s", time.monotonic() - _outage["since"])
                _outage.update(since=0.0, logged=0.0, error="")


def cache_health() -> dict:
    """{"cache": "ok"} or {"cache": "unavailable", "cache_down_s": seconds} for /healthz."""
    since = _outage["since"]
    if not since:
        return {"cache": "ok"}
    return {"cache": "unavailable", "cache_down_s": round(time.monotonic() - since, 1)}


def new_token() -> int:
    return secrets.randbits(62) + 1  # never 0, which stands for "no token"


def current_tokens(*keys: str) -> list[int]:
    """The tokens under `keys` (cache keys) in one cache read, each made when missing; 0 where the cache
    cannot say, which never matches a token kept beside something remembered."""
    try:
        found = cache.get_many(keys)
        missing = [key for key in keys if key not in found]
        if missing:
            for key in missing:
                cache.add(key, new_token(), timeout=None)
            found.update(cache.get_many(missing))
    except Exception as error:  # noqa: BLE001 (redis-py's errors, or any backend's: the cache cannot say)
        cache_failed("reading tokens", error)
        return [0] * len(keys)
    cache_answered()
    return [token if isinstance(token, int) else 0 for token in (found.get(key) for key in keys)]


def token_replaced(key: str) -> None:
    """Replace the token under `key` now and again after the commit (see the module's docstring); call inside
    the transaction that changes what the token stands for."""
    def replace() -> None:
        try:
            cache.set(key, new_token(), timeout=None)
        except Exception as error:  # noqa: BLE001 (the write stands; readers see 0 until the cache is back)
            cache_failed("replacing a token", error)

    replace()
    transaction.on_commit(replace)
