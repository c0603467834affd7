"""Which model backend answers, from settings (environment). The one place Django meets serving.backends."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from serving.backends import ModelBackend, backend_names, create_backend
from serving.backends.scripted import ScriptedBackend, steps_from_json


def available_backends() -> list[str]:
    """Backends this deployment can use: scripted only outside production and with a script
    (HARNESSOPS_SCRIPTED_STEPS; without one every turn would fail), openai only when configured."""
    names = [n for n in backend_names()
             if not (n == "scripted" and (settings.PRODUCTION or not settings.SCRIPTED_STEPS))]
    if not settings.OPENAI_BASE_URL:
        names = [n for n in names if n != "openai"]
    return names


def backend_for(name: str | None = None) -> ModelBackend:
    """A backend instance for one turn. Cheap: the local model is loaded once per process by its module."""
    name = name or settings.MODEL_BACKEND
    if name not in backend_names():
        raise ImproperlyConfigured(f"Unknown model backend {name!r}; choose one of {', '.join(backend_names())}.")
    if name == "scripted":
        if settings.PRODUCTION:
            raise ImproperlyConfigured("The scripted backend is for tests and is refused in production.")
        return ScriptedBackend(steps_from_json(list(settings.SCRIPTED_STEPS)), delay_s=settings.SCRIPTED_DELAY_S)
    if name == "openai":
        if not settings.OPENAI_BASE_URL:
            raise ImproperlyConfigured("Set HARNESSOPS_OPENAI_BASE_URL to use the openai backend (e.g. vLLM).")
        return create_backend("openai", base_url=settings.OPENAI_BASE_URL, model=settings.OPENAI_MODEL,
                              api_key=settings.OPENAI_API_KEY, timeout_s=settings.OPENAI_TIMEOUT_S)
    return create_backend(name)
