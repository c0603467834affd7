"""Eval wall time at concurrency 1, 8 and 32 against a fixed-latency OpenAI-compatible server, beside the ideal.

    .venv/bin/python benchmarks/eval_throughput.py [--cases 64] [--latency-ms 200]

The server (`serving.openai_compat`, scripted, a fixed delay before every answer) stands in for vLLM;
its reply loads no skill, so the demo harness's reply hooks retry it (up to 3 model calls a turn). A throw-away embedded workspace (SQLite) holds
the eval set; `manage.py eval_run --inline` runs it through the real run machinery (runtime, sandbox
tools, reference judge, one result row per case). Ideal = Σ model calls × latency / concurrency (the
calls counted from the run's traces); the wall time includes the command's start-up (~2 s).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embedded import ROOT, embedded_workspace, last_line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="harnessops-throughput-"))
    script = tmp / "script.json"
    script.write_text(json.dumps(["Thanks for asking! Let me check that for you."]))
    server = subprocess.Popen([sys.executable, "-m", "serving.openai_compat", "--backend", "scripted", "--script",
                               str(script), "--cycle", "--delay-ms", str(args.latency_ms), "--port", "0"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    base_url = server.stdout.readline().rsplit(" on ", 1)[1].strip()
    try:
        manage, _ = embedded_workspace(HARNESSOPS_OPENAI_BASE_URL=base_url, HARNESSOPS_OPENAI_MODEL="scripted")
        manage("eval_set", "throughput", "--workspace", "demo", "--suite", "live_stream_qa", "--seed", "1",
               "--n", str(args.cases))
        print(f"{args.cases} cases, {args.latency_ms} ms per model call")
        print("| concurrency | model calls | eval wall time | ideal | ratio |")
        print("|---|---|---|---|---|")
        for concurrency in (1, 8, 32):
            started = time.perf_counter()
            manage("eval_run", "avatar@production", "throughput@v1", "--workspace", "demo", "--backend", "openai",
                   "--concurrency", str(concurrency), "--inline")
            wall = time.perf_counter() - started
            calls = int(last_line(manage("shell", "-c", "from evaluation.models import EvalRun; "
                               "print(sum(r.trace.get('model_calls', 0) for r in EvalRun.objects.latest('id').results.all()))"
                               )))
            ideal = calls * args.latency_ms / 1000 / concurrency
            print(f"| {concurrency} | {calls} | {wall:.2f} s | {ideal:.2f} s | {wall / ideal:.2f}× |")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
