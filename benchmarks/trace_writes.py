"""The cost of writing a trace in the request's unit of work (serving/traces.py). Prints figures; asserts nothing.

    DATABASE_URL=postgres://… .venv/bin/python benchmarks/trace_writes.py [--traces 500] [--root <checkout>]

Runs `--traces` demo turns (the demo harness with an instant scripted model: load_skill and a product lookup,
then a reply; a new viewer, message and product each turn), so each trace is what a reply stores, the
prompt sent to the model included. Stores them one by one as the reply API does (autocommit, one INSERT),
into a throw-away workspace of a migrated database, and prints for one `trace_store` call: wall p50/p95,
PostgreSQL's CPU (all its processes, WAL writer included), the WAL it wrote and what the trace table and its
prompt parts grew by. Then a batch of the same size through `traces_store` with one bad row, to show what
the row-by-row fallback costs. The workspace is deleted afterwards. `--root` measures another checkout's code
with this script (compare the two in one sitting: the machine's speed drifts).
"""

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv:
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")


def demo_traces(count: int) -> list[dict]:
    """The traces of `count` demo turns, each a new viewer, message and product."""
    from harness.runtime import RoomContext, TurnInput, run_turn
    from harness.spec import parse_files, read_dir
    from serving.backends.scripted import ScriptedBackend, steps_from_json

    spec = parse_files(read_dir(ROOT / "harness/demo/avatar"))
    room_data = json.loads((ROOT / "harness/demo/room.json").read_text())
    room = RoomContext.from_dict(room_data)
    products = room_data["products"]

    async def turns():
        traces = []
        for i in range(count):
            product = products[i % len(products)]
            steps = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                                     {"name": "get_product_info_by_link_id",
                                      "arguments": {"link_id": product["link_id"]}}]},
                     f"The {product['name']} is ${product['price']} right now."]
            turn = TurnInput(message=f"How much is {product['link_id']} now? ({i})", viewer_id=f"v{i}", room=room)
            result = await run_turn(spec, turn, ScriptedBackend(steps_from_json(steps)))
            traces.append({**result.trace, "arm": "label:production"})
        return traces

    return asyncio.run(turns())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=500)
    parser.add_argument("--root", help="the checkout whose code to measure (default: this one)")
    args = parser.parse_args()
    os.chdir(ROOT)
    import django

    django.setup()
    logging.disable(logging.CRITICAL)  # the fallback logs the bad row with its traceback
    from django.db import connection
    from http_load import services_cpu_s

    from serving.models import Trace
    from serving.traces import trace_row, trace_store, traces_store
    from workspaces.models import Workspace

    if connection.vendor != "postgresql":
        raise SystemExit("Set DATABASE_URL to a PostgreSQL database: this measures PostgreSQL's side.")

    def sizes() -> tuple[int, int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, pg_total_relation_size('serving_trace'), "
                           "COALESCE(pg_total_relation_size(to_regclass('serving_promptpart')), 0)")
            wal, traces, parts = cursor.fetchone()
        return int(wal), int(traces), int(parts)

    traces = demo_traces(args.traces)
    workspace = Workspace.objects.create(slug=f"bench-{os.getpid()}-{time.time_ns() % 10**6}", name="trace benchmark")
    try:
        def row(data, i=0):
            data = {**data, "trace_id": f"{data['trace_id'][:24]}{i:08x}"}
            return trace_row(workspace_id=workspace.pk, data=data, source=Trace.Source.API, harness_id=None,
                             version_id=None)

        timings = []
        rows = [row(data) for data in traces]
        before, cpu_before = sizes(), services_cpu_s().get("PostgreSQL", 0.0)
        for item in rows:
            started = time.perf_counter()
            trace_store(item)
            timings.append((time.perf_counter() - started) * 1000)
        cpu = services_cpu_s().get("PostgreSQL", 0.0) - cpu_before
        after = sizes()
        timings.sort()
        n = len(rows)
        print(f"one trace_store per reply, {n} demo traces of {statistics.median(len(json.dumps(t)) for t in traces) / 1024:.1f} "
              f"KiB of JSON: p50 {statistics.median(timings):.2f} ms, p95 {timings[int(0.95 * (n - 1))]:.2f} ms; "
              f"a trace: PostgreSQL CPU {cpu * 1000 / n:.2f} ms, WAL {(after[0] - before[0]) / n / 1024:.1f} KiB, "
              f"trace table +{(after[1] - before[1]) / n / 1024:.1f} KiB, prompt parts +{(after[2] - before[2]) / n / 1024:.2f} KiB",
              flush=True)

        batch = [row(data, 1) for data in traces]
        started = time.perf_counter()
        traces_store(batch)
        clean = (time.perf_counter() - started) * 1000
        batch = [row(data, 2) for data in traces]
        batch[len(batch) // 2].message = "bad \x00 row"
        started = time.perf_counter()
        stubs = traces_store(batch)
        fallback = (time.perf_counter() - started) * 1000
        print(f"batch of {n}: bulk insert {clean:.0f} ms; with one bad row (row by row, {stubs} stub) {fallback:.0f} ms")
    finally:
        Workspace.objects.filter(pk=workspace.pk).delete()


if __name__ == "__main__":
    main()
