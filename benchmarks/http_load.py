"""Load for the API benchmarks: HTTP/1.1 POSTs on asyncio streams, each connection keep-alive with one request
in flight, and the CPU a server process (with its workers) spent meanwhile.

The load runs on the same two cores as the server it measures, so its own cost matters: httpx spent about a
millisecond of CPU a request here, as much as the reply route itself; these requests cost a fraction of that
(each run prints the client's CPU a request, so the claim is checked every time).
"""

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Load:
    latencies_ms: list[float]  # sorted
    wall_s: float
    client_cpu_ms: float  # this process's CPU a request, load generation and answer checks included
    server_cpu_ms: float | None  # the server's CPU a request (all its processes), None where /proc cannot say
    services_cpu_ms: dict[str, float]  # PostgreSQL's and Redis's CPU a request, where they run on this host

    def rate(self) -> float:
        return len(self.latencies_ms) / self.wall_s

    def pct(self, q: float) -> float:
        return self.latencies_ms[min(len(self.latencies_ms) - 1, int(len(self.latencies_ms) * q / 100))]


def post_load(port: int, path: str, headers: dict[str, str], bodies: list[dict], concurrency: int, *,
              server_pid: int | None = None, check=None) -> Load:
    """POST each of `bodies` (JSON) to 127.0.0.1:`port``path` over `concurrency` connections; `check(status,
    answer)` raises for an answer that does not count (the benchmark's assertion)."""
    head = "".join(f"{name}: {value}\r\n" for name, value in {"Host": "127.0.0.1", **headers}.items())
    requests = [(f"POST {path} HTTP/1.1\r\n{head}Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
                 .encode() + raw) for raw in (json.dumps(body).encode() for body in bodies)]

    async def run() -> tuple[list[float], float]:
        queue, latencies = list(reversed(requests)), []

        async def connection() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                while queue:
                    request = queue.pop()
                    started = time.perf_counter()
                    writer.write(request)
                    status, answer = await _response(reader)
                    latencies.append((time.perf_counter() - started) * 1000)
                    if check is not None:
                        check(status, answer)
            finally:
                writer.close()

        started = time.perf_counter()
        await asyncio.gather(*(connection() for _ in range(concurrency)))
        return latencies, time.perf_counter() - started

    cpu_before, server_before, services_before = time.process_time(), process_tree_cpu_s(server_pid), services_cpu_s()
    latencies, wall = asyncio.run(run())
    server_after, services_after = process_tree_cpu_s(server_pid), services_cpu_s()
    count = len(latencies)
    server = None if server_before is None or server_after is None else (server_after - server_before) / count * 1000
    services = {name: (services_after[name] - spent) / count * 1000 for name, spent in services_before.items()
                if name in services_after}
    return Load(sorted(latencies), wall, (time.process_time() - cpu_before) / count * 1000, server, services)


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    fields = dict(line.split(b":", 1) for line in lines[1:] if b":" in line)
    length = next((int(v) for k, v in fields.items() if k.strip().lower() == b"content-length"), None)
    if length is None:
        raise RuntimeError(f"answer without Content-Length: {head!r}")
    return status, await reader.readexactly(length)


def process_tree_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of `pid` and its child processes (uvicorn's workers), from /proc (Linux)."""
    if pid is None or not Path("/proc/self/stat").exists():
        return None
    return sum(cpu for this, parent, _name, cpu in _processes() if this == pid or parent == pid)


def workers_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of each worker of the server `pid` (its child processes; the server itself when it has none)."""
    processes = list(_processes())
    children = {this: cpu for this, parent, _name, cpu in processes if parent == pid}
    return children or {this: cpu for this, _parent, _name, cpu in processes if this == pid}


SERVICES = {"postgres": "PostgreSQL", "redis-server": "Redis"}  # process name → what it is


def services_cpu_s() -> dict[str, float]:
    """CPU seconds of the PostgreSQL and Redis processes on this host, by SERVICES' names (none found: absent).
    All their work counts, not only this load's: figures from an otherwise idle machine."""
    spent: dict[str, float] = {}
    for _this, _parent, name, cpu in _processes():
        if name in SERVICES:
            spent[SERVICES[name]] = spent.get(SERVICES[name], 0.0) + cpu
    return spent


def _processes():
    """(pid, parent pid, name, CPU seconds) of every process, from /proc (Linux; none elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK") if Path("/proc/self/stat").exists() else 0
    for stat in Path("/proc").glob("[0-9]*/stat") if ticks else ():
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
        yield int(stat.parent.name), int(fields[1]), name, (int(fields[11]) + int(fields[12])) / ticks
