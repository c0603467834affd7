"""Registered checkpoints as model backends: `checkpoint:<id>` wherever a backend is named.

The factory does not touch the database: backends are made per turn, sometimes inside an event loop
where the ORM is off limits. The checkpoint's directory is looked up when the model first loads (in a
worker thread) and cached, since a checkpoint's path never changes.
"""

from functools import cache
from pathlib import Path

from serving.backends import BackendError, register_backend_family
from serving.backends.transformers_backend import TransformersBackend


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


def register_checkpoint_backends() -> None:
    register_backend_family("checkpoint", checkpoint_backend)
