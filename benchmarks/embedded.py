"""A throw-away embedded workspace for benchmarks: SQLite in a temp dir, migrated and seeded with the demo."""

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def embedded_workspace(**env_extra: str) -> tuple[Callable[..., str], dict]:
    """Returns `manage(*argv) -> stdout` bound to a fresh workspace, and that workspace's environment."""
    env = {**os.environ, "HARNESSOPS_VAR_DIR": tempfile.mkdtemp(prefix="harnessops-bench-"),
           "HARNESSOPS_ADMIN_PASSWORD": "bench-password-1", **env_extra}
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
