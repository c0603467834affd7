"""Soak: replies and event batches at a fixed rate against the deployed stack, minute by minute. Prints figures;
exits 1 when the run shows a leak, a loss or an error it did not inject.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/0 \
        .venv/bin/python benchmarks/soak.py [--minutes 10] [--replies-per-s 20] [--batches-per-s 2] \
        [--batch-size 100] [--workers 2]

The stack is the one docker-compose.yml deploys: uvicorn with `--workers` processes, PostgreSQL, Redis and a
Celery worker (queues cpu, gpu), in a throw-away database `<your database>_soak` and Redis database 9 (both
emptied first), with the demo workspace (`seed_demo`) and an instant scripted model, so the figures are the
platform's, not a model's. A two-arm experiment (the harness's production and staging labels) runs on the demo
room, so replies are assigned arms and every event is an item-page view to fold into its viewer's exposure.
The scripted model answers as the demo harness's hooks require (a reply skill and a product lookup first).

Each minute prints: replies sent, their p50/p99 latency, errors (any answer but 200 with outcome `replied`, or
a failed request), event batches and events accepted, each process's resident memory (server master and
workers, the Celery worker's processes), PostgreSQL connections to the soak database and Redis clients, and
stored vs sent: traces found for the trace ids returned so far, events stored for the events accepted so far.

It fails (exit 1) when:
- an error appears (nothing is injected here, so every error is one the run did not cause);
- after the run (and 10 s for the buffered trace writer), a returned trace id has no stored trace, or an
  accepted event is not stored exactly once;
- memory grows without bound: the sum of all processes' resident memory over the last third of the run is
  more than max(10 %, 40 MB) above its level in the first third after the first minute (start-up's imports and
  caches filling). Ten minutes cannot prove the absence of a slow leak; it does catch one of a few MB a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402

DB = "harnessops_soak"
REDIS_DB = 9
# What the demo harness's hooks accept: a reply skill loaded and the product looked up, then the reply.
STEPS = json.dumps([{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                                    {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}]},
                    "The Merino Crew-Neck Sweater is $71.2 right now, down from $89."])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--replies-per-s", type=float, default=20.0)
    parser.add_argument("--batches-per-s", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="uvicorn processes")
    parser.add_argument("--port", type=int, default=8600 + os.getpid() % 200)
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not base.startswith("postgres"):
        raise SystemExit("The soak needs PostgreSQL: set DATABASE_URL.")
    redis_base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
    import psycopg
    import redis

    server_url = base.rsplit("/", 1)[0]
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
    url, redis_url = f"{server_url}/{DB}", f"{redis_base}/{REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": redis_url, "HARNESSOPS_ADMIN_PASSWORD": "soak-pass-1",
           "HARNESSOPS_MODEL_BACKEND": "scripted", "HARNESSOPS_SCRIPTED_STEPS": STEPS,
           "HARNESSOPS_LIVE_JUDGE_RATE": "0", "DJANGO_SETTINGS_MODULE": "console.settings",
           # one platform key sends every reply: its per-minute limit (600 by default) above the soak's rate
           "HARNESSOPS_REPLY_RATE_PER_MINUTE": str(int(120 * args.replies_per_s) + 60)}
    os.environ.update(env)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, capture_output=True)

    import django

    django.setup()
    token = _setup()
    import servers as asgi

    worker = subprocess.Popen([str(Path(sys.executable).parent / "celery"), "-A", "console", "worker", "-Q", "cpu,gpu",
                               "--concurrency", "1", "-l", "warning"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = asgi.start("uvicorn", args.port, workers=args.workers, env=env, cwd=ROOT)
    print(f"soak: {asgi.label('uvicorn', args.workers)} + a Celery worker, PostgreSQL and Redis on this host "
          f"({os.cpu_count()} CPUs); {args.replies_per_s:g} replies/s and {args.batches_per_s:g} batches/s of "
          f"{args.batch_size} events for {args.minutes:g} min")
    try:
        soak = Soak(args, token, url, redis_url, {"server": server.pid, "worker": worker.pid})
        asyncio.run(soak.run())
        failures = soak.verdict()
    finally:
        asgi.stop(server)
        worker.terminate()
        worker.wait(timeout=30)
    for failure in failures:
        print(f"FAIL: {failure}")
    print("soak ok" if not failures else f"soak failed ({len(failures)})")
    return 1 if failures else 0


def _setup() -> str:
    """An API key for replies and events, and a running two-arm experiment on the demo room's harness."""
    from harness.models import Harness
    from serving.experiments.lifecycle import experiment_create, experiment_start
    from serving.services import api_key_create
    from workspaces.access import Actor
    from workspaces.models import Workspace

    system = Actor.system("soak")
    workspace = Workspace.objects.get(slug="demo")
    harness = Harness.objects.get(workspace=workspace, name="avatar")
    experiment = experiment_create(actor=system, workspace=workspace, key="soak", harness=harness,
                                   arms=[{"name": "control", "weight": 0.5, "kind": "label", "label": "production"},
                                         {"name": "candidate", "weight": 0.5, "kind": "label",
                                          "label": "staging"}])
    experiment_start(actor=system, experiment=experiment)
    return api_key_create(actor=system, workspace=workspace, name="soak", scopes=["read", "ingest"])[1]


