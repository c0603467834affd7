"""The pure harness spec: parsing, validation, canonical form, hashing, diffs and rendering.

Everything here runs without Django or a database.
"""

import dataclasses
import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.spec import (
    FORMAT,
    Condition,
    HarnessSpec,
    Hook,
    PromptBlock,
    Settings,
    Skill,
    SpecError,
    SpecInvalid,
    Tool,
    ToolBinding,
    content_hash,
    diff_specs,
    openai_tools,
    parse_files,
    read_dir,
    render_system_prompt,
    skills_catalogue,
    spec_to_dict,
    to_files,
    validate,
    write_dir,
)
from harness.spec.model import ACTIONS_BY_EVENT, EVENT_CONTEXT, EVENTS, RUNTIME_VARIABLES, SETTINGS_FIELDS

# A small valid harness ----------------------------------------------------------------------------

HARNESS_YAML = """\
format: harnessops/v1
description: Test avatar.
settings:
  max_turns: 4
  reply_max_chars: 120
  deadline_s: 15
  language: en
  max_hook_retries: 2
  fallback_reply: One moment!
variables:
  persona_name: Mia
  max_discount_pct: 30
"""

PRODUCT_QA = """\
---
name: product-qa
description: Answers questions about a product. Use when a viewer asks about an item.
kind: reply
allowed-tools: get_product_info_by_link_id
metadata: {owner: ops}
---
Call get_product_info_by_link_id before stating a price.
"""

GROUND_NUMBERS = """\
---
name: ground-numbers
description: Checks that every number in a reply comes from a tool result.
kind: strategy
---
Quote numbers exactly.
"""

PRODUCT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_product_info_by_link_id",
        "description": "Look up a product by its link id.",
        "parameters": {"type": "object", "properties": {"link_id": {"type": "string"}}, "required": ["link_id"]},
        "strict": False,
    },
    "x_harness": {
        "binding": {"kind": "builtin", "target": "catalogue.product_by_link_id"},
        "timeout_ms": 800,
        "retries": 1,
        "side_effect": "read",
    },
}

COUPON_TOOL = {
    "type": "function",
    "function": {
        "name": "issue_coupon",
        "description": "Issue a coupon for one product.",
        "parameters": {
            "type": "object",
            "properties": {"link_id": {"type": "string"}, "discount_pct": {"type": "integer"}},
            "required": ["link_id", "discount_pct"],
        },
        "strict": False,
    },
    "x_harness": {
        "binding": {"kind": "http", "target": "POST https://shop.example/coupons/{link_id}"},
        "timeout_ms": 1500,
        "retries": 0,
        "side_effect": "write",
    },
}

CAP_DISCOUNT = """\
event: pre_tool
matcher: issue_coupon
when:
  cel: "args.discount_pct > vars.max_discount_pct"
action: deny
message: "Discounts above {{ max_discount_pct }}% need a human host."
max_retries: 0
priority: 20
enabled: true
"""

REPLY_LENGTH = """\
event: reply
matcher: "*"
when:
  length: {field: reply, max: reply_max_chars}
action: rewrite
"""

NO_LINKS = """\
event: input
when:
  regex: {field: message, pattern: 'https?://', flags: i}
action: block
"""

PERSONA = """\
---
cache_tier: static
variables: [persona_name, reply_max_chars]
---
You are {{ persona_name }}. Keep replies under {{ reply_max_chars }} characters.
"""

SKILLS_BLOCK = """\
---
cache_tier: static
variables: [skills_catalogue]
---
{{ skills_catalogue }}
"""

SESSION = """\
---
cache_tier: session
variables: [room_title]
---
Stream: {{ room_title }}
"""

BASE_FILES = {
    "harness.yaml": HARNESS_YAML,
    "skills/product-qa/SKILL.md": PRODUCT_QA,
    "skills/ground-numbers/SKILL.md": GROUND_NUMBERS,
    "tools/get_product_info_by_link_id.json": json.dumps(PRODUCT_TOOL, indent=2),
    "tools/issue_coupon.json": json.dumps(COUPON_TOOL, indent=2),
    "hooks/cap-discount.yaml": CAP_DISCOUNT,
    "hooks/reply-length.yaml": REPLY_LENGTH,
    "hooks/no-links.yaml": NO_LINKS,
    "prompt/00-persona.md": PERSONA,
    "prompt/10-skills.md": SKILLS_BLOCK,
    "prompt/50-session.md": SESSION,
}

PRODUCT_TOOL_FILE = "tools/get_product_info_by_link_id.json"


@pytest.fixture(scope="module")
def base_spec() -> HarnessSpec:
    return parse_files(BASE_FILES)


def edit(path: str, old: str, new: str) -> dict[str, str]:
    """BASE_FILES[path] with one substring replaced (which must be there)."""
    assert old in BASE_FILES[path], f"{old!r} not in {path}"
    return {path: BASE_FILES[path].replace(old, new)}


def edit_tool(path: str, change) -> dict[str, str]:
    document = json.loads(BASE_FILES[path])
    change(document)
    return {path: json.dumps(document)}


