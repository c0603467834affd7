"""Schemas of the platform reply API."""

import re
from typing import Literal

from ninja import Schema
from pydantic import Field, field_validator

from serving.backends import backend_families
from serving.model_config import available_backends
from workspaces.schemas import BodyIn, json_int


def backend_pattern() -> str:
    """The backends a request may name in this deployment: those it can run (serving.model_config.
    available_backends: no `openai` without a model server, no `scripted` in production) and `<family>:<id>`
    of each registered family (training's `checkpoint:<id>`). Read when the schema is built and when a request
    is validated, after every app registered its families."""
    names = [re.escape(name) for name in available_backends()]
    families = [f"{re.escape(family)}:[0-9]{{1,18}}" for family in backend_families()]
    return f"^(?:{'|'.join(names + families)})$"


def _backend_schema(schema: dict) -> None:
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch["pattern"] = backend_pattern()


class DialogueTurnIn(BodyIn):
    role: Literal["viewer", "assistant"]
    text: str = Field(max_length=2000)


class ReplyIn(BodyIn):
    message: str = Field(min_length=1, max_length=2000, description="What the viewer wrote.")
    viewer_id: str = Field(min_length=1, max_length=128)
    recent_dialogue: list[DialogueTurnIn] = Field(default_factory=list, max_length=20,
                                                  description="This viewer's recent exchange, oldest first.")
    room: dict | None = Field(default=None, description="Room context (products, on_screen, faq, promotions, "
                              "orders, facts: statements whose numbers ground a reply) when the room is not "
                              "registered or has changed.")
    harness: str | None = Field(default=None, description="Harness name; default: the room's harness, or the "
                                "workspace's only one (a room without a harness in a workspace with several is a "
                                "409: name the harness).")
    label: str | None = Field(default=None, max_length=64, description="Label to answer with (default production).")
    version: json_int(ge=1, le=2**31 - 1) | None = Field(default=None, description="Pin a version number instead of a label.")
    backend: str | None = Field(default=None, max_length=64, json_schema_extra=_backend_schema,
                                description="Model backend this deployment runs, or a training checkpoint of this "
                                "workspace as `checkpoint:<id>` (404 when it has none with that id); default: the "
                                "deployment's model.")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(backend_pattern(), value):
            raise ValueError(f"Unknown model backend “{value}”: it should match {backend_pattern()}")
        return value


class ReplyOut(Schema):
    reply: str
    silent: bool
    trace_id: str
    harness_version: int | None
    arm: str
    latency_ms: float
    outcome: str
    model: str | None = Field(default=None, description="Which model answered: the model id the backend reports "
                              "(the GGUF file for the local backend); null when no model was called.")


class EventsIn(BodyIn):
    events: list = Field(max_length=1000, description="Up to 1000 events: {event_id, type, viewer_id, room_id, "
                         "item_id, ts}; event_id makes retries and duplicates count once.")


class EventError(Schema):
    index: int
    message: str


class EventsOut(Schema):
    accepted: int
    duplicates: int
    errors: list[EventError]
