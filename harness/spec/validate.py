"""Semantic checks of a HarnessSpec: every rule of docs/harness-format.md.

`validate` never stops at the first problem: an author fixing a harness in
the console wants the whole list, each error pointing at the file and the
place in it. It also never trusts the types of a spec built in code.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
import jsonschema
from celpy.celparser import CELParseError

import harness.spec.cel_parser as cel_parser
from harness.spec.canonical import HARNESS_FILE, hook_path, prompt_path, skill_path, to_files, tool_path
from harness.spec.errors import SpecError
from harness.spec.model import (
    ACTIONS_BY_EVENT,
    BINDING_KINDS,
    BUILTIN_TOOLS,
    CACHE_TIERS,
    CATALOGUE_VARIABLES,
    CONDITION_KINDS,
    EVENT_CONTEXT,
    EVENTS,
    RUNTIME_VARIABLES,
    SETTINGS_FIELDS,
    SIDE_EFFECTS,
    SKILL_KINDS,
    TOOL_EVENTS,
    Condition,
    HarnessSpec,
    Hook,
    PromptBlock,
    Settings,
    Skill,
    Tool,
)
from harness.spec.template import invalid_tags, template_names

MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_SKILL_BODY_CHARS = 20_000
MAX_BLOCK_CHARS = 8_000
MAX_EXPRESSION_CHARS = 2_000  # CEL and regex: bounds parse time of operator input
MAX_TOTAL_BYTES = 1_000_000
MAX_RETRIES = 5
MAX_PROMPT_ORDER = 99

SETTINGS_RANGES: Mapping[str, tuple[float, float]] = {
    "max_turns": (1, 16),
    "reply_max_chars": (10, 2000),
    "deadline_s": (1, 120),
    "max_hook_retries": (0, MAX_RETRIES),
}
TIMEOUT_MS_RANGE = (1, 60_000)
TOOL_RETRIES_RANGE = (0, MAX_RETRIES)

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_TOOL_NAME = re.compile(r"[a-z0-9_]+(?:-[a-z0-9_]+)*")
_VARIABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")
_LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8})*")
_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_REGISTRY_NAME = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_HTTP_TARGET = re.compile(r"(GET|POST|PUT|PATCH|DELETE) (https://\S+)")
_URL_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
_REWRITE_KEYS = ("pattern", "replacement")


def validate(spec: HarnessSpec, *, bindings: Mapping[str, Collection[str]] | None = None) -> list[SpecError]:
    """Every semantic error in `spec`, sorted by path (empty when valid).

    With `bindings` (binding kind → available targets), a tool whose kind is listed must bind to one of
    its targets: a harness that calls a builtin this installation does not have is not valid here.
    """
    scope = _Scope.of(spec)
    errors = [
        *_check_harness_file(spec),
        *_check_skills(spec, scope),
        *_check_tools(spec, bindings),
        *_check_hooks(spec, scope),
        *_check_prompt(spec, scope),
        *_check_total_size(spec),
    ]
    return sorted(errors, key=lambda error: error.path)


def name_problem(name: object, *, allow_underscore: bool = False) -> str | None:
    """Why `name` breaks the Agent Skills naming rule, or None when it is fine."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_CHARS:
        return f"name must be 1-{MAX_NAME_CHARS} characters"
    pattern, letters = (_TOOL_NAME, "a-z, 0-9, - and _") if allow_underscore else (_NAME, "a-z, 0-9 and -")
    if not pattern.fullmatch(name):
        return f"name “{name}” must use only {letters}, with no leading, trailing or doubled hyphen"
    return None


@lru_cache(maxsize=1)
def cel_environment() -> celpy.Environment:
    """The one CEL environment that parses conditions, here and in the hook engine.

    cel-python keeps one parser per process, whose tree class is that of the first environment made; the
    hook engine's transpiler needs its own tree class (a subclass, which the interpreter reads too), so every
    environment that parses is made with it. With `cel_parser.DIRECTORY` set (the Django app sets it), the
    parser is loaded from there, or built and saved there for the next process.
    """
    directory, tree_class = cel_parser.DIRECTORY, celpy.CompiledRunner.tree_node_class
    loaded = directory is not None and cel_parser.load_parser(directory, tree_class)
    environment = celpy.Environment(runner_class=celpy.CompiledRunner)
    if directory is not None and not loaded:
        cel_parser.save_parser(directory)
    return environment


