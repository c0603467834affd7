"""The reply route on the event loop (serving.lean_reply) through console.asgi.application, as a server calls it:
the everyday request is answered there, as Django's route answers it, without a query on Django's connections;
everything else reaches Django's route with its body, and a request is admitted (counted) once."""

import asyncio
import json

import pytest
from django.conf import settings as django_settings
from django.core.signals import request_started

from harness import services as harness_services
from serving.models import Room, Trace
from serving.services import api_key_create, room_upsert
from workspaces.access import Actor

pytestmark = [
    pytest.mark.skipif(not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
                       or not django_settings.REDIS_URL, reason="the route on the loop needs PostgreSQL and Redis"),
    pytest.mark.django_db(transaction=True),  # its own connections see committed rows only
]

ROOM = {"room_id": "demo-room", "title": "Demo", "currency": "$", "on_screen": "L001",
        "products": [{"link_id": "L001", "name": "Merino Crew-Neck Sweater", "price": 89.0, "promo_price": 71.2}],
        "faq": [], "promotions": [], "orders": []}
HELLO = {"message": "price of the sweater?", "viewer_id": "v1"}
STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}]},
         "The sweater is $71.2 now, down from $89."]


@pytest.fixture
def platform(workspace, harness, settings, monkeypatch):
    """A stored room with the demo harness labelled production, and a read key; Django's guard against
    database calls on the event loop is on, so a query on the loop fails the test."""
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    settings.MODEL_BACKEND, settings.SCRIPTED_STEPS = "scripted", STEPS
    settings.REPLY_RATE_PER_MINUTE = 1000
    from django.core.cache import cache

    cache.clear()
    system = Actor.system("t")
    harness_services.label_move(actor=system, harness=harness, name="production", version=harness.head, reason="go")
    room_upsert(workspace=workspace, context=ROOM, harness=harness)
    return api_key_create(actor=system, workspace=workspace, name="platform", scopes=["read"])[1]


def asgi(requests: list[tuple]) -> list[dict]:
    """Send (path, body, headers[, query]) requests one after another through the ASGI application on one event
    loop; each answer: status, headers, parsed JSON and whether Django's request cycle ran for it."""
    from console.asgi import application
    from serving.loop_db import close_loop_pool

    async def call(path, body, headers, query=b""):
        chunks = body if isinstance(body, list) else [body if isinstance(body, bytes) else json.dumps(body).encode()]
        raw = b"".join(chunks)
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
                 "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(raw)).encode()), *headers],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
        inbox = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
                 for i, chunk in enumerate(chunks)]
        done, sent, django = asyncio.Event(), [], []

        async def receive():
            if inbox:
                return inbox.pop(0)
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        def seen(**_kwargs):
            django.append(True)

        request_started.connect(seen)
        try:
            await application(scope, receive, send)
        finally:
            request_started.disconnect(seen)
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return {"status": sent[0]["status"], "headers": {k.decode().lower(): v.decode() for k, v in sent[0]["headers"]},
                "raw": body, "json": json.loads(body) if body[:1] in (b"{", b"[") else None, "django": bool(django)}

    async def run():
        try:
            return [await call(*request) for request in requests]
        finally:
            await close_loop_pool()

    return asyncio.run(run())


def bearer(token: str) -> list:
    return [(b"authorization", f"Bearer {token}".encode())]


REPLY = "/api/v1/rooms/demo-room/reply"


