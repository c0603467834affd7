"""Starting files for a module added in the editor: valid, minimal, and obvious to edit."""

import json
import re

MODULE_KINDS = ("skill", "tool", "hook", "prompt")
_NAME = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")


def skeleton_path(kind: str, name: str, order: int | None = None) -> str:
    return {
        "skill": f"skills/{name}/SKILL.md",
        "tool": f"tools/{name}.json",
        "hook": f"hooks/{name}.yaml",
        "prompt": f"prompt/{order if order is not None else 90:02d}-{name}.md",
    }[kind]


def skeleton(kind: str, name: str, *, binding: str = "") -> str:
    """The text of a new module named `name`; raises ValueError for an unknown kind or a bad name.

    A tool binds to `binding`, a builtin target the operator picked from those available: a skeleton
    bound to a made-up target would look valid and fail on its first call.
    """
    if kind not in MODULE_KINDS:
        raise ValueError(f"Module kind must be one of {', '.join(MODULE_KINDS)}.")
    if not _NAME.match(name or ""):
        raise ValueError("Names use lowercase letters, digits and single hyphens (tools may use _).")
    if kind == "tool" and not binding:
        raise ValueError("Choose the builtin the new tool binds to.")
    if kind == "skill":
        return (
            f"---\nname: {name}\ndescription: Describe what this skill does and when to use it.\nkind: reply\n---\n"
            "- First rule the model follows after loading this skill.\n"
        )
    if kind == "tool":
        return json.dumps(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": "Describe what the tool returns and when to call it.",
                    "parameters": {"type": "object", "properties": {}, "required": []},
                    "strict": False,
                },
                "x_harness": {
                    "binding": {"kind": "builtin", "target": binding},
                    "timeout_ms": 1000,
                    "retries": 0,
                    "side_effect": "read",
                },
            },
            indent=2,
            sort_keys=True,
        ) + "\n"
    if kind == "hook":
        return (
            "event: reply\nmatcher: '*'\nwhen:\n  regex:\n    field: reply\n    pattern: 'TODO'\n"
            "action: retry_with_feedback\nmessage: Explain to the model what to fix.\nmax_retries: 1\n"
            "priority: 100\nenabled: true\n"
        )
    return "---\ncache_tier: static\nvariables: []\n---\nWrite the block's instructions here.\n"
