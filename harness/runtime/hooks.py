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

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import celpy
import jsonschema
from celpy.evaluation import CELEvalError

from harness.spec import HarnessSpec
from harness.spec.model import Condition, Hook
from harness.spec.template import render_template
from harness.spec.validate import cel_environment

_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}

# The transpiler logs every failed evaluation at ERROR (the trace records each one with its hook already),
# and the source of every program it makes at INFO.
logging.getLogger("celpy.Transpiler").setLevel(logging.CRITICAL)
logging.getLogger("celpy.CompiledRunner").setLevel(logging.WARNING)

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
            self.program, self.names = _cel_program(condition.expr)
            self.memo: dict[tuple, bool] = {}
        elif self.kind == "regex":
            flags = 0
            for letter in condition.flags:
                flags |= _FLAGS[letter]
            self.regex = re.compile(condition.pattern, flags)
        elif self.kind == "json_schema":
            self.validator = SchemaCheck(dict(condition.schema or {}))
        elif self.kind == "length":
            self.low = _bound(condition.min, constants)
            self.high = _bound(condition.max, constants)
        self.message = render_template(hook.message, constants) if hook.message else ""
        self.rewrite = dict(hook.rewrite) if hook.rewrite else None
        if self.rewrite:
            self.rewrite_regex = re.compile(self.rewrite["pattern"])

    def fires(self, context: Mapping[str, Any], activation: Callable[[frozenset[str]], Any]) -> bool:
        condition: Condition = self.hook.condition
        if self.kind == "always":
            return True
        if self.kind == "cel":
            return self._cel_fires(context, activation)
        value = _field(context, condition.field)
        if self.kind == "regex":
            return value is not None and self.regex.search(str(value)) is not None
        if self.kind == "json_schema":
            return self.validator.first_error(value) is not None
        size = len(value) if isinstance(value, (str, list, tuple, dict)) else len(str(value or ""))
        return (self.low is not None and size < self.low) or (self.high is not None and size > self.high)


    def _cel_fires(self, context: Mapping[str, Any], activation: Callable[[frozenset[str]], Any]) -> bool:
        # CEL is pure: the same values of the names it reads give the same answer, so answers are
        # remembered per compiled hook (bounded). Most turns repeat a handful of inputs (no error,
        # no ungrounded number), and cel-python's tree-walking interpreter costs ~0.3–1 ms a call.
        # settings and vars are left out of the key: they are fixed for this spec version's engine.
        key = _memo_key({name: context[name] for name in self.names - _FIXED_NAMES if name in context})
        fired = self.memo.get(key) if key is not None else None
        if fired is None:
            fired = bool(self.program.evaluate(activation(self.names)))  # errors are never remembered
            if key is not None and len(self.memo) < CEL_MEMO_SIZE:
                self.memo[key] = fired
        return fired


CEL_MEMO_SIZE = 512  # answers remembered per hook; past it new inputs are evaluated every time
_FIXED_NAMES = frozenset({"settings", "vars"})
_MEMO_KEY_BUDGET = 256  # scalars and containers walked at most; bigger inputs are evaluated every time


SCHEMA_MEMO_SIZE = 512  # answers remembered per JSON Schema; past it new inputs are validated every time


class SchemaCheck:
    """A JSON Schema validator (2020-12) that remembers its answers per input, bounded, as CEL answers are:
    validation is pure, live turns repeat a handful of arguments (the item on screen), and jsonschema's
    validator costs ~10 µs a call, the largest part of a tool call's overhead."""

    def __init__(self, schema: Mapping[str, Any]):
        self.validator = jsonschema.Draft202012Validator(schema)
        self.memo: dict[tuple, tuple[str, str] | None] = {}

    def first_error(self, value: Any) -> tuple[str, str] | None:
        """(where, message) of the first error, or None when `value` is valid."""
        key = _memo_key({"": value})
        if key is not None and key in self.memo:
            return self.memo[key]
        problem = next(iter(self.validator.iter_errors(value)), None)
        answer = None if problem is None else (".".join(str(p) for p in problem.absolute_path), problem.message)
        if key is not None and len(self.memo) < SCHEMA_MEMO_SIZE:
            self.memo[key] = answer
        return answer


def _memo_key(values: Mapping[str, Any]) -> tuple | None:
    """A hashable, type-exact image of JSON-like values (CEL tells 1, 1.0 and true apart), or None."""
    budget = [_MEMO_KEY_BUDGET]

    def image(value: Any) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise OverflowError
        if value is None or isinstance(value, (str, bool, int, float)):
            return (type(value).__name__, value)
        if isinstance(value, Mapping):
            return ("map", tuple(sorted((str(k), image(v)) for k, v in value.items())))
        if isinstance(value, (list, tuple)):
            return ("list", tuple(image(v) for v in value))
        raise OverflowError  # anything else (dates, bytes…): not remembered

    try:
        return tuple((name, image(value)) for name, value in sorted(values.items()))
    except OverflowError:
        return None


def _cel_program(expr: str):
    """The program and the identifiers it may read (a superset: field and macro names too).

    Transpiled to Python by cel-python's CompiledRunner (~5× faster than its tree-walking interpreter);
    an expression the transpiler cannot handle runs on the interpreter. Either way, once per spec version.
    """
    env = cel_environment()
    ast = env.compile(expr)
    names = frozenset(str(token) for token in ast.scan_values(lambda v: getattr(v, "type", None) == "IDENT"))
    try:
        return _Transpiled(env.program(ast)), names
    except Exception:  # noqa: BLE001 - a transpiler gap; the interpreter handles the whole language
        return celpy.Environment(runner_class=celpy.InterpretedRunner).program(ast), names


class _Transpiled:
    """A transpiled CEL program, safe to share between threads.

    cel-python's transpiled code reads its activation from, and writes its result to, module globals of
    `celpy.evaluation`: two evaluations at once in two threads would read each other's values. Evaluation
    never yields (tens of µs), so one lock is cheap. Errors come back as the interpreter's would.
    """

    _lock = threading.Lock()

    def __init__(self, runner: Any):
        self.runner = runner

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        with self._lock:
            try:
                return self.runner.evaluate(activation)
            except CELEvalError as error:
                raise _unwrapped(error) from None


def _unwrapped(error: CELEvalError) -> CELEvalError:
    # The transpiled program wraps the evaluation's own error in ("evaluation error", its type, its args).
    args = error.args
    if len(args) == 3 and args[0] == "evaluation error" and args[1] is CELEvalError and isinstance(args[2], tuple):
        return CELEvalError(*args[2])
    return error


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
        # Converted to CEL values once: every event's activation shares them.
        self.cel_fixed = {"settings": celpy.json_to_cel(self.settings), "vars": celpy.json_to_cel(self.variables)}

    def run(self, event: str, context: dict[str, Any], *, tool: str | None = None, value_key: str | None = None
            ) -> HookOutcome:
        """Evaluate `event`'s hooks on `context`. `value_key` names the field a rewrite changes (e.g. `reply`)."""
        context = {**context, "settings": self.settings, "vars": self.variables}
        outcome = HookOutcome(value=context.get(value_key) if value_key else None)
        converted: dict[str, Any] = {}

        def activation(names: frozenset[str]) -> dict[str, Any]:
            # Only the names a condition reads are converted to CEL values, each once per event
            # (again only after a rewrite changed the context); settings and vars once per spec.
            for name in names:
                if name not in converted and name in context:
                    fixed = self.cel_fixed.get(name)  # context's settings/vars are always this engine's
                    converted[name] = fixed if fixed is not None else celpy.json_to_cel(context[name])
            return {name: converted[name] for name in names if name in converted}

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
