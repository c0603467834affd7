"""Fixtures for the serving tests: a real `serving.openai_compat` server process per script."""

import json
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30


def start_compat_server(args: list[str]) -> tuple[subprocess.Popen, str]:
    """Start `python -m serving.openai_compat ARGS --port 0`; return the process and its /v1 base URL."""
    process = subprocess.Popen([sys.executable, "-m", "serving.openai_compat", *args, "--port", "0"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.1)
        if ready:
            line = process.stdout.readline()
            if " on http://" in line:
                base_url = line.rsplit(" on ", 1)[1].strip()
                break
        if process.poll() is not None:
            raise RuntimeError(f"openai_compat exited {process.returncode}: {process.stderr.read()}")
    else:
        process.kill()
        raise RuntimeError("openai_compat did not announce its address in time")
    root = base_url.removesuffix("/v1")
    while httpx.get(f"{root}/health").status_code != 200:  # announced after bind, so this is quick
        time.sleep(0.05)
    return process, base_url


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()
    process.stderr.close()


@pytest.fixture
def scripted_server(tmp_path) -> Iterator[Callable[..., str]]:
    """`scripted_server(steps, *extra_args) -> base_url`: a scripted model server for this test."""
    processes = []

    def start(steps: list, *extra: str) -> str:
        script = tmp_path / f"script-{len(processes)}.json"
        script.write_text(json.dumps(steps))
        process, base_url = start_compat_server(["--backend", "scripted", "--script", str(script), *extra])
        processes.append(process)
        return base_url

    yield start
    for process in processes:
        stop(process)