class Soak:
    def __init__(self, args, token: str, url: str, redis_url: str, roots: dict[str, int]):
        self.args, self.url, self.redis_url, self.roots = args, url, redis_url, roots
        self.headers = {"Authorization": f"Bearer {token}"}
        self.latencies: list[float] = []  # this minute's
        self.errors: list[str] = []
        self.minute_errors = 0
        self.replies = self.batches = 0
        self.trace_ids: list[str] = []
        self.accepted_ids: list[str] = []
        self.memory: list[float] = []  # MB, all processes, a value a minute

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.args.port}", headers=self.headers,
                                     timeout=30, limits=limits) as client:
            end = time.monotonic() + 60 * self.args.minutes
            tasks: set[asyncio.Task] = set()
            producers = [self._every(1 / self.args.replies_per_s, end, lambda: self._reply(client), tasks),
                         self._every(1 / self.args.batches_per_s, end, lambda: self._events(client), tasks),
                         self._report(end)]
            print(f"{'min':>4} {'replies':>7} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} {'batches':>7} "
                  f"{'events':>8}  {'RSS MB by process':<44} {'PG':>3} {'Redis':>5} {'traces stored/sent':>19} "
                  f"{'events stored/sent':>19}")
            await asyncio.gather(*producers)
            if tasks:
                await asyncio.gather(*tasks)

    async def _every(self, period: float, end: float, make, tasks: set) -> None:
        """Start `make()` every `period` seconds on a fixed schedule (a slow answer does not slow the rate)."""
        due = time.monotonic()
        while due < end:
            task = asyncio.create_task(make())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            due += period
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def _reply(self, client: httpx.AsyncClient) -> None:
        self.replies += 1
        viewer = f"soak-{self.replies % 5000}"
        started = time.perf_counter()
        try:
            response = await client.post("/api/v1/rooms/demo-room/reply",
                                         json={"message": "Is the sweater in stock?", "viewer_id": viewer})
        except httpx.HTTPError as error:
            return self._error(f"reply: {type(error).__name__}: {error}")
        self.latencies.append((time.perf_counter() - started) * 1000)
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.status_code != 200 or body.get("outcome") != "replied":
            return self._error(f"reply: {response.status_code} {str(body)[:200]}")
        self.trace_ids.append(body["trace_id"])

    async def _events(self, client: httpx.AsyncClient) -> None:
        self.batches += 1
        now = datetime.now(UTC).isoformat()
        events = [{"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": f"soak-{i % 5000}",
                   "room_id": "demo-room", "item_id": "L001", "ts": now}
                  for i in range(self.batches * self.args.batch_size, (self.batches + 1) * self.args.batch_size)]
        try:
            response = await client.post("/api/v1/events", json={"events": events})
        except httpx.HTTPError as error:
            return self._error(f"events: {type(error).__name__}: {error}")
        body = response.json() if response.status_code == 200 else {}
        if response.status_code != 200 or body.get("accepted") != len(events):
            return self._error(f"events: {response.status_code} {str(body or response.text)[:200]}")
        self.accepted_ids += [event["event_id"] for event in events]

    def _error(self, what: str) -> None:
        self.minute_errors += 1
        if len(self.errors) < 20:
            self.errors.append(what)

    async def _report(self, end: float) -> None:
        minute = 0
        while time.monotonic() < end:
            await asyncio.sleep(min(60.0, max(0.0, end - time.monotonic())))
            minute += 1
            latencies, self.latencies = sorted(self.latencies), []
            errors, self.minute_errors = self.minute_errors, 0
            rss = {name: _tree_rss_mb(pid) for name, pid in self.roots.items()}
            self.memory.append(sum(sum(values) for values in rss.values()))
            stored_traces, stored_events, pg, clients = await asyncio.to_thread(self._stored)
            shown = "; ".join(f"{name} {'+'.join(f'{v:.0f}' for v in values)}" for name, values in rss.items())
            p50 = statistics.median(latencies) if latencies else float("nan")
            p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else float("nan")
            print(f"{minute:>4} {len(latencies):>7} {p50:>7.1f} {p99:>7.1f} {errors:>6} {self.batches:>7} "
                  f"{len(self.accepted_ids):>8}  {shown:<44} {pg:>3} {clients:>5} "
                  f"{stored_traces:>9}/{len(self.trace_ids):<9} {stored_events:>9}/{len(self.accepted_ids):<9}",
                  flush=True)

    def _stored(self) -> tuple[int, int, int, int]:
        import psycopg
        import redis

        with psycopg.connect(self.url) as conn:
            traces = conn.execute("SELECT count(*) FROM serving_trace WHERE trace_id = ANY(%s)",
                                  [list(self.trace_ids)]).fetchone()[0]
            events = conn.execute("SELECT count(*) FROM serving_event WHERE event_id = ANY(%s)",
                                  [list(self.accepted_ids)]).fetchone()[0]
            pg = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [DB]).fetchone()[0] - 1
        clients = redis.Redis.from_url(self.redis_url).info("clients")["connected_clients"] - 1
        return traces, events, pg, clients

    def verdict(self) -> list[str]:
        failures = [f"{len(self.errors)}+ errors the run did not inject, first: {self.errors[0]}"] if self.errors else []
        time.sleep(10)  # the buffered trace writer flushes within a few seconds
        traces, events, _, _ = self._stored()
        if traces != len(set(self.trace_ids)):
            failures.append(f"{len(set(self.trace_ids)) - traces} returned trace ids have no stored trace")
        if events != len(self.accepted_ids):
            failures.append(f"{len(self.accepted_ids)} events accepted, {events} stored")
        settled = self.memory[1:]
        if len(settled) >= 3:
            third = max(1, len(settled) // 3)
            early, late = statistics.mean(settled[:third]), statistics.mean(settled[-third:])
            print(f"memory, all processes: {early:.0f} MB in the first third after minute 1, {late:.0f} MB in the "
                  f"last third")
            if late - early > max(0.10 * early, 40.0):
                failures.append(f"memory grew {late - early:.0f} MB ({early:.0f} → {late:.0f} MB)")
        return failures


def _tree_rss_mb(pid: int) -> list[float]:
    """Resident memory of `pid` and each of its descendants (MB), in tree order."""
    found = []
    pending = [pid]
    while pending:
        current = pending.pop(0)
        try:
            with open(f"/proc/{current}/status") as status:
                found.append(next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024)
            with open(f"/proc/{current}/task/{current}/children") as children:
                pending += [int(child) for child in children.read().split()]
        except (OSError, StopIteration):
            continue
    return found


if __name__ == "__main__":
    sys.exit(main())
