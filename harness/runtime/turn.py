"""What one viewer message brings to the runtime, and what the runtime returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class RoomContext:
    """A live room as the platform describes it: catalogue, item on screen, FAQ, promotions, orders."""

    room_id: str
    title: str = ""
    products: tuple[Mapping[str, Any], ...] = ()
    on_screen: str | None = None
    faq: tuple[Mapping[str, Any], ...] = ()
    promotions: tuple[Mapping[str, Any], ...] = ()
    orders: tuple[Mapping[str, Any], ...] = ()
    currency: str = ""
    # Statements the operator vouches for ("free shipping over 50"): numbers in them ground a reply.
    facts: tuple[str, ...] = ()
    # Room-tier prompt values its turns reuse (runtime.messages); None where the room is one turn's alone.
    remembered: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoomContext:
        return cls(
            room_id=str(data.get("room_id", "")),
            title=str(data.get("title", "")),
            products=tuple(data.get("products") or ()),
            on_screen=data.get("on_screen"),
            faq=tuple(data.get("faq") or ()),
            promotions=tuple(data.get("promotions") or ()),
            orders=tuple(data.get("orders") or ()),
            currency=str(data.get("currency", "")),
            facts=tuple(str(f) for f in data.get("facts") or ()),
        )

    @classmethod
    def shared(cls, context: Mapping[str, Any], room_id: str) -> RoomContext:
        """`from_dict({**context, "room_id": room_id})`, one object per context object and room id while it is
        remembered: a stored room's context is decoded once and shared (serving.selectors), and a turn's
        room-tier prompt values (the catalogue) are remembered by their RoomContext (runtime.messages)."""
        key = (id(context), room_id)
        known = _SHARED_ROOMS.get(key)
        if known is not None and known[0] is context:
            return known[1]
        room = replace(cls.from_dict({**context, "room_id": room_id}), remembered={})
        if len(_SHARED_ROOMS) >= _SHARED_ROOMS_MAX:
            _SHARED_ROOMS.clear()
        _SHARED_ROOMS[key] = (context, room)  # the context kept: its id is not reused while remembered
        return room

    def product(self, link_id: str) -> Mapping[str, Any] | None:
        return next((p for p in self.products if p.get("link_id") == link_id), None)


_SHARED_ROOMS_MAX = 256
_SHARED_ROOMS: dict[tuple[int, str], tuple[Mapping[str, Any], RoomContext]] = {}


@dataclass(frozen=True)
class TurnInput:
    message: str
    viewer_id: str
    room: RoomContext
    # (speaker, text) pairs, oldest first; speaker is "viewer" or "assistant".
    recent_dialogue: tuple[tuple[str, str], ...] = ()


OUTCOMES = ("replied", "silent", "fallback", "deadline", "error")


@dataclass(frozen=True)
class TurnResult:
    reply: str
    silent: bool
    outcome: str  # one of OUTCOMES
    trace: dict[str, Any] = field(compare=False)

    @property
    def latency_ms(self) -> float:
        return self.trace["duration_ms"]
