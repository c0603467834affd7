"""What one HTTP tool call costs the process that makes it: `ToolRegistry.execute` of a GET binding against a
local JSON server in another process (so the figure is the caller's alone). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/http_tool.py [--calls 500 --blocks 5] [--hostname]

CPU and wall time per call, the median of the blocks and their range, after 200 calls of warm-up (the session
and its keep-alive connection made). `--hostname` calls `localhost` instead of `127.0.0.1`: the name is looked up (and its
addresses kept for `tools.DNS_KEPT_S`), and the host policy checks them before the call dials the one checked.
"""

import argparse
import asyncio
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _serve(port: int) -> None:
    from aiohttp import web

    async def product(request):
        return web.json_response({"link_id": request.match_info["link_id"], "price": 19.9, "stock": 3})

    app = web.Application()
    app.router.add_get("/products/{link_id}", product)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _measure(registry, tool, ctx, calls: int, blocks: int) -> tuple[list[float], list[float]]:
    for _ in range(200):
        outcome = await registry.execute(tool, {"link_id": "L001", "fields": "price"}, ctx)
        if outcome.error:
            raise SystemExit(f"the tool call failed: {outcome.error}")
    cpu, wall = [], []
    for _ in range(blocks):
        started, started_cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            await registry.execute(tool, {"link_id": "L001", "fields": "price"}, ctx)
        wall.append((time.perf_counter() - started) / calls * 1e6)
        cpu.append((time.process_time() - started_cpu) / calls * 1e6)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="calls a block")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--hostname", action="store_true", help="call localhost (a name looked up)")
    args = parser.parse_args()

    from harness.runtime import HttpPolicy, RoomContext, ToolContext, ToolRegistry
    from harness.spec.model import Tool, ToolBinding

    port = _free_port()
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    host = "localhost" if args.hostname else "127.0.0.1"
    for _ in range(100):  # until the server listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    tool = Tool(name="product", description="d", parameters={"type": "object"}, timeout_ms=2000,
                binding=ToolBinding("http", f"GET http://{host}:{port}/products/{{link_id}}"))
    registry = ToolRegistry(http_policy=HttpPolicy(allowed_hosts=(host,)))
    ctx = ToolContext(room=RoomContext(room_id="bench"), viewer_id="v")
    try:
        cpu, wall = asyncio.run(_measure(registry, tool, ctx, args.calls, args.blocks))
    finally:
        server.terminate()
    print(f"HTTP tool call (GET {host}, {args.blocks} blocks of {args.calls}): caller CPU median "
          f"{statistics.median(cpu):.0f} µs ({min(cpu):.0f}-{max(cpu):.0f}), wall median {statistics.median(wall):.0f} µs "
          f"({min(wall):.0f}-{max(wall):.0f})")


if __name__ == "__main__":
    main()
