"""Event ingestion against raw COPY of the same rows, and the dashboard snapshot as ingested events grow.
Prints figures; asserts only that what was sent was counted.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/ingest.py \
        [--viewers 20000] [--sizes 10 100 1000 5000] [--api-batches 40] [--concurrency 4] \
        [--snapshot-at 100000 1000000 10000000]

Everything runs in a throw-away database `<your database>_bench` on the server of DATABASE_URL, with one
running two-arm experiment whose viewers are all exposed, so every event is an item-page view that the
ingest must fold into an exposure and a rollup (the most work an event can cause).

1. In-process ingest (`events_ingest`, what the API calls: validation, idempotent insert, rollup fold) by
   batch size, each batch followed by raw COPY of a twin batch (same rows, fresh ids, tuples built
   beforehand, one transaction a batch, one connection), so both see the same load; the ratio is the sum of
   COPY times over the sum of ingest times. Batches above the API's 1,000 are in-process only.
2. POST /api/v1/events through an ASGI server (`--server`, `--workers`; batches of 1,000, `--concurrency` clients, bodies encoded
   beforehand), in rounds alternating with raw COPY of as many rows.
3. The table is filled through `events_ingest` (batches of 1,000, so the rollups are what ingest made) and
   the dashboard snapshot (`experiment_snapshot`, median of 7) is timed at each of --snapshot-at events.

Exposures are written in bulk (GrowthBook assignment, as `assign_viewer` would, with the rollups' user
counts), spread over the last --exposure-minutes minutes: the rollups have one row per arm and minute of
first exposure, and that, not the number of events, is what the snapshot reads.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB = os.environ.get("DATABASE_URL", "/postgres").rsplit("/", 1)[1] + "_bench"  # beside your own database
COLUMNS = "workspace_id, event_id, type, viewer_id, room_id, item_id, ts, received_at"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", type=int, default=20_000)
    parser.add_argument("--exposure-minutes", type=int, default=60)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000, 5000])
    parser.add_argument("--rows-per-size", type=int, default=20_000)
    parser.add_argument("--api-batches", type=int, default=40, help="0 skips the API")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--server", default="uvicorn", choices=["daphne", "uvicorn"],
                        help="the ASGI server the API is measured under (benchmarks/servers.py)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn processes (daphne: 1)")
    parser.add_argument("--snapshot-at", type=int, nargs="*", default=[100_000, 1_000_000, 10_000_000])
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not base.startswith("postgres"):
        raise SystemExit("This benchmark needs PostgreSQL: set DATABASE_URL.")
    import psycopg

    server_url = base.rsplit("/", 1)[0]
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
    url = f"{server_url}/{DB}"
    env = {**os.environ, "DATABASE_URL": url, "HARNESSOPS_ADMIN_PASSWORD": "bench-pass-1",
           "HARNESSOPS_MODEL_BACKEND": "scripted", "HARNESSOPS_SCRIPTED_STEPS": '["hi"]',
           "HARNESSOPS_LIVE_JUDGE_RATE": "0", "DJANGO_SETTINGS_MODULE": "console.settings"}
    env.pop("REDIS_URL", None)
    os.environ.update(env)
    os.environ.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, capture_output=True)

    import django

    django.setup()
    from workspaces.models import Workspace

    workspace = Workspace.objects.get(slug="demo")
    experiment = _experiment(workspace, args.viewers, args.exposure_minutes)
    viewers = [f"bench-{i}" for i in range(args.viewers)]
    print(f"PostgreSQL {psycopg.connect(url).info.server_version}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start; {args.viewers:,} exposed viewers over {args.exposure_minutes} min")
    sent = _scaling(url, workspace, viewers, args.sizes, args.rows_per_size)
    if args.api_batches:
        sent += _api(url, workspace, viewers, args.api_batches, args.concurrency, env, args.server, args.workers)
    _snapshots(url, workspace, experiment, viewers, sent, args.snapshot_at)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def _experiment(workspace, n_viewers: int, minutes: int):
    """A running two-arm experiment whose viewers were exposed over the last `minutes` minutes."""
    from django.db import connection
    from django.utils import timezone

    from harness.models import Harness
    from serving.experiments.assignment import assign
    from serving.experiments.lifecycle import experiment_create, experiment_start
    from serving.models import Exposure, Rollup
    from workspaces.access import Actor

    system = Actor.system("bench")
    experiment = experiment_create(actor=system, workspace=workspace, key="bench",
                                   harness=Harness.objects.get(workspace=workspace, name="avatar"),
                                   arms=[{"name": "control", "weight": 1, "kind": "react"},
                                         {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=system, experiment=experiment)
    now = timezone.now()
    started = now - timedelta(minutes=minutes)
    type(experiment).objects.filter(pk=experiment.pk).update(started_at=started)
    experiment.refresh_from_db()
    arms = list(experiment.arms.all())
    exposures, users = [], {}
    for i in range(n_viewers):
        viewer = f"bench-{i}"
        index = assign(experiment.seed, viewer, [a.weight for a in arms], coverage=experiment.coverage)
        seen = started + timedelta(seconds=i * minutes * 60 / n_viewers)
        bucket = seen.replace(second=0, microsecond=0)
        exposures.append(Exposure(experiment=experiment, arm=arms[index], viewer_id=viewer, bucket=bucket,
                                  first_seen_at=seen))
        users[(arms[index].pk, bucket)] = users.get((arms[index].pk, bucket), 0) + 1
    Exposure.objects.bulk_create(exposures, batch_size=5000)
    Rollup.objects.bulk_create([Rollup(experiment=experiment, arm_id=arm_id, bucket=bucket, users=n)
                                for (arm_id, bucket), n in sorted(users.items())])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE serving_exposure")  # what autovacuum would have done by now
    return experiment


def _batch(viewers, start: int, size: int, now: str) -> list[dict]:
    return [{"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": viewers[(start + i) % len(viewers)],
             "room_id": "demo-room", "item_id": "L001", "ts": now} for i in range(size)]


def _copy_rows(conn, rows) -> float:
    """Raw COPY of prepared rows in one transaction; seconds."""
    started = time.perf_counter()
    with conn.transaction(), conn.cursor() as cursor, \
            cursor.copy(f"COPY serving_event ({COLUMNS}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    return time.perf_counter() - started


def _twin_rows(workspace_id, events) -> list[tuple]:
    """The same rows as `events` with fresh ids, as COPY takes them."""
    now = datetime.now(UTC)
    ts = datetime.fromisoformat(events[0]["ts"])
    return [(workspace_id, uuid.uuid4().hex, e["type"], e["viewer_id"], e["room_id"], e["item_id"], ts, now)
            for e in events]


def _scaling(url, workspace, viewers, sizes, rows_per_size) -> int:
    import psycopg

    from serving.experiments import ingest
    from workspaces.access import Actor

    ingest.MAX_EVENTS = max(ingest.MAX_EVENTS, *sizes)  # in-process only: the API keeps its cap
    ingester = Actor.system("bench")
    print("\nIn-process ingest (validation + idempotent insert + rollup fold) vs raw COPY of the same rows, "
          "interleaved batch by batch:")
    print(f"{'batch':>6} {'batches':>7} {'ingest ev/s':>12} {'COPY rows/s':>12} {'ratio':>6} "
          f"{'ms a batch':>11} {'µs an event':>12} {'replayed batch':>15}")
    sent = offset = 0
    with psycopg.connect(url) as conn:
        for size in sizes:
            batches = max(3, rows_per_size // size)
            ingest_s = copy_s = 0.0
            first = None
            for _ in range(batches):
                events = _batch(viewers, offset, size, datetime.now(UTC).isoformat())
                offset += size
                twin = _twin_rows(workspace.pk, events)
                started = time.perf_counter()
                result = ingest.events_ingest(actor=ingester, workspace=workspace, events=events)
                ingest_s += time.perf_counter() - started
                assert result.accepted == size and not result.errors, result
                copy_s += _copy_rows(conn, twin)
                first = first or events
            sent += batches * size
            started = time.perf_counter()
            again = ingest.events_ingest(actor=ingester, workspace=workspace, events=first)
            replay_ms = (time.perf_counter() - started) * 1000
            assert again.accepted == 0 and again.duplicates == size
            n = batches * size
            print(f"{size:>6} {batches:>7} {n / ingest_s:>12,.0f} {n / copy_s:>12,.0f} {copy_s / ingest_s:>5.2f}× "
                  f"{1000 * ingest_s / batches:>11.1f} {1e6 * ingest_s / n:>12.1f} {replay_ms:>12.1f} ms"
                  + ("  (above the API cap)" if size > 1000 else ""))
    return sent


def _api(url, workspace, viewers, batches, concurrency, env, server_name, workers) -> int:
    import psycopg
    import servers as asgi

    from serving.services import api_key_create
    from workspaces.access import Actor

    token = api_key_create(actor=Actor.system("bench"), workspace=workspace, name="bench", scopes=["ingest"])[1]
    port = 8700 + os.getpid() % 200
    server = asgi.start(server_name, port, workers=workers, env=env, cwd=ROOT)
    rounds = max(1, batches // 10)
    api_s = copy_s = 0.0
    spent = dict.fromkeys(_cpu_now(server.pid), 0.0)  # CPU seconds while the API is loaded, by whom
    try:
        warmed = [0]  # events the warm-up sent: they are stored and folded like the timed ones

        def warm_up() -> None:
            # New events every round (the same ones again would be duplicates, not accepted), for the viewers
            # after the timed batches' range, so the warm-up does not pile extra views on the first viewers.
            start = batches * 1000 + warmed[0]
            bodies = [json.dumps({"events": _batch(viewers, start + i * 1000, 1000,
                                                   datetime.now(UTC).isoformat())}).encode()
                      for i in range(2 * workers)]
            asyncio.run(_post(port, token, bodies, 2 * workers))
            warmed[0] += len(bodies) * 1000

        if not asgi.warm_every_worker(server.pid, workers, warm_up):
            print("  (warm-up: not every worker served a request; the figures include their start-up)")
        with psycopg.connect(url) as conn:
            for r in range(rounds):
                n = batches // rounds
                payloads = [_batch(viewers, (r * n + b) * 1000, 1000, datetime.now(UTC).isoformat())
                            for b in range(n)]
                bodies = [json.dumps({"events": events}).encode() for events in payloads]
                before = _cpu_now(server.pid)
                api_s += asyncio.run(_post(port, token, bodies, concurrency))
                after = _cpu_now(server.pid)
                spent = {name: total + after[name] - before[name] for name, total in spent.items()}
                for events in payloads:
                    copy_s += _copy_rows(conn, _twin_rows(workspace.pk, events))
    finally:
        asgi.stop(server)
    n = rounds * (batches // rounds) * 1000
    print(f"\nPOST /api/v1/events ({asgi.label(server_name, workers)}; batches of 1,000; {concurrency} clients; {rounds} rounds "
          f"alternating with COPY): {n / api_s:,.0f} events/s, raw COPY of the same rows {n / copy_s:,.0f} rows/s, "
          f"ratio {copy_s / api_s:.2f}× COPY ({1000 * api_s / (n / 1000):.1f} ms a batch of wall time)")
    per_batch = ", ".join(f"{name} {1000 * seconds / (n / 1000):.1f} ms" for name, seconds in spent.items())
    print(f"  CPU a batch while the API was loaded: {per_batch}; the cores were busy "
          f"{100 * spent['all processes'] / api_s / os.cpu_count():.0f} % of that time")
    return n + warmed[0]


def _cpu_now(server_pid: int) -> dict[str, float]:
    """CPU seconds so far: the server's processes, PostgreSQL's, the load generator's (this process) and the
    whole machine's (/proc/stat; everything else running meanwhile counts there too)."""
    from http_load import process_tree_cpu_s, services_cpu_s

    with open("/proc/stat") as stat:
        user, nice, system = (int(x) for x in stat.readline().split()[1:4])
    return {"server": process_tree_cpu_s(server_pid) or 0.0,
            "PostgreSQL": services_cpu_s().get("PostgreSQL", 0.0), "load generator": time.process_time(),
            "all processes": (user + nice + system) / os.sysconf("SC_CLK_TCK")}


