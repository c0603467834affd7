"""What an augmentation changed, and how to carry ground truth and reference trajectories across it.

Plain dicts inside a frozen dataclass, as in `harness.spec.model`: treat them
as read-only. Keys of `skills`/`tools` are names in the original spec, values
names in the augmented one; a name that was not renamed is absent and maps to
itself.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.augmentation.text import json_escaped, rename_identifiers

if TYPE_CHECKING:  # only the type: rewriting goes through dataclasses.replace, so no import cycle or cost
    from harness.simulator.cases import Case

BUILTIN_TOOLS = ("load_skill",)
LOAD_SKILL_ARGUMENTS = ("name", "skill")  # runtime's argument, and the report's load_skill(skill=…) form
TOOL_LIST_META = ("any_of_tools", "forbidden_tools")  # case.meta keys that hold tool names (the judges read them)


@dataclass(frozen=True)
class HsaOperation:
    """One applied sub-operation: its dimension, what it did, to which module, and how."""

    dimension: str
    op: str
    target: str
    detail: str = ""


@dataclass(frozen=True)
class HsaMapping:
    """Old → new for everything a reference needs to follow; `operations` is the full log."""

    __hash__ = None  # type: ignore[assignment]  # holds dicts

    seed: int
    source_hash: str
    skills: Mapping[str, str] = field(default_factory=dict)             # renamed skills, old → new
    tools: Mapping[str, str] = field(default_factory=dict)              # renamed tools, old → new
    settings: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)  # changed limits, name → (old, new)
    noise_skills: tuple[str, ...] = ()      # added skills (names in the augmented spec)
    masked_skills: tuple[str, ...] = ()     # skills whose description was masked (augmented names)
    dropped_skills: tuple[str, ...] = ()    # original skills removed (only opt-in, unreferenced strategy skills)
    hook_messages: Mapping[str, str] = field(default_factory=dict)      # rendered model-facing message old → new
    skill_bodies: Mapping[str, str] = field(default_factory=dict)       # augmented name → new body, if changed
    operations: tuple[HsaOperation, ...] = ()

    # -- names ---------------------------------------------------------------------------------

    def skill(self, name: str) -> str:
        """The augmented name of original skill `name` (itself when not renamed)."""
        if name in self.dropped_skills:
            raise KeyError(f"skill {name!r} was dropped by this augmentation")
        return self.skills.get(name, name)

    def tool(self, name: str) -> str:
        """The augmented name of original tool `name` (itself when not renamed; load_skill never is)."""
        return self.tools.get(name, name)

    def setting(self, name: str, default: Any) -> Any:
        """The augmented value of a perturbed limit, or `default` (the original value) when unchanged."""
        return self.settings[name][1] if name in self.settings else default

    @property
    def names(self) -> dict[str, str]:
        """Every renamed identifier, skills and tools together (the two namespaces never collide)."""
        return {**self.skills, **self.tools}

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Dimensions that changed something, in application order."""
        return tuple(dict.fromkeys(op.dimension for op in self.operations))

    @property
    def is_identity(self) -> bool:
        return not self.operations

    # -- ground truth --------------------------------------------------------------------------

    def rewrite_case(self, case: Case) -> Case:
        """`case` with expected skills and tool calls, fault targets and the tool lists of its meta
        (`TOOL_LIST_META`: the simulator's `any_of_tools` / `forbidden_tools`) renamed; facts, forbidden
        claims, the message and the room are unchanged (every transform is task-preserving)."""
        expected = dataclasses.replace(
            case.expected,
            skills=tuple(self.skill(name) for name in case.expected.skills),
            tools=tuple(dataclasses.replace(call, name=self.tool(call.name)) for call in case.expected.tools),
        )
        faults = {self.tool(name): kind for name, kind in case.faults.items()}
        meta = dict(case.meta)
        for key in TOOL_LIST_META:
            if isinstance(meta.get(key), list | tuple):
                meta[key] = [self.tool(str(name)) for name in meta[key]]
        return dataclasses.replace(case, expected=expected, faults=faults, meta=meta)

    def rewrite_text(self, text: str) -> str:
        """Model-visible text from the original harness as the augmented one says it: hook feedback
        messages replaced by their augmented wording, then names renamed."""
        for old, new in self.hook_messages.items():
            if old in text:
                text = text.replace(old, new)
            elif json_escaped(old) in text:
                text = text.replace(json_escaped(old), json_escaped(new))
        return rename_identifiers(text, self.names)

    def rewrite_trajectory(self, messages: list[dict[str, Any]], *, system: str | None = None) -> list[dict[str, Any]]:
        """A reference trajectory (OpenAI chat messages) made consistent with the augmented harness.

        Tool calls get their new function names; load_skill arguments name the
        new skill; a load_skill result becomes the augmented skill body; hook
        feedback and denial texts get their new wording; names inside any text
        are renamed. The system prompt is best re-rendered from the augmented
        spec (block order, limits and catalogues change): pass it as `system`;
        otherwise only names and messages inside it are rewritten. Raises
        KeyError when the trajectory loads a skill this augmentation dropped.
        """
        out: list[dict[str, Any]] = []
        loads: dict[str, str] = {}  # tool_call_id → augmented skill name
        for original in messages:
            message = copy.deepcopy(original)
            role = message.get("role")
            if role == "system" and system is not None:
                message["content"] = system
            else:
                message["content"] = self._rewrite_content(message.get("content"))
            for call in message.get("tool_calls") or ():
                function = call.get("function", call)
                function["name"] = self.tool(str(function.get("name", "")))
                if function["name"] in BUILTIN_TOOLS:
                    function["arguments"], skill = self._rewrite_load_skill(function.get("arguments"))
                    if skill is not None and call.get("id") is not None:
                        loads[call["id"]] = skill
            if role == "tool":
                if isinstance(message.get("name"), str):
                    message["name"] = self.tool(message["name"])
                skill = loads.get(message.get("tool_call_id"))
                if skill is not None and skill in self.skill_bodies:
                    message["content"] = self.skill_bodies[skill]
            out.append(message)
        return out

    def _rewrite_content(self, content: Any) -> Any:
        if isinstance(content, str):
            return self.rewrite_text(content)
        if isinstance(content, list):  # content parts
            return [part | {"text": self.rewrite_text(part["text"])}
                    if isinstance(part, dict) and isinstance(part.get("text"), str) else part for part in content]
        return content

    def _rewrite_load_skill(self, arguments: Any) -> tuple[Any, str | None]:
        parsed = arguments
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments or "{}")
            except ValueError:
                return rename_identifiers(arguments, self.skills), None
        if not isinstance(parsed, dict):
            return arguments, None
        parsed = dict(parsed)
        skill = None
        for key in LOAD_SKILL_ARGUMENTS:
            if isinstance(parsed.get(key), str):
                parsed[key] = skill = self.skill(parsed[key])
        if isinstance(arguments, str):
            return json.dumps(parsed, ensure_ascii=False), skill
        return parsed, skill

    # -- provenance ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, to store next to an augmented sample."""
        data = dataclasses.asdict(self)
        data["settings"] = {name: list(pair) for name, pair in self.settings.items()}
        data["skill_bodies"] = sorted(self.skill_bodies)  # the bodies live in the augmented spec
        return data