@lru_cache(maxsize=4096)
def cel_syntax_error(expr: str) -> str | None:
    """Why `expr` does not compile as CEL, or None. Compiling is slow, so each text compiles once."""
    try:
        cel_environment().compile(expr)
    except CELParseError as error:
        return f"CEL syntax error at line {error.line}, column {error.column}"
    except RecursionError:
        return "CEL expression is nested too deeply"
    return None


@dataclass(frozen=True)
class _Scope:
    """Names other modules may refer to."""

    tools: frozenset[str]
    settings: Settings
    variables: Mapping[str, object]

    @classmethod
    def of(cls, spec: HarnessSpec) -> _Scope:
        return cls(frozenset(tool.name for tool in spec.tools) | frozenset(BUILTIN_TOOLS),
                   spec.settings, spec.variables)

    @property
    def message_names(self) -> frozenset[str]:
        """What a hook message may use: settings fields and variables."""
        return frozenset(SETTINGS_FIELDS) | frozenset(self.variables)

    def template_names_at(self, tier: str) -> frozenset[str]:
        tiers = CACHE_TIERS[: CACHE_TIERS.index(tier) + 1]
        runtime = (name for t in tiers for name in RUNTIME_VARIABLES[t])
        return self.message_names | frozenset(CATALOGUE_VARIABLES) | frozenset(runtime)

    def integer(self, name: str) -> object:
        """The value of a setting or variable that a length bound names (None if neither)."""
        if name in SETTINGS_FIELDS:
            return getattr(self.settings, name)
        return self.variables.get(name)


# harness.yaml --------------------------------------------------------------------------------------


def _check_harness_file(spec: HarnessSpec) -> Iterator[SpecError]:
    yield from _check_text(HARNESS_FILE, "description", spec.description, MAX_DESCRIPTION_CHARS, required=False)
    yield from _check_settings(spec.settings)
    yield from _check_variables(spec.variables)


def _check_settings(settings: Settings) -> Iterator[SpecError]:
    out_of_range = set()
    for name, (low, high) in SETTINGS_RANGES.items():
        value = getattr(settings, name)
        allowed_types = (int, float) if name == "deadline_s" else (int,)
        if not _is_number(value, allowed_types) or not low <= value <= high:
            out_of_range.add(name)
            kind = "a number" if name == "deadline_s" else "a whole number"
            yield _error(HARNESS_FILE, f"settings.{name}", f"must be {kind} from {low} to {high}, not {_shown(value)}")
    if not isinstance(settings.language, str) or not _LANGUAGE_TAG.fullmatch(settings.language):
        yield _error(HARNESS_FILE, "settings.language", f"{_shown(settings.language)} is not a BCP-47 language tag")
    if not isinstance(settings.fallback_reply, str):
        yield _error(HARNESS_FILE, "settings.fallback_reply", "must be a string")
    elif "reply_max_chars" not in out_of_range and len(settings.fallback_reply) > settings.reply_max_chars:
        yield _error(HARNESS_FILE, "settings.fallback_reply", "is longer than settings.reply_max_chars")
    if not isinstance(settings.constrained_decoding, bool):
        yield _error(HARNESS_FILE, "settings.constrained_decoding", f"must be true or false, not {_shown(settings.constrained_decoding)}")


def _check_variables(variables: Mapping[str, object]) -> Iterator[SpecError]:
    reserved = set(SETTINGS_FIELDS) | set(CATALOGUE_VARIABLES) | {n for names in RUNTIME_VARIABLES.values() for n in names}
    for name, value in variables.items():
        location = f"variables.{name}"
        if not isinstance(name, str) or not _VARIABLE_NAME.fullmatch(name):
            yield _error(HARNESS_FILE, location, "variable names must match [a-z][a-z0-9_]*")
        elif name in reserved:
            yield _error(HARNESS_FILE, location, f"“{name}” shadows a setting or runtime variable of the same name")
        if not _is_scalar(value):
            yield _error(HARNESS_FILE, location, "must be a string, a finite number or a boolean")


# skills --------------------------------------------------------------------------------------------


def _check_skills(spec: HarnessSpec, scope: _Scope) -> Iterator[SpecError]:
    yield from _check_duplicates("skill", [skill_path(skill.name) for skill in spec.skills])
    for skill in spec.skills:
        yield from _check_skill(skill, scope)


