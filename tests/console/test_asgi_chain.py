"""Under ASGI every request runs the middleware chain on the event loop: no middleware is sync-only (each one
would cost every request, the reply API's included, two thread hops), and the two of ours that made it so
(the health probe, WhiteNoise's static files) still answer what they answered."""

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncClient
from django.utils.module_loading import import_string


def test_every_middleware_runs_on_the_event_loop():
    sync_only = [path for path in settings.MIDDLEWARE if not getattr(import_string(path), "async_capable", False)]
    assert sync_only == []
    assert iscoroutinefunction(ASGIHandler()._middleware_chain)


@pytest.mark.django_db(transaction=True)
def test_static_files_and_the_probe_answer_through_the_async_chain():
    async def requests():
        client = AsyncClient()
        asset = await client.get("/static/console/console.css")
        body = b"".join(asset.streaming_content)
        missing = await client.get("/static/console/no-such-file.css")
        return asset.status_code, body, missing.status_code, await client.get("/healthz"), \
            await client.get("/accounts/login/")

    status, body, missing, probe, page = async_to_sync(requests)()
    assert status == 200 and b"{" in body
    assert missing == 404
    assert probe.json() == {"status": "ok"}
    assert page.status_code == 200  # a page, past both


def _asgi_get(path: str) -> int:
    """GET `path` through console.asgi.application as a server calls it (a thread-sensitive context a request)."""
    import asyncio

    from console.asgi import application

    async def call():
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
        inbox, done, sent = [{"type": "http.request", "body": b""}], asyncio.Event(), []

        async def receive():
            if inbox:
                return inbox.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await application(scope, receive, send)
        return sent[0]["status"]

    return asyncio.run(call())


@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"), reason="needs PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_asgi_requests_share_pooled_postgresql_connections():
    """Each ASGI request runs its sync code in a thread of its own; without the pool each would open a connection."""
    from django.db import connection

    assert _asgi_get("/healthz") == 200  # the pool exists from the first use on
    connection.pool.pop_stats()
    assert [_asgi_get("/healthz") for _ in range(12)] == [200] * 12
    stats = connection.pool.get_stats()
    assert stats["requests_num"] >= 12 and stats.get("connections_num", 0) <= 2, stats