def test_the_everyday_reply_is_answered_on_the_loop_as_django_answers_it(platform, harness):
    first, second = asgi([(REPLY, HELLO, bearer(platform)), (REPLY, {**HELLO, "viewer_id": "v2"}, bearer(platform))])
    assert first["django"] and not second["django"]  # the label is read by Django's route, then remembered
    assert first["status"] == second["status"] == 200
    ignored = {"trace_id", "latency_ms"}
    assert {k: v for k, v in first["json"].items() if k not in ignored} == \
        {k: v for k, v in second["json"].items() if k not in ignored}
    assert second["json"]["outcome"] == "replied" and second["json"]["arm"] == "label:production"
    assert {k: v for k, v in first["headers"].items() if k != "content-length"} == \
        {k: v for k, v in second["headers"].items() if k != "content-length"}
    assert int(second["headers"]["content-length"]) == len(second["raw"])
    stored = {t.trace_id: t for t in Trace.objects.all()}
    one, two = stored[first["json"]["trace_id"]], stored[second["json"]["trace_id"]]
    columns = ("workspace_id", "source", "room_id", "harness_id", "harness_version_id", "arm", "backend",
               "outcome", "silent", "message", "reply", "model_calls", "hooks_fired")
    assert [getattr(one, c) for c in columns] == [getattr(two, c) for c in columns]
    assert two.viewer_id == "v2" and two.data["input"]["viewer_id"] == "v2"
    assert two.harness_version_id == harness.head_id


def _asked(monkeypatch) -> list[str]:
    """The statements (PostgreSQL, on the loop's connections) and commands (Redis) the route on the loop asks,
    in order, with "|" once each request's answer is ready."""
    import psycopg

    from serving import lean_reply
    from serving.redis_loop import LoopRedis

    asked: list[str] = []
    execute, sent, answer = psycopg.AsyncConnection.execute, LoopRedis._sent, lean_reply._answer

    async def counted_execute(self, query, *args, **kwargs):
        asked.append(str(query).split(None, 1)[0].upper())
        return await execute(self, query, *args, **kwargs)

    def counted_sent(self, command):
        asked.append(command[0].decode())
        return sent(self, command)

    async def counted_answer(*args, **kwargs):
        try:
            return await answer(*args, **kwargs)
        finally:
            asked.append("|")  # the request's statements are all asked by now: its trace is stored first

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted_execute)
    monkeypatch.setattr(LoopRedis, "_sent", counted_sent)
    monkeypatch.setattr(lean_reply, "_answer", counted_answer)
    return asked


def _per_request(asked: list[str]) -> list[list[str]]:
    return [request.split() for request in "".join(f" {word}" for word in asked).split(" |")[:-1]]


def test_a_warm_reply_asks_redis_for_its_admission_and_postgresql_for_its_trace_only(platform, monkeypatch):
    """The everyday reply's cost in round trips, which no benchmark's noise hides: once the label, the room and
    the prompt parts are remembered, a reply is one EVALSHA (admission, with the room's token) and one INSERT
    (its trace) - nothing on Django's connections (the platform fixture). The first reply reads the label
    through Django's route; the second reads the room once more, now with its harness's token."""
    asked = _asked(monkeypatch)
    answers = asgi([(REPLY, {**HELLO, "viewer_id": f"v{i}"}, bearer(platform)) for i in range(4)])

    assert [a["status"] for a in answers] == [200] * 4 and [a["django"] for a in answers] == [True] + [False] * 3
    assert _per_request(asked)[1:] == [["EVALSHA", "SELECT", "INSERT"]] + [["EVALSHA", "INSERT"]] * 2, asked


def test_a_kept_room_is_read_again_once_its_token_is_lost_and_once_it_is_older_than_it_may_be_kept(
        platform, workspace, monkeypatch):
    """A room's token lost in Redis (evicted, flushed) is made anew by the admission, so the room kept under the
    old one is read again; a write that replaces no token (psql, a restored database) is seen after ROOM_KEPT_S."""
    import time

    from django.core.cache import cache

    from serving import selectors

    asgi([(REPLY, HELLO, bearer(platform))] * 2)  # the label and the room with its harness's token: kept
    asked = _asked(monkeypatch)
    cache.delete(selectors.room_token_key(workspace.pk, "demo-room"))
    assert [a["django"] for a in asgi([(REPLY, HELLO, bearer(platform))] * 2)] == [False, False]
    assert _per_request(asked) == [["EVALSHA", "SELECT", "INSERT"], ["EVALSHA", "INSERT"]]
    assert cache.get(selectors.room_token_key(workspace.pk, "demo-room"))  # made by the admission

    monkeypatch.setattr(selectors, "ROOM_KEPT_S", 0.3)
    Room.objects.filter(workspace=workspace, room_id="demo-room").update(  # no token replaced
        context={**ROOM, "products": [{**ROOM["products"][0], "price": 79.0}]})
    asked.clear()
    time.sleep(0.3)
    answers = asgi([(REPLY, HELLO, bearer(platform))] * 2)
    assert _per_request(asked) == [["EVALSHA", "SELECT", "INSERT"], ["EVALSHA", "INSERT"]]
    prices = [s["result"]["price"] for a in answers for s in Trace.objects.get(trace_id=a["json"]["trace_id"]).data[
        "steps"] if s.get("name") == "get_product_info_by_link_id"]
    assert prices == [79.0, 79.0]


