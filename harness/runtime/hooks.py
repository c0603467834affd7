"""The hook engine: evaluates a spec's declarative hooks on one event.

Conditions are data (CEL, regex, JSON Schema, length), compiled once per spec.
Hooks of an event run in (priority, name) order; the first decisive action
wins, `rewrite` changes the value and lets later hooks see the new value.
A condition that fails to evaluate (a CEL type error, say) never crashes a live
turn and is always recorded with its error. Where it lands depends on what the
event guards: on `input` and `pre_tool` (refusals, coupon caps) it fails closed,
as if it had fired (the hook's own refusal, else `block`/`deny`), because a check
that cannot run must not let the turn through — except an `allow` rule, which
then grants nothing and the later checks run; on `post_tool` and `reply` it
does not fire (a broken reply rule would otherwise silence every turn).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import celpy
import jsonschema

from harness.spec import HarnessSpec
from harness.spec.model import Condition, Hook
from harness.spec.template import render_template

_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}

# Events whose hooks fail closed, with the refusal used when the hook's own action is not one.
FAIL_CLOSED = {"input": ("block", "fallback"), "pre_tool": ("deny", "fallback")}


@dataclass(frozen=True)
class HookDecision:
    hook: str
    fired: bool
    action: str
    message: str = ""
    error: str = ""
    failed_closed: bool = False  # the condition could not be evaluated and the event refuses instead


@dataclass
class HookOutcome:
    """What an event's hooks decided: `action` is `allow` when none fired decisively."""

    action: str = "allow"
    hook: str | None = None
    message: str = ""
    value: Any = None  # the (possibly rewritten) value of the event, e.g. the reply
    decisions: list[HookDecision] = field(default_factory=list)

    @property
    def fired(self) -> list[str]:
        return [d.hook for d in self.decisions if d.fired]

    @property
    def failed_closed(self) -> bool:
        return any(d.failed_closed for d in self.decisions)

    def describe(self, event: str) -> str:
        """Why the turn stopped here, for the trace's `reason`."""
        why = " could not be evaluated (failed closed)" if self.failed_closed else ""
        return f"{event} hook {self.hook}{why}"


class _Compiled:
    def __init__(self, hook: Hook, constants: Mapping[str, Any]):
        self.hook = hook
        condition = hook.condition
        self.kind = condition.kind
        if self.kind == "cel":
            self.program = _cel_program(condition.expr)
        elif self.kind == "regex":
            flags = 0
            for letter in condition.flags:
                flags |= _FLAGS[letter]
            self.regex = re.compile(condition.pattern, flags)
        elif self.kind == "json_schema":
            self.validator = jsonschema.Draft202012Validator(dict(condition.schema or {}))
        elif self.kind == "length":
            self.low = _bound(condition.min, constants)
            self.high = _bound(condition.max, constants)
        self.message = render_template(hook.message, constants) if hook.message else ""
        self.rewrite = dict(hook.rewrite) if hook.rewrite else None
        if self.rewrite:
            self.rewrite_regex = re.compile(self.rewrite["pattern"])

    def fires(self, context: Mapping[str, Any], activation: Callable[[], Any]) -> bool:
        condition: Condition = self.hook.condition
        if self.kind == "always":
            return True
        if self.kind == "cel":
            return bool(self.program.evaluate(activation()))
        value = _field(context, condition.field)
        if self.kind == "regex":
            return value is not None and self.regex.search(str(value)) is not None
        if self.kind == "json_schema":
            return not self.validator.is_valid(value)
        size = len(value) if isinstance(value, (str, list, tuple, dict)) else len(str(value or ""))
        return (self.low is not None and size < self.low) or (self.high is not None and size > self.high)


def _cel_program(expr: str):
    # cel-python's CompiledRunner would be ~3.5× faster but fails to transpile expressions such as
    # `size(x) > 0` (cel-python 0.5), so the interpreter it is.
    env = celpy.Environment()
    return env.program(env.compile(expr))


def _bound(value: int | str | None, constants: Mapping[str, Any]) -> int | None:
    if value is None or isinstance(value, int):
        return value
    return int(constants[value])


def _field(context: Mapping[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def truncate(text: str, limit: int) -> str:
    """Cut to at most `limit` characters, at a word boundary when one is near, ending with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space >= limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


class HookEngine:
    """All hooks of one spec, compiled. Build once per spec (see `engine_for`)."""

    def __init__(self, spec: HarnessSpec):
        self.settings = asdict(spec.settings)
        self.variables = dict(spec.variables)
        constants = {**self.settings, **self.variables}
        hooks = sorted((h for h in spec.hooks if h.enabled), key=lambda h: (h.priority, h.name))
        self.by_event: dict[str, list[_Compiled]] = {}
        for hook in hooks:
            self.by_event.setdefault(hook.event, []).append(_Compiled(hook, constants))
        self.max_retries = {h.name: h.max_retries for h in spec.hooks}

    def run(self, event: str, context: dict[str, Any], *, tool: str | None = None, value_key: str | None = None
            ) -> HookOutcome:
        """Evaluate `event`'s hooks on `context`. `value_key` names the field a rewrite changes (e.g. `reply`)."""
        context = {**context, "settings": self.settings, "vars": self.variables}
        outcome = HookOutcome(value=context.get(value_key) if value_key else None)
        converted: list = []

        def activation():
            # CEL values are built once per event (and again only after a rewrite changed the context).
            if not converted:
                converted.append(celpy.json_to_cel(dict(context)))
            return converted[0]

        for compiled in self.by_event.get(event, ()):
            hook = compiled.hook
            if tool is not None and not hook.matches_tool(tool):
                continue
            try:
                fired = compiled.fires(context, activation)
            except Exception as exc:  # never crash the turn; the trace shows why
                error = f"{type(exc).__name__}: {exc}"
                refusals = FAIL_CLOSED.get(event)
                # An `allow` rule that cannot run grants nothing: the later checks still run.
                if refusals is None or hook.action == "allow":
                    outcome.decisions.append(HookDecision(hook.name, False, "", error=error))
                    continue
                action = hook.action if hook.action in refusals else refusals[0]
                message = compiled.message or f"safety check {hook.name} could not be evaluated"
                outcome.decisions.append(HookDecision(hook.name, False, action, message, error=error,
                                                      failed_closed=True))
                outcome.action, outcome.hook, outcome.message = action, hook.name, message
                return outcome
            outcome.decisions.append(HookDecision(hook.name, fired, hook.action if fired else "", compiled.message))
            if not fired:
                continue
            if hook.action == "rewrite" and value_key:
                new = _rewrite(compiled, str(context.get(value_key, "")), self.settings["reply_max_chars"])
                context[value_key] = outcome.value = new
                converted.clear()
                continue
            outcome.action, outcome.hook, outcome.message = hook.action, hook.name, compiled.message
            return outcome
        return outcome


def _rewrite(compiled: _Compiled, text: str, limit: int) -> str:
    """Substitute with the hook's `rewrite` pattern, else truncate: to a length hook's own max, else the setting."""
    if compiled.rewrite:
        return compiled.rewrite_regex.sub(compiled.rewrite["replacement"], text)
    if compiled.kind == "length" and compiled.high is not None:
        limit = compiled.high
    return truncate(text, limit)


@lru_cache(maxsize=128)
def engine_for(spec: HarnessSpec) -> HookEngine:
    """Compiled hooks per spec (specs hash by content, so a new version compiles once)."""
    return HookEngine(spec)
