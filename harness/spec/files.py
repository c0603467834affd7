"""Reading a harness directory into a HarnessSpec, and directories on disk.

A directory arrives as a mapping of relative posix path → text (from the
editor, a zip, the store or `read_dir`). Parsing reports every problem of
every file at once, then runs the semantic checks of `validate.py`, so an
author sees the whole list in one go.

A file that cannot be read at all (bad YAML, JSON or front matter) still
yields a stand-in module built from defaults under its file name, so that
references to it from other files do not turn into noise.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from harness.spec.canonical import FORMAT, HARNESS_FILE, spec_to_dict, to_files
from harness.spec.errors import SpecError, SpecInvalid
from harness.spec.model import (
    Condition,
    HarnessSpec,
    Hook,
    PromptBlock,
    Settings,
    Skill,
    Tool,
    ToolBinding,
)
from harness.spec.validate import validate

__all__ = ["parse_files", "to_files", "read_dir", "write_dir", "content_hash", "spec_to_dict"]

_SKILL_FILE = re.compile(r"skills/([^/]+)/SKILL\.md")
_TOOL_FILE = re.compile(r"tools/([^/]+)\.json")
_HOOK_FILE = re.compile(r"hooks/([^/]+)\.yaml")
_PROMPT_FILE = re.compile(r"prompt/(\d\d)-([^/]+)\.md")
FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^---[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)

_EXPECTED_FILE = {
    "skills": "skills/<name>/SKILL.md",
    "tools": "tools/<name>.json",
    "hooks": "hooks/<name>.yaml",
    "prompt": "prompt/NN-<name>.md (NN = two digits)",
}


def parse_files(files: Mapping[str, str], *, bindings: Mapping[str, Collection[str]] | None = None) -> HarnessSpec:
    """The spec a directory describes. Raises SpecInvalid with every parse and semantic error.

    `bindings` (binding kind → the targets available where the harness will run) also checks that every
    tool binds to one of them; without it, targets are checked for form only.
    """
    errors: list[SpecError] = []
    texts = {path: normalise(text) for path, text in files.items()}
    if HARNESS_FILE in texts:
        description, settings, variables = _parse_harness_yaml(texts[HARNESS_FILE], errors)
    else:
        errors.append(SpecError(HARNESS_FILE, "is missing: every harness needs one"))
        description, settings, variables = "", Settings(), {}
    skills, tools, hooks, prompt = [], [], [], []
    for path, text in sorted(texts.items()):
        if path == HARNESS_FILE:
            continue
        if match := _SKILL_FILE.fullmatch(path):
            skills.append(_parse_skill(path, match.group(1), text, errors))
        elif match := _TOOL_FILE.fullmatch(path):
            tools.append(_parse_tool(path, match.group(1), text, errors))
        elif match := _HOOK_FILE.fullmatch(path):
            hooks.append(_parse_hook(path, match.group(1), text, errors))
        elif match := _PROMPT_FILE.fullmatch(path):
            prompt.append(_parse_prompt_block(path, int(match.group(1)), match.group(2), text, errors))
        else:
            errors.append(SpecError(path, _unknown_file_message(path)))
    spec = HarnessSpec(description=description, settings=settings, variables=variables,
                       skills=tuple(skills), tools=tuple(tools), hooks=tuple(hooks), prompt=tuple(prompt))
    if not _context_unknown(errors):
        errors += [error for error in validate(spec, bindings=bindings) if not any(_covers(parse, error) for parse in errors)]
    if errors:
        raise SpecInvalid(sorted(errors, key=lambda error: error.path))
    return spec


def content_hash(source: HarnessSpec | Mapping[str, str]) -> str:
    """The content hash of a spec, or of the canonical form of a directory (which must be valid)."""
    spec = source if isinstance(source, HarnessSpec) else parse_files(source)
    return spec.content_hash


def read_dir(path: str | os.PathLike[str]) -> dict[str, str]:
    """Every file under `path` as relative posix path → text. Hidden files and folders (.git) are skipped."""
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    files: dict[str, str] = {}
    errors: list[SpecError] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            file = Path(folder, name)
            relative = file.relative_to(root).as_posix()
            try:
                files[relative] = file.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                errors.append(SpecError(relative, "is not UTF-8 text"))
    if errors:
        raise SpecInvalid(errors)
    return files


def write_dir(files: Mapping[str, str], path: str | os.PathLike[str]) -> None:
    """Write `files` under `path` (creating folders), byte for byte. Other files there are left alone."""
    root = Path(path)
    for relative in files:
        _check_relative(relative)
    for relative, text in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="")


def _check_relative(relative: str) -> None:
    parts = PurePosixPath(relative).parts
    if not relative or relative.startswith("/") or "\\" in relative or ".." in parts or relative.endswith("/"):
        raise ValueError(f"refusing to write “{relative}”: paths must be relative and stay inside the harness")


# Files ---------------------------------------------------------------------------------------------


def _parse_harness_yaml(text: str, errors: list[SpecError]) -> tuple[str, Settings, dict[str, Any]]:
    document, errors = _load(HARNESS_FILE, text, _load_yaml, errors)
    fields = _Fields(document, HARNESS_FILE, "", errors)
    declared = fields.text("format", required=True)
    if declared and declared != FORMAT:
        fields.error("format", f"unsupported format “{declared}”; this is {FORMAT}")
    description = fields.text("description")
    settings = _parse_settings(fields.mapping("settings"))
    variables = _parse_variables(fields.mapping("variables"))
    fields.reject_unknown()
    return description, settings, variables


def _parse_settings(fields: _Fields) -> Settings:
    defaults = Settings()
    settings = Settings(
        max_turns=fields.integer("max_turns", defaults.max_turns),
        reply_max_chars=fields.integer("reply_max_chars", defaults.reply_max_chars),
        deadline_s=fields.number("deadline_s", defaults.deadline_s),
        language=fields.text("language", defaults.language),
        max_hook_retries=fields.integer("max_hook_retries", defaults.max_hook_retries),
        fallback_reply=fields.text("fallback_reply", defaults.fallback_reply),
        constrained_decoding=fields.boolean("constrained_decoding", defaults.constrained_decoding),
    )
    fields.reject_unknown()
    return settings


def _parse_variables(fields: _Fields) -> dict[str, Any]:
    variables = {}
    for name in fields.keys():
        if not isinstance(name, str):
            fields.error(str(name), "variable names must be strings")
        elif (value := fields.scalar(name)) is not None:
            variables[name] = value
    return variables


def _parse_skill(path: str, name: str, text: str, errors: list[SpecError]) -> Skill:
    (document, body), errors = _load(path, text, _load_front_matter, errors, stand_in=({}, ""))
    fields = _Fields(document, path, "", errors)
    fields.name("name", name, "directory")
    skill = Skill(
        name=name,
        description=fields.text("description", required=True),
        kind=fields.text("kind", "reply"),
        body=body,
        allowed_tools=fields.words("allowed-tools"),
        metadata=fields.string_map("metadata"),
    )
    fields.reject_unknown()
    return skill


def _parse_tool(path: str, name: str, text: str, errors: list[SpecError]) -> Tool:
    document, errors = _load(path, text, _load_json, errors)
    top = _Fields(document, path, "", errors)
    if (kind := top.text("type", required=True)) and kind != "function":
        top.error("type", f"must be “function”, not “{kind}”")
    function = top.mapping("function", required=True)
    harness = top.mapping("x_harness", required=True)
    binding = harness.mapping("binding", required=True)
    function.name("name", name, "file name")
    tool = Tool(
        name=name,
        description=function.text("description", required=True),
        parameters=function.value("parameters", dict, {"type": "object", "properties": {}}, required=True),
        strict=function.boolean("strict", False),
        binding=ToolBinding(kind=binding.text("kind", required=True), target=binding.text("target", required=True)),
        timeout_ms=harness.integer("timeout_ms", 1000),
        retries=harness.integer("retries", 0),
        side_effect=harness.text("side_effect", "read"),
    )
    for fields in (top, function, harness, binding):
        fields.reject_unknown()
    return tool


def _parse_hook(path: str, name: str, text: str, errors: list[SpecError]) -> Hook:
    document, errors = _load(path, text, _load_yaml, errors)
    fields = _Fields(document, path, "", errors)
    rewrite = fields.mapping("rewrite") if fields.has("rewrite") else None
    hook = Hook(
        name=name,
        event=fields.text("event", required=True),
        matcher="|".join(part.strip() for part in fields.text("matcher", "*").split("|")),
        condition=_parse_condition(fields.mapping("when", required=True)),
        action=fields.text("action", required=True),
        message=fields.text("message"),
        max_retries=fields.integer("max_retries", 0),
        priority=fields.integer("priority", 100),
        enabled=fields.boolean("enabled", True),
        rewrite=None if rewrite is None else {key: rewrite.text(key) for key in rewrite.keys()},
    )
    fields.reject_unknown()
    return hook


def _parse_condition(when: _Fields) -> Condition:
    kinds = list(when.keys())
    if len(kinds) != 1:
        if not when.failed:
            when.error("", "needs exactly one condition: cel, regex, json_schema, length or always")
        return Condition.always()
    [kind] = kinds
    if kind == "cel":
        return Condition.cel(when.text("cel"))
    if kind == "always":
        if when.boolean("always", True) is not True:
            when.error("always", "must be true (disable a hook with enabled: false)")
        return Condition.always()
    if kind not in ("regex", "json_schema", "length"):
        when.keys()  # reported here, as a whole, rather than as an unknown field
        when.error("", f"unknown condition “{kind}”; use cel, regex, json_schema, length or always")
        return Condition(kind=str(kind))
    params = when.mapping(kind)
    field = params.text("field", required=True)
    if kind == "regex":
        condition = Condition.regex(field, params.text("pattern", required=True), params.text("flags"))
    elif kind == "json_schema":
        condition = Condition.json_schema(field, params.value("schema", dict, {}, required=True))
    else:
        condition = Condition.length(field, min=params.bound("min"), max=params.bound("max"))
    params.reject_unknown()
    return condition


def _parse_prompt_block(path: str, order: int, name: str, text: str, errors: list[SpecError]) -> PromptBlock:
    (document, body), errors = _load(path, text, _load_front_matter, errors, stand_in=({}, ""))
    fields = _Fields(document, path, "", errors)
    block = PromptBlock(
        order=order,
        name=name,
        cache_tier=fields.text("cache_tier", "static"),
        variables=fields.words("variables"),
        template=body,
    )
    fields.reject_unknown()
    return block


def _unknown_file_message(path: str) -> str:
    folder = path.split("/", 1)[0]
    if folder in _EXPECTED_FILE:
        return f"is not a harness file: {folder}/ holds {_EXPECTED_FILE[folder]}"
    return "is not a harness file (harness.yaml, skills/, tools/, hooks/ or prompt/)"


def _context_unknown(errors: list[SpecError]) -> bool:
    """Whether harness.yaml's variables could not be read, so references to them cannot be checked."""
    return any(error.file == HARNESS_FILE and error.location in ("", "variables") for error in errors)


