"""The event loop's own PostgreSQL connections (serving.loop_db): a statement and a wait for a connection each have a
deadline, since the replies on a loop share statements and connections (one stuck would hold them all)."""

import asyncio
import time

import psycopg
import pytest
from django.conf import settings as django_settings
from psycopg_pool import PoolTimeout

from serving import loop_db

pytestmark = [
    pytest.mark.skipif(not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                       reason="the loop's connections are PostgreSQL's"),
    pytest.mark.django_db(transaction=True),
]


def _on_a_loop(work):
    async def run():
        try:
            return await work()
        finally:
            await loop_db.close_loop_pool()

    return asyncio.run(run())


def test_a_statement_past_the_deadline_is_cancelled_and_the_connection_serves_the_next(monkeypatch):
    monkeypatch.setattr(loop_db, "DEADLINE_S", 0.2)

    async def work():
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            async with loop_db.loop_connection() as conn:
                await conn.execute("SELECT pg_sleep(2)")
        cancelled_after = time.monotonic() - started
        async with loop_db.loop_connection() as conn:
            answer = await (await conn.execute("SELECT 1")).fetchone()
        return cancelled_after, answer

    cancelled_after, answer = _on_a_loop(work)
    assert cancelled_after < 1.5 and answer == (1,)


def test_a_wait_for_a_connection_past_the_deadline_fails_instead_of_queueing(monkeypatch):
    monkeypatch.setattr(loop_db, "DEADLINE_S", 0.2)
    monkeypatch.setattr(loop_db, "POOL_SIZE", 1)

    async def work():
        async with loop_db.loop_connection():  # the pool's one connection, held
            started = time.monotonic()
            with pytest.raises(PoolTimeout):
                async with loop_db.loop_connection():
                    pass
            return time.monotonic() - started

    waited = _on_a_loop(work)
    assert 0.15 < waited < 1.5
    assert issubclass(PoolTimeout, psycopg.Error)  # what the reply route and the trace writer catch
