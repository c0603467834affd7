"""Backends registered by name, so configs and CLIs refer to a backend by a string."""

from collections.abc import Callable
from typing import Any

from serving.backends.base import ModelBackend

BackendFactory = Callable[..., ModelBackend]

_FACTORIES: dict[str, BackendFactory] = {}


def register_backend(name: str) -> Callable[[BackendFactory], BackendFactory]:
    """Class/function decorator: `create_backend(name, **config)` will call the factory with `config`."""

    def decorate(factory: BackendFactory) -> BackendFactory:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"model backend {name!r} is already registered")
        _FACTORIES[name] = factory
        return factory

    return decorate


def create_backend(name: str, **config: Any) -> ModelBackend:
    """A new backend instance; `KeyError` names the registered backends when `name` is unknown."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown model backend {name!r}; registered: {', '.join(backend_names())}") from None
    return factory(**config)


def backend_names() -> list[str]:
    return sorted(_FACTORIES)