def _check_skill(skill: Skill, scope: _Scope) -> Iterator[SpecError]:
    path = skill_path(skill.name)
    if problem := name_problem(skill.name):
        yield SpecError(path, problem)
    yield from _check_text(path, "description", skill.description, MAX_DESCRIPTION_CHARS)
    if skill.kind not in SKILL_KINDS:
        yield _error(path, "kind", f"must be one of {_listed(SKILL_KINDS)}, not “{skill.kind}”")
    yield from _check_text(path, "body", skill.body, MAX_SKILL_BODY_CHARS, empty="is empty: the body is what load_skill returns")
    for tool, count in Counter(skill.allowed_tools).items():
        if tool not in scope.tools:
            yield _error(path, "allowed-tools", f"names unknown tool “{tool}”")
        if count > 1:
            yield _error(path, "allowed-tools", f"lists “{tool}” more than once")
    for key, value in skill.metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            yield _error(path, f"metadata.{key}", "metadata maps strings to strings")


# tools ---------------------------------------------------------------------------------------------


def _check_tools(spec: HarnessSpec, bindings: Mapping[str, Collection[str]] | None) -> Iterator[SpecError]:
    yield from _check_duplicates("tool", [tool_path(tool.name) for tool in spec.tools])
    for tool in spec.tools:
        yield from _check_tool(tool, bindings)


def _check_tool(tool: Tool, bindings: Mapping[str, Collection[str]] | None) -> Iterator[SpecError]:
    path = tool_path(tool.name)
    if problem := name_problem(tool.name, allow_underscore=True):
        yield SpecError(path, problem)
    elif tool.name in BUILTIN_TOOLS:
        yield SpecError(path, f"“{tool.name}” is built in and may not be defined here")
    yield from _check_text(path, "function.description", tool.description, MAX_DESCRIPTION_CHARS)
    yield from _check_parameters(path, tool.parameters)
    if not isinstance(tool.strict, bool):
        yield _error(path, "function.strict", "must be true or false")
    yield from _check_binding(path, tool, bindings)
    yield from _check_int(path, "x_harness.timeout_ms", tool.timeout_ms, *TIMEOUT_MS_RANGE)
    yield from _check_int(path, "x_harness.retries", tool.retries, *TOOL_RETRIES_RANGE)
    if tool.side_effect not in SIDE_EFFECTS:
        yield _error(path, "x_harness.side_effect", f"must be one of {_listed(SIDE_EFFECTS)}, not “{tool.side_effect}”")


def _check_parameters(path: str, parameters: object) -> Iterator[SpecError]:
    location = "function.parameters"
    if not isinstance(parameters, dict) or not _is_json(parameters):
        yield _error(path, location, "must be a JSON Schema object")
        return
    yield from _check_json_schema(path, location, parameters)
    if parameters.get("type") != "object":
        yield _error(path, f"{location}.type", 'parameters must be a schema of "type": "object"')


def _check_binding(path: str, tool: Tool, bindings: Mapping[str, Collection[str]] | None) -> Iterator[SpecError]:
    kind, target = tool.binding.kind, tool.binding.target
    if kind not in BINDING_KINDS:
        yield _error(path, "x_harness.binding.kind", f"must be one of {_listed(BINDING_KINDS)}, not “{kind}”")
        return
    location = "x_harness.binding.target"
    if not isinstance(target, str):
        yield _error(path, location, "must be a string")
    elif kind == "http":
        yield from _check_http_target(path, location, target, tool.parameters)
    elif not _REGISTRY_NAME.fullmatch(target):
        yield _error(path, location, f"{kind} target must be a registered name such as catalogue.product_by_link_id")
    elif bindings is not None and kind in bindings and target not in bindings[kind]:
        available = sorted(bindings[kind])
        choices = f"one of {_listed(available)}" if available else "none is installed; use another kind"
        yield _error(path, location, f"no {kind} binding named “{target}” is available here: {choices}")


def _check_http_target(path: str, location: str, target: str, parameters: object) -> Iterator[SpecError]:
    match = _HTTP_TARGET.fullmatch(target)
    if not match:
        yield _error(path, location, "http target must be 'METHOD https://…' (GET, POST, PUT, PATCH or DELETE)")
        return
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    for placeholder in _URL_PLACEHOLDER.findall(match.group(2)):
        if placeholder not in properties:
            yield _error(path, location, f"placeholder {{{placeholder}}} is not a parameter of the tool")


# hooks ---------------------------------------------------------------------------------------------


