"""Eval wall time against a fixed-latency OpenAI-compatible server, beside the ideal, at growing cases and concurrency.

    .venv/bin/python benchmarks/eval_throughput.py [--cases 32 128] [--concurrency 1 8 32] [--latency-ms 200]

The server (`serving.openai_compat`, scripted, a fixed delay before every answer) stands in for vLLM;
its reply loads no skill, so the demo harness's reply hooks retry it (up to 3 model calls a turn). A throw-away
embedded workspace (SQLite) holds the eval sets; `manage.py eval_run --inline` runs each through the real run
machinery (runtime, sandbox tools, reference judge, one result row per case, live progress).

Ideal = Σ model calls × latency / concurrency (the calls counted from the run's traces). "run wall" is the
run's own started → finished time (what the runner costs); "command wall" adds the command's start-up
(Django, migrations check: ~2 s here), which does not grow with the cases. Concurrency 1 is skipped above
64 cases (it only waits). The ratio run wall / ideal is the figure the target (≤ 1.3× at 32) is about.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from embedded import ROOT, embedded_workspace, last_line
from http_load import workers_cpu_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
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
        print(f"{args.latency_ms} ms per model call")
        print("| cases | concurrency | model calls | ideal | run wall | run / ideal | command wall "
              "| command CPU | model server CPU |")
        print("|---|---|---|---|---|---|---|---|---|")
        for cases in args.cases:
            name = f"throughput{cases}"
            manage("eval_set", name, "--workspace", "demo", "--suite", "live_stream_qa", "--seed", "1",
                   "--n", str(cases))
            for concurrency in args.concurrency:
                if concurrency == 1 and cases > 64:
                    continue
                started, command_cpu = time.perf_counter(), _children_cpu_s()
                server_cpu = sum(workers_cpu_s(server.pid).values())
                manage("eval_run", "avatar@production", f"{name}@v1", "--workspace", "demo", "--backend", "openai",
                       "--concurrency", str(concurrency), "--inline")
                command_wall = time.perf_counter() - started
                # Both on the same cores as the run: the command's (start-up included) and the stand-in's.
                command_cpu = _children_cpu_s() - command_cpu
                server_cpu = sum(workers_cpu_s(server.pid).values()) - server_cpu
                calls, run_wall = json.loads(last_line(manage("shell", "-c", (
                    "import json; from evaluation.models import EvalRun; r = EvalRun.objects.latest('id'); "
                    "print(json.dumps([sum(x.trace.get('model_calls', 0) for x in r.results.all()), "
                    "(r.finished_at - r.started_at).total_seconds()]))"))))
                ideal = calls * args.latency_ms / 1000 / concurrency
                print(f"| {cases} | {concurrency} | {calls} | {ideal:.2f} s | {run_wall:.2f} s | "
                      f"{run_wall / ideal:.2f}× | {command_wall:.2f} s | {command_cpu:.2f} s | {server_cpu:.2f} s |",
                      flush=True)
    finally:
        server.terminate()


def _children_cpu_s() -> float:
    """CPU seconds of this script's finished child processes (the eval_run command among them)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