def test_a_room_not_kept_here_is_answered_on_the_loop_with_its_harness_token_read_after_it(platform, monkeypatch):
    """A fresh process, or one whose kept rooms were dropped (more rooms than it keeps): the admission cannot name
    the room's harness, so its routing token is read once the room is (one more Redis call). The room is then
    kept without that token (it was read after the row), so the next reply reads the room once more, under both."""
    from serving import selectors

    asgi([(REPLY, HELLO, bearer(platform))])  # the label, read by Django's route and remembered
    selectors._loop_kept.clear()
    asked = _asked(monkeypatch)
    answers = asgi([(REPLY, {**HELLO, "viewer_id": f"v{i}"}, bearer(platform)) for i in range(3)])

    assert [a["status"] for a in answers] == [200] * 3 and [a["django"] for a in answers] == [False] * 3
    assert _per_request(asked) == [["EVALSHA", "SELECT", "EVALSHA", "INSERT"], ["EVALSHA", "SELECT", "INSERT"],
                                   ["EVALSHA", "INSERT"]]


def _lifespan() -> list[str]:
    """A server's lifespan through the ASGI application: start-up, then shutdown; the messages it sent back."""
    from console.asgi import application

    inbox, sent = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}], []

    async def receive():
        return inbox.pop(0)

    async def send(message):
        sent.append(message["type"])

    asyncio.run(application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    return sent


def test_a_starting_worker_warms_the_reply_route_so_its_first_reply_stays_on_the_loop(platform, harness):
    from harness import routing
    from harness import selectors as harness_selectors

    routing._memo.clear()
    harness_selectors._SPEC_CACHE.clear()
    assert _lifespan() == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert harness.head.content_hash in harness_selectors._SPEC_CACHE  # parsed before any request
    first = asgi([(REPLY, HELLO, bearer(platform))])[0]
    assert first["status"] == 200 and not first["django"] and first["json"]["harness_version"] == 1


def test_a_warm_up_that_fails_still_lets_the_worker_start(platform, monkeypatch, caplog):
    from serving import lean_reply

    def broken():
        raise RuntimeError("no database")

    monkeypatch.setattr(lean_reply, "_routes_read", broken)
    assert _lifespan() == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert "could not warm the reply route" in caplog.text
    assert asgi([(REPLY, HELLO, bearer(platform))])[0]["status"] == 200  # the first reply just pays it


def test_every_other_request_reaches_django_with_its_body(platform, client, settings, workspace, demo_files):
    """Each is answered exactly as Django's route answers it through the test client."""
    Room.objects.create(workspace=workspace, room_id="bare", title="Bare", context=ROOM)  # no harness assigned
    harness_services.harness_create(actor=Actor.system("t"), workspace=workspace, name="second",
                                    files=demo_files, message="2")
    cases = [
        ("/api/v1/rooms/nowhere/reply", HELLO, b""),                     # unknown room: 404
        ("/api/v1/rooms/bare/reply", HELLO, b""),                        # no harness assigned, two in the workspace
        (REPLY, {**HELLO, "harness": "avatar"}, b""),                    # a harness named
        (REPLY, {**HELLO, "version": 1}, b""),                           # a version pinned
        (REPLY, {**HELLO, "backend": "nonesuch"}, b""),                  # a backend named: 422
        (REPLY, {**HELLO, "label": "nonesuch"}, b""),                    # an unknown label: 404
        (REPLY, {"message": "", "viewer_id": "v"}, b""),                 # a schema error: 422
        (REPLY, b"{not json", b""),                                      # malformed: 400
        (REPLY, {**HELLO, "message": "nul \x00"}, b""),                   # a NUL, replaced by Django's parser
        (REPLY, HELLO, b"stream=1"),                                     # server-sent events
        (REPLY, HELLO, b"surprise=1"),                                   # an unknown query parameter: 422
    ]
    answers = asgi([(REPLY, HELLO, bearer(platform))] + [(p, b, bearer(platform), q) for p, b, q in cases])
    for (path, body, query), answer in zip(cases, answers[1:], strict=True):
        raw = body if isinstance(body, bytes) else json.dumps(body)
        expected = client.post(f"{path}?{query.decode()}" if query else path, raw, content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {platform}")
        assert answer["django"], (path, body, query)
        assert answer["status"] == expected.status_code, (path, body, query, answer["raw"])
        if expected["Content-Type"].startswith("application/json"):
            ignored = {"trace_id", "latency_ms"}
            assert {k: v for k, v in answer["json"].items() if k not in ignored} == \
                {k: v for k, v in expected.json().items() if k not in ignored}, (path, body, query)
    unknown_key, foreign_host = asgi([(REPLY, HELLO, bearer(platform + "x")), (REPLY, HELLO, [
        (b"host", b"shop.invalid"), *bearer(platform)])])  # (a later host header replaces the first)
    assert unknown_key["status"] == 401 and unknown_key["django"]
    expected = client.post(REPLY, json.dumps(HELLO), content_type="application/json", HTTP_HOST="shop.invalid",
                           HTTP_AUTHORIZATION=f"Bearer {platform}")
    assert foreign_host["status"] == expected.status_code == 400 and foreign_host["django"]


def test_a_body_too_large_is_not_held_but_handed_to_django_as_it_streams_in(platform, settings):
    settings.REPLY_MAX_BODY_BYTES = 1024
    body = json.dumps({**HELLO, "room": {"pad": "x" * 3000}}).encode()
    answer = asgi([(REPLY, [body[:600], body[600:1200], body[1200:]], bearer(platform))])[0]
    assert answer["status"] == 413 and answer["django"]


def test_a_request_is_counted_once_when_django_answers_it_after_the_loop_admitted_it(platform, settings):
    settings.REPLY_RATE_PER_MINUTE = 3
    answers = asgi([(REPLY, HELLO, bearer(platform))] * 5)
    assert [a["status"] for a in answers] == [200, 200, 200, 429, 429]
    assert [a["django"] for a in answers] == [True, False, False, True, True]  # Django renders the 429
    assert answers[3]["json"]["detail"].startswith("Rate limit of 3 replies per minute")


def test_a_key_revoked_elsewhere_is_refused_at_the_next_reply(platform, workspace):
    from django.core.cache import cache
    from django.utils import timezone

    from serving.models import ApiKey
    from workspaces.access import API_ACCESS_GENERATION

    assert [a["status"] for a in asgi([(REPLY, HELLO, bearer(platform))] * 2)] == [200, 200]
    ApiKey.objects.filter(workspace=workspace, name="platform").update(revoked_at=timezone.now())
    cache.set(API_ACCESS_GENERATION, 12345, timeout=None)  # as another process's api_key_revoke does
    refused = asgi([(REPLY, HELLO, bearer(platform))])[0]
    assert refused["status"] == 401 and refused["django"]


def test_a_moved_label_is_seen_by_the_next_reply(platform, harness, demo_files):
    system = Actor.system("t")
    assert [a["json"]["harness_version"] for a in asgi([(REPLY, HELLO, bearer(platform))] * 2)] == [1, 1]
    changed = {**demo_files, "prompt/00-persona.md": demo_files["prompt/00-persona.md"] + "\nBe brief.\n"}
    v2 = harness_services.version_commit(actor=system, harness=harness, files=changed, base_version=harness.head,
                                         message="brief").version
    harness_services.label_move(actor=system, harness=harness, name="production", version=v2, reason="go",
                                override=True)
    answers = asgi([(REPLY, HELLO, bearer(platform))] * 3)
    assert [a["json"]["harness_version"] for a in answers] == [2, 2, 2]
    assert [a["django"] for a in answers] == [True, False, False]  # the label is read again once, then remembered


def test_a_changed_room_is_read_again_by_the_next_reply_on_the_loop(platform, harness, workspace):
    """The loop keeps a room's context and asks PostgreSQL for it only when the room's row changed."""
    from serving.selectors import trace_sent_request

    def price_seen(answer):
        trace = Trace.objects.get(trace_id=answer["json"]["trace_id"])
        return [s["result"]["price"] for s in trace.data["steps"] if s.get("name") == "get_product_info_by_link_id"]

    before = asgi([(REPLY, HELLO, bearer(platform))] * 3)
    assert [a["django"] for a in before] == [True, False, False] and price_seen(before[2]) == [89.0]
    room_upsert(workspace=workspace, harness=harness,
                context={**ROOM, "products": [{**ROOM["products"][0], "price": 79.0}]})
    after = asgi([(REPLY, HELLO, bearer(platform))] * 2)
    assert [a["django"] for a in after] == [False, False]  # still on the loop: its route is remembered
    assert price_seen(after[0]) == price_seen(after[1]) == [79.0]
    catalogue = trace_sent_request(Trace.objects.get(trace_id=after[1]["json"]["trace_id"]))["messages"][0]["content"]
    assert "$79.0" in catalogue and "$89.0" not in catalogue  # the prompt's catalogue is the new one too


def test_requests_for_a_room_at_once_share_its_reads_and_each_gets_its_own_route(platform, harness, workspace,
                                                                               monkeypatch):
    from serving import selectors
    from serving.loop_db import close_loop_pool

    asgi([(REPLY, HELLO, bearer(platform))])  # the room stored by Django's route
    reads = []
    real = selectors._room_read_on_loop

    async def counted(key, asked):
        reads.append(asked)
        return await real(key, asked)

    monkeypatch.setattr(selectors, "_room_read_on_loop", counted)

    async def at_once():
        try:
            return await asyncio.gather(*(selectors.room_route_on_loop(workspace.pk, "demo-room") for _ in range(12)))
        finally:
            await close_loop_pool()

    routes = asyncio.run(at_once())
    assert sum(reads) == 12 and len(reads) < 12  # shared reads, one answer a request
    assert all(route.harness.pk == harness.pk and route.context["products"] == ROOM["products"] for route in routes)
    assert len({id(route.harness) for route in routes}) == 12  # no request's harness object is another's
    assert asyncio.run(_missing_room(workspace.pk)) is None


def test_a_worker_with_more_rooms_than_it_keeps_drops_the_room_read_longest_ago(platform, harness, workspace,
                                                                                 monkeypatch):
    from serving import selectors
    from serving.loop_db import close_loop_pool

    for room_id in ("room-b", "room-c"):
        room_upsert(workspace=workspace, context={**ROOM, "room_id": room_id}, harness=harness)
    monkeypatch.setattr(selectors, "_LOOP_ROOMS_MAX", 2)
    selectors._loop_kept.clear()
    reads = []
    real = selectors._room_read_on_loop

    async def counted(key, asked):
        reads.append(key[1])
        return await real(key, asked)

    monkeypatch.setattr(selectors, "_room_read_on_loop", counted)

    async def visit(room_ids):
        try:
            for room_id in room_ids:  # the same tokens throughout: only room 3 evicts
                await selectors.room_route_on_loop(workspace.pk, room_id, room_token=5, routing_tokens={harness.pk: 7})
        finally:
            await close_loop_pool()

    asyncio.run(visit(["demo-room", "room-b", "demo-room", "room-c", "demo-room", "room-b"]))
    assert reads == ["demo-room", "room-b", "room-c", "room-b"]  # demo-room, read last, stays; room-b goes
    assert len(selectors._loop_kept) == len(selectors._loop_rooms) == 2



def test_decoded_contexts_beyond_the_limit_drop_the_one_decoded_longest_ago(monkeypatch):
    from serving import selectors

    monkeypatch.setattr(selectors, "_CONTEXTS_MAX", 2)
    monkeypatch.setattr(selectors, "_contexts", {})
    first = selectors._context('{"room": 1}')
    selectors._context('{"room": 2}')
    assert selectors._context('{"room": 1}') is first  # shared while kept
    selectors._context('{"room": 3}')
    assert list(selectors._contexts) == ['{"room": 2}', '{"room": 3}']  # room 1 goes, room 2 stays

async def _missing_room(workspace_id):
    from serving.loop_db import close_loop_pool
    from serving.selectors import room_route_on_loop

    try:
        return await room_route_on_loop(workspace_id, "no-such-room")
    finally:
        await close_loop_pool()


def test_a_trace_the_loop_cannot_insert_is_stored_by_the_rescue_path(platform, harness, workspace):
    """A trace id stored already: the lone insert on the loop fails and the row-by-row path keeps one row."""
    from serving.loop_db import close_loop_pool
    from serving.selectors import trace_sent_request
    from serving.traces import trace_row, trace_store_on_loop

    answer = asgi([(REPLY, HELLO, bearer(platform))] * 2)[1]
    stored = Trace.objects.get(trace_id=answer["json"]["trace_id"])
    sent = trace_sent_request(stored)  # the loop stored the prompt's parts before the trace referring to them
    assert sent["messages"][0]["role"] == "system" and sent["messages"][0]["content"] and sent["tools"]
    row = trace_row(workspace_id=workspace.pk, data=stored.data, source=Trace.Source.API, harness_id=harness.pk,
                    version_id=stored.harness_version_id)

    async def again():
        try:
            await trace_store_on_loop(row)
        finally:
            await close_loop_pool()

    asyncio.run(again())
    assert Trace.objects.filter(trace_id=stored.trace_id).count() == 1


def _loop_rows(workspace, harness, count, **changes):
    import time
    import uuid

    from serving.traces import trace_row

    rows = []
    for i in range(count):
        data = {"trace_id": uuid.uuid4().hex, "input": {"message": f"m{i}", "viewer_id": f"v{i}", "room_id": "r1"},
                "arm": "label:production", "backend": "scripted", "outcome": "replied", "silent": False,
                "reply": "ok", "duration_ms": 1.0, "model_calls": 1, "tokens_in": 1, "tokens_out": 1,
                "hooks_fired": [], "started_at": time.time(), "steps": [],
                "request": {"messages": [{"role": "system", "content": "You are Mia."},
                                         {"role": "user", "content": f"m{i}"}], "tools": []}}
        rows.append(trace_row(workspace_id=workspace.pk, data=data, source=Trace.Source.API, harness_id=harness.pk,
                              version_id=None))
    for index, fields in changes.items():
        for name, value in fields.items():
            setattr(rows[int(index.removeprefix("row"))], name, value)
    return rows


def test_traces_stored_at_once_on_the_loop_share_inserts_and_a_refused_row_keeps_the_others(
        harness, workspace, monkeypatch):
    """Replies that finish while an insert runs have their traces inserted together; a row PostgreSQL refuses
    sends the batch row by row, where it becomes a stub and the others are stored whole."""
    from serving import traces
    from serving.loop_db import close_loop_pool
    from serving.selectors import trace_sent_request

    inserts = []
    real = traces._inserted_on_loop

    async def counted(rows):
        inserts.append(len(rows))
        await real(rows)

    monkeypatch.setattr(traces, "_inserted_on_loop", counted)
    rows = _loop_rows(workspace, harness, 40, row7={"outcome": "x" * 40})  # too long for its column

    async def at_once():
        try:
            first = asyncio.ensure_future(traces.trace_store_on_loop(rows[0]))
            await asyncio.sleep(0)  # the first insert under way: the rest arrive meanwhile
            cancelled = asyncio.ensure_future(traces.trace_store_on_loop(rows[1]))
            rest = asyncio.gather(*(traces.trace_store_on_loop(row) for row in rows[2:]))
            await asyncio.sleep(0)
            cancelled.cancel()  # its reply went away: its trace is stored all the same
            await first
            await rest
        finally:
            await close_loop_pool()

    asyncio.run(at_once())
    stored = {t.trace_id: t for t in Trace.objects.filter(trace_id__in=[row.trace_id for row in rows])}
    assert len(stored) == 40 and stored[rows[7].trace_id].data.get("storage_error")
    assert all(trace_sent_request(stored[row.trace_id]) == {"messages": [
        {"role": "system", "content": "You are Mia."}, {"role": "user", "content": f"m{i}"}], "tools": []}
        for i, row in enumerate(rows) if i != 7)
    assert inserts == [1, 39] + [1] * 39  # the others gathered in one insert; refused, each row alone


def test_a_new_key_is_checked_on_the_loop_and_an_unknown_one_refused_by_django(platform, workspace):
    other = api_key_create(actor=Actor.system("t"), workspace=workspace, name="second", scopes=["read"])[1]
    first, second, unknown = asgi([(REPLY, HELLO, bearer(platform)), (REPLY, HELLO, bearer(other)),
                                   (REPLY, HELLO, bearer(other[:-4] + "abcd"))])
    assert first["django"] and not second["django"] and second["status"] == 200  # checked in a thread, not Django
    assert unknown["django"] and unknown["status"] == 401


def test_a_harness_under_an_experiment_is_answered_by_django(platform, harness, workspace):
    """An arm's reply records the viewer's exposure and publishes the dashboard: the request cycle's work."""
    from serving.experiments.lifecycle import experiment_create, experiment_start
    from serving.models import Exposure

    system = Actor.system("t")
    asgi([(REPLY, HELLO, bearer(platform))])
    experiment = experiment_create(actor=system, workspace=workspace, key="lean", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=system, experiment=experiment)
    answers = asgi([(REPLY, {**HELLO, "viewer_id": f"x{i}"}, bearer(platform)) for i in range(4)])
    assert all(a["django"] and a["status"] == 200 for a in answers)
    assert {a["json"]["arm"].rsplit(":", 1)[-1] for a in answers} <= {"control", "harness"}
    assert Exposure.objects.filter(experiment=experiment).count() == 4


def test_the_loops_own_connections_failing_hands_the_reply_to_django(platform, monkeypatch):
    """PostgreSQL unreachable from the loop's pool, or Redis from its asyncio client: Django's route answers with
    its own connections (here they work), and admits the request itself."""
    import psycopg
    import redis

    from serving import lean_reply

    remembered = asgi([(REPLY, HELLO, bearer(platform))])[0]  # the route is remembered from here on

    async def pool_down(*_args, **_kwargs):
        raise psycopg.OperationalError("connection refused")

    async def redis_down(*_args, **_kwargs):
        raise redis.ConnectionError("connection refused")

    monkeypatch.setattr(lean_reply, "room_route_on_loop", pool_down)
    no_pool = asgi([(REPLY, {**HELLO, "viewer_id": "v2"}, bearer(platform))])[0]
    monkeypatch.undo()
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    monkeypatch.setattr(lean_reply, "reply_admit_async", redis_down)
    no_redis = asgi([(REPLY, {**HELLO, "viewer_id": "v3"}, bearer(platform))])[0]
    assert remembered["status"] == no_pool["status"] == no_redis["status"] == 200
    assert no_pool["django"] and no_redis["django"]
    assert no_pool["json"]["outcome"] == no_redis["json"]["outcome"] == "replied"
    assert Trace.objects.filter(trace_id__in=[no_pool["json"]["trace_id"], no_redis["json"]["trace_id"]]).count() == 2