def error_paths(changes: dict[str, str | None]) -> list[str]:
    files = {**BASE_FILES, **changes}
    files = {path: text for path, text in files.items() if text is not None}
    with pytest.raises(SpecInvalid) as raised:
        parse_files(files)
    return [error.path for error in raised.value.errors]


# Parsing ------------------------------------------------------------------------------------------


def test_base_files_parse_into_sorted_modules(base_spec):
    assert [skill.name for skill in base_spec.skills] == ["ground-numbers", "product-qa"]
    assert [tool.name for tool in base_spec.tools] == ["get_product_info_by_link_id", "issue_coupon"]
    assert [(block.order, block.name) for block in base_spec.prompt] == [(0, "persona"), (10, "skills"), (50, "session")]
    assert base_spec.settings == Settings(fallback_reply="One moment!")
    assert base_spec.variables == {"max_discount_pct": 30, "persona_name": "Mia"}
    assert base_spec.skill("product-qa").allowed_tools == ("get_product_info_by_link_id",)
    assert base_spec.tool("issue_coupon").binding == ToolBinding("http", "POST https://shop.example/coupons/{link_id}")
    assert base_spec.hook("reply-length").condition == Condition.length("reply", max="reply_max_chars")
    assert base_spec.hook("no-links").matcher == "*"
    with pytest.raises(KeyError):
        base_spec.skill("missing")


def test_parse_reports_every_error_of_every_file_at_once():
    paths = error_paths({
        **edit("harness.yaml", "max_turns: 4", "max_turns: four"),
        **edit("skills/product-qa/SKILL.md", "kind: reply", "kind: answer"),
        **edit("hooks/cap-discount.yaml", "priority: 20", "priorty: 20"),
        "notes.txt": "hello",
    })
    assert paths == [
        "harness.yaml: settings.max_turns",
        "hooks/cap-discount.yaml: priorty",
        "notes.txt",
        "skills/product-qa/SKILL.md: kind",
    ]


def test_an_unreadable_file_is_reported_once_and_still_resolves_references():
    # The hook and the skill name the broken tool; its stand-in keeps them quiet.
    assert error_paths({PRODUCT_TOOL_FILE: "{ not json"}) == [PRODUCT_TOOL_FILE]


def test_crlf_bom_and_trailing_whitespace_are_accepted(base_spec):
    noisy = {path: "\ufeff" + text.replace("\n", "\r\n") + "  \r\n\r\n" for path, text in BASE_FILES.items()}
    assert parse_files(noisy) == base_spec


def test_spec_error_string_names_file_then_location():
    error = SpecError.at("tools/x.json", "function.parameters.type", "must be object")
    assert str(error) == "tools/x.json: function.parameters.type: must be object"
    assert (error.file, error.location) == ("tools/x.json", "function.parameters.type")
    assert SpecError("notes.txt", "unknown").location == ""


def test_spec_invalid_message_lists_every_error():
    invalid = SpecInvalid([SpecError("a.md", "one"), SpecError("b.md", "two")])
    assert "2 errors" in str(invalid) and "a.md: one" in str(invalid) and "b.md: two" in str(invalid)


# One test per error kind ------------------------------------------------------------------------

