"""Two checkouts' reply APIs side by side, in alternated blocks of load. Prints figures; asserts nothing.

    DATABASE_URL=postgres://… REDIS_URL=redis://… .venv/bin/python benchmarks/reply_ab.py <before> <after>
        [--rounds 6] [--concurrency 32] [--requests 1000]

The shared machine's speed drifts by up to 3× within minutes, so two benchmark runs one after the other compare
the hosts as much as the code. Here each checkout gets its own fresh database (`<DATABASE_URL's>_ab0`, `_ab1`,
migrated and seeded with the demo by its own code), Redis database and uvicorn (`--workers` processes, scripted
model), both started at once and warmed; then blocks of `--requests` replies at `--concurrency` go to one and the
other in turn (the order swapped every round). Each block prints req/s, p50/p99 and the CPU a reply of the server
and of PostgreSQL; the medians over the rounds close.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers as asgi  # noqa: E402
from embedded import _fresh_database, last_line  # noqa: E402
from http_load import post_load  # noqa: E402

STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}]},
         "The Merino Crew-Neck Sweater is $71.2 right now, down from $89."]


def _started(index: int, root: Path, workers: int) -> tuple[int, str, object]:
    """(port, API key, server) of `root`'s code on its own database."""
    redis_base, _, _db = os.environ["REDIS_URL"].rpartition("/")
    env = {**os.environ, "HARNESSOPS_VAR_DIR": tempfile.mkdtemp(prefix="harnessops-ab-"),
           "HARNESSOPS_ADMIN_PASSWORD": "bench-password-1",
           "DATABASE_URL": _fresh_database(os.environ["DATABASE_URL"], f"ab{index}"),
           "REDIS_URL": f"{redis_base}/{10 + index}", "HARNESSOPS_MODEL_BACKEND": "scripted",
           "HARNESSOPS_SCRIPTED_STEPS": json.dumps(STEPS), "HARNESSOPS_REPLY_RATE_PER_MINUTE": "100000000"}

    def manage(*argv: str) -> str:
        return subprocess.run([sys.executable, str(root / "manage.py"), *argv], env=env, cwd=root, check=True,
                              capture_output=True, text=True).stdout

    manage("migrate", "-v0")
    manage("seed_demo")
    token = last_line(manage("shell", "-c", "from workspaces.access import Actor; from workspaces.models import Workspace; "
                                            "from serving.services import api_key_create; "
                                            "print(api_key_create(actor=Actor.system('bench'), workspace="
                                            "Workspace.objects.get(slug='demo'), name='bench', scopes=['read'])[1])"))
    port = 18300 + index
    return port, token, asgi.start("uvicorn", port, workers=workers, env=env, cwd=root)


def _load(port: int, token: str, server, concurrency: int, count: int, first_viewer: int):
    def replied(status: int, answer: bytes) -> None:
        assert status == 200 and json.loads(answer)["outcome"] == "replied", answer

    bodies = [{"message": "How much is L001 now?", "viewer_id": f"v{first_viewer + i}"} for i in range(count)]
    return post_load(port, "/api/v1/rooms/demo-room/reply", {"Authorization": f"Bearer {token}"}, bodies,
                     concurrency, server_pid=server.pid, check=replied)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs=2, type=Path, help="the two checkouts (before, after)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn processes each")
    args = parser.parse_args()
    if not (os.environ.get("DATABASE_URL", "").startswith("postgres") and os.environ.get("REDIS_URL")):
        raise SystemExit("Set DATABASE_URL (PostgreSQL) and REDIS_URL: this measures the deployed path.")
    roots = [root.resolve() for root in args.roots]
    started = []
    try:
        for index, root in enumerate(roots):
            started.append((root, *_started(index, root, args.workers)))
        for _root, port, token, server in started:  # warm: the loop's pools, the harness, CEL, the first burst
            if not asgi.warm_every_worker(server.pid, args.workers, lambda s=server, p=port, t=token:
                                          _load(p, t, s, 2 * args.workers, 50, 0)):
                print(f"  (warm-up: not every worker of {_root} served a request)")
            _load(port, token, server, args.concurrency, 300, 100)
        figures = {root: [] for root in roots}
        for round_ in range(args.rounds):
            for root, port, token, server in started if round_ % 2 == 0 else started[::-1]:
                run = _load(port, token, server, args.concurrency, args.requests, 10_000 * (round_ + 1))
                postgres = run.services_cpu_ms.get("PostgreSQL", float("nan"))
                figures[root].append((run.rate(), run.pct(50), run.pct(99), run.server_cpu_ms or float("nan"), postgres))
                print(f"round {round_} {root}: {run.rate():.0f} req/s, p50 {run.pct(50):.1f} ms, p99 {run.pct(99):.1f} ms;"
                      f" CPU a reply: server {run.server_cpu_ms or float('nan'):.2f} ms, PostgreSQL {postgres:.2f} ms",
                      flush=True)
        print(f"medians over {args.rounds} rounds of {args.requests} replies at concurrency {args.concurrency}:")
        for root in roots:
            rate, p50, p99, server_cpu, postgres = (statistics.median(column) for column in zip(*figures[root], strict=True))
            print(f"  {root}: {rate:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms; CPU a reply: server "
                  f"{server_cpu:.2f} ms, PostgreSQL {postgres:.2f} ms")
    finally:
        for *_, server in started:
            asgi.stop(server)


if __name__ == "__main__":
    main()
