"""The ASGI servers the benchmarks start, by name: the deployed one and the ones it was chosen against.

`daphne` is one process (it has no workers); `uvicorn` runs `workers` processes with uvloop and httptools,
as the Dockerfile and docker-compose.yml serve the product (WEB_CONCURRENCY workers).
"""

import subprocess
import sys
import time
from pathlib import Path

import httpx


def command(name: str, port: int, workers: int = 1) -> list[str]:
    if name == "daphne":
        if workers != 1:
            raise SystemExit("daphne runs one process; measure workers with uvicorn")
        return [str(Path(sys.executable).parent / "daphne"), "-p", str(port), "console.asgi:application"]
    if name == "uvicorn":
        return [sys.executable, "-m", "uvicorn", "console.asgi:application", "--port", str(port),
                "--workers", str(workers), "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                "--log-level", "warning"]
    raise SystemExit(f"unknown server {name!r}: daphne or uvicorn")


def label(name: str, workers: int) -> str:
    return f"{name}, {workers} process{'es' if workers > 1 else ''}"


def start(name: str, port: int, *, workers: int = 1, env: dict, cwd: Path) -> subprocess.Popen:
    """The server, answering /healthz (one worker up: `warm_every_worker` waits for the others)."""
    server = subprocess.Popen(command(name, port, workers), env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    for _ in range(150):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).raise_for_status()
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        server.terminate()
        raise SystemExit(f"{name} did not answer on port {port} within 30 s")
    return server


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    server.wait(timeout=20)


def warm_every_worker(server_pid: int, workers: int, load) -> bool:
    """Call `load()` (a round of untimed requests) until each of the server's `workers` processes has served some
    (its CPU grew by 0.2 s): a worker's first requests import what the views need, about a second of CPU, and which
    worker accepts a connection is the kernel's choice (uvicorn's other children, such as multiprocessing's
    tracker, serve none). False after 10 rounds without it: the figures that follow include a start-up.

    /healthz answered tells that one worker is up, not all: a worker still importing (≈ 3 s of CPU) when the
    round's CPU was first read grew by 0.2 s without serving, and took its first requests in the timed load (a
    fresh two-process server's first burst at 32 then had p99 480-570 ms, in 2 of 13 such servers). So the workers'
    CPU is read once it has settled."""
    from http_load import workers_cpu_s

    start = _settled(server_pid, workers)
    for _ in range(10):
        load()
        now = workers_cpu_s(server_pid)
        if sum(now.get(pid, 0.0) - cpu > 0.2 for pid, cpu in start.items()) >= workers:
            return True
    return False


def _settled(server_pid: int, workers: int) -> dict[int, float]:
    """The server's workers' CPU seconds once there are `workers` of them and none grew by 20 ms in 0.3 s (their
    start-up done), or after 30 s."""
    from http_load import workers_cpu_s

    before = workers_cpu_s(server_pid)
    for _ in range(100):
        time.sleep(0.3)
        now = workers_cpu_s(server_pid)
        if len(now) >= workers and all(now[pid] - before.get(pid, 0.0) < 0.02 for pid in now):
            return now
        before = now
    return before
