"""What training registers with serving at start-up: checkpoints as model backends (`checkpoint:<id>` wherever a
backend is named), as a model source (a workspace's names, which may take live traffic), and the embedded
trained default that the `local` backend serves once built. Serving is below training and never imports it.

The factory does not touch the database: backends are made per turn, sometimes inside an event loop
where the ORM is off limits. The checkpoint's directory is looked up when the model first loads (in a
worker thread) and cached, since a checkpoint's path never changes.
"""

from functools import cache
from pathlib import Path

from harness.model_protocol import BackendError
from serving.backends import register_backend_family
from serving.backends.transformers_backend import TransformersBackend
from serving.model_sources import (
    LocalDefault,
    ModelSource,
    NamedModel,
    register_local_default,
    register_model_source,
)
from training import default_model


@cache
def checkpoint_path(checkpoint_id: int) -> Path:
    from django.db import connection

    from training.models import Checkpoint

    try:
        path = Checkpoint.objects.filter(pk=checkpoint_id).values_list("path", flat=True).first()
    finally:
        if not connection.in_atomic_block:  # a worker thread of the event loop: do not keep a connection
            connection.close()
    if path is None:
        raise BackendError(f"no checkpoint:{checkpoint_id} is registered")
    return Path(path)


def checkpoint_backend(ref: str, **config) -> TransformersBackend:
    if not ref.isdigit():
        raise KeyError(f"checkpoint names are checkpoint:<id>, not checkpoint:{ref}")
    return TransformersBackend(lambda: checkpoint_path(int(ref)), label=f"checkpoint:{ref}", **config)


def checkpoint_model(name: str) -> NamedModel | None:
    from training.selectors import checkpoint_for_backend

    checkpoint = checkpoint_for_backend(name)
    if checkpoint is None:
        return None
    return NamedModel(name=name, workspace_id=checkpoint.workspace_id, live=checkpoint.promoted)


def register_with_serving() -> None:
    from training.selectors import backend_choices

    register_backend_family("checkpoint", checkpoint_backend)
    register_model_source(ModelSource(family="checkpoint", names=backend_choices, lookup=checkpoint_model))
    register_local_default(LocalDefault(built_path=default_model.built_path, manifest=default_model.manifest))