def _check_hooks(spec: HarnessSpec, scope: _Scope) -> Iterator[SpecError]:
    yield from _check_duplicates("hook", [hook_path(hook.name) for hook in spec.hooks])
    for hook in spec.hooks:
        yield from _check_hook(hook, scope)


def _check_hook(hook: Hook, scope: _Scope) -> Iterator[SpecError]:
    path = hook_path(hook.name)
    if problem := name_problem(hook.name):
        yield SpecError(path, problem)
    if hook.event not in EVENTS:
        yield _error(path, "event", f"must be one of {_listed(EVENTS)}, not “{hook.event}”")
    else:
        yield from _check_action(path, hook)
        yield from _check_matcher(path, hook, scope)
    yield from _check_condition(path, hook.condition, hook.event, scope)
    yield from _check_template(path, "message", hook.message, scope.message_names)
    yield from _check_retries(path, hook)
    yield from _check_rewrite(path, hook)
    if not _is_number(hook.priority, (int,)):
        yield _error(path, "priority", "must be an integer")
    if not isinstance(hook.enabled, bool):
        yield _error(path, "enabled", "must be true or false")


def _check_action(path: str, hook: Hook) -> Iterator[SpecError]:
    allowed = ACTIONS_BY_EVENT[hook.event]
    if hook.action not in allowed:
        yield _error(path, "action", f"“{hook.action}” is not an action of {hook.event} hooks; use {_listed(allowed)}")


def _check_matcher(path: str, hook: Hook, scope: _Scope) -> Iterator[SpecError]:
    if hook.matcher == "*":
        return
    if hook.event not in TOOL_EVENTS:
        yield _error(path, "matcher", f"{hook.event} hooks match every turn; their matcher must be '*'")
        return
    for name in str(hook.matcher).split("|"):
        if name not in scope.tools:
            yield _error(path, "matcher", f"names unknown tool “{name}” (tool names joined by |, or *)")


def _check_retries(path: str, hook: Hook) -> Iterator[SpecError]:
    if hook.action == "retry_with_feedback":
        yield from _check_int(path, "max_retries", hook.max_retries, 1, MAX_RETRIES)
        if not hook.message:
            yield _error(path, "message", "retry_with_feedback needs a message: it is the feedback the model gets")
    elif hook.max_retries != 0:
        yield _error(path, "max_retries", "applies only to retry_with_feedback; must be 0")


def _check_rewrite(path: str, hook: Hook) -> Iterator[SpecError]:
    if hook.rewrite is None:
        return
    if hook.action != "rewrite":
        yield _error(path, "rewrite", "applies only to the rewrite action")
    if not isinstance(hook.rewrite, Mapping):
        yield _error(path, "rewrite", "must be a mapping with pattern and replacement")
        return
    for key in set(hook.rewrite) - set(_REWRITE_KEYS):
        yield _error(path, f"rewrite.{key}", "unknown field; rewrite has pattern and replacement")
    pattern, replacement = hook.rewrite.get("pattern"), hook.rewrite.get("replacement", "")
    if not isinstance(pattern, str) or not pattern:
        yield _error(path, "rewrite.pattern", "must be a non-empty regular expression")
        return
    if problem := _regex_problem(pattern, 0):
        yield _error(path, "rewrite.pattern", problem)
    elif not isinstance(replacement, str):
        yield _error(path, "rewrite.replacement", "must be a string")
    elif problem := _replacement_problem(pattern, replacement):
        yield _error(path, "rewrite.replacement", problem)


# conditions ----------------------------------------------------------------------------------------


def _check_condition(path: str, condition: Condition, event: str, scope: _Scope) -> Iterator[SpecError]:
    if condition.kind not in CONDITION_KINDS:
        yield _error(path, "when", f"unknown condition kind “{condition.kind}”; use {_listed(CONDITION_KINDS)}")
        return
    location = f"when.{condition.kind}"
    if condition.kind == "cel":
        yield from _check_cel(path, location, condition.expr)
        return
    if condition.kind == "always":
        return
    yield from _check_field(path, f"{location}.field", condition.field, event)
    if condition.kind == "regex":
        yield from _check_regex(path, location, condition)
    elif condition.kind == "json_schema":
        if not isinstance(condition.schema, dict) or not _is_json(condition.schema):
            yield _error(path, f"{location}.schema", "must be a JSON Schema mapping")
        else:
            yield from _check_json_schema(path, f"{location}.schema", condition.schema)
    elif condition.kind == "length":
        yield from _check_length(path, location, condition, scope)


