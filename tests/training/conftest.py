"""Training fixtures: a small harness (short prompts, two reply skills, one tool) so sequences stay a few
hundred tokens and CPU steps take seconds; simulator cases in small rooms; a recording reporter."""

from __future__ import annotations

import json

import pytest

from harness.simulator import generate_cases, generate_room
from harness.spec import parse_files

TOOL = {
    "type": "function",
    "function": {
        "name": "get_product_info_by_link_id",
        "description": "Look up one product by its link id: price, sizes, colours, stock.",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["link_id"],
                       "properties": {"link_id": {"type": "string", "pattern": "^L\\d{3}$",
                                                  "description": "Link id such as L003."}}},
        "strict": False,
    },
    "x_harness": {"binding": {"kind": "builtin", "target": "demo.get_product_info_by_link_id"},
                  "retries": 0, "side_effect": "read", "timeout_ms": 800},
}

MINI_HARNESS = {
    "harness.yaml": (
        "format: harnessops/v1\n"
        "description: Mini shopping avatar for training tests.\n"
        "settings:\n  max_turns: 4\n  reply_max_chars: 150\n  deadline_s: 15.0\n  language: en\n"
        "  max_hook_retries: 1\n  fallback_reply: One moment please!\n"
        "variables:\n  persona_name: Mia\n"
    ),
    "prompt/00-persona.md": (
        "---\ncache_tier: static\nvariables:\n- persona_name\n- skills_catalogue\n---\n"
        "You are {{ persona_name }}, a live-stream shopping assistant. Load a reply skill, then reply in one "
        "short sentence.\n\n{{ skills_catalogue }}\n"
    ),
    "prompt/10-turn.md": "---\ncache_tier: turn\nvariables:\n- product_on_screen\n---\nOn screen: {{ product_on_screen }}\n",
    "skills/product-qa/SKILL.md": (
        "---\nname: product-qa\ndescription: Answers questions about a product's price, size, colour or stock.\n"
        "kind: reply\n---\nLook the product up, then state the exact price or stock.\n"
    ),
    "skills/casual-chat/SKILL.md": (
        "---\nname: casual-chat\ndescription: Small talk and greetings.\nkind: reply\n---\nBe friendly and brief.\n"
    ),
    "tools/get_product_info_by_link_id.json": json.dumps(TOOL, indent=2),
    "hooks/require-reply-skill.yaml": (
        "event: reply\nmatcher: '*'\nwhen:\n  cel: size(loaded_reply_skills) == 0\naction: retry_with_feedback\n"
        "message: Load a reply skill with load_skill first, then reply.\nmax_retries: 1\npriority: 10\n"
        "enabled: true\n"
    ),
}


@pytest.fixture(scope="session")
def mini_spec():
    return parse_files(MINI_HARNESS)


@pytest.fixture(scope="session")
def mini_room():
    return generate_room(5, n_products=3)


@pytest.fixture(scope="session")
def mini_cases(mini_room):
    return generate_cases(5, 6, room=mini_room, mix={"product_qa": 0.7, "casual_chat": 0.3})


class RecordingReporter:
    def __init__(self):
        self.logs: list[tuple[str, int, int, dict[str, float]]] = []
        self.lines: list[str] = []
        self.checkpoints = []

    def log(self, stage, step, total_steps, metrics):
        self.logs.append((stage, step, total_steps, dict(metrics)))

    def line(self, text):
        self.lines.append(text)

    def checkpoint(self, result):
        self.checkpoints.append(result)

    def values(self, stage: str, key: str) -> list[float]:
        return [m[key] for s, _, _, m in self.logs if s == stage and key in m]


@pytest.fixture
def reporter():
    return RecordingReporter()
