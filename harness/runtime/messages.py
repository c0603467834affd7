"""Assembling the model's messages for one turn.

Static and session prompt blocks form the system message, identical for every
viewer of a room, so a serving engine's prefix cache covers it; turn blocks
(item on screen, recent dialogue) and the viewer's message come last, in the
user message. Loaded skills and tool results are appended, never inserted.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from harness.runtime.turn import TurnInput
from harness.spec import HarnessSpec
from harness.spec.prompt import skills_catalogue, tools_catalogue
from harness.spec.template import render_template

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """Drop `<think>…</think>` (and an unclosed `<think>…` at the end) from a model's reply."""
    return _THINK.sub("", text or "").strip()


def room_values(turn: TurnInput, now: datetime | None = None) -> dict[str, str]:
    """The runtime template variables (session and turn tiers) for this turn."""
    room = turn.room
    currency = room.currency or ""
    catalogue = "\n".join(
        f"- {p.get('link_id')} · {p.get('name')} · {p.get('category', '')} · {currency}{p.get('price')}"
        for p in room.products
    ) or "(no products listed)"
    faq = "\n".join(f"Q: {e.get('q')}\nA: {e.get('a')}" for e in room.faq) or "(no FAQ)"
    facts = "\n".join(f"- {fact}" for fact in room.facts) or "(none)"
    on_screen = room.product(room.on_screen) if room.on_screen else None
    dialogue = "\n".join(f"{who}: {text}" for who, text in turn.recent_dialogue) or "(none)"
    return {
        "room_title": room.title or room.room_id,
        "room_catalogue": catalogue,
        "room_faq": faq,
        "room_facts": facts,
        "product_on_screen": f"{on_screen['link_id']} · {on_screen.get('name')}" if on_screen else "(none)",
        "viewer_id": turn.viewer_id,
        "recent_dialogue": dialogue,
        "now": (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
    }


@lru_cache(maxsize=128)
def _spec_values(spec: HarnessSpec) -> dict[str, Any]:
    """The template values a spec version fixes (settings, variables, catalogues): built once per version."""
    return {
        **asdict(spec.settings),
        **spec.variables,
        "skills_catalogue": skills_catalogue(spec),
        "tools_catalogue": tools_catalogue(spec),
    }


def assemble_messages(spec: HarnessSpec, turn: TurnInput, now: datetime | None = None) -> list[dict[str, Any]]:
    values = {**room_values(turn, now), **_spec_values(spec)}
    system = [render_template(b.template, values) for b in spec.prompt if b.cache_tier != "turn"]
    dynamic = [render_template(b.template, values) for b in spec.prompt if b.cache_tier == "turn"]
    user = "\n\n".join([*dynamic, f"[viewer {turn.viewer_id}] {turn.message}"])
    return [{"role": "system", "content": "\n\n".join(system)}, {"role": "user", "content": user}]


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> list[str]:
    found = []
    for raw in _NUMBER.findall(text or ""):
        cleaned = raw.replace(",", "")
        try:
            value = float(cleaned)
        except ValueError:
            continue
        found.append(f"{value:g}")
    return found


def ungrounded_numbers(reply: str, messages: list[dict[str, Any]], facts: tuple[str, ...] = ()) -> list[str]:
    """Numbers in the reply found in no tool result of this turn and no configured room fact.

    The prompt (catalogue, FAQ, settings) does not ground a number: any price in the catalogue would
    pass, which is exactly the risk the check is for. Only what a tool returned this turn, and the
    facts the operator configured for the room (`RoomContext.facts`), count.
    """
    claimed = dict.fromkeys(_numbers(reply))
    if not claimed:  # most replies state no number: nothing to look up
        return []
    grounded = set()
    for message in messages:
        if message.get("role") == "tool":
            grounded.update(_numbers(str(message.get("content") or "")))
    for fact in facts:
        grounded.update(_numbers(fact))
    return [n for n in claimed if n not in grounded]
