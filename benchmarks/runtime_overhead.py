"""Runtime and API overhead, and the offline model's speed. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/runtime_overhead.py [--turns 2000] [--requests 400] [--skip-api] [--skip-model]
                                                    [--servers daphne uvicorn]

1. Runtime overhead per turn: the demo harness with an instant scripted model (load_skill +
   get_product_info_by_link_id, then a reply): everything but the model — hooks, prompt assembly,
   tool calls, trace — in µs (p50/p95), as CPU time of this process (`time.process_time`, what to trust on
   a loaded machine) and wall time; with the same input every turn and with a new viewer, message and
   product each turn (so remembered CEL answers rarely apply); with no remembered answers at all; then how
   it grows with tool calls per turn and with the room's catalogue, and where the CPU time goes (cProfile).
   Compare checkouts in one run with `--root`: `--root ../old --skip-api --skip-model`, then this one.
2. The API's added latency over the model call: a real ASGI server (Daphne, and uvicorn with uvloop and
   httptools when installed) on an embedded workspace (SQLite in a temp dir) with the scripted model,
   at concurrency 1 and 32 and two request counts: requests/s and p50/p99 of the HTTP latency (the
   scripted model answers at once, so all of it is added by the stack), and the CPU a request of the server's
   processes and of the load generator (benchmarks/http_load.py: keep-alive HTTP/1.1 on asyncio streams),
   which share the machine's cores with PostgreSQL and Redis. `--deployed`: PostgreSQL and Redis, and their
   processes' CPU a request too where they run on this host (all their work meanwhile: run it on an idle machine).
3. The offline model (local backend): load time and decode tokens/s.
"""

import argparse
import asyncio
import functools
import importlib.util
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv:  # measure another checkout (e.g. the previous commit) with this script
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))

STEPS = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}},
                         {"name": "get_product_info_by_link_id", "arguments": {"link_id": "L001"}}]},
         "The Merino Crew-Neck Sweater is $71.2 right now, down from $89."]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def reference_us() -> float:
    """A fixed pure-Python workload (p50 of 200 runs), timed in the same run: the ratio to it is
    what to compare across machines and load (the machine is shared; absolute µs drift with load)."""
    def work():
        return sum(len(str(i)) for i in range(2000))

    times = []
    for _ in range(200):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1e6)
    return pct(times, 50)


def _turn_steps(products: list[dict], calls: int) -> list:
    """Scripted model steps: load a skill and look up `calls` products in one model call, then a reply that
    states the first one's price (grounded by its tool result, so no hook asks for a retry)."""
    first = products[0]
    lookups = [{"name": "get_product_info_by_link_id", "arguments": {"link_id": p["link_id"]}} for p in products[:calls]]
    return [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "product-qa"}}, *lookups]},
            f"The {first['name']} is ${first['price']} right now."]


