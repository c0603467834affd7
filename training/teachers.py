"""Teachers by name: who acts in a trajectory that HSA-SFT learns from.

A teacher is a `ModelBackend` for one case (`teacher_for(name, case, config)`), so trajectories are
produced by the same runtime (`harness.runtime.run_turn`) that serves viewers: hooks, tools, retries
and the deadline all apply to the teacher exactly as they will to the trained model.

- `oracle`: acts from the simulator's ground truth, offline and deterministic. It calls the expected
  tools (arguments from the case, required free-text fields from the viewer's message), loads the
  first expected reply skill, then replies with the expected facts ("Here's what I found: 88."), a size's
  stock with its size ("XL is sold out"), or what the case's ground truth holds ("Yes, it's in stock!",
  "vegan: yes", "Sizes: S, M, L; fit: relaxed"). With `skill_first` it loads the skill first (as the system prompt asks, so the skill's body names the tool
  to call), then calls the tools, and says each fact after the name of the tool-result field that holds
  it ("price 88"); `name_fields` names the fields with the tools called first. docs/default-model.md
  measures the protocols. It reads every name from the case
  it is given, so a case rewritten through an HSA mapping (`HsaMapping.rewrite_case`) makes it call
  the tools and skills by their augmented names. With `mistake_rate` > 0 it sometimes replies before
  loading a skill, so the harness's require-a-skill hook answers with feedback and the trajectory
  holds a retry (what the retry policy in `trajectories.py` works on).
- any other name: a registered model backend (`serving.backends`), e.g. `openai` pointed at a strong
  model behind an OpenAI-compatible server; `config` is passed to its factory. One instance serves
  every case.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from harness.model_protocol import ModelBackend, ModelResponse, ToolCall
from harness.simulator.cases import Case
from serving.backends import create_backend

LOAD_SKILL = "load_skill"
FEEDBACK_PREFIX = "[harness feedback]"

TeacherFactory = Callable[[Case, Mapping[str, Any]], ModelBackend]
_TEACHERS: dict[str, TeacherFactory] = {}


def register_teacher(name: str) -> Callable[[TeacherFactory], TeacherFactory]:
    def decorate(factory: TeacherFactory) -> TeacherFactory:
        _TEACHERS[name] = factory
        return factory

    return decorate


def teacher_names() -> list[str]:
    return sorted(_TEACHERS)


_SHARED: dict[tuple[str, str], ModelBackend] = {}


def teacher_for(name: str, case: Case, config: Mapping[str, Any] | None = None) -> ModelBackend:
    """The backend that acts for `case`: a per-case teacher (oracle) or a shared model backend."""
    config = dict(config or {})
    if name in _TEACHERS:
        return _TEACHERS[name](case, config)
    key = (name, json.dumps(config, sort_keys=True, default=str))
    if key not in _SHARED:
        _SHARED[key] = create_backend(name, **config)  # KeyError names the registered backends
    return _SHARED[key]


def _case_draw(case_id: str, salt: str) -> float:
    """A stable draw in [0, 1) per case (resumed or repeated runs make the same choices)."""
    return random.Random(hashlib.sha256(f"{salt}:{case_id}".encode()).hexdigest()).random()


class OracleBackend:
    """Acts from `case.expected` (see the module docstring). One instance per case."""

    name = "oracle"

    def __init__(self, case: Case, *, mistake: bool = False, skill_first: bool = False, name_fields: bool = False):
        self.case = case
        self.mistake = mistake
        self.skill_first = skill_first
        self.name_fields = name_fields or skill_first
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int = 512,
                       temperature: float = 0.0, tool_choice: str = "auto") -> ModelResponse:
        self.calls += 1
        expected = self.case.expected
        made = _calls_made(messages)
        feedback = any(m.get("role") == "user" and str(m.get("content", "")).startswith(FEEDBACK_PREFIX)
                       for m in messages)
        schemas = {t["function"]["name"]: t["function"] for t in tools if t.get("type") == "function"}
        if tool_choice != "none":
            pending = [call for call in self._tool_calls(schemas) if (call.name, call.arguments) not in made]
            skill = expected.skills[0] if expected.skills else None
            loaded = any(name == LOAD_SKILL for name, _ in made)
            skip_skill = self.mistake and not feedback  # the deliberate slip the hook should catch
            if pending and not (self.skill_first and skill and not loaded and not skip_skill):
                return ModelResponse(tool_calls=tuple(pending), tokens_out=20 * len(pending))
            if skill and not loaded and not skip_skill:
                call = ToolCall(id=f"oracle_{self.calls}_skill", name=LOAD_SKILL,
                                arguments=json.dumps({"name": skill}))
                return ModelResponse(tool_calls=(call,), tokens_out=12)
        reply = self._reply(_tool_results(messages) if self.name_fields else [])
        return ModelResponse(content=reply, tokens_out=len(reply.split()))

    def _tool_calls(self, schemas: Mapping[str, Mapping[str, Any]]) -> list[ToolCall]:
        case, calls = self.case, []
        wanted = [(c.name, dict(c.arguments)) for c in case.expected.tools]
        any_of = [str(t) for t in case.meta.get("any_of_tools") or ()]
        if any_of and not any(name in any_of for name, _ in wanted):
            wanted.append((any_of[0], {}))
        for index, (name, arguments) in enumerate(wanted):
            schema = schemas.get(name)
            if schema is None:
                continue  # the harness given has no such tool: the judge will say so
            arguments = self._complete_arguments(arguments, schema.get("parameters") or {})
            calls.append(ToolCall(id=f"oracle_{index}", name=name,
                                  arguments=json.dumps(arguments, ensure_ascii=False, sort_keys=True)))
        return calls

    def _complete_arguments(self, arguments: dict[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
        """Fill required fields the ground truth leaves out (free-text queries, ids named in meta)."""
        properties = parameters.get("properties") or {}
        for field in parameters.get("required") or ():
            if field in arguments:
                continue
            if field in self.case.meta and isinstance(self.case.meta[field], str):
                arguments[field] = self.case.meta[field]
            elif (properties.get(field) or {}).get("type") == "string":
                arguments[field] = self.case.message[:200]
        return arguments

    def _reply(self, results: list[Any]) -> str:
        facts, meta = list(self.case.expected.facts), self.case.meta
        stock = meta.get("in_stock") if isinstance(meta.get("in_stock"), bool) else None
        if facts:
            # "XL." does not answer "is XL in stock?"; the size and its stock do.
            said = [f"{fact} is {'in stock' if stock else 'sold out'}" if stock is not None and fact == meta.get("size")
                    else _labelled(fact, results) for fact in facts]
            return "Here's what I found: " + ", ".join(said) + "."
        if self.case.meta.get("expects_question"):
            return "Which item do you mean? Tell me the link number and I'll check it for you."
        if stock is not None:
            return "Yes, it's in stock!" if stock else "Sorry, it's sold out right now."
        if meta.get("available") is False and meta.get("colours"):
            return f"Sorry, not in {meta.get('colour')}. Colours: {', '.join(map(str, meta['colours']))}."
        if meta.get("sizes"):
            fit = f"; fit: {meta['fit']}" if meta.get("fit") else ""
            return f"Sizes: {', '.join(map(str, meta['sizes']))}{fit}."
        if isinstance(meta.get("answer"), bool) and meta.get("spec"):
            # The spec's own name: "does it have perfume in it?" is answered by "fragrance free: yes".
            return f"{str(meta['spec']).replace('_', ' ')}: {'yes' if meta['answer'] else 'no'}."
        if isinstance(meta.get("answer"), str):
            return f"I'm {meta['answer']}! Ask me anything about the items in the stream."
        return "Thanks for watching! Ask me anything about the items in the stream."


def _tool_results(messages: list[dict[str, Any]]) -> list[Any]:
    """The JSON tool results of a turn (a loaded skill's body is text and is left out)."""
    results = []
    for message in messages:
        if message.get("role") != "tool":
            continue
        try:
            results.append(json.loads(str(message.get("content"))))
        except ValueError:
            continue
    return results


def _scalar_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _fields(value: Any, key: str = "") -> list[tuple[str, Any]]:
    """(field name, scalar value) pairs of a JSON value, depth first; list items keep their list's name."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _fields(v, str(k))]
    if isinstance(value, list):
        return [pair for item in value for pair in _fields(item, key)]
    return [(key, value)] if key and value is not None and not isinstance(value, bool) else []


def _labelled(fact: str, results: list[Any]) -> str:
    """`fact` after the name of the first tool-result field that holds exactly it; bare when none does
    (a fact quoted from inside a text, such as an FAQ answer, has no field name worth saying)."""
    keys = [key for result in results for key, value in _fields(result)
            if _scalar_text(value).lower() == fact.lower()]
    return f"{keys[0].replace('_', ' ')} {fact}" if keys else fact


def _calls_made(messages: list[dict[str, Any]]) -> set[tuple[str, str]]:
    made = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function", call)
            made.add((str(function.get("name")), str(function.get("arguments"))))
    return made


@register_teacher("oracle")
def oracle_teacher(case: Case, config: Mapping[str, Any]) -> ModelBackend:
    """`config`: `mistake_rate` (0..1, default 0): share of cases whose first reply skips the skill;
    `skill_first` (default false): the skill, then the tools, then each fact after its field's name;
    `name_fields` (default false): each fact after its field's name, the tools called first."""
    rate = float(config.get("mistake_rate", 0.0))
    flags = {name: config.get(name, False) for name in ("skill_first", "name_fields")}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"oracle {name} must be true or false, not {value!r}")
    return OracleBackend(case, mistake=_case_draw(case.case_id, "oracle-mistake") < rate, **flags)
