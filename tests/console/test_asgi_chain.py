"""Under ASGI every request runs the middleware chain on the event loop: no middleware is sync-only (each one
would cost every request, the reply API's included, two thread hops), and the two of ours that made it so
(the health probe, WhiteNoise's static files) still answer what they answered. Django's own middleware runs
its hooks on the loop too (console/middleware.py), in a thread only for the hooks that do I/O."""

import json
import os
import subprocess
import sys

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncClient
from django.utils.module_loading import import_string

from tests.conftest import PASSWORD


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
    assert probe.json() == {"status": "ok", "cache": "ok"}
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


def _thread_hops(monkeypatch) -> list[str]:
    """The names of the functions the async chain runs in a thread (`sync_to_async`) from now on; from now on
    a database query on the event loop raises, as it does in production."""
    from asgiref import sync

    hops, real = [], sync.SyncToAsync.__call__
    # The suite allows the ORM on an event loop (tests/conftest.py, for Playwright): here it must raise.
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    return hops


@pytest.mark.django_db(transaction=True)
def test_a_page_that_saves_nothing_runs_our_middleware_hooks_on_the_loop(members, monkeypatch):
    async def page():
        client = AsyncClient()
        await client.aforce_login(members["viewer"])
        hops = _thread_hops(monkeypatch)
        response = await client.get("/w/acme/")
        return response.status_code, hops

    status, hops = async_to_sync(page)()
    assert status == 200
    # Only the three that Django's deploy checks find by their paths (console/middleware.py).
    assert sorted(name for name in hops if "Middleware" in name) == [
        "CsrfViewMiddleware.process_request", "CsrfViewMiddleware.process_response", "CsrfViewMiddleware.process_view",
        "SecurityMiddleware.process_request", "SecurityMiddleware.process_response",
        "XFrameOptionsMiddleware.process_response"]
    assert "harness_list" in hops, hops  # the (sync) view itself does run in one


@pytest.mark.django_db(transaction=True)
def test_session_messages_and_csrf_still_do_their_io_under_the_async_chain(members, monkeypatch):
    """A login saves its session, a message survives the redirect and is shown once, a forged POST is refused:
    the hooks that touch the database go to a thread (an ORM call on the loop would raise)."""
    from evaluation import services as eval_services
    from workspaces.access import Actor
    from workspaces.models import Workspace

    eval_services.eval_set_generate(actor=Actor.system("t"), workspace=Workspace.objects.get(slug="acme"),
                                    name="lsqa", suite="live_stream_qa", seed=1, n=3)

    async def flow():
        hops = _thread_hops(monkeypatch)
        client = AsyncClient()
        login = await client.post("/accounts/login/", {"username": "operator", "password": PASSWORD})
        home = await client.get("/w/acme/")
        archived = await client.post("/w/acme/eval/sets/lsqa/archive/", {"archived": "1"})
        shown = await client.get(archived["Location"])
        again = await client.get(archived["Location"])
        forged = await AsyncClient(enforce_csrf_checks=True).post("/accounts/login/", {"username": "operator"})
        return login, home, archived, shown, again, forged, hops

    login, home, archived, shown, again, forged, hops = async_to_sync(flow)()
    assert login.status_code == 302 and home.status_code == 200
    assert archived.status_code == 302
    assert "Archived eval set lsqa." in shown.content.decode() and "Archived eval set lsqa." not in again.content.decode()
    assert forged.status_code == 403
    assert "MessageMiddleware.process_response" in hops  # reading the stored message loads it
    assert "SessionMiddleware.process_response" in hops  # the login's session save


def test_what_start_up_loaded_is_frozen_out_of_full_collections():
    """A full collection walks every tracked object with the event loop stopped: with start-up's objects (Django,
    every view module) tracked, 110-170 ms every few thousand replies. Loading the ASGI application freezes them.
    A Celery worker's start does the same for its eval runs."""
    probe = ("import gc, json, sys; import console.asgi; from celpy.celparser import CELParser; "
             "print(json.dumps({'frozen': gc.get_freeze_count(), 'tracked': len(gc.get_objects()), "
             "'views': 'serving.api' in sys.modules and 'console.views.serving' in sys.modules, "
             "'cel': CELParser.CEL_PARSER is not None}))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=settings.BASE_DIR, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["views"] and state["cel"]  # loaded before the freeze, not on the first request after it
    assert state["frozen"] > 10 * state["tracked"], state

    worker_start = ("import gc, json, django; django.setup(); from celery.signals import worker_init; "
                    "from console.celery import app; from celpy.celparser import CELParser; "
                    "worker_init.send(sender=None); print(json.dumps({'frozen': gc.get_freeze_count(), "
                    "'tracked': len(gc.get_objects()), 'cel': CELParser.CEL_PARSER is not None}))")
    done = subprocess.run([sys.executable, "-c", worker_start], cwd=settings.BASE_DIR, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["cel"] and state["frozen"] > 10 * state["tracked"], state
