"""The canonical text of a spec, its content hash and its JSON-ready form.

One spec has exactly one canonical directory: that is what the store keeps,
what diffs compare and what the content hash covers, so formatting, key
order and line endings never make two equal harnesses look different.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # types only: model.py computes its content hash from this module
    from harness.spec.model import Condition, HarnessSpec, Hook, PromptBlock, Skill, Tool

FORMAT = "harnessops/v1"  # the format tag every canonical harness.yaml carries and the content hash covers

HARNESS_FILE = "harness.yaml"


def skill_path(name: str) -> str:
    return f"skills/{name}/SKILL.md"


def tool_path(name: str) -> str:
    return f"tools/{name}.json"


def hook_path(name: str) -> str:
    return f"hooks/{name}.yaml"


def prompt_path(block: PromptBlock) -> str:
    return f"prompt/{block.order:02d}-{block.name}.md"


def to_files(spec: HarnessSpec) -> dict[str, str]:
    """The canonical directory of `spec`: relative posix path → text, sorted by path."""
    files = {HARNESS_FILE: _harness_yaml(spec)}
    files.update((skill_path(skill.name), _skill_md(skill)) for skill in spec.skills)
    files.update((tool_path(tool.name), _tool_json(tool)) for tool in spec.tools)
    files.update((hook_path(hook.name), _hook_yaml(hook)) for hook in spec.hooks)
    files.update((prompt_path(block), _prompt_md(block)) for block in spec.prompt)
    return dict(sorted(files.items()))


def hash_files(files: Mapping[str, str]) -> str:
    """sha256 over the format tag, then each file's path, byte length and bytes, in path order."""
    digest = hashlib.sha256(f"{FORMAT}\n".encode())
    for path in sorted(files):
        content = files[path].encode("utf-8")
        digest.update(f"{path}\n{len(content)}\n".encode())
        digest.update(content)
    return digest.hexdigest()


def spec_to_dict(spec: HarnessSpec) -> dict[str, Any]:
    """A JSON-ready structured view of `spec`, for APIs and templates."""
    return {
        "format": FORMAT,
        "content_hash": spec.content_hash,
        "description": spec.description,
        "settings": asdict(spec.settings),
        "variables": dict(spec.variables),
        "skills": [_skill_dict(skill) for skill in spec.skills],
        "tools": [_tool_dict(tool) for tool in spec.tools],
        "hooks": [_hook_dict(hook) for hook in spec.hooks],
        "prompt": [asdict(block) | {"variables": list(block.variables), "path": prompt_path(block)}
                   for block in spec.prompt],
    }


# Files ---------------------------------------------------------------------------------------------


def _harness_yaml(spec: HarnessSpec) -> str:
    return _yaml({
        "format": FORMAT,
        "description": spec.description,
        "settings": _settings_document(spec),
        "variables": dict(sorted(spec.variables.items())),
    })


# Settings written only when they differ from their default: added after harnesses were stored, so writing
# the default would change every stored version's canonical text and content hash.
_WRITTEN_WHEN_SET = {"constrained_decoding": True}


def _settings_document(spec: HarnessSpec) -> dict[str, Any]:
    return {name: value for name, value in asdict(spec.settings).items()
            if name not in _WRITTEN_WHEN_SET or value != _WRITTEN_WHEN_SET[name]}


def _skill_md(skill: Skill) -> str:
    front: dict[str, Any] = {"name": skill.name, "description": skill.description, "kind": skill.kind}
    # Optional Agent Skills fields are left out when empty, as other Agent Skills tools expect.
    if skill.allowed_tools:
        front["allowed-tools"] = " ".join(skill.allowed_tools)
    if skill.metadata:
        front["metadata"] = dict(sorted(skill.metadata.items()))
    return _front_matter_file(front, skill.body)


