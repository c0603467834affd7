"""System checks: the console's front-end files are installed (they come from npm, not from the repo)."""

from django.contrib.staticfiles import finders
from django.core.checks import Error, register

# Every front-end file a template loads from a package: (static path, how it gets there).
FRONTEND_FILES = (
    ("vendor/htmx.org/htmx.min.js", "npm ci"),
    ("vendor/chart.js/chart.umd.min.js", "npm ci"),
    ("vendor/chartjs-chart-matrix/chartjs-chart-matrix.min.js", "npm ci"),
    ("build/editor.js", "npm run build"),
)


@register()
def frontend_installed(app_configs=None, **kwargs):
    return [
        Error(f"static file {path} is missing: the console's pages would load without it.",
              hint=f"Run `make install` (it runs `{step}`; front-end packages are pinned in package-lock.json).",
              id="console.E001")
        for path, step in FRONTEND_FILES if finders.find(path) is None
    ]
