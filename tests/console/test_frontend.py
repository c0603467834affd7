"""Front-end code comes from npm at pinned versions, never as a copy in the repository; every static file a
template loads exists; charts are drawn by Chart.js, not hand-built SVG."""

import json
import re
import subprocess
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.checks import run_checks

from console.checks import FRONTEND_FILES

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = json.loads((ROOT / "package.json").read_text())
LOCK = json.loads((ROOT / "package-lock.json").read_text())
TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))
STATIC_TAG = re.compile(r"""{%\s*static\s+['"]([^'"]+)['"]\s*%}""")


def test_every_package_is_pinned_exactly_and_locked():
    declared = {**PACKAGE["dependencies"], **PACKAGE["devDependencies"]}
    assert {"htmx.org", "chart.js", "chartjs-chart-matrix", "codemirror", "esbuild"} <= set(declared)
    for name, version in declared.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} is not pinned to one version: {version!r}"
        locked = LOCK["packages"][f"node_modules/{name}"]
        assert locked["version"] == version and locked["integrity"].startswith("sha512-"), name
    assert LOCK["packages"][""]["dependencies"] == PACKAGE["dependencies"]


def test_no_third_party_bundle_is_copied_into_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    copies = [path for path in tracked if re.search(r"\.min\.(js|css)$|(^|/)(vendor|node_modules|static_build)/", path)]
    assert not copies, f"third-party files in the repository (install them with npm instead): {copies}"
    ours = [path for path in tracked if path.startswith("console/static/") and path.endswith(".js")]
    for path in ours:
        head = (ROOT / path).read_text()[:400]
        assert not re.search(r"\(c\)|@license|Released under", head), f"{path} looks like a copied library"


def test_every_static_file_a_template_loads_exists():
    referenced = {path for template in TEMPLATES for path in STATIC_TAG.findall(template.read_text())}
    assert {"vendor/htmx.org/htmx.min.js", "vendor/chart.js/chart.umd.min.js", "build/editor.js"} <= referenced
    missing = sorted(path for path in referenced if finders.find(path) is None)
    assert not missing, f"templates load static files that do not exist (run `make install`): {missing}"
    assert {path for path, _ in FRONTEND_FILES} <= referenced  # the system check watches what pages load


def test_the_system_check_names_a_missing_front_end_file(settings, tmp_path):
    assert [e for e in run_checks() if e.id == "console.E001"] == []
    settings.STATICFILES_DIRS = [(prefix, tmp_path / prefix.replace("/", "-")) for prefix, _ in settings.STATICFILES_DIRS]
    finders.get_finder.cache_clear()
    try:
        errors = [e for e in run_checks() if e.id == "console.E001"]
    finally:
        finders.get_finder.cache_clear()
    assert [e.msg.split()[2] for e in errors] == [path for path, _ in FRONTEND_FILES]
    assert "make install" in errors[0].hint


def test_charts_come_from_the_charting_library():
    """No hand-drawn charts: no SVG strings or SVG nodes built in templates, scripts or Python."""
    sources = [*TEMPLATES, *(ROOT / "console" / "static").rglob("*.js"), *(ROOT / "console" / "frontend").rglob("*.js")]
    sources += [p for package in ("console", "harness", "serving", "evaluation", "training")
                for p in (ROOT / package).rglob("*.py")]
    for source in sources:
        text = source.read_text()
        for pattern in ("<svg", "<polyline", "createElementNS", '"polyline"'):
            assert pattern not in text, f"{source.relative_to(ROOT)} draws with {pattern}"
    charted = [t for t in TEMPLATES if "<canvas" in t.read_text()]
    assert len(charted) >= 6
    for template in charted:
        text = template.read_text()
        assert "chart.umd.min.js" in text or "_chart_scripts.html" in text, template
