"""Backends registered by name, so configs and CLIs refer to a backend by a string."""

from collections.abc import Callable
from typing import Any

from harness.model_protocol import ModelBackend

BackendFactory = Callable[..., ModelBackend]

_FACTORIES: dict[str, BackendFactory] = {}
# Families name many models under one prefix: `checkpoint:12` calls the `checkpoint` family's factory with "12".
_FAMILIES: dict[str, BackendFactory] = {}


def register_backend(name: str) -> Callable[[BackendFactory], BackendFactory]:
    """Class/function decorator: `create_backend(name, **config)` will call the factory with `config`."""

    def decorate(factory: BackendFactory) -> BackendFactory:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"model backend {name!r} is already registered")
        _FACTORIES[name] = factory
        return factory

    return decorate


def register_backend_family(prefix: str, factory: BackendFactory) -> None:
    """Names `prefix:<ref>` resolve to `factory(ref, **config)` (e.g. registered training checkpoints)."""
    if prefix in _FAMILIES and _FAMILIES[prefix] is not factory:
        raise ValueError(f"model backend family {prefix!r} is already registered")
    _FAMILIES[prefix] = factory


def backend_family(name: str) -> str | None:
    """The family prefix of `name` when it is `prefix:<ref>` of a registered family, else None."""
    prefix, sep, ref = name.partition(":")
    return prefix if sep and ref and prefix in _FAMILIES else None


def create_backend(name: str, **config: Any) -> ModelBackend:
    """A new backend instance; `KeyError` names the registered backends when `name` is unknown."""
    family = backend_family(name)
    if family is not None:
        return _FAMILIES[family](name.partition(":")[2], **config)
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown model backend {name!r}; registered: {', '.join(backend_names())}") from None
    return factory(**config)


def backend_names() -> list[str]:
    return sorted(_FACTORIES)


def backend_families() -> list[str]:
    """The registered family prefixes (`checkpoint` for `checkpoint:<id>`)."""
    return sorted(_FAMILIES)


def is_backend_name(name: str) -> bool:
    return name in _FACTORIES or backend_family(name) is not None
