"""Where in its file an error points: the line an editor marks, counted from the top of the file.

A syntax error names its line in its message (`invalid YAML at line 3, …`). A field error names a
dotted location (`function.parameters.properties.link_id.type`, `when.regex.pattern`, `settings[0]`):
the file is composed again with PyYAML, which keeps the position of every node (JSON documents are
read the same way), and the location is followed as far as the file has it. An error about a field that
is missing points at its parent; an error about the whole file points at line 1.
"""

from __future__ import annotations

import re

import yaml

from harness.spec.errors import SpecError
from harness.spec.files import FRONT_MATTER, normalise

__all__ = ["error_line"]

_SYNTAX_LINE = re.compile(r"\bat line (\d+)\b")
_INDEX = re.compile(r"\[(\d+)\]\.?")
_TAG = re.compile(r"\{\{.*?\}\}")
_BODY_LOCATIONS = ("body",)


def error_line(text: str, error: SpecError) -> int:
    """The 1-based line of `text` (the file `error.file`) that `error` is about."""
    text = normalise(text)
    lines = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
    if not error.location:
        found = _SYNTAX_LINE.search(error.message)
        return min(int(found.group(1)), lines) if found else 1
    first_line, document, body = 1, text, None
    if error.file.endswith(".md"):
        match = FRONT_MATTER.match(text)
        if not match:
            return 1
        first_line, document = 2, match.group(1)
        body = (text[: match.end()].count("\n") + 1, text[match.end():])
    if body is not None and error.location.split(".")[0] in _BODY_LOCATIONS:
        return min(_body_line(*body, error.message), lines)
    return min(first_line + _node_line(document, error.location), lines)


def _body_line(start: int, body: str, message: str) -> int:
    """The body's first line, or the line of the `{{ tag }}` the message names."""
    tag = _TAG.search(message)
    if tag:
        inner = tag.group(0)[2:-2].strip()
        for number, line in enumerate(body.split("\n")):
            if any(found[2:-2].strip() == inner for found in _TAG.findall(line)):
                return start + number
    return start


def _node_line(document: str, location: str) -> int:
    """The 0-based line of the deepest node of `location` that `document` has (0 when unreadable)."""
    try:
        node = yaml.compose(document, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return 0
    if node is None:
        return 0
    line, rest = node.start_mark.line, location
    while rest:
        if isinstance(node, yaml.MappingNode):
            keys = [(key, value) for key, value in node.value if isinstance(key, yaml.ScalarNode)]
            # The longest key that starts the rest: property names may themselves hold dots.
            matches = [(key, value) for key, value in keys
                       if rest == key.value or rest.startswith((f"{key.value}.", f"{key.value}["))]
            if not matches:
                break
            key, node = max(matches, key=lambda pair: len(pair[0].value))
            line, rest = key.start_mark.line, rest[len(key.value):].removeprefix(".")
        elif isinstance(node, yaml.SequenceNode) and (index := _INDEX.match(rest)):
            position = int(index.group(1))
            if position >= len(node.value):
                break
            node = node.value[position]
            line, rest = node.start_mark.line, rest[index.end():]
        else:
            break
    return line
