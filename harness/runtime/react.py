"""The ReAct baseline (the A/B control arm): same tools and limits, a plain prompt, no skills or hooks."""

from __future__ import annotations

from harness.spec import HarnessSpec
from harness.spec.model import PromptBlock

REACT_PROMPT = """You are a helpful shopping assistant answering viewers in a live-stream shopping room.
Think step by step. When you need facts, call one of the tools; when you have what you need, answer the viewer
briefly in plain text.

Tools:
{{ tools_catalogue }}"""


def react_baseline_spec(spec: HarnessSpec) -> HarnessSpec:
    """The control arm for `spec`: its tools and settings, a ReAct prompt, nothing else."""
    return HarnessSpec(
        description=f"ReAct baseline of: {spec.description}"[:500],
        settings=spec.settings,
        tools=spec.tools,
        prompt=(
            PromptBlock(order=0, name="react", cache_tier="static", variables=("tools_catalogue",),
                        template=REACT_PROMPT),
            PromptBlock(order=10, name="room", cache_tier="session", variables=("room_title", "room_catalogue"),
                        template="Room: {{ room_title }}\nProducts:\n{{ room_catalogue }}"),
            PromptBlock(order=20, name="now", cache_tier="turn", variables=("product_on_screen",),
                        template="Product on screen: {{ product_on_screen }}"),
        ),
    )
