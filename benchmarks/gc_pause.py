"""How long a full garbage collection stops a web process, with start-up's objects frozen and without. Prints figures.

    .venv/bin/python benchmarks/gc_pause.py [--repeat 7]

Python's collector walks every tracked object in a full (generation-2) collection, with the event loop stopped.
Under load it runs one every few thousand replies; in a reply server that walked all of Django and every view
module, it stopped the loop for 110-170 ms and held every request in flight (docs/performance.md). console.asgi
loads the views and freezes what start-up made (`gc.freeze()`), so a full collection walks only what came later.

This loads console.asgi as a server does, times `gc.collect()` (the same walk a full collection does), then
unfreezes those objects (where they were before the change) and times it again. Needs no database.
"""

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pauses_ms(repeat: int) -> list[float]:
    found = []
    for _ in range(repeat):
        started = time.perf_counter()
        gc.collect()
        found.append((time.perf_counter() - started) * 1000)
    return found


def report(label: str, pauses: list[float]) -> None:
    print(f"{label}: {len(gc.get_objects()):>7,} objects tracked, {gc.get_freeze_count():>7,} frozen; full "
          f"collection p50 {statistics.median(pauses):.1f} ms, max {max(pauses):.1f} ms ({len(pauses)} runs)")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import console.asgi  # noqa: F401 (what a server imports: Django, the views, then the freeze)

    report("console.asgi loaded, start-up frozen", pauses_ms(args.repeat))
    gc.unfreeze()
    report("the same objects unfrozen (before)  ", pauses_ms(args.repeat))
