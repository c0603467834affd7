"""Settings from the environment, failing loudly.

Every setting HarnessOps reads from the environment goes through `env()`, so a
production deployment that forgot a variable stops at start-up with the
variable's name instead of running on a silent default.
"""

import os

from django.core.exceptions import ImproperlyConfigured

_REQUIRED = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env(name: str, default=_REQUIRED, cast=str):
    """Read `name` from the environment, cast it, or raise if it is required and missing."""
    raw = os.environ.get(name)
    if raw is None:
        if default is _REQUIRED:
            raise ImproperlyConfigured(f"Environment variable {name} is required in this mode.")
        return default
    if cast is bool:
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false).")
    if cast is list:
        return [item.strip() for item in raw.split(",") if item.strip()]
    try:
        return cast(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a valid {cast.__name__}.") from exc