def _check_cel(path: str, location: str, expr: object) -> Iterator[SpecError]:
    if not isinstance(expr, str) or not expr.strip():
        yield _error(path, location, "must be a non-empty CEL expression")
    elif len(expr) > MAX_EXPRESSION_CHARS:
        yield _error(path, location, f"is longer than {MAX_EXPRESSION_CHARS} characters")
    elif problem := cel_syntax_error(expr):
        yield _error(path, location, problem)


def _check_field(path: str, location: str, field: object, event: str) -> Iterator[SpecError]:
    if not isinstance(field, str) or not _DOTTED_NAME.fullmatch(field):
        yield _error(path, location, "must be a dotted path such as args.link_id")
        return
    context = EVENT_CONTEXT.get(event)
    if context is not None and field.split(".")[0] not in context:
        yield _error(path, location, f"“{field}” is not in the context of {event} hooks ({_listed(context)})")


def _check_regex(path: str, location: str, condition: Condition) -> Iterator[SpecError]:
    flags = condition.flags if isinstance(condition.flags, str) else ""
    if not isinstance(condition.flags, str) or set(flags) - set(_REGEX_FLAGS) or len(set(flags)) != len(flags):
        yield _error(path, f"{location}.flags", f"must be distinct letters of {''.join(_REGEX_FLAGS)}")
        flags = ""
    pattern = condition.pattern
    if not isinstance(pattern, str) or not pattern:
        yield _error(path, f"{location}.pattern", "must be a non-empty regular expression")
    elif problem := _regex_problem(pattern, _flag_bits(flags)):
        yield _error(path, f"{location}.pattern", problem)


def _check_length(path: str, location: str, condition: Condition, scope: _Scope) -> Iterator[SpecError]:
    if condition.min is None and condition.max is None:
        yield _error(path, location, "needs a min, a max or both")
    bounds = {}
    for key in ("min", "max"):
        bound = getattr(condition, key)
        if bound is None:
            continue
        value = scope.integer(bound) if isinstance(bound, str) else bound
        if not _is_number(value, (int,)) or value < 0:
            what = f"“{bound}” is not an integer setting or variable" if isinstance(bound, str) else "must be a whole number ≥ 0"
            yield _error(path, f"{location}.{key}", what)
        else:
            bounds[key] = value
    if len(bounds) == 2 and bounds["min"] > bounds["max"]:
        yield _error(path, location, f"min ({bounds['min']}) is greater than max ({bounds['max']})")


# prompt --------------------------------------------------------------------------------------------


def _check_prompt(spec: HarnessSpec, scope: _Scope) -> Iterator[SpecError]:
    names = Counter(block.name for block in spec.prompt)
    for block in spec.prompt:
        if names[block.name] > 1:
            yield SpecError(prompt_path(block), f"{names[block.name]} prompt blocks share the name “{block.name}”")
        yield from _check_block(block, scope)
    yield from _check_tier_order(spec.prompt)


def _check_tier_order(blocks: tuple[PromptBlock, ...]) -> Iterator[SpecError]:
    """Tiers never decrease along the order, so the static prefix is the same bytes for every room and turn."""
    highest: PromptBlock | None = None
    for block in blocks:
        if block.cache_tier not in CACHE_TIERS:
            continue  # reported by _check_block
        if highest and CACHE_TIERS.index(block.cache_tier) < CACHE_TIERS.index(highest.cache_tier):
            yield _error(prompt_path(block), "cache_tier", f"a {block.cache_tier} block after the {highest.cache_tier} "
                         f"block {prompt_path(highest)}: tiers must go static, session, turn")
        else:
            highest = block


def _check_block(block: PromptBlock, scope: _Scope) -> Iterator[SpecError]:
    path = prompt_path(block)
    if problem := name_problem(block.name):
        yield SpecError(path, problem)
    if not _is_number(block.order, (int,)) or not 0 <= block.order <= MAX_PROMPT_ORDER:
        yield SpecError(path, f"order must be a whole number from 0 to {MAX_PROMPT_ORDER} (the NN of NN-<name>.md)")
    if block.cache_tier not in CACHE_TIERS:
        yield _error(path, "cache_tier", f"must be one of {_listed(CACHE_TIERS)}, not “{block.cache_tier}”")
        return
    yield from _check_declared_variables(path, block, scope)
    yield from _check_text(path, "body", block.template, MAX_BLOCK_CHARS, required=False)
    yield from _check_template(path, "body", block.template, frozenset(block.variables),
                               undeclared="is not declared in the front matter's variables")


