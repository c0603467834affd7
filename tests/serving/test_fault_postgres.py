"""PostgreSQL restarted in the middle of event ingestion, then away for longer than a request waits: every batch the
server accepted is stored once, a refused batch is answered 503 with Retry-After (never a 500), a client that was
refused resends its batch and is told which events were already stored (duplicates, never counted twice), and the
server recovers without being restarted itself.

The deployed server (uvicorn, two processes) runs against a PostgreSQL cluster of this test's own (initdb in a
temporary directory, a spare port), so restarting it disturbs nothing else. Needs root (the cluster runs as the
`postgres` user through runuser), as CI and this machine's sessions are.
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.live_servers import ROOT, free_port, requires_services, start_deployed, stop, wait_for

PG_BIN = Path("/usr/lib/postgresql/15/bin")
OWN_CLUSTER = pytest.mark.skipif(
    os.geteuid() != 0 or not (PG_BIN / "initdb").exists() or not shutil.which("runuser"),
    reason="needs root, runuser and PostgreSQL 15's initdb to run a cluster of its own")
pytestmark = [requires_services, OWN_CLUSTER]
BATCH = 20


class OwnPostgres:
    def __init__(self):
        self.directory = Path(tempfile.mkdtemp(prefix="harnessops-pg-", dir="/tmp"))
        self.port = free_port()
        owner = pwd.getpwnam("postgres")
        os.chown(self.directory, owner.pw_uid, owner.pw_gid)
        self._as_postgres("initdb", "-D", str(self.directory / "data"), "-A", "trust", "-U", "postgres",
                          "--no-sync", "-E", "UTF8")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/harnessops"

    def _as_postgres(self, program: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / program), *args], check=True,
                       capture_output=True, cwd=self.directory)

    def start(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.directory / "data"), "-l", str(self.directory / "log"), "-w",
                          "-o", f"-p {self.port} -k {self.directory} -c fsync=off -c listen_addresses=127.0.0.1",
                          "start")

    def stop(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def own_postgres():
    cluster = OwnPostgres()
    cluster.start()
    with psycopg.connect(f"postgres://postgres@127.0.0.1:{cluster.port}/postgres", autocommit=True) as admin:
        admin.execute("CREATE DATABASE harnessops")
    yield cluster
    cluster.remove()


def manage(url: str, *argv: str, **extra: str) -> str:
    env = {**os.environ, "DATABASE_URL": url, "HARNESSOPS_ADMIN_PASSWORD": "fault-pass-1", **extra}
    return subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=env, check=True, capture_output=True,
                          text=True).stdout


KEY = ("from serving.services import api_key_create; from workspaces.access import Actor; "
       "from workspaces.models import Workspace; "
       "print(api_key_create(actor=Actor.system('t'), workspace=Workspace.objects.get(slug='demo'), name='platform', "
       "scopes=['ingest'])[1])")


def test_accepted_batches_survive_a_postgres_restart_and_resent_ones_count_once(own_postgres):
    manage(own_postgres.url, "migrate", "-v0")
    manage(own_postgres.url, "seed_demo")
    token = manage(own_postgres.url, "shell", "-c", KEY).strip().splitlines()[-1]
    server, base = start_deployed(DATABASE_URL=own_postgres.url)
    sent: list[tuple[float, int, dict, list[dict]]] = []  # (answered at, status, body, events)
    overlapping: list[float] = []  # when the requests in flight while PostgreSQL was down had started
    going = threading.Event()
    marks: dict[str, float] = {}

    def batch() -> list[dict]:
        now = datetime.now(UTC).isoformat()
        return [{"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": f"v{i}", "room_id": "demo-room",
                 "item_id": "L001", "ts": now} for i in range(BATCH)]

    def platform() -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as api:
            while not going.is_set():
                events = batch()
                started = time.monotonic()
                try:
                    answer = api.post("/api/v1/events", json={"events": events})
                    body = answer.json() if answer.status_code == 200 else \
                        {"retry_after": answer.headers.get("Retry-After")}
                    sent.append((time.monotonic(), answer.status_code, body, events))
                except httpx.TransportError:
                    sent.append((time.monotonic(), 0, {}, events))
                if started < marks.get("up", float("inf")) and sent[-1][0] > marks.get("down", float("inf")):
                    overlapping.append(started)
                time.sleep(0.05)

    clients = [threading.Thread(target=platform) for _ in range(2)]
    try:
        for client in clients:
            client.start()
        wait_for(lambda: len(sent) >= 20, 60, "batches before the restart")
        marks["down"] = time.monotonic()
        own_postgres.stop()
        time.sleep(3)
        own_postgres.start()
        marks["up"] = up_at = time.monotonic()
        # the server comes back by itself: batches land again
        wait_for(lambda: len([s for s in sent if s[0] > up_at and s[1] == 200]) >= 20, 60, "batches after")
        # Away longer than a request waits for a connection (the pool's 10 s): batches are refused with a 503
        # that says when to come back, and land again once it is back.
        own_postgres.stop()
        away_at = time.monotonic()
        wait_for(lambda: [s for s in sent if s[0] > away_at and s[1] == 503], 60, "a 503 while it is away")
        own_postgres.start()
        back_at = time.monotonic()
        wait_for(lambda: len([s for s in sent if s[0] > back_at and s[1] == 200]) >= 20, 60, "batches after it")
    finally:
        going.set()
        for client in clients:
            client.join(timeout=60)

    try:
        # Requests were under way while PostgreSQL was away: they waited for a connection (the pool's 10 s) and
        # landed, or failed and are resent below.
        assert overlapping, "the restart was felt"
        assert all(s[1] == 200 for s in sent[-10:]), [s[1] for s in sent[-10:]]
        # Every batch landed or was refused with a 503 and a time to come back: never a 500, never a lost answer.
        assert {status for _, status, _, _ in sent} <= {200, 503}, sorted({s[1] for s in sent})
        assert all(body["retry_after"] == "5" for _, status, body, _ in sent if status == 503)
        landed = [events for _, status, body, events in sent if status == 200]
        assert all(body["accepted"] == BATCH for _, status, body, _ in sent if status == 200)
        # A client that got an error resends its batch; what the server had stored is reported as duplicates.
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as api:
            for _, status, _, events in sent:
                if status != 200:
                    answer = api.post("/api/v1/events", json={"events": events})
                    assert answer.status_code == 200, answer.status_code
                    body = answer.json()
                    assert body["accepted"] + body["duplicates"] == BATCH and not body["errors"], body
            again = api.post("/api/v1/events", json={"events": landed[0]}).json()
            assert (again["accepted"], again["duplicates"]) == (0, BATCH)
    finally:
        stop(server)
    every_id = [event["event_id"] for _, _, _, events in sent for event in events]
    with psycopg.connect(own_postgres.url) as conn:
        stored = conn.execute("SELECT count(*), count(DISTINCT event_id) FROM serving_event WHERE event_id = ANY(%s)",
                              [every_id]).fetchone()
    assert stored == (len(every_id), len(every_id))  # every event stored, each once