def _tool_json(tool: Tool) -> str:
    return json.dumps(openai_definition(tool) | {"x_harness": _x_harness(tool)},
                      sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def openai_definition(tool: Tool) -> dict[str, Any]:
    """The tool as an OpenAI function definition: what a model sees, without `x_harness`."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": tool.strict,
        },
    }


def _x_harness(tool: Tool) -> dict[str, Any]:
    return {
        "binding": {"kind": tool.binding.kind, "target": tool.binding.target},
        "timeout_ms": tool.timeout_ms,
        "retries": tool.retries,
        "side_effect": tool.side_effect,
    }


def _hook_yaml(hook: Hook) -> str:
    document: dict[str, Any] = {
        "event": hook.event,
        "matcher": hook.matcher,
        "when": condition_document(hook.condition),
        "action": hook.action,
        "message": hook.message,
        "max_retries": hook.max_retries,
        "priority": hook.priority,
        "enabled": hook.enabled,
    }
    if hook.rewrite is not None:
        document["rewrite"] = {key: hook.rewrite[key] for key in ("pattern", "replacement") if key in hook.rewrite}
    return _yaml(document)


def condition_document(condition: Condition) -> dict[str, Any]:
    """The `when:` mapping of a hook file; optional parameters appear only when set."""
    if condition.kind == "cel":
        return {"cel": condition.expr}
    if condition.kind == "regex":
        params: dict[str, Any] = {"field": condition.field, "pattern": condition.pattern}
        if condition.flags:
            params["flags"] = condition.flags
        return {"regex": params}
    if condition.kind == "json_schema":
        return {"json_schema": {"field": condition.field, "schema": _sorted_keys(condition.schema or {})}}
    if condition.kind == "length":
        bounds = {key: value for key, value in (("min", condition.min), ("max", condition.max)) if value is not None}
        return {"length": {"field": condition.field, **bounds}}
    return {condition.kind: True}


def _prompt_md(block: PromptBlock) -> str:
    return _front_matter_file({"cache_tier": block.cache_tier, "variables": sorted(block.variables)}, block.template)


def _front_matter_file(front: Mapping[str, Any], body: str) -> str:
    """Front matter, then the body (already canonical: see model.canonical_body)."""
    return f"---\n{_yaml(front)}---\n" + (f"{body}\n" if body else "")


def _sorted_keys(value: Any) -> Any:
    """`value` with every mapping's keys sorted, so author key order never reaches the hash."""
    if isinstance(value, Mapping):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


# YAML ----------------------------------------------------------------------------------------------


class _CanonicalDumper(yaml.SafeDumper):
    """safe_dump, plus: multi-line strings as literal blocks, never anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if any(char in value for char in _UNICODE_BREAKS):
        style = '"'  # PyYAML writes these raw in other styles and then reads them back as line breaks
    elif "\n" in value:
        style = "|"  # the emitter falls back to quotes when a literal block cannot hold the text
    else:
        style = None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_UNICODE_BREAKS = ("\x85", "\u2028", "\u2029")


_CanonicalDumper.add_representer(str, _represent_str)


def _yaml(document: Mapping[str, Any]) -> str:
    return yaml.dump(dict(document), Dumper=_CanonicalDumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=1_000_000)


# Structured view -----------------------------------------------------------------------------------


def _skill_dict(skill: Skill) -> dict[str, Any]:
    return asdict(skill) | {"allowed_tools": list(skill.allowed_tools), "metadata": dict(skill.metadata),
                            "path": skill_path(skill.name)}


def _tool_dict(tool: Tool) -> dict[str, Any]:
    return asdict(tool) | {"path": tool_path(tool.name)}


def _hook_dict(hook: Hook) -> dict[str, Any]:
    data = asdict(hook)  # deep copies, so callers cannot reach into the spec
    condition = data["condition"]
    params = _CONDITION_PARAMS.get(condition["kind"], ())
    return data | {
        "condition": {"kind": condition["kind"]} | {name: condition[name] for name in params},
        "path": hook_path(hook.name),
    }


_CONDITION_PARAMS = {
    "cel": ("expr",),
    "regex": ("field", "pattern", "flags"),
    "json_schema": ("field", "schema"),
    "length": ("field", "min", "max"),
    "always": (),
}