ERROR_CASES = {
    # file-level parse errors
    "yaml syntax": ({"hooks/cap-discount.yaml": "event: [pre_tool\n"}, ["hooks/cap-discount.yaml"]),
    "json syntax": ({PRODUCT_TOOL_FILE: '{"type": "function",}'}, [PRODUCT_TOOL_FILE]),
    "yaml duplicate key": (edit("hooks/no-links.yaml", "action: block", "action: block\naction: allow"),
                           ["hooks/no-links.yaml"]),
    "json duplicate key": ({PRODUCT_TOOL_FILE: '{"type": "function", "type": "function"}'}, [PRODUCT_TOOL_FILE]),
    "no front matter": ({"prompt/00-persona.md": "You are Mia.\n"}, ["prompt/00-persona.md"]),
    "front matter not a mapping": ({"prompt/00-persona.md": "---\n- a\n---\nx\n"}, ["prompt/00-persona.md"]),
    "missing harness.yaml": ({"harness.yaml": None}, ["harness.yaml"]),
    "unsupported format": (edit("harness.yaml", FORMAT, "harnessops/v9"), ["harness.yaml: format"]),
    "unknown file": ({"notes.txt": "hi"}, ["notes.txt"]),
    "unknown file inside a skill": ({"skills/product-qa/README.md": "hi"}, ["skills/product-qa/README.md"]),
    "bad prompt file name": ({"prompt/1-extra.md": SESSION}, ["prompt/1-extra.md"]),
    "hook with .yml extension": ({"hooks/other.yml": NO_LINKS}, ["hooks/other.yml"]),
    # field-level parse errors
    "missing field": (edit("skills/product-qa/SKILL.md", "description: Answers questions about a product. "
                           "Use when a viewer asks about an item.\n", ""),
                      ["skills/product-qa/SKILL.md: description"]),
    "ill-typed field": (edit("harness.yaml", "max_turns: 4", "max_turns: four"), ["harness.yaml: settings.max_turns"]),
    "boolean is not an integer": (edit("hooks/cap-discount.yaml", "priority: 20", "priority: true"),
                                  ["hooks/cap-discount.yaml: priority"]),
    "unknown field": (edit("hooks/cap-discount.yaml", "enabled: true", "enabled: true\nname: cap"),
                      ["hooks/cap-discount.yaml: name"]),
    "unknown tool field": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["x_harness"].update(cache=True)),
                           [f"{PRODUCT_TOOL_FILE}: x_harness.cache"]),
    "skill name differs from directory": (edit("skills/product-qa/SKILL.md", "name: product-qa", "name: qa"),
                                          ["skills/product-qa/SKILL.md: name"]),
    "tool name differs from file": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["function"].update(name="lookup")),
                                    [f"{PRODUCT_TOOL_FILE}: function.name"]),
    "tool type is not function": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d.update(type="tool")),
                                  [f"{PRODUCT_TOOL_FILE}: type"]),
    "metadata value not a string": (edit("skills/product-qa/SKILL.md", "{owner: ops}", "{version: 4}"),
                                    ["skills/product-qa/SKILL.md: metadata"]),
    "two condition kinds": (edit("hooks/no-links.yaml", "when:\n", "when:\n  always: true\n"),
                            ["hooks/no-links.yaml: when"]),
    "unknown condition kind": (edit("hooks/no-links.yaml", "regex:", "glob:"), ["hooks/no-links.yaml: when"]),
    "always false": (edit("hooks/no-links.yaml", "  regex: {field: message, pattern: 'https?://', flags: i}",
                          "  always: false"), ["hooks/no-links.yaml: when.always"]),
    # names
    "skill name rule": ({"skills/product-qa/SKILL.md": None,
                         "skills/product--qa/SKILL.md": PRODUCT_QA.replace("product-qa", "product--qa")},
                        ["skills/product--qa/SKILL.md"]),
    "hook name may not use _": ({"hooks/no_links.yaml": NO_LINKS}, ["hooks/no_links.yaml"]),
    "prompt name rule": ({"prompt/20-Rules.md": PERSONA}, ["prompt/20-Rules.md"]),
    "duplicate prompt name": ({"prompt/05-persona.md": PERSONA},
                              ["prompt/00-persona.md", "prompt/05-persona.md"]),
    "tool named load_skill": ({"tools/load_skill.json": json.dumps(
        {**PRODUCT_TOOL, "function": {**PRODUCT_TOOL["function"], "name": "load_skill"}})},
        ["tools/load_skill.json"]),
    # sizes
    "skill description too long": (edit("skills/product-qa/SKILL.md", "Answers questions", "x" * 1024),
                                   ["skills/product-qa/SKILL.md: description"]),
    "skill body too long": (edit("skills/product-qa/SKILL.md", "Call get_", "x" * 20_001),
                            ["skills/product-qa/SKILL.md: body"]),
    "skill body empty": (edit("skills/ground-numbers/SKILL.md", "Quote numbers exactly.", ""),
                         ["skills/ground-numbers/SKILL.md: body"]),
    "prompt block too long": (edit("prompt/00-persona.md", "You are", "x" * 8_001),
                              ["prompt/00-persona.md: body"]),
    "harness over 1 MB": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["function"]["parameters"]["properties"]["link_id"]
                                    .update(description="x" * 1_000_001)), ["."]),
    # skills
    "skill kind": (edit("skills/product-qa/SKILL.md", "kind: reply", "kind: answer"),
                   ["skills/product-qa/SKILL.md: kind"]),
    "allowed-tools names unknown tool": (edit("skills/product-qa/SKILL.md", "allowed-tools: get_product_info_by_link_id",
                                              "allowed-tools: get_product load_skill"),
                                         ["skills/product-qa/SKILL.md: allowed-tools"]),
    # tools
    "parameters not a valid schema": (
        edit_tool(PRODUCT_TOOL_FILE, lambda d: d["function"]["parameters"]["properties"]["link_id"].update(type="strin")),
        [f"{PRODUCT_TOOL_FILE}: function.parameters.properties.link_id.type"]),
    "parameters not an object": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["function"].update(parameters={"type": "string"})),
                                 [f"{PRODUCT_TOOL_FILE}: function.parameters.type"]),
    "binding kind": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["x_harness"]["binding"].update(kind="python")),
                     [f"{PRODUCT_TOOL_FILE}: x_harness.binding.kind"]),
    "builtin target not a dotted name": (
        edit_tool(PRODUCT_TOOL_FILE, lambda d: d["x_harness"]["binding"].update(target="import os")),
        [f"{PRODUCT_TOOL_FILE}: x_harness.binding.target"]),
    "http target without method": (
        edit_tool("tools/issue_coupon.json", lambda d: d["x_harness"]["binding"].update(target="https://shop.example")),
        ["tools/issue_coupon.json: x_harness.binding.target"]),
    "http placeholder not a parameter": (
        edit_tool("tools/issue_coupon.json",
                  lambda d: d["x_harness"]["binding"].update(target="POST https://shop.example/{sku}")),
        ["tools/issue_coupon.json: x_harness.binding.target"]),
    "timeout out of range": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["x_harness"].update(timeout_ms=0)),
                             [f"{PRODUCT_TOOL_FILE}: x_harness.timeout_ms"]),
    "retries out of range": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["x_harness"].update(retries=6)),
                             [f"{PRODUCT_TOOL_FILE}: x_harness.retries"]),
    "side effect": (edit_tool(PRODUCT_TOOL_FILE, lambda d: d["x_harness"].update(side_effect="delete")),
                    [f"{PRODUCT_TOOL_FILE}: x_harness.side_effect"]),
    # hooks
    "hook event": (edit("hooks/no-links.yaml", "event: input", "event: output"), ["hooks/no-links.yaml: event"]),
    "action not allowed for event": (edit("hooks/cap-discount.yaml", "action: deny", "action: rewrite"),
                                     ["hooks/cap-discount.yaml: action"]),
    "matcher names unknown tool": (edit("hooks/cap-discount.yaml", "matcher: issue_coupon",
                                        "matcher: issue_coupon|load_skill|refund"),
                                   ["hooks/cap-discount.yaml: matcher"]),
    "matcher on a non-tool event": (edit("hooks/no-links.yaml", "event: input", "event: input\nmatcher: issue_coupon"),
                                    ["hooks/no-links.yaml: matcher"]),
    "cel does not compile": (edit("hooks/cap-discount.yaml", "> vars", "> > vars"), ["hooks/cap-discount.yaml: when.cel"]),
    "regex does not compile": (edit("hooks/no-links.yaml", "https?://", "(https"),
                               ["hooks/no-links.yaml: when.regex.pattern"]),
    "regex flags": (edit("hooks/no-links.yaml", "flags: i", "flags: iq"), ["hooks/no-links.yaml: when.regex.flags"]),
    "field not in event context": (edit("hooks/no-links.yaml", "field: message", "field: args.text"),
                                   ["hooks/no-links.yaml: when.regex.field"]),
    "json_schema condition with invalid schema": (
        edit("hooks/no-links.yaml", "  regex: {field: message, pattern: 'https?://', flags: i}",
             "  json_schema: {field: message, schema: {type: text}}"),
        ["hooks/no-links.yaml: when.json_schema.schema.type"]),
    "length bound names unknown setting": (edit("hooks/reply-length.yaml", "max: reply_max_chars", "max: reply_chars"),
                                           ["hooks/reply-length.yaml: when.length.max"]),
    "length bound names a text variable": (edit("hooks/reply-length.yaml", "max: reply_max_chars", "max: persona_name"),
                                           ["hooks/reply-length.yaml: when.length.max"]),
    "length min above max": (edit("hooks/reply-length.yaml", "max: reply_max_chars", "min: 200, max: reply_max_chars"),
                             ["hooks/reply-length.yaml: when.length"]),
    "length without bounds": (edit("hooks/reply-length.yaml", ", max: reply_max_chars", ""),
                              ["hooks/reply-length.yaml: when.length"]),
    "rewrite on another action": (edit("hooks/no-links.yaml", "action: block",
                                       "action: block\nrewrite: {pattern: x, replacement: y}"),
                                  ["hooks/no-links.yaml: rewrite"]),
    "rewrite pattern does not compile": (edit("hooks/reply-length.yaml", "action: rewrite",
                                              "action: rewrite\nrewrite: {pattern: '(', replacement: y}"),
                                         ["hooks/reply-length.yaml: rewrite.pattern"]),
    "rewrite replacement names a missing group": (edit("hooks/reply-length.yaml", "action: rewrite",
                                                       "action: rewrite\nrewrite: {pattern: a, replacement: '\\2'}"),
                                                  ["hooks/reply-length.yaml: rewrite.replacement"]),
    "retry without max_retries": (edit("hooks/reply-length.yaml", "action: rewrite",
                                       "action: retry_with_feedback\nmessage: Shorter."),
                                  ["hooks/reply-length.yaml: max_retries"]),
    "retry without message": (edit("hooks/reply-length.yaml", "action: rewrite",
                                   "action: retry_with_feedback\nmax_retries: 1"),
                              ["hooks/reply-length.yaml: message"]),
    "max_retries on a deny hook": (edit("hooks/cap-discount.yaml", "max_retries: 0", "max_retries: 2"),
                                   ["hooks/cap-discount.yaml: max_retries"]),
    "hook message uses unknown variable": (edit("hooks/cap-discount.yaml", "{{ max_discount_pct }}", "{{ max_pct }}"),
                                           ["hooks/cap-discount.yaml: message"]),
    # prompt
    "template uses undeclared variable": (edit("prompt/00-persona.md", "You are", "{{ max_turns }} You are"),
                                          ["prompt/00-persona.md: body"]),
    "template uses an expression": (edit("prompt/50-session.md", "{{ room_title }}", "{{ room.title }}"),
                                    ["prompt/50-session.md: body"]),
    "variable not available at tier": (edit("prompt/00-persona.md", "variables: [", "variables: [room_title, "),
                                       ["prompt/00-persona.md: variables"]),
    "unknown declared variable": (edit("prompt/00-persona.md", "variables: [", "variables: [mood, "),
                                  ["prompt/00-persona.md: variables"]),
    "cache tier": (edit("prompt/50-session.md", "cache_tier: session", "cache_tier: hourly"),
                   ["prompt/50-session.md: cache_tier"]),
    "tiers decrease along the order": ({"prompt/60-late.md": SKILLS_BLOCK}, ["prompt/60-late.md: cache_tier"]),
    # settings and variables
    "setting out of range": (edit("harness.yaml", "reply_max_chars: 120", "reply_max_chars: 5"),
                             ["harness.yaml: settings.reply_max_chars"]),
    "deadline out of range": (edit("harness.yaml", "deadline_s: 15", "deadline_s: 0.5"),
                              ["harness.yaml: settings.deadline_s"]),
    "language tag": (edit("harness.yaml", "language: en", "language: English please"), ["harness.yaml: settings.language"]),
    "fallback longer than a reply": (edit("harness.yaml", "One moment!", "x" * 121),
                                     ["harness.yaml: settings.fallback_reply"]),
    "variable shadows a setting": (edit("harness.yaml", "persona_name: Mia", "persona_name: Mia\n  max_turns: 3"),
                                   ["harness.yaml: variables.max_turns"]),
    "variable shadows a runtime variable": (edit("harness.yaml", "persona_name: Mia", "persona_name: Mia\n  now: x"),
                                            ["harness.yaml: variables.now"]),
    "variable name": (edit("harness.yaml", "persona_name: Mia", "persona_name: Mia\n  Bad-Name: x"),
                      ["harness.yaml: variables.Bad-Name"]),
    "variable value not a scalar": (edit("harness.yaml", "persona_name: Mia", "persona_name: Mia\n  colours: [red]"),
                                    ["harness.yaml: variables.colours"]),
}


