"""The demo harness on each suite with a real backend and the reference judge; prints a Markdown table.

    .venv/bin/python benchmarks/eval_baseline.py [--n 8] [--backend local] [--seed 1]

Runs in a throw-away embedded workspace (SQLite in a temp dir): seeds the demo, adds one set per
suite (simulated n cases; IFEval = the shipped mini set), evaluates `avatar@production` inline.
"""

import argparse
import sys
import time

from embedded import ROOT, embedded_workspace


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    manage, _ = embedded_workspace()
    ifeval = ROOT / "evaluation/metrics/ifeval/data/ifeval_mini.jsonl"
    rows = []
    for suite in ("live_stream_qa", "harness_variant", "robustness", "ifeval"):
        if suite == "ifeval":
            manage("eval_set", suite, "--workspace", "demo", "--suite", suite, "--jsonl", str(ifeval))
        else:
            manage("eval_set", suite, "--workspace", "demo", "--suite", suite, "--seed", str(args.seed),
                   "--n", str(args.n))
        started = time.perf_counter()
        out = manage("eval_run", "avatar@production", f"{suite}@v1", "--workspace", "demo", "--backend",
                     args.backend, "--concurrency", "1", "--inline")
        wall = time.perf_counter() - started
        overall = next(line for line in out.splitlines() if line.strip().startswith("overall"))
        rows.append((suite, overall.split()[1:], wall))
        print(f"{suite}: {overall.strip()} ({wall:.0f} s)", file=sys.stderr)
    print(f"| suite | result (backend {args.backend}, reference judge; IFEval: official checkers) | wall |")
    print("|---|---|---|")
    for suite, fields, wall in rows:
        print(f"| {suite} | {' '.join(fields)} | {wall:.0f} s |")


if __name__ == "__main__":
    main()
