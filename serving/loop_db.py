"""PostgreSQL from the event loop: a few psycopg async connections per loop, in autocommit.

Django's connections are per thread, and its ORM runs in a worker thread under ASGI; the reply route on the
event loop (serving.lean_reply) reads its room and writes its trace with these instead, from the same
settings (DATABASES["default"]), so it never leaves the loop. Only PostgreSQL (`available()`).
"""

import asyncio
from contextlib import asynccontextmanager
from functools import cache

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections

POOL_SIZE = 8  # enough that 32 requests at once seldom wait for a connection
# A reply waits at most this long for a connection, and a statement runs at most this long, on these connections:
# requests share statements (serving.gathering), so one stuck statement would otherwise hold every reply behind
# it. Past either, the caller gets psycopg's error and takes its way out (Django's route; a trace, its rescue).
DEADLINE_S = 5.0


def available() -> bool:
    # From the settings, not `connection.vendor`: the connection proxy's per-context lookup is slow on the loop.
    # (A role Django assumes per connection, OPTIONS["assume_role"], is not set up here: Django's route then.)
    database = settings.DATABASES["default"]
    return database["ENGINE"].endswith("postgresql") and "assume_role" not in database.get("OPTIONS", {})


@cache
def preparing_connection():
    """A Django connection object for preparing values (`field.get_db_prep_save`) on the loop; it never connects.
    (`connections[alias]` on the loop would build a new one for every task: their storage is per context.)"""
    return connections.create_connection(DEFAULT_DB_ALIAS)


def _params() -> dict:
    """Django's connection parameters without its own cursor class and type adapters (sync, and JSON as text),
    with the statement deadline added to the server options the settings give."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    deadline = f"-c statement_timeout={round(DEADLINE_S * 1000)}"
    params["options"] = f"{params['options']} {deadline}" if params.get("options") else deadline
    return params


_pools: dict = {}  # event loop → the task that opens its pool (a connection belongs to its loop)


async def _configured(conn) -> None:
    from psycopg.types.string import TextLoader

    # JSON as text, as Django's connections give it: the reader decides how to decode (serving.selectors).
    conn.adapters.register_loader("jsonb", TextLoader)
    conn.adapters.register_loader("json", TextLoader)


async def _opened_pool():
    from psycopg_pool import AsyncConnectionPool

    # Opened at its full size (in the background: the first request waits for the first connection). Grown on
    # demand instead, one connection at a time, a fresh server's first burst at 32 waited for six connections in
    # turn: its p99 was 130-184 ms against 82-112 ms opened full (docs/performance.md).
    pool = AsyncConnectionPool(kwargs={**_params(), "autocommit": True}, min_size=POOL_SIZE, max_size=POOL_SIZE,
                               timeout=DEADLINE_S, open=False, name="harnessops-loop", configure=_configured)
    await pool.open()
    return pool


@asynccontextmanager
async def loop_connection():
    """A connection of this loop's pool (psycopg_pool's), for one or a few statements in autocommit."""
    loop = asyncio.get_running_loop()
    opening = _pools.get(loop)
    if opening is None:
        for stale in [other for other in _pools if other.is_closed()]:
            del _pools[stale]
        opening = _pools[loop] = loop.create_task(_opened_pool())  # requests meanwhile wait for the same pool
    try:
        pool = await opening
    except Exception:
        _pools.pop(loop, None)  # PostgreSQL unreachable: the next request tries again
        raise
    async with pool.connection() as conn:
        yield conn


async def close_loop_pool() -> None:
    """Close this loop's connections (a test or benchmark that runs its own loop, before the loop ends)."""
    opening = _pools.pop(asyncio.get_running_loop(), None)
    if opening is not None and not opening.cancelled() and opening.done() and opening.exception() is None:
        await opening.result().close()