@pytest.mark.parametrize(("changes", "expected"), ERROR_CASES.values(), ids=ERROR_CASES.keys())
def test_each_error_kind_is_reported_at_its_path(changes, expected):
    assert error_paths(changes) == expected


def test_tool_names_may_use_underscores_but_not_hyphen_runs(base_spec):
    tool = base_spec.tool("issue_coupon")
    assert validate(dataclasses.replace(base_spec, tools=(*base_spec.tools, dataclasses.replace(tool, name="issue_coupon_v2")))) == []
    bad = dataclasses.replace(tool, name="issue--coupon")
    assert [e.path for e in validate(dataclasses.replace(base_spec, tools=(*base_spec.tools, bad)))] == [
        "tools/issue--coupon.json"]


def test_duplicate_module_names_in_a_built_spec(base_spec):
    skill, hook = base_spec.skills[0], base_spec.hooks[0]
    spec = dataclasses.replace(base_spec, skills=(*base_spec.skills, skill), hooks=(*base_spec.hooks, hook))
    messages = {str(error) for error in validate(spec)}
    assert messages == {"skills/ground-numbers/SKILL.md: 2 skills share this name",
                        "hooks/cap-discount.yaml: 2 hooks share this name"}


def test_validate_reports_wrong_types_in_a_built_spec_without_crashing(base_spec):
    spec = dataclasses.replace(base_spec, settings=Settings(max_turns="4"),  # type: ignore[arg-type]
                               variables={**base_spec.variables, "when": None})
    assert [e.path for e in validate(spec)] == ["harness.yaml: settings.max_turns", "harness.yaml: variables.when"]


