"""Which model backend answers, from settings (environment). The one place Django meets serving.backends."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from harness.model_protocol import ModelBackend
from serving.backends import backend_family, backend_names, create_backend, is_backend_name
from serving.backends.scripted import ScriptedBackend, steps_from_json
from serving.model_sources import local_default_path, model_names, named_model


def available_backends(workspace=None) -> list[str]:
    """Backends this deployment can use: scripted only outside production and with a script
    (HARNESSOPS_SCRIPTED_STEPS; without one every turn would fail), openai only when configured; then,
    given a workspace, the models registered for it (training's checkpoints, `checkpoint:<id>`)."""
    names = [n for n in backend_names()
             if not (n == "scripted" and (settings.PRODUCTION or not settings.SCRIPTED_STEPS))]
    names = [n for n in names if n != "transformers"]  # a model directory is named as a checkpoint instead
    if not settings.OPENAI_BASE_URL:
        names = [n for n in names if n != "openai"]
    if workspace is not None:
        names += model_names(workspace)
    return names


def backend_for(name: str | None = None, *, workspace=None) -> ModelBackend:
    """A backend instance for one turn. Cheap: models are loaded once per process by their modules.

    Given `workspace`, a checkpoint name must be one of that workspace's checkpoints (names entering
    from a request are checked this way; a stored run's backend was checked when it was created).
    """
    name = name or settings.MODEL_BACKEND
    if not is_backend_name(name) or name == "transformers":
        raise ImproperlyConfigured(f"Unknown model backend “{name}”; choose one of {', '.join(backend_names())} "
                                   "or checkpoint:<id>.")
    if backend_family(name) == "checkpoint" and workspace is not None:
        model = named_model(name)
        if model is None or model.workspace_id != workspace.pk:
            raise ImproperlyConfigured(f"No checkpoint “{name}” in this workspace.")
    if name == "scripted":
        if settings.PRODUCTION:
            raise ImproperlyConfigured("The scripted backend is for tests and is refused in production.")
        # A backend per turn that nobody reads afterwards: it keeps no copies of the prompts it was sent.
        return ScriptedBackend(steps_from_json(list(settings.SCRIPTED_STEPS)), delay_s=settings.SCRIPTED_DELAY_S,
                               record=False)
    if name == "openai":
        if not settings.OPENAI_BASE_URL:
            raise ImproperlyConfigured("Set HARNESSOPS_OPENAI_BASE_URL to use the openai backend (e.g. vLLM).")
        return create_backend("openai", base_url=settings.OPENAI_BASE_URL, model=settings.OPENAI_MODEL,
                              api_key=settings.OPENAI_API_KEY, timeout_s=settings.OPENAI_TIMEOUT_S)
    if name == "local":
        return create_backend("local", model_path=local_model_path())
    return create_backend(name)


def local_model_path():
    """What the `local` backend serves: HARNESSOPS_LOCAL_MODEL when set, else the embedded harness-aware
    default once `manage.py build_default_model` has built it, else (None) the base SmolLM2 GGUF."""
    if settings.LOCAL_MODEL:
        return settings.LOCAL_MODEL
    return local_default_path(settings.VAR_DIR)
