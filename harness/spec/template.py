"""The `{{ name }}` templates of prompt blocks and hook messages.

Substitution only, no logic: a template's inputs are then a plain set of
names, which validation can check against what exists at each cache tier.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

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


class Slot(str):
    """A name left for `fill` in a template `split_template` returned."""


def split_template(template: str, values: Mapping[str, object], later: Collection[str]) -> tuple[str, ...]:
    """`template` with the `values` it uses filled in now and the `later` names left as `Slot`s, so
    `fill` renders it for many sets of runtime values at the cost of a join. A name in `values` wins over
    the same name in `later`, as in `render_template({**later_values, **values})`; a name in neither
    raises KeyError now."""
    parts: list[str] = []
    for index, piece in enumerate(_TAG.split(template)):
        if index % 2 == 0:
            parts.append(piece)
            continue
        name = piece.strip()
        if not _NAME.fullmatch(name):
            parts.append("{{" + piece + "}}")
        elif name in values:
            parts.append(format_value(values[name]))
        elif name in later:
            parts.append(Slot(name))
        else:
            raise KeyError(f"template uses {{{{ {name} }}}} but no value was given for it")
    return merge_parts(parts)


def merge_parts(parts: Iterable[str]) -> tuple[str, ...]:
    """Template parts with adjacent literals joined and empty ones dropped: one part per slot and per text
    between slots (what `fill` joins)."""
    merged: list[str] = []
    for part in parts:
        if merged and not isinstance(part, Slot) and not isinstance(merged[-1], Slot):
            merged[-1] += part
        elif part or isinstance(part, Slot):
            merged.append(part)
    return tuple(merged)


def fill(parts: tuple[str, ...], values: Mapping[str, object]) -> str:
    """Render the parts of `split_template` with the runtime `values` of its slots."""
    return "".join(format_value(values[part]) if isinstance(part, Slot) else part for part in parts)
