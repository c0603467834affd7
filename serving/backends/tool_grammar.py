"""Harness-constrained decoding: a model turn may only call a tool (or load a skill) the harness declares.

Both forms below admit what `serving.backends.hermes` parses and the training template
(`training/chat_template.py`) writes: free text, or Hermes blocks

    <tool_call>
    {"name": "<declared name>", "arguments": <JSON that follows that tool's parameters schema>}
    </tool_call>

one per line. A skill is loaded only through `load_skill`, whose `name` is an enum of the declared
skills (`harness.spec.prompt.load_skill_definition`), so the same rule covers skills.

- `gbnf(tools)`: a llama.cpp grammar for the local backend. Free text is any text that never contains
  `<tool_call>` (a small automaton, so a call cannot hide inside a reply), or a reply is nothing but calls.
  Argument grammars come from llama-cpp-python's own JSON-schema converter (the pinned dependency).
- `structural_tag(tools)`: vLLM's structural-tag response format: text is free until the trigger
  `<tool_call>`, after which the output must be one of the declared calls with schema-valid arguments.

`tool_choice="required"` drops the free-text alternative; "none" offers no tools, so nothing is built.
Builders are pure functions of the tool list; backends cache their result per harness content hash
(`harness.model_protocol.ToolConstraint.key`), so a turn pays nothing to build one.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Hashable
from threading import Lock
from typing import Any, TypeVar

OPEN_TAG = "<tool_call>"
CALL_PREFIX = OPEN_TAG + '\n{"name": '
CALL_SUFFIX = "}\n</tool_call>"


def _literal(text: str) -> str:
    """A GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("\t", "\\t") + '"'


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    return function.get("parameters") or {"type": "object", "properties": {}}


# Escapes llama-cpp-python's pattern converter copies as literal text (`^O\d{6}$` became the string
# "O\dO\d…", which llama.cpp then refuses): written as the classes they mean before conversion.
_CLASS_ESCAPES = {"\\d": "[0-9]", "\\w": "[A-Za-z0-9_]", "\\s": "[ \\t]"}


def _grammar_schema(schema: Any) -> Any:
    """A copy of `schema` the converter reads right (the runtime still validates arguments with the original:
    a pattern the converter cannot express is dropped here, never loosened there)."""
    if isinstance(schema, list):
        return [_grammar_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _grammar_schema(value) for key, value in schema.items()}
    pattern = out.get("pattern")
    if isinstance(pattern, str):
        for escape, klass in _CLASS_ESCAPES.items():
            pattern = pattern.replace(escape, klass)
        if "\\" in pattern or not (pattern.startswith("^") and pattern.endswith("$")):
            out.pop("pattern")  # other escapes and unanchored patterns: not expressed in the grammar
        else:
            out["pattern"] = pattern
    return out


def _name(tool: dict[str, Any]) -> str:
    return tool.get("function", tool)["name"]


def _free_text_rules() -> list[str]:
    """Text that never contains `<tool_call>`: state i has just read the tag's first i characters.

    The tag's `<` occurs only at its start, so a mismatch goes back to state 0 (or to 1 on a new `<`).
    Every state may end the text (a reply may end in `<` or `<tool`; it is not a call).
    """
    rules = ['tc-free ::= [^<] tc-free | "<" tc-s1 | ""']
    for index in range(1, len(OPEN_TAG)):
        expected = OPEN_TAG[index]
        if index == len(OPEN_TAG) - 1:  # the closing `>` would complete the tag: refused
            rules.append(f'tc-s{index} ::= "<" tc-s1 | [^<{expected}] tc-free | ""')
        else:
            rules.append(f'tc-s{index} ::= "<" tc-s1 | {_literal(expected)} tc-s{index + 1} | '
                         f'[^<{expected}] tc-free | ""')
    return rules


def gbnf(tools: list[dict[str, Any]], *, tool_choice: str = "auto") -> str:
    """The llama.cpp grammar of one turn under `tools` (OpenAI definitions, as the runtime sends them)."""
    if not tools:
        raise ValueError("a tool-call grammar needs at least one tool")
    from llama_cpp.llama_grammar import SchemaConverter  # the pinned llama-cpp-python's converter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    alternatives = []
    for index, tool in enumerate(tools):
        # A copy (resolving refs writes into the schema, and the runtime shares its tool list across turns).
        schema = converter.resolve_refs(_grammar_schema(_parameters(tool)), f"tool-{index}")
        arguments = converter.visit(schema, f"tc-args{index}")
        head = json.dumps(_name(tool)) + ', "arguments": '
        alternatives.append(f"{_literal(head)} {arguments}")
    rules = [
        "root ::= tc-calls" if tool_choice == "required" else "root ::= tc-free | tc-calls",
        'tc-calls ::= tc-call ("\\n" tc-call)*',
        f"tc-call ::= {_literal(CALL_PREFIX)} tc-named {_literal(CALL_SUFFIX)}",
        "tc-named ::= " + " | ".join(alternatives),
        *_free_text_rules(),
        converter.format_grammar(),
    ]
    return "\n".join(rules) + "\n"


def structural_tag(tools: list[dict[str, Any]], *, tool_choice: str = "auto") -> dict[str, Any]:
    """vLLM's `response_format` of type `structural_tag` (the begin/schema/end form with triggers) for `tools`.

    Text before the trigger stays free; `required` is left to vLLM's own tool_choice handling."""
    if not tools:
        raise ValueError("a structural tag needs at least one tool")
    del tool_choice  # the same tag serves auto and required: vLLM constrains `required` itself
    return {
        "type": "structural_tag",
        "structures": [{"begin": f'{CALL_PREFIX}{json.dumps(_name(tool))}, "arguments": ',
                        "schema": _parameters(tool), "end": CALL_SUFFIX} for tool in tools],
        "triggers": [OPEN_TAG],
    }


T = TypeVar("T")


class ConstraintCache:
    """What a backend built for one harness version and tool choice, kept for the next turns (bounded LRU)."""

    def __init__(self, size: int = 256):
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = Lock()
        self.builds = 0  # how many times something was built (the tests check a turn reuses it)

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()  # outside the lock: a slow build does not hold up other harnesses
        with self._lock:
            self.builds += 1
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value