# Canonical form and hash ------------------------------------------------------------------------


def test_to_files_writes_the_canonical_form(base_spec):
    files = to_files(base_spec)
    assert list(files) == sorted(BASE_FILES)
    assert files["hooks/no-links.yaml"] == (
        "event: input\nmatcher: '*'\nwhen:\n  regex:\n    field: message\n    pattern: https?://\n    flags: i\n"
        "action: block\nmessage: ''\nmax_retries: 0\npriority: 100\nenabled: true\n"
    )
    assert files["prompt/00-persona.md"].startswith("---\ncache_tier: static\nvariables:\n- persona_name\n")
    assert "deadline_s: 15.0\n" in files["harness.yaml"]
    assert json.loads(files[PRODUCT_TOOL_FILE]) == PRODUCT_TOOL
    assert all(text.endswith("\n") and not text.endswith("\n\n") for text in files.values())


def test_hash_is_sha256_over_paths_lengths_and_contents(base_spec):
    digest = hashlib.sha256(b"harnessops/v1\n")
    for path, text in sorted(to_files(base_spec).items()):
        data = text.encode()
        digest.update(f"{path}\n{len(data)}\n".encode() + data)
    assert content_hash(base_spec) == base_spec.content_hash == digest.hexdigest()


def test_same_content_in_another_form_has_the_same_hash(base_spec):
    reformatted = {
        **{path: text.replace("\n", "\r\n") for path, text in BASE_FILES.items()},
        PRODUCT_TOOL_FILE: json.dumps(json.loads(BASE_FILES[PRODUCT_TOOL_FILE]), indent=4, sort_keys=True),
        "hooks/cap-discount.yaml": "enabled: true\npriority: 20\n" + CAP_DISCOUNT.replace("priority: 20\nenabled: true\n", ""),
        "skills/product-qa/SKILL.md": "\ufeff" + PRODUCT_QA.replace("ops}", "ops}  ") + "   \n\n",
        "prompt/00-persona.md": PERSONA.replace("[persona_name, reply_max_chars]", "[reply_max_chars, persona_name]"),
        "hooks/reply-length.yaml": REPLY_LENGTH.replace("length: {field: reply, max: reply_max_chars}",
                                                        "length:\n    max: reply_max_chars\n    field: reply"),
    }
    assert content_hash(reformatted) == content_hash(BASE_FILES) == base_spec.content_hash
    assert parse_files(reformatted) == base_spec
    assert len({base_spec, parse_files(reformatted)}) == 1