async def _post(port, token, bodies, concurrency) -> float:
    import httpx

    queue = list(bodies)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"}) as client:
        async def worker():
            while queue:
                response = await client.post("/api/v1/events", content=queue.pop())
                assert response.status_code == 200 and response.json()["accepted"] == 1000, response.text[:300]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


def _snapshots(url, workspace, experiment, viewers, sent, targets) -> None:
    import psycopg

    from serving.experiments.ingest import events_ingest
    from serving.experiments.selectors import experiment_snapshot
    from serving.models import Rollup
    from workspaces.access import Actor

    ingester = Actor.system("bench")
    with psycopg.connect(url) as conn:
        copied = conn.execute("SELECT count(*) FROM serving_event").fetchone()[0] - sent  # the COPY twins
    print(f"\nDashboard snapshot as events are ingested (batches of 1,000 through events_ingest; the table also "
          f"holds the {copied:,} COPY reference rows, which have no rollups):")
    print(f"{'events stored':>14} {'by ingest':>11} {'rollup rows':>11} {'snapshot median':>16} {'min':>7} {'max':>7} "
          f"{'ingest ev/s since last':>22}")
    offset, last = 0, time.perf_counter()
    ingested_since = 0
    for target in sorted(targets):
        while sent < target:
            events = _batch(viewers, offset, 1000, datetime.now(UTC).isoformat())
            offset += 1000
            result = events_ingest(actor=ingester, workspace=workspace, events=events)
            assert result.accepted == 1000, result
            sent += 1000
            ingested_since += 1000
        rate = ingested_since / (time.perf_counter() - last) if ingested_since else 0
        with psycopg.connect(url) as conn:
            conn.execute("ANALYZE serving_event")
            stored = conn.execute("SELECT count(*) FROM serving_event").fetchone()[0]
            folded = conn.execute("SELECT coalesce(sum(sum_y), 0) FROM serving_rollup WHERE experiment_id = %s",
                                  [experiment.pk]).fetchone()[0]
        assert folded == sent, (folded, sent)  # every ingested view was counted once, replays not at all
        timings = []
        for _ in range(7):
            started = time.perf_counter()
            experiment_snapshot(experiment)
            timings.append((time.perf_counter() - started) * 1000)
        rollups = Rollup.objects.filter(experiment=experiment).count()
        print(f"{stored:>14,} {sent:>11,} {rollups:>11,} {statistics.median(timings):>13.1f} ms {min(timings):>7.1f} "
              f"{max(timings):>7.1f} {rate:>22,.0f}", flush=True)
        last, ingested_since = time.perf_counter(), 0


if __name__ == "__main__":
    main()
