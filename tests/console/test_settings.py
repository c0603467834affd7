"""Settings come from the environment and fail loudly; production passes the deploy checks."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.env import env

ROOT = Path(__file__).resolve().parents[2]


def test_env_helper_casts_and_fails_loudly(monkeypatch):
    monkeypatch.setenv("HX_FLAG", "yes")
    monkeypatch.setenv("HX_N", "12")
    monkeypatch.setenv("HX_LIST", "a, b,,c")
    assert env("HX_FLAG", cast=bool) is True
    assert env("HX_N", cast=int) == 12
    assert env("HX_LIST", cast=list) == ["a", "b", "c"]
    assert env("HX_MISSING", "fallback") == "fallback"
    with pytest.raises(ImproperlyConfigured, match="HX_MISSING"):
        env("HX_MISSING")
    monkeypatch.setenv("HX_N", "twelve")
    with pytest.raises(ImproperlyConfigured, match="HX_N"):
        env("HX_N", cast=int)


def manage(*args, **environ):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HARNESSOPS_"))}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **environ},
                          capture_output=True, text=True, timeout=120)


def test_production_requires_its_variables():
    result = manage("check", HARNESSOPS_MODE="production")
    assert result.returncode != 0 and "DJANGO_SECRET_KEY is required" in result.stderr


def test_production_deploy_check_is_clean():
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING",
        HARNESSOPS_MODE="production", DJANGO_SECRET_KEY="x" * 64 + "-not-a-real-secret-but-long-and-varied-0123456789",
        DJANGO_ALLOWED_HOSTS="console.example.com", DATABASE_URL="postgres://u@127.0.0.1:5432/none",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert result.returncode == 0, result.stderr + result.stdout
