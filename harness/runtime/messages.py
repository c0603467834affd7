"""Assembling the model's messages for one turn.

Static and session prompt blocks form the system message, identical for every
viewer of a room, so a serving engine's prefix cache covers it; turn blocks
(item on screen, recent dialogue) and the viewer's message come last, in the
user message. Loaded skills and tool results are appended, never inserted.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from harness.runtime.turn import TurnInput
from harness.spec import HarnessSpec
from harness.spec.prompt import BLOCK_SEPARATOR, skills_catalogue, tools_catalogue
from harness.spec.template import Slot, fill, merge_parts, split_template

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """Drop `<think>…</think>` (and an unclosed `<think>…` at the end) from a model's reply."""
    return _THINK.sub("", text or "").strip()


def _catalogue(turn: TurnInput, now: datetime | None) -> str:
    # Remembered by a shared room (RoomContext.shared: a stored room's turns): 28 products took ≈ 12 µs to
    # format, 6 % of a turn's overhead.
    remembered = turn.room.remembered
    if remembered is not None and "room_catalogue" in remembered:
        return remembered["room_catalogue"]
    currency = turn.room.currency or ""
    text = "\n".join(
        f"- {p.get('link_id')} · {p.get('name')} · {p.get('category', '')} · {currency}{p.get('price')}"
        for p in turn.room.products
    ) or "(no products listed)"
    if remembered is not None:
        remembered["room_catalogue"] = text
    return text


def _products(turn: TurnInput, now: datetime | None) -> str:
    """Link id and name only: the short catalogue a compact prompt can afford (prices come from the tool)."""
    return "\n".join(f"{p.get('link_id')} {p.get('name')}" for p in turn.room.products) or "(no products listed)"


def _on_screen(turn: TurnInput, now: datetime | None) -> str:
    room = turn.room
    on_screen = room.product(room.on_screen) if room.on_screen else None
    return f"{on_screen['link_id']} · {on_screen.get('name')}" if on_screen else "(none)"


# The runtime template variables (session and turn tiers), each computed only when a prompt uses it.
_RUNTIME_VALUES = {
    "room_title": lambda turn, now: turn.room.title or turn.room.room_id,
    "room_catalogue": _catalogue,
    "room_products": _products,
    "room_faq": lambda turn, now: "\n".join(f"Q: {e.get('q')}\nA: {e.get('a')}" for e in turn.room.faq) or "(no FAQ)",
    "room_facts": lambda turn, now: "\n".join(f"- {fact}" for fact in turn.room.facts) or "(none)",
    "product_on_screen": _on_screen,
    "viewer_id": lambda turn, now: turn.viewer_id,
    "recent_dialogue": lambda turn, now: "\n".join(f"{who}: {text}" for who, text in turn.recent_dialogue) or "(none)",
    "now": lambda turn, now: (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC"),
}


def room_values(turn: TurnInput, now: datetime | None = None, names: Collection[str] | None = None
                ) -> dict[str, str]:
    """The runtime template variables (session and turn tiers) for this turn: all, or those in `names`."""
    return {name: value(turn, now) for name, value in _RUNTIME_VALUES.items() if names is None or name in names}


@lru_cache(maxsize=128)
def _spec_values(spec: HarnessSpec) -> dict[str, Any]:
    """The template values a spec version fixes (settings, variables, catalogues): built once per version."""
    return {
        **asdict(spec.settings),
        **spec.variables,
        "skills_catalogue": skills_catalogue(spec),
        "tools_catalogue": tools_catalogue(spec),
    }


@dataclass(frozen=True)
class _Prompt:
    system: tuple[str, ...]  # template parts (see split_template), blocks joined
    user: tuple[str, ...]  # the turn blocks', ending with the separator before the viewer line (none: empty)
    names: frozenset[str]  # the runtime values they use


@lru_cache(maxsize=128)
def _prompt(spec: HarnessSpec) -> _Prompt:
    """The spec's blocks with its own values filled in once per version; a turn fills in the runtime ones."""
    fixed = _spec_values(spec)
    system = [split_template(b.template, fixed, _RUNTIME_VALUES) for b in spec.prompt if b.cache_tier != "turn"]
    user = [split_template(b.template, fixed, _RUNTIME_VALUES) for b in spec.prompt if b.cache_tier == "turn"]
    user_parts = _joined([*user, ()]) if user else ()  # an empty last block: the separator before the viewer line
    system_parts = _joined(system)
    names = frozenset(part for part in (*system_parts, *user_parts) if isinstance(part, Slot))
    return _Prompt(system_parts, user_parts, names)


def _joined(blocks: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The parts of `BLOCK_SEPARATOR.join(blocks)`, adjacent text merged."""
    return merge_parts(part for index, block in enumerate(blocks)
                       for part in ((BLOCK_SEPARATOR, *block) if index else block))


def assemble_messages(spec: HarnessSpec, turn: TurnInput, now: datetime | None = None) -> list[dict[str, Any]]:
    prompt = _prompt(spec)
    values = room_values(turn, now, prompt.names)
    user = f"{fill(prompt.user, values)}[viewer {turn.viewer_id}] {turn.message}"
    return [{"role": "system", "content": fill(prompt.system, values)}, {"role": "user", "content": user}]


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> tuple[str, ...]:
    # Remembered by text: a loaded skill's body, the same string every turn, holds dozens of numbers
    # (~35 µs to read them, a tenth of a turn's overhead). Long texts are read every time, not kept.
    return _numbers_remembered(text) if len(text) <= _NUMBERS_MEMO_CHARS else _numbers_read(text)


_NUMBERS_MEMO_CHARS = 16_384


def _numbers_read(text: str) -> tuple[str, ...]:
    found = []
    for raw in _NUMBER.findall(text):
        cleaned = raw.replace(",", "")
        try:
            value = float(cleaned)
        except ValueError:
            continue
        found.append(f"{value:g}")
    return tuple(found)


_numbers_remembered = lru_cache(maxsize=1024)(_numbers_read)


def ungrounded_numbers(reply: str, messages: list[dict[str, Any]], facts: tuple[str, ...] = ()) -> list[str]:
    """Numbers in the reply found in no tool result of this turn and no configured room fact.

    The prompt (catalogue, FAQ, settings) does not ground a number: any price in the catalogue would
    pass, which is exactly the risk the check is for. Only what a tool returned this turn, and the
    facts the operator configured for the room (`RoomContext.facts`), count.
    """
    claimed = dict.fromkeys(_numbers(reply or ""))
    if not claimed:  # most replies state no number: nothing to look up
        return []
    grounded = set()
    for message in messages:
        if message.get("role") == "tool":
            grounded.update(_numbers(str(message.get("content") or "")))
    for fact in facts:
        grounded.update(_numbers(fact))
    return [n for n in claimed if n not in grounded]
