"""Throw-away workspaces for benchmarks, migrated and seeded with the demo: embedded (SQLite in a temp dir,
in-process jobs) or deployed (a fresh database `<DATABASE_URL's>_bench_api` and the REDIS_URL of the
environment: what a production server runs on)."""

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def embedded_workspace(*, deployed: bool = False, **env_extra: str) -> tuple[Callable[..., str], dict]:
    """Returns `manage(*argv) -> stdout` bound to a fresh workspace, and that workspace's environment."""
    env = {**os.environ, "HARNESSOPS_VAR_DIR": tempfile.mkdtemp(prefix="harnessops-bench-"),
           "HARNESSOPS_ADMIN_PASSWORD": "bench-password-1", **env_extra}
    if deployed:
        if not (env.get("DATABASE_URL") and env.get("REDIS_URL")):
            raise SystemExit("--deployed needs DATABASE_URL (PostgreSQL) and REDIS_URL")
        env["DATABASE_URL"] = _fresh_database(env["DATABASE_URL"], "bench_api")
    else:
        for name in ("DATABASE_URL", "REDIS_URL"):  # embedded: SQLite, in-process jobs
            env.pop(name, None)

    def manage(*argv: str) -> str:
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *argv], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stderr)
        return done.stdout

    manage("migrate", "-v0")
    manage("seed_demo")
    return manage, env


def last_line(output: str) -> str:
    """`manage.py shell -c` prints a banner first; the value is on the last line."""
    return output.strip().splitlines()[-1]


def _fresh_database(url: str, suffix: str) -> str:
    import psycopg

    server, name = url.rsplit("/", 1)
    fresh = f"{name.split('?')[0]}_{suffix}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{fresh}"')
    return f"{server}/{fresh}"