def _covers(parse_error: SpecError, error: SpecError) -> bool:
    """Whether a parse error already explains a semantic error (a stand-in or default value caused it)."""
    if parse_error.file != error.file:
        return False
    outer, inner = parse_error.location, error.location
    return not outer or inner == outer or inner.startswith((f"{outer}.", f"{outer}["))


# Loading text --------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """One form for every input: no byte-order mark, `\\n` line endings."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _load(path: str, text: str, loader: Callable[[str], Any], errors: list[SpecError],
          stand_in: Any = None) -> tuple[Any, list[SpecError]]:
    """Run `loader`; when the file is unreadable, report it once and parse `stand_in` silently."""
    try:
        return loader(text), errors
    except _Unreadable as problem:
        errors.append(SpecError(path, str(problem)))
        return (stand_in if stand_in is not None else {}), []


class _Unreadable(Exception):
    """The file's syntax is broken; nothing in it can be trusted."""


def _load_yaml(text: str, first_line: int = 1) -> Any:
    """`text` as YAML; `first_line` is the file's line `text` starts on, so errors name the file's lines."""
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + first_line}, column {mark.column + 1}" if mark else ""
        raise _Unreadable(f"invalid YAML{where}: {error.problem}") from error
    except yaml.YAMLError as error:
        raise _Unreadable(f"invalid YAML: {error}") from error
    return {} if document is None else document


