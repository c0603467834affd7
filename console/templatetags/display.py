"""Showing stored values to people: tables, sentences and JSON — never a Python repr.

A dict or list reaching a template through `{{ value }}` or `|pprint` prints as `{'key': …}`, which
operators should never have to read. These filters and tags turn such values into nested tables
(`{% value_table %}`), a before/after table of the fields that changed (`{% change_table %}`) or, for
a "raw" view, JSON (`|as_json`). Everything goes through the template engine, so it stays escaped.
"""

import json
from collections.abc import Mapping
from typing import Any

from django import template

register = template.Library()

SCALARS = (str, int, float, bool, type(None))


def plain(value: Any) -> str:
    """One value as text a person reads: scalars as themselves, lists joined, dicts as `key: value` pairs."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, SCALARS):
        return str(value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {plain(v)}" for k, v in value.items()) or "(empty)"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(plain(v) for v in value) or "(none)"
    return str(value)


register.filter("plain", plain)


@register.filter
def as_json(value: Any) -> str:
    """Indented JSON (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def _node(value: Any, depth: int) -> dict:
    if isinstance(value, Mapping) and depth < 4:
        return {"kind": "dict", "items": [(str(k), _node(v, depth + 1)) for k, v in value.items()]}
    if isinstance(value, (list, tuple)) and depth < 4 and value:
        if all(isinstance(v, dict) for v in value):  # a list of records: one table, columns from their keys
            columns = list(dict.fromkeys(k for v in value for k in v))
            return {"kind": "records", "columns": columns,
                    "rows": [[_node(v.get(c), depth + 1) for c in columns] for v in value]}
        if any(not isinstance(v, SCALARS) for v in value):
            return {"kind": "list", "items": [_node(v, depth + 1) for v in value]}
    return {"kind": "text", "text": plain(value)}


@register.inclusion_tag("console/display/value.html")
def value_table(value: Any, empty: str = "(none)"):
    """A nested dict/list as tables and lists; a scalar as text."""
    return {"node": _node(value, 0), "empty": empty}


@register.inclusion_tag("console/display/changes.html")
def change_table(before: Any, after: Any):
    """The fields of two dicts side by side, changed ones marked; non-dicts as one before/after row."""
    if isinstance(before, dict) or isinstance(after, dict):
        before_d = before if isinstance(before, dict) else {}
        after_d = after if isinstance(after, dict) else {}
        keys = list(dict.fromkeys([*before_d, *after_d]))
        rows = [{"field": k, "before": _node(before_d.get(k), 1) if k in before_d else None,
                 "after": _node(after_d.get(k), 1) if k in after_d else None,
                 "changed": before_d.get(k) != after_d.get(k)} for k in keys]
    elif before is None and after is None:
        rows = []
    else:
        rows = [{"field": "", "before": None if before is None else _node(before, 1),
                 "after": None if after is None else _node(after, 1), "changed": before != after}]
    return {"rows": rows}


@register.filter
def hook_condition(condition) -> str:
    """A hook's condition as the operator wrote it, in one line (its JSON schema is shown apart)."""
    kind = getattr(condition, "kind", "")
    if kind == "cel":
        return condition.expr
    if kind == "regex":
        return f"{condition.field} matches /{condition.pattern}/{condition.flags}"
    if kind == "json_schema":
        return f"{condition.field} does not validate against the JSON schema"
    if kind == "length":
        bounds = [f"shorter than {condition.min}" if condition.min is not None else "",
                  f"longer than {condition.max}" if condition.max is not None else ""]
        return f"{condition.field} is " + " or ".join(b for b in bounds if b) if any(bounds) else condition.field
    if kind == "always":
        return "always"
    return kind


@register.filter
def as_text(value: Any) -> str:
    """A string as itself; anything else (a tool's structured result) as indented JSON."""
    return value if isinstance(value, str) else as_json(value)
