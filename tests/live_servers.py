"""Real server processes for tests: Daphne, the deployed server (docker-compose.yml's web command) and a
Celery worker on this test's database and Redis, and logging a browser into them. Used by the tests that
need websockets or a worker."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from tests.conftest import PASSWORD

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
requires_services = pytest.mark.skipif(
    not (os.environ.get("REDIS_URL") and os.environ.get("DATABASE_URL", "").startswith("postgres")),
    reason="needs PostgreSQL and Redis (set DATABASE_URL and REDIS_URL; CI does)")


def child_env(**extra) -> dict:
    """The environment of a server or worker process that shares this test's database and Redis."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "REDIS_URL": os.environ["REDIS_URL"],
            "HARNESSOPS_MODEL_BACKEND": "scripted",
            "HARNESSOPS_SCRIPTED_STEPS": '["Thanks for asking! Let me check that for you."]',
            "PYTHONUNBUFFERED": "1", **extra}


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def start_worker(log_file: Path | None = None, *, queues: str = "cpu", **extra) -> subprocess.Popen:
    """A solo-pool worker on `queues` (default `cpu`); with `log_file`, its info-level log (task results) goes there."""
    level = "info" if log_file else "warning"
    argv = [str(BIN / "celery"), "-A", "console", "worker", "-Q", queues, "--pool", "solo", "-l", level,
            "--without-gossip", "--without-mingle", "--without-heartbeat"]
    if log_file:
        argv += ["--logfile", str(log_file)]
    return subprocess.Popen(argv, cwd=ROOT, env=child_env(**extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def start_daphne(port: int | None = None, **extra) -> tuple[subprocess.Popen, str]:
    """Daphne serving the ASGI app (HTTP + websockets) on `port` (default: a free one); returns once
    /healthz answers. Starting it again on the same port stands for a server restart."""
    port = port or free_port()
    process = subprocess.Popen([str(BIN / "daphne"), "-p", str(port), "console.asgi:application"], cwd=ROOT,
                               env=child_env(**extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), 180, "daphne")  # its imports take minutes on a starved machine
    except AssertionError:
        stop(process)
        raise
    return process, base


def deployed_server_argv(port: int) -> list[str]:
    """docker-compose.yml's web command as written, on 127.0.0.1:`port` of this virtualenv."""
    import yaml

    argv = list(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"]["command"])
    argv[argv.index("--host") + 1], argv[argv.index("--port") + 1] = "127.0.0.1", str(port)
    return [str(BIN / argv[0]), *argv[1:]]


def start_deployed(workers: int = 2, **extra) -> tuple[subprocess.Popen, str]:
    """The server the image runs (uvicorn, `workers` processes), answering /healthz."""
    port = free_port()
    process = subprocess.Popen(deployed_server_argv(port), cwd=ROOT, env=child_env(WEB_CONCURRENCY=str(workers),
                                                                                   **extra),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), 180, "the deployed server")
    except AssertionError:
        stop(process)
        raise
    return process, base


def log_in(page, base: str, user) -> None:
    """Log `user` into the server in the browser. The server hashes with the default (slow, salted)
    hasher, while this test process uses a fast one, so the password is re-hashed for the server first."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user.password = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt())
    user.save(update_fields=["password"])
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