MEANINGFUL_EDITS = {
    "description": edit("harness.yaml", "Test avatar.", "Test avatar!"),
    "setting": edit("harness.yaml", "max_turns: 4", "max_turns: 5"),
    "variable type": edit("harness.yaml", "max_discount_pct: 30", "max_discount_pct: '30'"),
    "skill body": edit("skills/ground-numbers/SKILL.md", "exactly.", "exactly!"),
    "skill body leading line": edit("skills/ground-numbers/SKILL.md", "---\nQuote", "---\n\nQuote"),
    "tool parameter": edit_tool(PRODUCT_TOOL_FILE, lambda d: d["function"]["parameters"].update(required=[])),
    "hook priority": edit("hooks/cap-discount.yaml", "priority: 20", "priority: 21"),
    "prompt order": {"prompt/00-persona.md": None, "prompt/01-persona.md": PERSONA},
    "new skill": {"skills/extra/SKILL.md": GROUND_NUMBERS.replace("ground-numbers", "extra")},
}


@pytest.mark.parametrize("changes", MEANINGFUL_EDITS.values(), ids=MEANINGFUL_EDITS.keys())
def test_any_change_changes_the_hash(base_spec, changes):
    files = {path: text for path, text in {**BASE_FILES, **changes}.items() if text is not None}
    changed = parse_files(files)
    assert changed.content_hash != base_spec.content_hash
    assert changed != base_spec


def test_spec_to_dict_is_json_ready(base_spec):
    data = json.loads(json.dumps(spec_to_dict(base_spec)))
    assert data["content_hash"] == base_spec.content_hash
    assert data["hooks"][0]["condition"] == {"kind": "cel", "expr": "args.discount_pct > vars.max_discount_pct"}
    assert data["skills"][1]["path"] == "skills/product-qa/SKILL.md"
    assert data["prompt"][0]["variables"] == ["persona_name", "reply_max_chars"]


def test_read_dir_and_write_dir_round_trip(tmp_path, base_spec):
    write_dir(to_files(base_spec), tmp_path / "h")
    (tmp_path / "h" / ".git").mkdir()
    (tmp_path / "h" / ".git" / "HEAD").write_text("ref")
    assert read_dir(tmp_path / "h") == to_files(base_spec)


@pytest.mark.parametrize("path", ["../escape.md", "/etc/passwd", "skills/../../x", ""])
def test_write_dir_refuses_paths_outside_the_directory(tmp_path, path):
    with pytest.raises(ValueError):
        write_dir({path: "x"}, tmp_path)


def test_read_dir_reports_files_that_are_not_utf8(tmp_path):
    (tmp_path / "harness.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(SpecInvalid) as raised:
        read_dir(tmp_path)
    assert [e.path for e in raised.value.errors] == ["harness.yaml"]


# Generated valid specs ----------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_line = _text.filter(lambda s: s.strip() and "{" not in s and "}" not in s)
_body = st.lists(_line, min_size=1, max_size=4).map("\n".join).filter(lambda s: s.strip())
_name = st.from_regex(r"[a-z0-9]{1,6}(-[a-z0-9]{1,6}){0,2}", fullmatch=True)
_tool_name = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True).filter(lambda n: n != "load_skill")
_variable_name = st.from_regex(r"v_[a-z0-9_]{0,8}", fullmatch=True)
_scalar = st.one_of(_text, st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False), st.booleans())
_identifier = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@st.composite
def _settings(draw) -> Settings:
    reply_max_chars = draw(st.integers(10, 2000))
    return Settings(
        max_turns=draw(st.integers(1, 16)),
        reply_max_chars=reply_max_chars,
        deadline_s=draw(st.floats(1, 120)),
        language=draw(st.sampled_from(["en", "zh-CN", "pt-BR", "de"])),
        max_hook_retries=draw(st.integers(0, 5)),
        fallback_reply=draw(_text.map(lambda s: s[:reply_max_chars])),
    )


@st.composite
def _tool(draw, name: str) -> Tool:
    properties = draw(st.dictionaries(_identifier, st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "boolean"])}, optional={"description": _text}), max_size=3))
    required = draw(st.lists(st.sampled_from(sorted(properties)), unique=True)) if properties else []
    binding = draw(st.one_of(
        st.builds(ToolBinding, st.sampled_from(["builtin", "sandbox"]), st.from_regex(r"[a-z]+\.[a-z_]+", fullmatch=True)),
        st.builds(lambda path: ToolBinding("http", f"GET https://api.example/{path}"),
                  st.sampled_from([f"{{{p}}}" for p in properties] or ["items"])),
    ))
    return Tool(
        name=name, description=draw(_line), parameters={"type": "object", "properties": properties, "required": required},
        binding=binding, timeout_ms=draw(st.integers(1, 60_000)), retries=draw(st.integers(0, 5)),
        side_effect=draw(st.sampled_from(["read", "write"])), strict=draw(st.booleans()),
    )


