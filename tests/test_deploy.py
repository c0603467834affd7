"""The production build as files: the image's build context holds every package, docker-compose.yml pins
its images, starts vLLM from the profile, and its web healthcheck passes under production settings.

No docker here: the Dockerfile and .dockerignore are read with Docker's own matching rules, and the
compose commands are run as the containers would run them.
"""

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from serving.vllm.profile import PROFILES
from tests.live_servers import requires_services, start_deployed, stop

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


# --- the build context -----------------------------------------------------------------------------

def dockerignore_patterns(text: str) -> list[tuple[bool, re.Pattern]]:
    """(exclude?, regex) per line, as Docker reads .dockerignore: paths relative to the context root,
    Go `filepath.Match` globs plus `**`, `!` re-includes, the last matching line wins."""
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        glob = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex = ""
        i = 0
        while i < len(glob):
            if glob.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif glob.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif glob[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif glob[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(glob[i]), i + 1
        patterns.append((exclude, re.compile(regex + "$")))
    return patterns


def in_build_context(path: str, patterns) -> bool:
    """A path is left out when the last pattern matching it, or one of its parent directories, excludes."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        verdict = None
        for exclude, regex in patterns:
            if regex.match(prefix):
                verdict = exclude
        if verdict:
            return False
    return True


def top_level_packages() -> set[str]:
    """Directories with an __init__.py, and those pyproject's packages.find includes."""
    includes = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set()
    for entry in ROOT.iterdir():
        # Only importable names: `harness*` must not take pip's `harnessops.egg-info` for a package.
        if not entry.is_dir() or not entry.name.isidentifier():
            continue
        if (entry / "__init__.py").exists() or any(re.fullmatch(p.replace("*", ".*"), entry.name) for p in includes):
            found.add(entry.name)
    return found


def dockerfile_copied_sources() -> list[str]:
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words and words[0].upper() in ("COPY", "ADD"):
            args = [w for w in words[1:] if not w.startswith("--")]
            sources += [os.path.normpath(s) for s in args[:-1]]
    return sources


def test_matcher_reads_dockerignore_like_docker():
    patterns = dockerignore_patterns("# c\n.venv\n**/__pycache__\n*.md\n!README.md\n/var\n")
    assert not in_build_context(".venv/bin/python", patterns)
    assert not in_build_context("serving/__pycache__/api.cpython-311.pyc", patterns)
    assert not in_build_context("__pycache__/x.pyc", patterns)
    assert not in_build_context("NOTES.md", patterns) and in_build_context("README.md", patterns)
    assert in_build_context("docs/x.md", patterns)  # `*` stops at a slash
    assert not in_build_context("var/db.sqlite3", patterns) and in_build_context("serving/var.py", patterns)


def test_every_package_reaches_the_image():
    packages = top_level_packages()
    assert {"console", "harness", "serving", "evaluation"} <= packages
    sources = dockerfile_copied_sources()
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    for package in sorted(packages):
        copied = "." in sources or package in sources
        assert copied, f"the Dockerfile copies no {package}/ (copy the whole context: COPY . .)"
        files = [p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
        missing = [f for f in files if not in_build_context(f, patterns)]
        assert not missing, f".dockerignore leaves {package} files out of the image: {missing[:5]}"
    for needed in ("pyproject.toml", "manage.py", "templates/base.html"):
        assert in_build_context(needed, patterns) and ("." in sources or needed.split("/")[0] in sources)


def test_local_state_stays_out_of_the_image():
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    for path in (".git/HEAD", ".venv/bin/python", "var/secret_key", ".env", "console/__pycache__/a.pyc",
                 "node_modules/chart.js/package.json", "static_build/editor.js",
                 "experiments/harness-reading/study.json"):
        assert not in_build_context(path, patterns), path


def test_front_end_packages_are_built_in_a_pinned_stage_from_the_lock_file():
    """The image installs the npm packages with `npm ci` (package-lock.json, nothing copied from a checkout)
    in a node stage of a pinned version, bundles the editor, and collectstatic finds what settings serve."""
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.MULTILINE | re.IGNORECASE)
    images = dict((name or "final", image) for image, name in stages)
    assert re.fullmatch(r"node:\d+\.\d+\.\d+-\S+", images["frontend"]), images
    frontend = text.split("FROM", 2)[1]
    assert "COPY package.json package-lock.json" in frontend and "npm ci" in frontend and "npm run build" in frontend
    final = text.split("FROM", 2)[2]
    assert "COPY --from=frontend /app/node_modules node_modules" in final
    assert "COPY --from=frontend /app/static_build static_build" in final
    assert final.index("COPY --from=frontend") < final.index("collectstatic")
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    for needed in ("package.json", "package-lock.json", "console/frontend/editor.js"):
        assert in_build_context(needed, patterns), needed


# --- docker-compose.yml ----------------------------------------------------------------------------

def test_images_are_pinned():
    vllm_pin = next(d for d in PYPROJECT["project"]["optional-dependencies"]["gpu"] if d.startswith("vllm=="))
    for name, service in COMPOSE["services"].items():
        image = service.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name} runs an unpinned image {image!r}"
    assert COMPOSE["services"]["vllm"]["image"] == f"vllm/vllm-openai:v{vllm_pin.split('==')[1]}"
    assert COMPOSE["services"]["web"]["image"] == f"harnessops:{PYPROJECT['project']['version']}"


def interpolate(value: str) -> str:
    """Compose's `${NAME:-default}` with NAME unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_vllm_service_runs_the_profile(tmp_path):
    """Run the service's entrypoint + command as its container would, with a stand-in `vllm` on PATH that
    prints the argv it was exec'd with: it must be exactly the profile's, thinking off, speculation on."""
    service = COMPOSE["services"]["vllm"]
    mounts = dict(v.split(":")[1::-1] for v in service["volumes"] if v.startswith("./"))  # container → source
    argv = [interpolate(a) for a in service["entrypoint"] + service["command"]]
    argv = [str(ROOT / mounts[a]) if a in mounts else a for a in argv]
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert argv[0] == "python3"
    result = subprocess.run([sys.executable, *argv[1:]], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    served = result.stdout.splitlines()
    profile = PROFILES["qwen3-8b"]
    assert ["vllm", *served] == profile.to_argv()
    flags = dict(zip(served, served[1:], strict=False))
    assert json.loads(flags["--default-chat-template-kwargs"]) == {"enable_thinking": False}
    assert json.loads(flags["--speculative-config"])["method"] == "eagle3"
    assert flags["--tool-call-parser"] == "hermes" and flags["--reasoning-parser"] == "qwen3"
    # The app asks vLLM for the model by the name the profile serves it under.
    model = interpolate(COMPOSE["x-app"]["environment"]["HARNESSOPS_OPENAI_MODEL"])
    assert model == profile.served_model_name == flags["--served-model-name"]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profiles_serve_under_their_own_name(name):
    """VLLM_PROFILE names both the profile and the served model, so the two never disagree."""
    assert PROFILES[name].served_model_name == name


def test_profile_module_prints_the_command():
    result = subprocess.run([sys.executable, "-m", "serving.vllm.profile", "--json", "qwen3-30b-a3b"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == PROFILES["qwen3-30b-a3b"].to_argv()
    shell = subprocess.run([sys.executable, "-m", "serving.vllm.profile", "qwen3-8b"], cwd=ROOT,
                           capture_output=True, text=True, timeout=30).stdout
    assert shlex.split(shell) == PROFILES["qwen3-8b"].to_argv()


# --- the web healthcheck under production settings -------------------------------------------------

@pytest.mark.django_db
def test_healthz_ignores_host_and_https_redirect(client, settings):
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz", HTTP_HOST="127.0.0.1:8000").json() == {"status": "ok", "cache": "ok"}
    assert client.get("/accounts/login/", HTTP_HOST="127.0.0.1:8000").status_code == 400  # hosts still checked
    assert client.get("/accounts/login/", HTTP_HOST="console.example.com").status_code == 301  # and HTTPS


@requires_services
@pytest.mark.django_db(transaction=True)
def test_compose_web_healthcheck_passes_under_production_settings():
    """The deployed server (compose's web command: uvicorn, two processes) in production mode; the compose
    healthcheck command, as written, against it."""
    server, base = start_deployed(HARNESSOPS_MODE="production", DJANGO_SECRET_KEY="s" * 60,
                                  DJANGO_ALLOWED_HOSTS="console.example.com")
    try:
        test = COMPOSE["services"]["web"]["healthcheck"]["test"]
        assert test[0] == "CMD" and test[1] == "python"
        command = [sys.executable, *[a.replace("127.0.0.1:8000", base.removeprefix("http://")) for a in test[2:]]]
        assert subprocess.run(command, capture_output=True, timeout=60).returncode == 0
        assert httpx.get(f"{base}/accounts/login/", timeout=60).status_code == 400  # the server really is in production mode
    finally:
        stop(server)


def test_the_image_and_compose_serve_with_the_same_command():
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = json.loads(next(line for line in dockerfile.splitlines() if line.startswith("CMD "))[4:])
    assert cmd == COMPOSE["services"]["web"]["command"]
    assert cmd[0] == "uvicorn" and "WEB_CONCURRENCY=2" in dockerfile
