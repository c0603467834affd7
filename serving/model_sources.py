"""Models that a higher app owns and serving names as backends, registered by that app at start-up.

Serving sits below training in the layers (docs/architecture.md), so it never imports training: the training
app registers here, in its AppConfig.ready, what serving needs to know of its models —
- a model source per backend family (`checkpoint:<id>`): the names a workspace may pick, and for one name its
  workspace and whether it may take live traffic;
- the embedded trained default: where its built GGUF lies and its manifest, for the `local` backend.
Without a registration (training not installed) there are no such names and the local backend serves the base.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NamedModel:
    """What serving needs to know of one registered model name."""

    name: str
    workspace_id: int
    live: bool  # promoted for live traffic (experiment arms)


@dataclass(frozen=True)
class ModelSource:
    family: str  # the backend family its names carry (`checkpoint` for `checkpoint:<id>`)
    names: Callable[[object], list[str]]  # a workspace's names, newest first
    lookup: Callable[[str], NamedModel | None]  # one name (None when unknown)


@dataclass(frozen=True)
class LocalDefault:
    built_path: Callable[[Path], Path | None]  # the built GGUF under a var dir, None until built
    manifest: Callable[[], dict | None]  # what it is and how it measured


_sources: dict[str, ModelSource] = {}
_local_default: list[LocalDefault] = []


def register_model_source(source: ModelSource) -> None:
    _sources[source.family] = source


def register_local_default(default: LocalDefault) -> None:
    _local_default[:] = [default]


def model_names(workspace) -> list[str]:
    """Every registered name the workspace may pick."""
    return [name for source in _sources.values() for name in source.names(workspace)]


def named_model(name: str) -> NamedModel | None:
    """The registered model a backend name refers to (None for other names and unknown ones)."""
    family, sep, _ = name.partition(":")
    source = _sources.get(family) if sep else None
    return source.lookup(name) if source is not None else None


def local_default_path(var_dir: Path) -> Path | None:
    """The built trained default for the `local` backend, if one is registered and built."""
    return _local_default[0].built_path(var_dir) if _local_default else None


def local_default_manifest() -> dict | None:
    return _local_default[0].manifest() if _local_default else None
