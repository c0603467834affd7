"""Event ingestion throughput and dashboard query time on PostgreSQL. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/ingest.py \
        [--batches 100] [--concurrency 4] [--total-events 10000000]

1. events/s through POST /api/v1/events (a real Daphne server, batches of 1000, `concurrency` clients),
   with idempotency and incremental rollups (every event belongs to an exposed viewer of a running
   experiment), into a throw-away database `harnessops_bench` on the server of DATABASE_URL;
2. raw COPY of the same kind of rows into the same table, for comparison;
3. the table is filled to --total-events with COPY, then the dashboard snapshot (rollups only) is timed.

With --scaling-only, only the in-process ingest (`events_ingest`, the service the API calls: validation,
idempotent insert, rollup fold) is timed at growing batch sizes against COPY of the same number of rows,
each printed as a ratio to COPY measured in the same run. --root measures another checkout's code
(e.g. an export of the previous commit) with this script.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv:  # measure another checkout with this script
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))
DB = os.environ.get("DATABASE_URL", "/postgres").rsplit("/", 1)[1] + "_bench"  # beside your own database


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--viewers", type=int, default=20_000)
    parser.add_argument("--total-events", type=int, default=10_000_000)
    parser.add_argument("--scaling-only", action="store_true", help="only in-process ingest vs COPY by batch size")
    parser.add_argument("--root", help="the checkout whose code to measure (default: this one)")
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
    os.environ.update({k: v for k, v in env.items() if k != "REDIS_URL"})
    os.environ.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, capture_output=True)

    import django

    django.setup()
    from console.access import Actor
    from console.models import Workspace
    from harness.models import Harness
    from serving.experiments.selectors import experiment_snapshot
    from serving.experiments.services import assign_viewer, experiment_create, experiment_start
    from serving.services import api_key_create

    system = Actor.system("bench")
    workspace = Workspace.objects.get(slug="demo")
    experiment = experiment_create(actor=system, workspace=workspace, key="bench",
                                   harness=Harness.objects.get(workspace=workspace, name="avatar"),
                                   arms=[{"name": "control", "weight": 1, "kind": "react"},
                                         {"name": "harness", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=system, experiment=experiment)
    started = time.perf_counter()
    viewers = [f"bench-{i}" for i in range(args.viewers)]
    for viewer in viewers:
        assign_viewer(experiment, viewer)
    print(f"exposed {len(viewers)} viewers in {time.perf_counter() - started:.1f} s")
    _scaling(url, workspace, viewers)
    if args.scaling_only:
        return
    token = api_key_create(actor=system, workspace=workspace, name="bench", scopes=["ingest"])[1]

    port = 8700 + os.getpid() % 200
    daphne = subprocess.Popen([str(Path(sys.executable).parent / "daphne"), "-p", str(port), "console.asgi:application"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx

        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        events_per_s = asyncio.run(_post_batches(port, token, viewers, args.batches, args.concurrency))
        print(f"API ingest: {events_per_s:,.0f} events/s ({args.batches} batches of 1000, concurrency "
              f"{args.concurrency}, Daphne + PostgreSQL, idempotent insert + rollup update)")
    finally:
        daphne.terminate()

    copy_rate = _copy(url, workspace.pk, viewers, 100_000)
    print(f"raw COPY: {copy_rate:,.0f} rows/s (100,000 rows into the same table, one connection)")
    with psycopg.connect(url) as conn:
        have = conn.execute("SELECT count(*) FROM serving_event").fetchone()[0]
    remaining = max(0, args.total_events - have)
    started = time.perf_counter()
    while remaining > 0:
        chunk = min(1_000_000, remaining)
        _copy(url, workspace.pk, viewers, chunk)
        remaining -= chunk
    with psycopg.connect(url) as conn:
        total = conn.execute("SELECT count(*) FROM serving_event").fetchone()[0]
        conn.execute("ANALYZE serving_event")
    print(f"filled to {total:,} events in {time.perf_counter() - started:.0f} s")
    timings = []
    for _ in range(7):
        started = time.perf_counter()
        experiment_snapshot(experiment)
        timings.append((time.perf_counter() - started) * 1000)
    print(f"dashboard snapshot at {total:,} events: median {statistics.median(timings):.1f} ms "
          f"(min {min(timings):.1f}, max {max(timings):.1f}; 7 runs; rollups + guardrail queries, no event scan)")


async def _post_batches(port, token, viewers, batches, concurrency) -> float:
    import httpx

    queue = list(range(batches))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        async def worker():
            while queue:
                b = queue.pop()
                now = datetime.now(UTC).isoformat()
                events = [{"event_id": uuid.uuid4().hex, "type": "item_page_view",
                           "viewer_id": viewers[(b * 1000 + i) % len(viewers)], "room_id": "demo-room",
                           "item_id": "L001", "ts": now} for i in range(1000)]
                response = await client.post("/api/v1/events", json={"events": events})
                assert response.status_code == 200 and response.json()["accepted"] == 1000, response.text[:300]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return batches * 1000 / (time.perf_counter() - started)


def _scaling(url, workspace, viewers) -> None:
    """In-process `events_ingest` per batch size vs COPY of as many rows, same run (ratios are what count)."""
    from console.access import Actor
    from serving.experiments.services import events_ingest

    ingester = Actor.system("bench")
    print("in-process ingest (validation + idempotent insert + rollup fold, every event an exposed viewer's view):")
    offset = 0
    for size in (10, 100, 1000):
        batches = max(2, 20_000 // size)
        now = datetime.now(UTC).isoformat()
        payloads = [[{"event_id": uuid.uuid4().hex, "type": "item_page_view",
                      "viewer_id": viewers[(offset + b * size + i) % len(viewers)], "room_id": "demo-room",
                      "item_id": "L001", "ts": now} for i in range(size)] for b in range(batches)]
        offset += batches * size
        started = time.perf_counter()
        for events in payloads:
            result = events_ingest(actor=ingester, workspace=workspace, events=events)
            assert result.accepted == size, result
        ingest_rate = batches * size / (time.perf_counter() - started)
        copy_rate = _copy(url, workspace.pk, viewers, batches * size)
        again = time.perf_counter()
        duplicates = events_ingest(actor=ingester, workspace=workspace, events=payloads[0])
        retry_ms = (time.perf_counter() - again) * 1000
        assert duplicates.accepted == 0 and duplicates.duplicates == size
        print(f"  batch {size:>5}: {ingest_rate:>8,.0f} events/s, COPY {copy_rate:>8,.0f} rows/s, "
              f"ratio {ingest_rate / copy_rate:.2f}× COPY, {1000 * size / ingest_rate:.1f} ms a batch "
              f"(a retried batch, all duplicates: {retry_ms:.1f} ms)")


def _copy(url, workspace_id, viewers, n) -> float:
    import psycopg

    now = datetime.now(UTC)
    started = time.perf_counter()
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        with cursor.copy("COPY serving_event (workspace_id, event_id, type, viewer_id, room_id, item_id, ts, "
                         "received_at) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row((workspace_id, uuid.uuid4().hex, "item_page_view", viewers[i % len(viewers)],
                                "demo-room", "L001", now, now))
    return n / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
