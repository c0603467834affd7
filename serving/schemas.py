"""Schemas of the platform reply API."""

from typing import Literal

from ninja import Schema
from pydantic import Field


class DialogueTurnIn(Schema):
    role: Literal["viewer", "assistant"]
    text: str = Field(max_length=2000)


class ReplyIn(Schema):
    message: str = Field(min_length=1, max_length=2000, description="What the viewer wrote.")
    viewer_id: str = Field(min_length=1, max_length=128)
    recent_dialogue: list[DialogueTurnIn] = Field(default_factory=list, max_length=20,
                                                  description="This viewer's recent exchange, oldest first.")
    room: dict | None = Field(default=None, description="Room context (products, on_screen, faq, promotions, "
                              "orders, facts: statements whose numbers ground a reply) when the room is not "
                              "registered or has changed.")
    harness: str | None = Field(default=None, description="Harness name; default: the room's harness.")
    label: str | None = Field(default=None, max_length=64, description="Label to answer with (default production).")
    version: int | None = Field(default=None, ge=1, le=2**31 - 1, description="Pin a version number instead of a label.")
    backend: str | None = Field(default=None, max_length=64, description="Model backend, or a registered "
                                "training checkpoint as `checkpoint:<id>`; default: the deployment's model.")


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


class EventsIn(Schema):
    events: list = Field(max_length=1000, description="Up to 1000 events: {event_id, type, viewer_id, room_id, "
                         "item_id, ts}; event_id makes retries and duplicates count once.")


class EventError(Schema):
    index: int
    message: str


class EventsOut(Schema):
    accepted: int
    duplicates: int
    errors: list[EventError]
