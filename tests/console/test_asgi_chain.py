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
