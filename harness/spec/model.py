"""The HarnessSpec value: skills, tools, hooks and prompt blocks plus settings.

Everything here is a frozen dataclass so one value can flow from the editor
through the store, runtime, augmentation and training without being re-read.
Nested JSON-shaped fields (tool parameters, JSON-schema conditions, metadata)
are plain dicts so they can go straight to `jsonschema` and `json.dumps`;
treat them as read-only.  Module dataclasses compare by value; only the spec
as a whole is hashable (by content hash), because dicts are not.

The rules these values must obey live in `validate.py`; the file format in
`files.py` and `canonical.py`; the contract in docs/harness-format.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from operator import attrgetter
from typing import Any

SKILL_KINDS = ("reply", "strategy")
BINDING_KINDS = ("builtin", "http", "sandbox")
SIDE_EFFECTS = ("read", "write")
CONDITION_KINDS = ("cel", "regex", "json_schema", "length", "always")

EVENTS = ("input", "pre_tool", "post_tool", "reply")
TOOL_EVENTS = ("pre_tool", "post_tool")

ACTIONS_BY_EVENT: Mapping[str, tuple[str, ...]] = {
    "input": ("allow", "block", "fallback"),
    "pre_tool": ("allow", "deny", "fallback"),
    "post_tool": ("allow", "deny", "retry_with_feedback", "fallback"),
    "reply": ("allow", "block", "retry_with_feedback", "rewrite", "fallback"),
}
ACTIONS = ("allow", "block", "deny", "retry_with_feedback", "rewrite", "fallback")

# Names a hook condition can read (CEL identifiers, roots of `field` paths).
EVENT_CONTEXT: Mapping[str, tuple[str, ...]] = {
    "input": ("message", "viewer_id", "room_id", "settings", "vars"),
    "pre_tool": ("tool", "args", "settings", "vars"),
    "post_tool": ("tool", "args", "result", "error", "settings", "vars"),
    "reply": (
        "reply", "loaded_skills", "loaded_reply_skills", "tools_called",
        "ungrounded_numbers", "retries", "settings", "vars",
    ),
}

# Tiers in cache order: a block may only use what exists at its tier, and
# tiers never decrease along the prompt, so every static byte is a cache hit.
CACHE_TIERS = ("static", "session", "turn")

# Template names computed from the spec itself; available at every tier.
CATALOGUE_VARIABLES = ("skills_catalogue", "tools_catalogue")

# Template names the runtime supplies, by the tier that introduces them.
RUNTIME_VARIABLES: Mapping[str, tuple[str, ...]] = {
    "static": (),
    "session": ("room_title", "room_catalogue", "room_products", "room_faq", "room_facts"),
    "turn": ("product_on_screen", "viewer_id", "recent_dialogue", "now"),
}

BUILTIN_TOOLS = ("load_skill",)

Scalar = str | int | float | bool


def canonical_body(text: str) -> str:
    """A Markdown body as the canonical file holds it: LF line endings, no trailing whitespace.

    Applied when a module is built, so a spec made in code equals the spec
    read back from its own files.
    """
    if not isinstance(text, str):
        return text  # reported by validate()
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip()


@dataclass(frozen=True)
class Settings:
    """Runtime limits of one harness; every field has a safe default."""

    max_turns: int = 4
    reply_max_chars: int = 120
    deadline_s: float = 15.0
    language: str = "en"
    max_hook_retries: int = 2
    fallback_reply: str = ""
    # Decode only free text or calls of the tools (and loads of the skills) this harness declares, on
    # backends that can constrain decoding (serving.backends: llama.cpp grammar, vLLM structural tags).
    constrained_decoding: bool = True

    def __post_init__(self) -> None:
        # `deadline_s: 15` and `15.0` are the same setting; keep one form so
        # the canonical text (and so the content hash) does not depend on it.
        if isinstance(self.deadline_s, int) and not isinstance(self.deadline_s, bool):
            object.__setattr__(self, "deadline_s", float(self.deadline_s))


SETTINGS_FIELDS = tuple(f.name for f in fields(Settings))


@dataclass(frozen=True, kw_only=True)
class Skill:
    """A SKILL.md: only name, description and kind sit in the system prompt."""

    __hash__ = None  # type: ignore[assignment]  # holds a dict; hash the spec instead

    name: str
    description: str
    kind: str
    body: str
    allowed_tools: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", canonical_body(self.body))
        object.__setattr__(self, "allowed_tools", tuple(self.allowed_tools))
        object.__setattr__(self, "metadata", dict(sorted(self.metadata.items())))


@dataclass(frozen=True)
class ToolBinding:
    """What runs when the model calls a tool: `builtin`, `http` or `sandbox`."""

    kind: str
    target: str


@dataclass(frozen=True, kw_only=True)
class Tool:
    """An OpenAI function definition plus how the harness runs it."""

    __hash__ = None  # type: ignore[assignment]

    name: str
    description: str
    parameters: dict[str, Any]
    binding: ToolBinding
    timeout_ms: int = 1000
    retries: int = 0
    side_effect: str = "read"
    strict: bool = False


@dataclass(frozen=True, kw_only=True)
class Condition:
    """When a hook fires. `kind` picks which of the other fields apply.

    - cel: `expr`
    - regex: `field`, `pattern`, `flags` (letters of "imsx")
    - json_schema: `field`, `schema` (fires when the value does NOT validate)
    - length: `field`, `min`, `max` (ints, or names of a setting/variable)
    - always: nothing
    """

    __hash__ = None  # type: ignore[assignment]

    kind: str
    expr: str = ""
    field: str = ""
    pattern: str = ""
    flags: str = ""
    schema: Mapping[str, Any] | None = None
    min: int | str | None = None
    max: int | str | None = None

    @classmethod
    def cel(cls, expr: str) -> Condition:
        return cls(kind="cel", expr=expr)

    @classmethod
    def regex(cls, field: str, pattern: str, flags: str = "") -> Condition:
        return cls(kind="regex", field=field, pattern=pattern, flags=flags)

    @classmethod
    def json_schema(cls, field: str, schema: Mapping[str, Any]) -> Condition:
        return cls(kind="json_schema", field=field, schema=schema)

    @classmethod
    def length(cls, field: str, *, min: int | str | None = None, max: int | str | None = None) -> Condition:
        return cls(kind="length", field=field, min=min, max=max)

    @classmethod
    def always(cls) -> Condition:
        return cls(kind="always")


@dataclass(frozen=True, kw_only=True)
class Hook:
    """A declarative check on one event: when `condition` holds, apply `action`."""

    __hash__ = None  # type: ignore[assignment]

    name: str
    event: str
    matcher: str = "*"
    condition: Condition
    action: str
    message: str = ""
    max_retries: int = 0
    priority: int = 100
    enabled: bool = True
    rewrite: Mapping[str, str] | None = None

    def matches_tool(self, tool_name: str) -> bool:
        """Whether this hook applies to a call of `tool_name` (tool events only)."""
        return self.matcher == "*" or tool_name in self.matcher.split("|")


@dataclass(frozen=True, kw_only=True)
class PromptBlock:
    """One system-prompt block; `order` is the NN of its file name."""

    order: int
    name: str
    cache_tier: str = "static"
    variables: tuple[str, ...] = ()
    template: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "template", canonical_body(self.template))
        object.__setattr__(self, "variables", tuple(sorted(self.variables)))


@dataclass(frozen=True, eq=False, kw_only=True)
class HarnessSpec:
    """The immutable value of a whole harness.

    Modules are kept sorted (skills, tools, hooks by name; prompt by order,
    then name) so two specs with the same content are the same value.
    Equality and hashing go through the content hash of the canonical files.
    """

    description: str = ""
    settings: Settings = field(default_factory=Settings)
    variables: Mapping[str, Scalar] = field(default_factory=dict)
    skills: tuple[Skill, ...] = ()
    tools: tuple[Tool, ...] = ()
    hooks: tuple[Hook, ...] = ()
    prompt: tuple[PromptBlock, ...] = ()

    def __post_init__(self) -> None:
        by_name = attrgetter("name")
        object.__setattr__(self, "variables", dict(sorted(self.variables.items())))
        object.__setattr__(self, "skills", tuple(sorted(self.skills, key=by_name)))
        object.__setattr__(self, "tools", tuple(sorted(self.tools, key=by_name)))
        object.__setattr__(self, "hooks", tuple(sorted(self.hooks, key=by_name)))
        object.__setattr__(self, "prompt", tuple(sorted(self.prompt, key=lambda b: (b.order, b.name))))

    @cached_property
    def content_hash(self) -> str:
        """sha256 of the canonical files (see docs/harness-format.md)."""
        from harness.spec.canonical import hash_files, to_files  # the serializer of this model

        return hash_files(to_files(self))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HarnessSpec):
            return NotImplemented
        return self is other or self.content_hash == other.content_hash

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def skill(self, name: str) -> Skill:
        return _named(self.skills, name, "skill")

    def tool(self, name: str) -> Tool:
        return _named(self.tools, name, "tool")

    def hook(self, name: str) -> Hook:
        return _named(self.hooks, name, "hook")


def _named(modules: tuple[Any, ...], name: str, kind: str) -> Any:
    for module in modules:
        if module.name == name:
            return module
    raise KeyError(f"no {kind} named {name!r}")