@st.composite
def _condition(draw, event: str, numeric_names: list[str]) -> Condition:
    field = draw(st.sampled_from(EVENT_CONTEXT[event]))
    kind = draw(st.sampled_from(["cel", "regex", "json_schema", "length", "always"]))
    if kind == "cel":
        return Condition.cel(draw(st.sampled_from(["true", f"size({field}) > 3", "vars.x == 'a' || settings.max_turns < 3"])))
    if kind == "regex":
        return Condition.regex(field, draw(st.sampled_from([r"\d+", "(?:a|b)c", "ü+"])), draw(st.sampled_from(["", "i", "ms"])))
    if kind == "json_schema":
        return Condition.json_schema(field, {"type": "string", "maxLength": draw(st.integers(0, 9))})
    if kind == "length":
        low = draw(st.none() | st.integers(0, 5))
        high = draw(st.none() | st.integers(5, 500) | st.sampled_from(numeric_names))
        if low is None and high is None:
            low = 1
        return Condition.length(field, min=low, max=high)
    return Condition.always()


@st.composite
def _hook(draw, name: str, tool_names: list[str], numeric_names: list[str]) -> Hook:
    event = draw(st.sampled_from(EVENTS))
    action = draw(st.sampled_from(ACTIONS_BY_EVENT[event]))
    retry = action == "retry_with_feedback"
    matcher = "*"
    if event in ("pre_tool", "post_tool") and tool_names:
        chosen = draw(st.lists(st.sampled_from([*tool_names, "load_skill"]), unique=True, max_size=3))
        matcher = "|".join(chosen) or "*"
    rewrite = draw(st.none() | st.just({"pattern": r"\s+", "replacement": " "})) if action == "rewrite" else None
    return Hook(
        name=name, event=event, matcher=matcher, condition=draw(_condition(event, numeric_names)), action=action,
        message=draw(_line if retry else st.one_of(st.just(""), _line, st.just("Max {{ max_turns }}."))),
        max_retries=draw(st.integers(1, 5)) if retry else 0, priority=draw(st.integers(-5, 500)),
        enabled=draw(st.booleans()), rewrite=rewrite,
    )


@st.composite
def _prompt(draw, variables: list[str]) -> tuple[PromptBlock, ...]:
    names = draw(st.lists(_name, unique=True, max_size=5))
    orders = draw(st.lists(st.integers(0, 99), min_size=len(names), max_size=len(names)))
    tiers = sorted(draw(st.lists(st.sampled_from([0, 1, 2]), min_size=len(names), max_size=len(names))))
    blocks = []
    for (order, name), tier_index in zip(sorted(zip(orders, names, strict=True)), tiers, strict=True):
        tier = ("static", "session", "turn")[tier_index]
        available = [*SETTINGS_FIELDS, *variables, "skills_catalogue", "tools_catalogue",
                     *(n for t in ("static", "session", "turn")[: tier_index + 1] for n in RUNTIME_VARIABLES[t])]
        declared = draw(st.lists(st.sampled_from(available), unique=True, max_size=4))
        pieces = draw(st.lists(_line | st.sampled_from([f"{{{{ {n} }}}}" for n in declared] or [""]), max_size=5))
        blocks.append(PromptBlock(order=order, name=name, cache_tier=tier, variables=tuple(declared),
                                  template="\n".join(pieces)))
    return tuple(blocks)


@st.composite
def valid_specs(draw) -> HarnessSpec:
    variables = draw(st.dictionaries(_variable_name, _scalar, max_size=4))
    numeric = ["reply_max_chars", *(n for n, v in variables.items() if type(v) is int and v >= 500)]
    tool_names = draw(st.lists(_tool_name, unique=True, max_size=3))
    tools = tuple(draw(_tool(name)) for name in tool_names)
    skills = tuple(
        Skill(name=name, description=draw(_line), kind=draw(st.sampled_from(["reply", "strategy"])), body=draw(_body),
              allowed_tools=tuple(draw(st.lists(st.sampled_from([*tool_names, "load_skill"]), unique=True, max_size=2))),
              metadata=draw(st.dictionaries(_identifier, _text, max_size=2)))
        for name in draw(st.lists(_name, unique=True, max_size=3))
    )
    hooks = tuple(draw(_hook(name, tool_names, numeric)) for name in draw(st.lists(_name, unique=True, max_size=4)))
    return HarnessSpec(description=draw(_text), settings=draw(_settings()), variables=variables, skills=skills,
                       tools=tools, hooks=hooks, prompt=draw(_prompt(list(variables))))


PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(valid_specs())
def test_generated_specs_round_trip_through_files(spec):
    assert validate(spec) == []
    files = to_files(spec)
    parsed = parse_files(files)
    assert to_files(parsed) == files
    assert parsed == spec
    assert content_hash(files) == content_hash(parsed) == spec.content_hash