def _check_declared_variables(path: str, block: PromptBlock, scope: _Scope) -> Iterator[SpecError]:
    available = scope.template_names_at(block.cache_tier)
    for name, count in Counter(block.variables).items():
        if count > 1:
            yield _error(path, "variables", f"declares “{name}” more than once")
        if name in available:
            continue
        later = [tier for tier in CACHE_TIERS if name in RUNTIME_VARIABLES[tier]]
        reason = f"is a {later[0]} variable" if later else "is not a setting, variable or runtime variable"
        yield _error(path, "variables", f"“{name}” is not available to a {block.cache_tier} block: it {reason}")


# shared checks -------------------------------------------------------------------------------------


def _check_total_size(spec: HarnessSpec) -> Iterator[SpecError]:
    try:
        files = to_files(spec)
    except (TypeError, ValueError):  # non-JSON data; reported by the module checks
        return
    total = sum(len(text.encode("utf-8")) for text in files.values())
    if total > MAX_TOTAL_BYTES:
        yield SpecError(".", f"the harness is {total:,} bytes; the limit is {MAX_TOTAL_BYTES:,}")


def _check_duplicates(kind: str, paths: list[str]) -> Iterator[SpecError]:
    for path, count in Counter(paths).items():
        if count > 1:
            yield SpecError(path, f"{count} {kind}s share this name")


def _check_text(path: str, location: str, text: object, limit: int, *, required: bool = True,
                empty: str = "must not be empty") -> Iterator[SpecError]:
    if not isinstance(text, str):
        yield _error(path, location, "must be a string")
    elif required and not text.strip():
        yield _error(path, location, empty)
    elif len(text) > limit:
        yield _error(path, location, f"is {len(text):,} characters; the limit is {limit:,}")


def _check_template(path: str, location: str, template: object, known: frozenset[str],
                    undeclared: str = "is not a setting or variable") -> Iterator[SpecError]:
    if not isinstance(template, str):
        yield _error(path, location, "must be a string")
        return
    for tag in invalid_tags(template):
        yield _error(path, location, f"{tag} is not a plain {{{{ name }}}}: templates substitute names only")
    for name in template_names(template):
        if name not in known:
            yield _error(path, location, f"{{{{ {name} }}}} {undeclared}")


def _check_int(path: str, location: str, value: object, low: int, high: int) -> Iterator[SpecError]:
    if not _is_number(value, (int,)) or not low <= value <= high:
        yield _error(path, location, f"must be a whole number from {low} to {high}, not {_shown(value)}")


def _check_json_schema(path: str, location: str, schema: dict[str, Any]) -> Iterator[SpecError]:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        yield _error(path, _json_location(location, error.path), error.message)


def _regex_problem(pattern: str, flags: int) -> str | None:
    if len(pattern) > MAX_EXPRESSION_CHARS:
        return f"is longer than {MAX_EXPRESSION_CHARS} characters"
    try:
        re.compile(pattern, flags)
    except re.error as error:
        return f"invalid regular expression: {error}"
    return None


def _replacement_problem(pattern: str, replacement: str) -> str | None:
    try:
        re.compile(pattern).sub(replacement, "")
    except (re.error, IndexError) as error:
        return f"invalid replacement: {error}"
    return None


def _flag_bits(flags: str) -> int:
    bits = 0
    for letter in flags:
        bits |= _REGEX_FLAGS[letter]
    return bits


def _json_location(location: str, steps: Any) -> str:
    for step in steps:
        location += f"[{step}]" if isinstance(step, int) else f".{step}"
    return location


def _is_number(value: object, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not isinstance(value, bool) and math.isfinite(value)  # type: ignore[arg-type]


def _is_scalar(value: object) -> bool:
    return isinstance(value, (str, bool)) or _is_number(value, (int, float))


def _is_json(value: object) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _listed(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names)


def _error(path: str, location: str, message: str) -> SpecError:
    return SpecError.at(path, location, message)


def _shown(value: object) -> str:
    """A value from a file as the operator wrote it: text in quotes, anything else as JSON (never a repr)."""
    text = f"“{value}”" if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:79] + "…"
