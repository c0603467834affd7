"""The reply request in process, on PostgreSQL and Redis: what it asks of them and what it costs. Prints figures.

    DATABASE_URL=postgres://… REDIS_URL=redis://… .venv/bin/python benchmarks/reply_path.py [--requests 50 200]

Migrates the database and seeds the demo workspace (`seed_demo`; a database you may write to), then posts
replies through Django's test client (the whole stack but the ASGI server: middleware, key check, rate
limit, routing, the turn with an instant scripted model, the trace write) and prints the SQL statements
and Redis commands of one reply, then wall and CPU p50/p95 per request at growing request counts (the cost per
request should not grow with the count). To compare checkouts in one sitting, run this script twice, the
second time with `--root <other checkout>` (its code, this script). `--asgi` also calls the ASGI application
(console.asgi) in process, as a server would, on one event loop, before any server's HTTP parsing: there the
everyday reply takes the route on the event loop (serving.lean_reply) where the test client takes Django's
route (middleware, ninja, the sync view in a thread and the turn back on a loop); it then times a full garbage
collection over what the process holds, with start-up's objects frozen (console.asgi) and not (gc_pause.py).
`--otlp-endpoint URL` times each count again with OpenTelemetry export on (serving.otel) towards URL - give it a
dead collector (`http://127.0.0.1:9`, refused; `http://10.255.255.1:4318`, never answers) to see what one costs
a reply: the figures with export off and on are printed side by side (docs/observability.md).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv:  # measure another checkout (e.g. main) with this script
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))

STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}]},
         "The Merino Crew-Neck Sweater is $71.2 right now, down from $89."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--profile", type=int, default=100, help="replies to profile (CPU time by package); 0: none")
    parser.add_argument("--root", help="the checkout whose code to measure (default: this one)")
    parser.add_argument("--asgi", action="store_true", help="also through the ASGI application, in process")
    parser.add_argument("--top", type=int, default=0, help="with --profile, also the N functions of most self time")
    parser.add_argument("--otlp-endpoint", help="also time replies with OpenTelemetry export to this collector")
    args = parser.parse_args()
    if not (os.environ.get("DATABASE_URL", "").startswith("postgres") and os.environ.get("REDIS_URL")):
        raise SystemExit("Set DATABASE_URL (PostgreSQL) and REDIS_URL: this measures the deployed path.")
    os.environ.update(DJANGO_SETTINGS_MODULE="console.settings", HARNESSOPS_MODEL_BACKEND="scripted",
                      HARNESSOPS_SCRIPTED_STEPS=json.dumps(STEPS), HARNESSOPS_REPLY_RATE_PER_MINUTE="100000000")
    for argv in (["migrate", "-v0"], ["seed_demo"]):
        subprocess.run([sys.executable, str(ROOT / "manage.py"), *argv], cwd=ROOT, check=True,
                       capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    import django

    os.chdir(ROOT)  # Celery's Django fixup puts the working directory first on sys.path
    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from redis.client import Redis

    from serving.services import api_key_create
    from workspaces.access import Actor
    from workspaces.models import Workspace

    workspace = Workspace.objects.get(slug="demo")
    token = api_key_create(actor=Actor.system("bench"), workspace=workspace, name=f"bench{time.time_ns()}",
                           scopes=["read"])[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def reply(i: int) -> None:
        response = client.post("/api/v1/rooms/demo-room/reply", json.dumps(
            {"message": "How much is L001 now?", "viewer_id": f"bench-{i}"}), content_type="application/json")
        assert response.status_code == 200 and response.json()["outcome"] == "replied", response.content

    for i in range(20):  # warm-up: imports, compiled hooks, pooled connections
        reply(i)
    commands = []
    real = Redis.execute_command

    def counted(self, *argv, **kwargs):
        commands.append(str(argv[0]))
        return real(self, *argv, **kwargs)

    Redis.execute_command = counted
    with CaptureQueriesContext(connection) as queries:
        reply(-1)
    Redis.execute_command = real
    statements = [q["sql"].split()[0] + " " + next((w for w in q["sql"].split() if w.startswith('"')), "")
                  for q in queries.captured_queries]
    print(f"one reply: {len(statements)} SQL statements ({', '.join(statements)}); "
          f"{len(commands)} Redis commands ({', '.join(commands)})")
    asgi_reply = None
    for count in args.requests:
        times, cpu = timed(reply, count)
        # CPU time of this process (the request's Python, not PostgreSQL's or Redis's): steadier than wall
        # time on a loaded machine.
        print(f"{count:>5} replies in process: wall p50 {times[len(times) // 2]:.1f} ms, "
              f"p95 {times[int(len(times) * 0.95)]:.1f} ms; CPU p50 {cpu[len(cpu) // 2]:.2f} ms, "
              f"p95 {cpu[int(len(cpu) * 0.95)]:.2f} ms", flush=True)
        if args.otlp_endpoint:
            exported(reply, count, args.otlp_endpoint, "in process")

        if args.asgi:
            asgi_reply = asgi_reply or warmed(asgi_client(token))
            times, cpu = timed(asgi_reply, count, offset=60_000)
            print(f"{count:>5} replies through the ASGI app: wall p50 {times[len(times) // 2]:.1f} ms, "
                  f"p95 {times[int(len(times) * 0.95)]:.1f} ms; CPU p50 {cpu[len(cpu) // 2]:.2f} ms, "
                  f"p95 {cpu[int(len(cpu) * 0.95)]:.2f} ms", flush=True)
            if args.otlp_endpoint:
                exported(asgi_reply, count, args.otlp_endpoint, "through the ASGI app", offset=70_000)

    if args.asgi:  # what a serving process has tracked by now, and a full collection's pause over it
        import gc

        from gc_pause import pauses_ms, report

        report("after these replies, start-up frozen", pauses_ms(7))
        gc.unfreeze()
        report("start-up unfrozen (before)          ", pauses_ms(7))
        gc.freeze()

    if args.profile:
        profile_replies(reply, args.profile, "through the test client", args.top)
        if args.asgi:
            profile_replies(asgi_reply or warmed(asgi_client(token)), args.profile, "through the ASGI app",
                            args.top)


def exported(reply, count: int, endpoint: str, how: str, offset: int = 80_000) -> None:
    """`count` replies with export off, then on towards `endpoint`, then off again (the machine's drift shows
    as the difference between the two off runs); each: wall and CPU p50/p95."""
    from serving import otel

    def figures(label: str) -> str:
        times, cpu = timed(reply, count, offset=offset)
        return (f"{label}: wall p50 {times[len(times) // 2]:.2f} ms, p95 {times[int(len(times) * 0.95)]:.2f} ms; "
                f"CPU p50 {cpu[len(cpu) // 2]:.2f} ms, p95 {cpu[int(len(cpu) * 0.95)]:.2f} ms")

    rows = [figures("export off"), observed("what a reply pays to be observed, export off")]
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    otel.reset()
    try:
        assert otel.tracer() is not None
        rows.append(figures(f"export on → {endpoint}"))
        rows.append(observed("what a reply pays to be observed, export on"))
    finally:
        del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
        shut = time.perf_counter()
        otel.reset()  # the processor's shutdown tries the queued spans once more
        shutdown_s = time.perf_counter() - shut
    rows.append(figures("export off again"))
    print(f"{count:>5} replies {how}, OpenTelemetry:\n    " + "\n    ".join(rows)
          + f"\n    (the exporter's shutdown took {shutdown_s:.1f} s)", flush=True)


def observed(label: str, turns: int = 2000) -> str:
    """CPU of `serving.observability.reply_observed` (metrics and spans of one stored trace) per reply: in the
    replying thread (what the reply waits for), and in the whole process once the span builder has caught up."""
    from serving import otel
    from serving.models import Trace
    from serving.observability import reply_observed

    trace = Trace.objects.filter(outcome="replied").order_by("-id").first().data
    started, started_thread = time.process_time(), time.thread_time()
    for _ in range(turns):
        reply_observed(trace, harness="avatar", arm="label:production")
    in_thread = (time.thread_time() - started_thread) / turns * 1e6
    if otel._state["builder"] is not None:
        otel._state["builder"].pending.join()  # the spans built (their export is the processor's thread's)
    in_process = (time.process_time() - started) / turns * 1e6
    return (f"{label}: {in_thread:.0f} µs CPU in the replying thread, {in_process:.0f} µs in the process "
            f"({len(trace['steps'])} steps a turn, {turns} turns, {otel.dropped} turns' spans dropped so far)")


def warmed(reply):
    for i in range(20):
        reply(50_000 + i)
    return reply


def timed(reply, count: int, offset: int = 0) -> tuple[list[float], list[float]]:
    """Sorted wall and CPU milliseconds of `count` replies."""
    times, cpu = [], []
    for i in range(count):
        started, started_cpu = time.perf_counter(), time.process_time()
        reply(offset + i)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return sorted(times), sorted(cpu)


def asgi_client(token: str):
    """`reply(i)` through console.asgi.application on one event loop, as an ASGI server calls it."""
    import asyncio

    from console.asgi import application

    loop = asyncio.new_event_loop()
    path = "/api/v1/rooms/demo-room/reply"

    async def call(i: int) -> None:
        body = json.dumps({"message": "How much is L001 now?", "viewer_id": f"asgi-{i}"}).encode()
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode()),
                             (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
        inbox = [{"type": "http.request", "body": body, "more_body": False}]
        done = asyncio.Event()
        sent = []

        async def receive():
            if inbox:
                return inbox.pop()
            await done.wait()  # Django listens for a disconnect until the response is sent
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await application(scope, receive, send)
        status = next(m["status"] for m in sent if m["type"] == "http.response.start")
        payload = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
        assert status == 200 and payload["outcome"] == "replied", payload

    return lambda i: loop.run_until_complete(call(i))


def profile_replies(reply, count: int, how: str, top: int = 0) -> None:
    """Where a reply's CPU time goes: cProfile with process_time, self time grouped by package."""
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for i in range(count):
        reply(10_000 + i)
    profiler.disable()
    # Through the test client the turn runs on async_to_sync's event-loop thread, which cProfile does not follow:
    # the process's CPU time it takes lands on the lock the request thread waits on.
    groups = {"the turn (async_to_sync's thread; lock wait)": "'acquire' of '_thread.lock",
              "agent loop (harness/)": "/harness/", "serving/": "/serving/", "console/": "/console/",
              "django (ORM, request, middleware)": "/django/", "ninja, pydantic": ("/ninja/", "/pydantic"),
              "psycopg": "/psycopg", "redis client": "/redis/", "asgiref (async_to_sync)": "/asgiref/",
              "asyncio, threading": ("/asyncio/", "threading.py", "concurrent/"),
              "json, re, uuid, logging": ("/json/", "/re/", "uuid.py", "/logging/")}
    shares = dict.fromkeys([*groups, "other"], 0.0)
    stats = pstats.Stats(profiler).stats
    for (file, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        where = f"{file}:{function}"
        label = next((label for label, needles in groups.items()
                      if any(n in where for n in ((needles,) if isinstance(needles, str) else needles))), "other")
        shares[label] += tottime
    total = sum(shares.values())
    print(f"where a reply's CPU time goes {how} (cProfile self time, {count} replies, "
          f"{sum(v[1] for v in stats.values()) / count:.0f} Python calls a reply):")
    for label, spent in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"  {label:<46} {100 * spent / total:5.1f}%")
    if top:
        print(f"  the {top} functions of most self time (µs a reply, calls a reply):")
        ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
        for (file, line, function), (_cc, calls, tottime, _ct, _callers) in ranked:
            where = f"{'/'.join(Path(file).parts[-2:])}:{line}" if file != "~" else "built-in"
            print(f"    {1e6 * tottime / count:7.1f} µs {calls / count:6.1f}  {function[:60]}  ({where})")


if __name__ == "__main__":
    main()