def bench_runtime(turns: int) -> None:
    """Per-turn overhead in wall time (perf_counter) and CPU time of this process (process_time, which a loaded
    machine disturbs far less), with the same input every turn and with varied ones, then how it grows."""
    import cProfile
    import pstats

    from harness.runtime import RoomContext, TurnInput, hooks, run_turn
    from harness.spec import parse_files, read_dir
    from serving.backends.scripted import ScriptedBackend, steps_from_json

    spec = parse_files(read_dir(ROOT / "harness/demo/avatar"))
    room_data = json.loads((ROOT / "harness/demo/room.json").read_text())
    room = RoomContext.from_dict(room_data)
    products = list(room_data["products"])
    same = TurnInput(message="How much is L001 now?", viewer_id="v_anna88", room=room)

    async def main(count, *, varied=False, calls=1, turn_room=room):
        """(wall µs, CPU µs) of the turn minus the scripted model's own time, per turn after 50 warm-up turns."""
        wall, cpu = [], []
        for i in range(count + 50):
            if varied:  # a new viewer, message and product each turn: remembered CEL answers rarely apply
                k = i % len(products)
                mine = products[k:] + products[:k]
                turn = TurnInput(message=f"How much is {mine[0]['link_id']} now? ({i})", viewer_id=f"v{i}",
                                 room=turn_room)
                script = steps_from_json(_turn_steps(mine, calls))
            else:
                turn = same if turn_room is room else TurnInput(same.message, same.viewer_id, turn_room)
                script = steps_from_json(STEPS if calls == 1 else _turn_steps(products, calls))
            backend = ScriptedBackend(script, cycle=True)  # cycle: no call recording
            started, started_cpu = time.perf_counter(), time.process_time()
            result = await run_turn(spec, turn, backend)
            elapsed, elapsed_cpu = (time.perf_counter() - started) * 1e6, (time.process_time() - started_cpu) * 1e6
            assert result.outcome == "replied" and result.trace["model_calls"] == 2, result.trace["reason"]
            if i >= 50:  # warm-up: hook compilation, first imports
                model_us = result.trace["model_latency_ms"] * 1000
                wall.append(elapsed - model_us)
                cpu.append(elapsed_cpu - model_us)
        return wall, cpu

    def line(label, measured):
        wall, cpu = measured
        return (f"{label}: CPU p50 {pct(cpu, 50):.0f} µs, p95 {pct(cpu, 95):.0f} µs; "
                f"wall p50 {pct(wall, 50):.0f} µs ({pct(wall, 50) / reference:.1f}× reference), "
                f"p95 {pct(wall, 95):.0f} µs")

    reference = reference_us()
    print(f"reference workload (sum of len(str(i)) for 2,000 ints): p50 {reference:.0f} µs wall")
    print(line(f"runtime overhead per turn (demo harness, 2 model calls, 2 tool calls, {turns} turns, same input)",
               asyncio.run(main(turns))))
    print(line("  same, a new viewer, message and product every turn", asyncio.run(main(turns, varied=True))))
    if hasattr(RoomContext, "shared"):  # the room as the reply API passes a stored one: its catalogue remembered
        shared = RoomContext.shared(room_data, room.room_id)
        print(line("  same, varied, the room shared as the reply API shares a stored room",
                   asyncio.run(main(turns, varied=True, turn_room=shared))))

    # The same turns with nothing remembered: every CEL condition runs (transpiled, compiled once per spec
    # version) and every JSON Schema validates.
    if hasattr(hooks, "CEL_MEMO_SIZE"):  # an older checkout (`--root`) may remember nothing anyway
        from harness.runtime import loop

        saved = hooks.CEL_MEMO_SIZE, getattr(hooks, "SCHEMA_MEMO_SIZE", 0)
        hooks.CEL_MEMO_SIZE = hooks.SCHEMA_MEMO_SIZE = 0
        for cached in (hooks.engine_for, getattr(loop, "_argument_check", None)):
            if cached is not None:
                cached.cache_clear()
        print(line("  same, nothing remembered (every CEL condition and JSON Schema evaluated)",
                   asyncio.run(main(max(turns // 4, 100), varied=True))))
        hooks.CEL_MEMO_SIZE, hooks.SCHEMA_MEMO_SIZE = saved
        hooks.engine_for.cache_clear()

    # How it grows with work: product lookups per turn, and the size of the room's catalogue (rendered into
    # the prompt every turn). Varied input throughout.
    count = max(turns // 4, 100)
    for calls in (1, 4, 8):
        print(line(f"  growth: {calls + 1} tool calls per turn", asyncio.run(main(count, varied=True, calls=calls))))
    for size in (28, 280):
        big = [{**p, "link_id": f"L{n:03d}"} for n, p in enumerate((products * 10)[:size], start=1)]
        bigger = RoomContext.from_dict({**room_data, "products": big})
        print(line(f"  growth: {size} products in the room", asyncio.run(main(count, varied=True, turn_room=bigger))))

    # Where the time goes: profiled turns (CPU time, so other processes do not land in the profile),
    # self time of each part as a share of the turn.
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    asyncio.run(main(200, varied=True))
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    groups = {"hooks (hooks.py, cel-python, lark)": ("runtime/hooks.py", "celpy/", "lark/", "<string>"),
              "prompt assembly (messages.py, prompt.py, template.py)": ("runtime/messages.py", "spec/prompt.py",
                                                                       "spec/template.py"),
              "agent loop (loop.py)": ("runtime/loop.py",),
              "tools (tools.py, demo_tools.py)": ("runtime/tools.py", "runtime/demo_tools.py"),
              "argument validation (jsonschema)": ("jsonschema/", "referencing/", "rpds"),
              "trace (trace.py)": ("runtime/trace.py",),
              "asyncio (tasks, wait_for, event loop)": ("asyncio/", "selectors.py", "contextvars"),
              "json, re, uuid, dataclasses": ("json/", "re/", "uuid.py", "dataclasses.py", "method 'sub'",
                                              "method 'findall'", "method 'search'")}
    groups["the scripted model (scripted.py)"] = ("backends/scripted.py",)
    groups["the benchmark's own loop"] = ("benchmarks/runtime_overhead.py",)
    other = "other (the standard library's rest, builtins called from it)"
    shares = dict.fromkeys([*groups, other], 0.0)

    def part(file: str, function: str) -> str | None:
        where = f"{file}:{function}"
        return next((label for label, needles in groups.items() if any(n in where for n in needles)), None)

    for (file, _line, function), (_cc, _nc, tottime, _ct, callers) in stats.items():
        label = part(file, function)
        if label is None and file == "~" and callers:
            # A builtin (str.join, dict.get, isinstance…): its time goes to the parts that called it, in
            # proportion to the time it spent for each.
            spent_for = {caller: timing[2] for caller, timing in callers.items()}
            whole = sum(spent_for.values()) or 1.0
            for (caller_file, _, caller_function), spent in spent_for.items():
                shares[part(caller_file, caller_function) or other] += tottime * spent / whole
            continue
        shares[label or other] += tottime
    total = sum(shares.values())
    calls = sum(v[1] for v in stats.values()) / 200
    print(f"  where it goes (cProfile CPU self time by component, a builtin's with its callers; 200 varied turns, "
          f"{calls:.0f} Python calls a turn):")
    for label, spent in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"    {label:<62} {100 * spent / total:5.1f}%")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_api(requests: int, servers: list[str], workers: list[int], deployed: bool) -> None:
    import servers as asgi
    from embedded import embedded_workspace, last_line

    manage, env = embedded_workspace(deployed=deployed, HARNESSOPS_MODEL_BACKEND="scripted",
                                     HARNESSOPS_SCRIPTED_STEPS=json.dumps(STEPS),
                                     HARNESSOPS_REPLY_RATE_PER_MINUTE="1000000")
    where = "PostgreSQL + Redis" if deployed else "SQLite"
    token = last_line(manage("shell", "-c",
                             "from workspaces.access import Actor; from workspaces.models import Workspace; "
                             "from serving.services import api_key_create; "
                             "print(api_key_create(actor=Actor.system('bench'), "
                             "workspace=Workspace.objects.get(slug='demo'), name='bench', scopes=['read'])[1])"))
    runs = [(name, n) for name in servers for n in (workers if name == "uvicorn" else [1])]
    for server_name, processes in runs:
        if importlib.util.find_spec(server_name) is None:
            print(f"API added latency, {server_name}: not installed here, skipped", flush=True)
            continue
        if processes > 1 and not deployed:
            print(f"API added latency, {asgi.label(server_name, processes)}: skipped (several processes need "
                  f"--deployed: SQLite takes one writer)", flush=True)
            continue
        port = free_port()
        server = asgi.start(server_name, port, workers=processes, env=env, cwd=ROOT)
        try:
            warm_up = functools.partial(_replies, port, token, server.pid, 2 * processes, 50)
            if not asgi.warm_every_worker(server.pid, processes, warm_up):
                print("  (warm-up: not every worker served a request; the figures include their start-up)")
            for concurrency in (1, 32):
                for count in (requests // 4, requests):  # the cost per request should not grow with the count
                    run = _replies(port, token, server.pid, concurrency, count)
                    server_cpu = "?" if run.server_cpu_ms is None else f"{run.server_cpu_ms:.2f}"
                    services = "".join(f", {name} {ms:.2f} ms" for name, ms in run.services_cpu_ms.items()
                                       if deployed)
                    print(f"API added latency, {asgi.label(server_name, processes)}, concurrency {concurrency:>2}, "
                          f"{count:>4} requests (scripted model, {where}): {run.rate():.0f} req/s, "
                          f"p50 {run.pct(50):.1f} ms, p99 {run.pct(99):.1f} ms; CPU a request: server "
                          f"{server_cpu} ms{services}, load generator {run.client_cpu_ms:.2f} ms", flush=True)
        finally:
            asgi.stop(server)


def _replies(port: int, token: str, server_pid: int, concurrency: int, count: int):
    from http_load import post_load

    def replied(status: int, answer: bytes) -> None:
        body = json.loads(answer)
        assert status == 200 and body["outcome"] == "replied", body

    bodies = [{"message": "How much is L001 now?", "viewer_id": f"v{i}"} for i in range(count)]
    return post_load(port, "/api/v1/rooms/demo-room/reply", {"Authorization": f"Bearer {token}"}, bodies,
                     concurrency, server_pid=server_pid, check=replied)


def bench_model() -> None:
    from serving.backends.local import LocalBackend

    backend = LocalBackend()
    started = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - started
    messages = [{"role": "system", "content": "You are a friendly shop assistant."},
                {"role": "user", "content": "Describe a warm wool sweater for winter in about eighty words."}]

    async def main():
        await backend.complete(messages, [], max_tokens=16)  # warm-up
        return [await backend.complete(messages, [], max_tokens=128) for _ in range(3)]

    results = asyncio.run(main())
    rates = [r.tokens_out / ((r.latency_ms - (r.ttft_ms or 0)) / 1000) for r in results if r.tokens_out > 1]
    print(f"offline model (SmolLM2-135M Q4_1, llama.cpp, {os.cpu_count()} threads): load {load_s:.2f} s, "
          f"TTFT {statistics.mean(r.ttft_ms for r in results):.0f} ms, "
          f"decode {statistics.mean(rates):.1f} tokens/s over {sum(r.tokens_out for r in results)} tokens")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--skip-api", action="store_true")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--servers", nargs="+", default=["daphne", "uvicorn"], choices=["daphne", "uvicorn"],
                        help="ASGI servers to measure the API under (benchmarks/servers.py)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1],
                        help="uvicorn processes to measure (more than one needs --deployed)")
    parser.add_argument("--deployed", action="store_true",
                        help="serve from PostgreSQL + Redis (DATABASE_URL, REDIS_URL; a fresh <db>_bench_api "
                             "database) instead of the embedded SQLite workspace")
    parser.add_argument("--root", help="the checkout whose code to measure (default: this one)")
    args = parser.parse_args()
    bench_runtime(args.turns)
    if not args.skip_api:
        bench_api(args.requests, args.servers, args.workers, args.deployed)
    if not args.skip_model:
        bench_model()
