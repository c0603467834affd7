"""The `{{ name }}` templates of prompt blocks and hook messages.

Substitution only, no logic: a template's inputs are then a plain set of
names, which validation can check against what exists at each cache tier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_TAG = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def template_names(template: str) -> list[str]:
    """The names a template substitutes, in order of first use."""
    names = (match.group(1).strip() for match in _TAG.finditer(template))
    return list(dict.fromkeys(name for name in names if _NAME.fullmatch(name)))


def invalid_tags(template: str) -> list[str]:
    """Tags such as `{{ room.title }}` or `{{ x | upper }}` that are not a bare name."""
    return [match.group(0) for match in _TAG.finditer(template) if not _NAME.fullmatch(match.group(1).strip())]


def render_template(template: str, values: Mapping[str, object]) -> str:
    """Substitute every `{{ name }}`; raises KeyError for a name missing from `values`."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if not _NAME.fullmatch(name):
            return match.group(0)
        if name not in values:
            raise KeyError(f"template uses {{{{ {name} }}}} but no value was given for it")
        return format_value(values[name])

    return _TAG.sub(substitute, template)


def format_value(value: object) -> str:
    """How a setting or variable reads in a prompt: `true`, `15`, `0.5`, text as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
