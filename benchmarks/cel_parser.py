"""What a process pays for CEL's parser before its first hook condition: built (cel-python's way, every process)
against loaded from the installation's saved parser (harness/spec/cel_parser.py). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/cel_parser.py [--processes 8]

Each process is a fresh interpreter that imports the harness core and calls `cel_environment()` once; the
figure is that call's wall and CPU time (the imports before it are the same either way). The saved parser's
first process builds it and saves it; the figures are for the ones after.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROCESS = """
import json, sys, time
from pathlib import Path
from harness.spec import cel_parser
from harness.spec.validate import cel_environment
if sys.argv[1]:
    cel_parser.DIRECTORY = Path(sys.argv[1])
wall, cpu = time.perf_counter(), time.process_time()
cel_environment()
print(json.dumps([(time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000]))
"""


def timings(directory: str, processes: int) -> list[tuple[float, float]]:
    runs = []
    for _ in range(processes):
        done = subprocess.run([sys.executable, "-c", PROCESS, directory], cwd=ROOT, capture_output=True, text=True,
                              check=True)
        runs.append(tuple(json.loads(done.stdout)))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=8)
    args = parser.parse_args()
    saved_in = tempfile.mkdtemp(prefix="harnessops-cel-")
    timings(saved_in, 1)  # the installation's first process: builds and saves
    for label, directory in (("built in the process", ""), ("loaded from the saved parser", saved_in)):
        runs = timings(directory, args.processes)
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"CEL parser, {label}: wall p50 {wall:.1f} ms, CPU p50 {cpu:.1f} ms "
              f"({args.processes} processes; min–max wall {min(r[0] for r in runs):.1f}–{max(r[0] for r in runs):.1f} ms)")


if __name__ == "__main__":
    main()