@PROPERTY_SETTINGS
@given(st.sampled_from(sorted(BASE_FILES)), st.integers(0, 10**4), st.integers(0, 20), _text, st.data())
def test_any_edit_parses_to_a_canonical_spec_or_raises_spec_invalid(path, at, cut, insert, data):
    files = dict(BASE_FILES)
    text = files[path]
    at %= len(text) + 1
    files[path] = text[:at] + insert + text[at + cut:]
    if data.draw(st.booleans()):
        files[data.draw(_text)] = data.draw(_text)
    try:
        spec = parse_files(files)
    except SpecInvalid as invalid:
        assert invalid.errors and all(error.message for error in invalid.errors)
        return
    assert to_files(parse_files(to_files(spec))) == to_files(spec)


@PROPERTY_SETTINGS
@given(valid_specs())
def test_diff_of_a_spec_with_itself_is_empty(spec):
    diff = diff_specs(spec, spec)
    assert diff.is_empty and diff.by_module() == {} and diff.summary() == "no changes"


@PROPERTY_SETTINGS
@given(valid_specs(), st.data())
def test_diff_lists_exactly_the_changed_modules(spec, data):
    changed_skills = data.draw(st.lists(st.sampled_from(spec.skills), unique_by=lambda s: s.name)) if spec.skills else []
    removed_hooks = data.draw(st.lists(st.sampled_from(spec.hooks), unique_by=lambda h: h.name)) if spec.hooks else []
    new_skill = Skill(name="zz-new-skill", description="New.", kind="reply", body="Rules.")
    edited = {skill.name: dataclasses.replace(skill, body=skill.body + "\nOne more rule.") for skill in changed_skills}
    other = dataclasses.replace(
        spec,
        skills=(*(edited.get(skill.name, skill) for skill in spec.skills), new_skill),
        hooks=tuple(hook for hook in spec.hooks if hook not in removed_hooks),
        settings=dataclasses.replace(spec.settings, max_turns=spec.settings.max_turns % 16 + 1),
    )
    expected = {("settings", "harness", "changed"), ("skills", "zz-new-skill", "added")}
    expected |= {("skills", name, "changed") for name in edited}
    expected |= {("hooks", hook.name, "removed") for hook in removed_hooks}

    forward, backward = diff_specs(spec, other), diff_specs(other, spec)
    assert {(c.module, c.name, c.status) for c in forward.changes} == expected
    swap = {"added": "removed", "removed": "added", "changed": "changed"}
    assert {(c.module, c.name, swap[c.status]) for c in backward.changes} == expected
    assert forward.counts["added"] == backward.counts["removed"] == 1
    assert list(forward.by_module())[0] == "settings"


def test_diff_shows_unified_text_with_file_headers(base_spec):
    block = base_spec.prompt[0]
    moved = dataclasses.replace(base_spec, prompt=(dataclasses.replace(block, order=1), *base_spec.prompt[1:]))
    [change] = diff_specs(base_spec, moved).changes
    assert (change.module, change.name, change.status, change.path) == ("prompt", "persona", "changed",
                                                                          "prompt/01-persona.md")
    assert change.unified.startswith("--- a/prompt/00-persona.md\n+++ b/prompt/01-persona.md\n")

    without = dataclasses.replace(base_spec, tools=base_spec.tools[1:])
    [removed] = [c for c in diff_specs(base_spec, without).changes if c.module == "tools"]
    assert removed.status == "removed" and removed.path == PRODUCT_TOOL_FILE
    assert removed.unified.startswith(f"--- a/{PRODUCT_TOOL_FILE}\n+++ /dev/null\n")
    assert diff_specs(base_spec, without).summary() == "1 removed"


# Rendering ----------------------------------------------------------------------------------------


def test_render_system_prompt_fills_blocks_in_order(base_spec):
    prompt = render_system_prompt(base_spec, {"room_title": "Autumn coats", "ignored": "x"})
    persona, skills, session = prompt.split("\n\n", 2)
    assert persona == "You are Mia. Keep replies under 120 characters."
    assert skills == skills_catalogue(base_spec)
    assert session == "Stream: Autumn coats"


def test_render_system_prompt_marks_missing_runtime_values(base_spec):
    assert render_system_prompt(base_spec).endswith("Stream: ⟨room_title⟩")


def test_skills_catalogue_lists_name_description_and_kind(base_spec):
    catalogue = skills_catalogue(base_spec)
    assert catalogue.startswith("<available_skills>\n  <skill>\n    <name>ground-numbers</name>\n")
    assert "    <kind>strategy</kind>\n" in catalogue and catalogue.endswith("</available_skills>")


def test_openai_tools_strip_x_harness_and_add_load_skill(base_spec):
    tools = openai_tools(base_spec)
    assert [tool["function"]["name"] for tool in tools] == ["get_product_info_by_link_id", "issue_coupon", "load_skill"]
    assert all(set(tool) == {"type", "function"} for tool in tools)
    assert tools[0] == {key: PRODUCT_TOOL[key] for key in ("type", "function")}
    assert tools[2]["function"]["parameters"]["properties"]["name"]["enum"] == ["ground-numbers", "product-qa"]
    tools[0]["function"]["parameters"]["properties"].clear()
    assert base_spec.tool("get_product_info_by_link_id").parameters["properties"]


def test_spec_without_skills_offers_no_load_skill(base_spec):
    spec = dataclasses.replace(base_spec, skills=(), prompt=())
    assert [tool["function"]["name"] for tool in openai_tools(spec)] == ["get_product_info_by_link_id", "issue_coupon"]
