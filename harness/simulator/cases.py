"""An evaluation case: one viewer message in one room, with the ground truth a correct turn satisfies.

The JSONL form (one `Case.to_dict()` per line) is the exchange format of eval
sets: the simulator writes it, real logs can be imported in it, judges read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

CATEGORIES = ("product_qa", "casual_chat", "clarification", "after_sales", "discount", "presentation_order",
              "faq", "irrelevant")
FAULTS = ("timeout", "malformed", "permission", "empty")


@dataclass(frozen=True)
class ExpectedCall:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)  # a subset the actual call must contain


@dataclass(frozen=True)
class Expected:
    silent: bool = False
    facts: tuple[str, ...] = ()      # each must appear in a correct reply (case/space/number-normalised)
    forbidden: tuple[str, ...] = ()  # claims a correct reply must not make
    skills: tuple[str, ...] = ()     # reply skills, any of which a good turn loads
    tools: tuple[ExpectedCall, ...] = ()  # calls a good turn makes (arguments matched as subsets)


@dataclass(frozen=True)
class Case:
    case_id: str
    category: str
    room: Mapping[str, Any]
    viewer_id: str
    message: str
    expected: Expected
    dialogue: tuple[tuple[str, str], ...] = ()  # (speaker, text), oldest first; speaker viewer|assistant
    faults: Mapping[str, str] = field(default_factory=dict)  # tool name → fault kind (robustness suite)
    suite: str = "live_stream_qa"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["dialogue"] = [{"role": who, "text": text} for who, text in self.dialogue]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Case:
        expected = dict(data.get("expected") or {})
        return cls(
            case_id=str(data["case_id"]),
            category=str(data["category"]),
            room=dict(data["room"]),
            viewer_id=str(data["viewer_id"]),
            message=str(data["message"]),
            expected=Expected(
                silent=bool(expected.get("silent", False)),
                facts=tuple(expected.get("facts", ())),
                forbidden=tuple(expected.get("forbidden", ())),
                skills=tuple(expected.get("skills", ())),
                tools=tuple(ExpectedCall(c["name"], dict(c.get("arguments") or {})) for c in expected.get("tools", ())),
            ),
            dialogue=tuple((t["role"], t["text"]) for t in data.get("dialogue") or ()),
            faults=dict(data.get("faults") or {}),
            suite=str(data.get("suite", "live_stream_qa")),
            meta=dict(data.get("meta") or {}),
        )
