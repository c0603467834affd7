"""Error pages never show a traceback unless DEBUG is explicitly on, in the embedded mode and in production.

Each case runs in a fresh process, so the settings are read from that environment as `make run` or the
production image would read them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {"HARNESSOPS_MODE": "production", "DJANGO_ALLOWED_HOSTS": "console.example.com",
              "DJANGO_SECRET_KEY": "x" * 64 + "-not-a-real-secret-but-long-and-varied-0123456789",
              "DATABASE_URL": "postgres://u@127.0.0.1:5432/none", "REDIS_URL": "redis://127.0.0.1:6379/0"}

# Serves the console plus one view that fails, and reports what a browser would get.
PROBE = """
import json, sys, types
import django
from django.conf import settings
django.setup()
from django.test import Client
from django.urls import include, path

def boom(request):
    raise RuntimeError("secret-internal-detail")

urls = types.ModuleType("probe_urls")
urls.urlpatterns = [path("boom/", boom), path("", include("console.urls"))]
sys.modules["probe_urls"] = urls
settings.ROOT_URLCONF = "probe_urls"
host = settings.ALLOWED_HOSTS[0]
client = Client(raise_request_exception=False)
error = client.get("/boom/", secure=True, HTTP_HOST=host)
missing = client.get("/no/such/page/", secure=True, HTTP_HOST=host)
print(json.dumps({"debug": settings.DEBUG, "error": [error.status_code, error.content.decode()],
                  "missing": [missing.status_code, missing.content.decode()]}))
"""


def probe(**environ) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "HARNESSOPS_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**clean, "DJANGO_SETTINGS_MODULE": "console.settings",
                                 "HARNESSOPS_VAR_DIR": str(ROOT / "var"), **environ})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["embedded", "production"])
def test_error_pages_hide_internals_by_default(mode):
    answer = probe(**(PRODUCTION if mode == "production" else {}))
    assert answer["debug"] is False
    status, body = answer["error"]
    assert status == 500 and "Something went wrong on our side" in body
    assert "Traceback" not in body and "secret-internal-detail" not in body and "RuntimeError" not in body
    status, body = answer["missing"]
    assert status == 404 and "Not found" in body and "URLconf" not in body and "probe_urls" not in body


def test_debug_is_opt_in():
    answer = probe(DJANGO_DEBUG="1")
    assert answer["debug"] is True
    assert "secret-internal-detail" in answer["error"][1]  # the developer asked for the debug page
    # Production ignores DJANGO_DEBUG: it never shows a traceback.
    assert probe(**PRODUCTION, DJANGO_DEBUG="1")["debug"] is False