def _load_json(text: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        if duplicate := next((key for key in keys if keys.count(key) > 1), None):
            raise _Unreadable(f"invalid JSON: key “{duplicate}” appears twice in one object")
        return dict(pairs)

    def no_constants(name: str) -> Any:
        raise _Unreadable(f"invalid JSON: {name} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    except json.JSONDecodeError as error:
        raise _Unreadable(f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from error


def _load_front_matter(text: str) -> tuple[Any, str]:
    match = FRONT_MATTER.match(text)
    if not match:
        raise _Unreadable("must start with YAML front matter between two '---' lines")
    return _load_yaml(match.group(1), first_line=2), text[match.end():]  # line 1 is the opening '---'


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key “{key}”", key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


# Typed fields --------------------------------------------------------------------------------------


class _Fields:
    """Typed reads from one mapping of a file.

    Each read records its own error (missing, ill-typed) and returns a
    default instead, so one file reports all of its problems in one pass.
    """

    def __init__(self, data: Any, file: str, location: str, errors: list[SpecError]) -> None:
        self.file, self.location, self.errors = file, location, errors
        self.failed = not isinstance(data, dict)
        if self.failed:
            self.error("", f"must be a mapping, not {_type_name(data)}")
        self._data: dict[Any, Any] = data if isinstance(data, dict) else {}
        self._read: set[Any] = set()

    def error(self, key: str, message: str) -> None:
        location = ".".join(part for part in (self.location, key) if part)
        self.errors.append(SpecError.at(self.file, location, message))

    def keys(self) -> list[Any]:
        self._read.update(self._data)
        return list(self._data)

    def has(self, key: str) -> bool:
        self._read.add(key)
        return key in self._data

    def value(self, key: str, types: type | tuple[type, ...], default: Any, *, required: bool = False) -> Any:
        self._read.add(key)
        if key not in self._data:
            if required:
                self.error(key, "is required")
            return default
        value = self._data[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            self.error(key, f"must be {_describe(types)}, not {_type_name(value)}")
            return default
        return value

    def text(self, key: str, default: str = "", *, required: bool = False) -> str:
        return self.value(key, str, default, required=required)

    def integer(self, key: str, default: int) -> int:
        return self.value(key, int, default)

    def number(self, key: str, default: float) -> float:
        return self.value(key, (int, float), default)

    def boolean(self, key: str, default: bool) -> bool:
        return self.value(key, bool, default)

    def scalar(self, key: str) -> str | int | float | bool | None:
        return self.value(key, (str, int, float, bool), None)

    def bound(self, key: str) -> int | str | None:
        return self.value(key, (int, str), None)

    def name(self, key: str, expected: str, source: str) -> None:
        """Check that the name written in the file equals the one its path gives."""
        written = self.text(key, expected, required=True)
        if written != expected:
            self.error(key, f"“{written}” must equal the {source} “{expected}”")

    def words(self, key: str) -> tuple[str, ...]:
        """A space-separated string or a list of strings (Agent Skills `allowed-tools` allows both)."""
        value = self.value(key, (str, list), "")
        words = value.split() if isinstance(value, str) else value
        if not all(isinstance(word, str) for word in words):
            self.error(key, "must list names as strings")
            return ()
        return tuple(words)

    def string_map(self, key: str) -> dict[str, str]:
        value = self.value(key, dict, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            self.error(key, "must map strings to strings (quote numbers: version: \"4\")")
            return {}
        return value

    def mapping(self, key: str, *, required: bool = False) -> _Fields:
        self._read.add(key)
        location = ".".join(part for part in (self.location, key) if part)
        if key not in self._data:
            if required:
                self.error(key, "is required")
            return _Fields({}, self.file, location, self.errors)
        return _Fields(self._data[key], self.file, location, self.errors)

    def reject_unknown(self) -> None:
        known = [key for key in self._read if isinstance(key, str)]
        for key in self._data:
            if key not in self._read:
                hint = difflib.get_close_matches(str(key), known, n=1)
                self.error(str(key), "unknown field" + (f"; did you mean “{hint[0]}”?" if hint else ""))


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               dict: "a mapping", list: "a list"}


def _describe(types: type | tuple[type, ...]) -> str:
    names = [_TYPE_NAMES.get(kind, kind.__name__) for kind in _as_tuple(types)]
    return " or ".join(dict.fromkeys(names))


def _type_name(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "a boolean"
    return _TYPE_NAMES.get(type(value), type(value).__name__)
