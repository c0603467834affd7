"""The cost of writing a trace in the request's unit of work (serving/traces.py). Prints figures; asserts nothing.

    DATABASE_URL=postgres://… .venv/bin/python benchmarks/trace_writes.py [--traces 500]

Stores `--traces` realistic traces (the demo harness's turn: load_skill + a product lookup + reply, ~3 KB
of JSON) one by one, as the reply API does, into a throw-away workspace of a migrated database, and prints
p50/p95 of one `trace_store` call; then a batch of the same size through `traces_store` with one bad row,
to show what the row-by-row fallback costs. The workspace is deleted afterwards.
"""

import argparse
import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")


def trace_data(i: int) -> dict:
    steps = [{"kind": "model", "at_ms": 1.0, "backend": "scripted", "content": "", "tokens_in": 1400,
              "tool_calls": [{"id": "c1", "name": "get_product_info_by_link_id", "arguments": '{"link_id": "L001"}'}]},
             {"kind": "tool", "at_ms": 2.0, "name": "get_product_info_by_link_id", "arguments": '{"link_id": "L001"}',
              "result": {"link_id": "L001", "name": "Merino Crew-Neck Sweater", "price": 89.0, "promo_price": 71.2,
                         "description": "Soft merino wool, regular fit. " * 40}, "error": "", "attempts": 1}]
    return {"trace_id": uuid.uuid4().hex, "input": {"message": f"price of the sweater? {i}", "viewer_id": f"v{i}",
                                                     "room_id": "bench-room"},
            "arm": "label:production", "backend": "scripted", "outcome": "replied", "silent": False,
            "reply": "It is $71.2 now, down from $89.", "duration_ms": 812.0, "model_calls": 2, "tokens_in": 2900,
            "tokens_out": 40, "hooks_fired": [], "started_at": time.time(), "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=500)
    args = parser.parse_args()
    import django

    django.setup()
    logging.disable(logging.CRITICAL)  # the fallback logs the bad row with its traceback
    from django.db import connection

    from console.models import Workspace
    from serving.models import Trace
    from serving.traces import trace_row, trace_store, traces_store

    workspace = Workspace.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="trace benchmark")
    try:
        def row(i):
            return trace_row(workspace_id=workspace.pk, data=trace_data(i), source=Trace.Source.API, harness_id=None,
                             version_id=None)

        timings = []
        for i in range(args.traces):
            item = row(i)
            started = time.perf_counter()
            trace_store(item)
            timings.append((time.perf_counter() - started) * 1000)
        timings.sort()
        print(f"{connection.vendor}: one trace_store per reply, {args.traces} traces of "
              f"{len(str(trace_data(0))) / 1024:.1f} KiB: p50 {statistics.median(timings):.2f} ms, "
              f"p95 {timings[int(0.95 * (len(timings) - 1))]:.2f} ms")

        batch = [row(i) for i in range(args.traces)]
        started = time.perf_counter()
        traces_store(batch)
        clean = (time.perf_counter() - started) * 1000
        batch = [row(i) for i in range(args.traces)]
        batch[len(batch) // 2].message = "bad \x00 row"
        started = time.perf_counter()
        stubs = traces_store(batch)
        fallback = (time.perf_counter() - started) * 1000
        print(f"batch of {args.traces}: bulk insert {clean:.0f} ms; with one bad row (row by row, {stubs} stub) "
              f"{fallback:.0f} ms")
    finally:
        Workspace.objects.filter(pk=workspace.pk).delete()


if __name__ == "__main__":
    main()
