"""What a model sees of a spec: the system prompt and the tool definitions.

Everything here is a pure function of the spec (plus runtime values), so the
console preview, the runtime and training render byte-identical prompts, and
static blocks stay byte-identical for a serving engine's prefix cache.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict
from functools import lru_cache
from html import escape
from typing import Any

from harness.spec.canonical import openai_definition
from harness.spec.model import RUNTIME_VARIABLES, HarnessSpec
from harness.spec.template import render_template

__all__ = ["skills_catalogue", "tools_catalogue", "render_template", "render_system_prompt",
           "openai_tools", "shared_openai_tools", "load_skill_definition"]

LOAD_SKILL_DESCRIPTION = (
    "Load a skill's full rules by name. Call it when a skill in <available_skills> matches the "
    "viewer's message, then follow the rules it returns."
)
BLOCK_SEPARATOR = "\n\n"


@lru_cache(maxsize=128)
def skills_catalogue(spec: HarnessSpec) -> str:
    """The `<available_skills>` block of the Agent Skills integration guide, with `kind` for `location`."""
    entries = "".join(
        "  <skill>\n"
        f"    <name>{escape(skill.name)}</name>\n"
        f"    <description>{escape(skill.description, quote=False)}</description>\n"
        f"    <kind>{escape(skill.kind)}</kind>\n"
        "  </skill>\n"
        for skill in spec.skills
    )
    return f"<available_skills>\n{entries}</available_skills>"


@lru_cache(maxsize=128)
def tools_catalogue(spec: HarnessSpec) -> str:
    """One `- name: description` line per tool the model can call, by name."""
    tools = [(tool["function"]["name"], tool["function"]["description"]) for tool in shared_openai_tools(spec)]
    return "\n".join(f"- {name}: {' '.join(description.split())}" for name, description in tools)


def render_system_prompt(spec: HarnessSpec, values: Mapping[str, object] | None = None) -> str:
    """The system prompt: every block in order, with settings, variables and catalogues filled in.

    `values` supplies runtime variables (room_title, now, …); any other key is
    ignored. A runtime variable without a value renders as a visible
    placeholder such as ⟨room_catalogue⟩, so the console can preview a spec
    without a room.
    """
    runtime = {name for names in RUNTIME_VARIABLES.values() for name in names}
    supplied = {name: value for name, value in (values or {}).items() if name in runtime}
    filled = {
        **{name: f"⟨{name}⟩" for name in runtime},
        **supplied,
        **asdict(spec.settings),
        **spec.variables,
        "skills_catalogue": skills_catalogue(spec),
        "tools_catalogue": tools_catalogue(spec),
    }
    return BLOCK_SEPARATOR.join(render_template(block.template, filled) for block in spec.prompt)


def openai_tools(spec: HarnessSpec) -> list[dict[str, Any]]:
    """Tool definitions for a chat-completions request: no `x_harness`, sorted by name, with `load_skill`.

    `load_skill` is left out when the spec has no skills, since it could
    load nothing. The result is a deep copy; callers may change it freely.
    """
    return copy.deepcopy(shared_openai_tools(spec))


@lru_cache(maxsize=128)
def shared_openai_tools(spec: HarnessSpec) -> list[dict[str, Any]]:
    """`openai_tools`, built once per spec version and shared by every turn: callers must not change it.

    The runtime hands it to the backend on every model call; copying the definitions each
    turn cost more than the rest of prompt assembly (specs hash by content, so a new version
    builds its own list).
    """
    tools = [copy.deepcopy(openai_definition(tool)) for tool in spec.tools]
    if spec.skills:
        tools.append(load_skill_definition(spec))
    return sorted(tools, key=lambda tool: tool["function"]["name"])


def load_skill_definition(spec: HarnessSpec) -> dict[str, Any]:
    """The built-in tool that returns a skill's body (progressive disclosure)."""
    return {
        "type": "function",
        "function": {
            "name": "load_skill",
            "description": LOAD_SKILL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string", "enum": [skill.name for skill in spec.skills],
                                        "description": "The skill's name from <available_skills>."}},
                "required": ["name"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
