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
  the tools and skills by their augmented names.
  Mistakes: on a `mistake_rate` share of cases (a stable draw per case id, so a resumed or repeated run
  makes the same ones; default `DEFAULT_MISTAKE_RATE`) it makes one slip, drawn per case from
  `mistakes` among those the case allows: `skipped_skill` (replies before loading a skill: the
  harness's require-a-skill hook sends it back, and the trajectory holds a retry), `wrong_skill`
  (loads another skill than the expected one), `wrong_field` (states another field's value instead
  of the fact asked for), `missed_tool` (answers from memory without calling the expected tools).
  The judge rejects the last three; after a hook's feedback the oracle acts correctly, as a good
  model reading the feedback would. So the judge filter and the retry policy (`trajectories.py`)
  have something to do, as they do with a real teacher.
- any other name: a registered model backend (`serving.backends`), e.g. `openai` pointed at a strong
  model behind an OpenAI-compatible server (vLLM serving a larger model on a GPU node); `config` is
  passed to its factory. One instance serves every case. `check_teacher(name, config)` validates the
  choice without touching the network; `probe_teacher(name, config)` asks an `openai` teacher's
  server for `GET {base_url}/models` (a job's validation step calls it, so a teacher that does not
  answer is refused before anything trains).
"""

from __future__ import annotations

import hashlib
import json
import random
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from evaluation.judges.text import contains, tokens
from harness.http_pool import proxy_for, ssl_context
from harness.model_protocol import ModelBackend, ModelResponse, ToolCall
from harness.simulator.cases import Case
from serving.backends import create_backend, is_backend_name

LOAD_SKILL = "load_skill"
FEEDBACK_PREFIX = "[harness feedback]"

# The oracle's slips (module docstring). A job that names no rate gets the default: enough that the judge
# filter and the retry policy act on every run, few enough that most cases still teach the right behaviour.
MISTAKES = ("skipped_skill", "wrong_skill", "wrong_field", "missed_tool")
DEFAULT_MISTAKE_RATE = 0.15
ORACLE_STYLE = ("skill_first", "name_fields")  # how the oracle acts, apart from the mistakes it makes
ORACLE_OPTIONS = ("mistake_rate", "mistakes", *ORACLE_STYLE)
PROBE_TIMEOUT_S = 5.0

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


def mistakes_for(case: Case, kinds: tuple[str, ...] = MISTAKES) -> list[str]:
    """The slips of `kinds` that `case` allows: a skill slip needs an expected skill, a wrong field a fact
    to get wrong, a missed tool an expected tool."""
    allowed = {"skipped_skill": bool(case.expected.skills), "wrong_skill": bool(case.expected.skills),
               "wrong_field": bool(case.expected.facts),
               "missed_tool": bool(case.expected.tools or case.meta.get("any_of_tools"))}
    return [kind for kind in kinds if allowed[kind]]


def draw_mistake(case: Case, rate: float, kinds: tuple[str, ...] = MISTAKES) -> str:
    """The slip the oracle makes on `case` ("" for none): a `rate` share of cases, the kind drawn per case."""
    possible = mistakes_for(case, kinds)
    if not possible or _case_draw(case.case_id, "oracle-mistake") >= rate:
        return ""
    return possible[int(_case_draw(case.case_id, "oracle-mistake-kind") * len(possible))]


class OracleBackend:
    """Acts from `case.expected` (see the module docstring). One instance per case."""

    name = "oracle"

    def __init__(self, case: Case, *, mistake: str = "", skill_first: bool = False, name_fields: bool = False):
        if mistake and mistake not in MISTAKES:
            raise ValueError(f"oracle mistake must be one of {', '.join(MISTAKES)}, not {mistake!r}")
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
        slip = "" if feedback else self.mistake  # the hook's feedback is read and acted on
        schemas = {t["function"]["name"]: t["function"] for t in tools if t.get("type") == "function"}
        if tool_choice != "none":
            pending = [] if slip == "missed_tool" else [
                call for call in self._tool_calls(schemas) if (call.name, call.arguments) not in made]
            skill = expected.skills[0] if expected.skills else None
            if skill and slip == "wrong_skill":
                skill = self._other_skill(schemas) or skill
            loaded = {str(_arguments(arguments).get("name")) for name, arguments in made if name == LOAD_SKILL}
            # Any skill loaded is enough unless the hook sent the reply back: then the expected one.
            need_skill = bool(skill) and slip != "skipped_skill" and (
                skill not in loaded if feedback or slip == "wrong_skill" else not loaded)
            if pending and not (self.skill_first and need_skill):
                return ModelResponse(tool_calls=tuple(pending), tokens_out=20 * len(pending))
            if need_skill:
                call = ToolCall(id=f"oracle_{self.calls}_skill", name=LOAD_SKILL,
                                arguments=json.dumps({"name": skill}))
                return ModelResponse(tool_calls=(call,), tokens_out=12)
        results = _tool_results(messages)
        reply = self._wrong_reply(results) if slip == "wrong_field" else self._reply(
            results if self.name_fields else [])
        return ModelResponse(content=reply, tokens_out=len(reply.split()))

    def _other_skill(self, schemas: Mapping[str, Mapping[str, Any]]) -> str | None:
        """A skill the harness offers other than the expected ones (drawn per case), for `wrong_skill`."""
        offered = ((schemas.get(LOAD_SKILL) or {}).get("parameters") or {}).get("properties", {})
        names = [str(n) for n in (offered.get("name") or {}).get("enum") or () if n not in self.case.expected.skills]
        return names[int(_case_draw(self.case.case_id, "oracle-wrong-skill") * len(names))] if names else None

    def _wrong_reply(self, results: list[Any]) -> str:
        """The reply with the first fact replaced by another tool-result field's value (`wrong_field`), or
        by a value off by one when no result holds another value; never one the judge would accept."""
        facts = list(self.case.expected.facts)
        wanted = facts[0]

        def acceptable(value: str) -> bool:
            return not any(contains(tokens(value), fact) or contains(tokens(fact), value) for fact in facts)

        numeric = wanted.replace(".", "", 1).isdigit()
        candidates = [(key, _scalar_text(value)) for result in results for key, value in _fields(result)
                      if _scalar_text(value).replace(".", "", 1).isdigit() == numeric]
        candidates = [(key, value) for key, value in candidates
                      if value.strip() and len(value) <= 40 and acceptable(value)]
        if candidates:
            key, value = candidates[int(_case_draw(self.case.case_id, "oracle-wrong-field") * len(candidates))]
            said = f"{key.replace('_', ' ')} {value}" if self.name_fields else value
        else:
            said = str(int(float(wanted)) + 1) if numeric else "not listed"
        return "Here's what I found: " + ", ".join([said, *facts[1:]]) + "."

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


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _calls_made(messages: list[dict[str, Any]]) -> set[tuple[str, str]]:
    made = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function", call)
            made.add((str(function.get("name")), str(function.get("arguments"))))
    return made


class TeacherRefused(ValueError):
    """A teacher choice that cannot work; `option` names the teacher_config key at fault ("" for the name)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


@register_teacher("oracle")
def oracle_teacher(case: Case, config: Mapping[str, Any]) -> ModelBackend:
    """`config` (see `check_oracle_config`): `mistake_rate` (0..1, default `DEFAULT_MISTAKE_RATE`): share of
    cases with one slip; `mistakes` (default all of `MISTAKES`): the kinds drawn from; `skill_first`
    (default false): the skill, then the tools, then each fact after its field's name; `name_fields`
    (default false): each fact after its field's name, the tools called first."""
    check_oracle_config(config)
    rate = float(config.get("mistake_rate", DEFAULT_MISTAKE_RATE))
    kinds = tuple(config.get("mistakes", MISTAKES))
    return OracleBackend(case, mistake=draw_mistake(case, rate, kinds),
                         skill_first=bool(config.get("skill_first", False)),
                         name_fields=bool(config.get("name_fields", False)))


def check_oracle_config(config: Mapping[str, Any]) -> None:
    """Refuse an oracle config that would fail mid-run (`TeacherRefused` names the option)."""
    unknown = sorted(set(config) - set(ORACLE_OPTIONS))
    if unknown:
        raise TeacherRefused(unknown[0], f"oracle {unknown[0]}: unknown option; known: {', '.join(ORACLE_OPTIONS)}")
    for name in ("skill_first", "name_fields"):
        if not isinstance(config.get(name, False), bool):
            raise TeacherRefused(name, f"oracle {name} must be true or false, not {config[name]!r}")
    rate = config.get("mistake_rate", DEFAULT_MISTAKE_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
        raise TeacherRefused("mistake_rate", f"oracle mistake_rate must be a number within 0..1, not {rate!r}")
    kinds = config.get("mistakes", MISTAKES)
    if (isinstance(kinds, str) or not isinstance(kinds, list | tuple) or not kinds
            or any(kind not in MISTAKES for kind in kinds)):
        raise TeacherRefused("mistakes", f"oracle mistakes must be a non-empty list of {', '.join(MISTAKES)}, "
                                         f"not {kinds!r}")


# --- choosing and checking a teacher ----------------------------------------------------------------------

def check_teacher(name: str, config: Mapping[str, Any]) -> None:
    """Static checks of a teacher choice (no network): a known name and the options it needs."""
    if name == "oracle":
        check_oracle_config(config)
        return
    if name in _TEACHERS:
        return
    if not is_backend_name(name) and ":" not in name:  # `family:ref` names may be registered by an app later
        raise TeacherRefused("", f"unknown teacher {name!r}; use {', '.join(teacher_names())} or a model backend "
                                 "(e.g. openai)")
    if name == "openai":
        for option in ("base_url", "model"):
            value = config.get(option)
            if not isinstance(value, str) or not value.strip():
                raise TeacherRefused(option, f"the openai teacher needs {option}")
        parts = urlsplit(str(config["base_url"]))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise TeacherRefused("base_url", f"not an http(s) URL: {config['base_url']!r}")


def probe_teacher(name: str, config: Mapping[str, Any], *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Ask an `openai` teacher's server for `GET {base_url}/models` once, within `timeout_s`: one that does
    not answer, or does not serve `model`, raises `TeacherRefused`. Other teachers have nothing to ask."""
    if name != "openai":
        return
    base_url = str(config["base_url"]).rstrip("/")
    url = f"{base_url}/models"
    proxy = proxy_for(url)
    handlers: list[Any] = [urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {})]
    if url.startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(context=ssl_context()))
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if config.get("api_key"):
        request.add_header("Authorization", f"Bearer {config['api_key']}")
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout_s) as response:
            body = response.read(1_000_000)
    except urllib.error.HTTPError as error:
        raise TeacherRefused("base_url", f"{url} answered HTTP {error.code}; is base_url the server's "
                                         "OpenAI API root (e.g. http://host:8000/v1)?") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise TeacherRefused("base_url", f"the teacher at {url} did not answer within {timeout_s:g} s "
                                         f"({reason})") from None
    try:
        served = [str(m.get("id")) for m in json.loads(body).get("data") or () if isinstance(m, dict)]
    except (ValueError, AttributeError):
        raise TeacherRefused("base_url", f"{url} did not answer with an OpenAI model list") from None
    if served and config["model"] not in served:
        raise TeacherRefused("model", f"{base_url} does not serve {config['model']!r} (it serves "
                                      f"{', '.join(served[:8])})")
