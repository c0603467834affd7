"""The line an error points at, counted from the top of its file (what the editor marks), and validation
that knows which tool bindings exist here."""

import json

import pytest

from harness.skeletons import skeleton
from harness.spec import SpecInvalid, parse_files, read_dir
from harness.spec.locate import error_line
from tests.conftest import DEMO_HARNESS

SKILL = "skills/product-qa/SKILL.md"
TOOL = "tools/get_promotion.json"


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return read_dir(DEMO_HARNESS)


def errors_of(files: dict[str, str], **bindings):
    with pytest.raises(SpecInvalid) as raised:
        parse_files(files, **bindings)
    return raised.value.errors


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the first line of `text` that contains `needle`."""
    return next(number for number, line in enumerate(text.split("\n"), 1) if needle in line)


def located(files: dict[str, str], path: str, text: str) -> list[tuple[int, str]]:
    changed = {**files, path: text}
    return [(error_line(text, error), error.message) for error in errors_of(changed) if error.file == path]


def test_yaml_syntax_error_in_skill_front_matter_is_counted_from_the_top_of_the_file(files):
    text = files[SKILL].replace("description:", "description: [unclosed\nbroken:", 1)
    [(line, message)] = located(files, SKILL, text)
    # The message and the marker agree, and both count the opening '---' as line 1.
    assert f"at line {line}," in message
    assert line in (line_of(text, "broken:"), line_of(text, "broken:") + 1)
    assert line > 2


def test_duplicate_key_in_front_matter_points_at_the_second_key(files):
    text = files[SKILL].replace("\nkind:", "\nname: product-qa\nkind:", 1)
    [(line, message)] = located(files, SKILL, text)
    assert "duplicate key" in message
    assert line == [n for n, row in enumerate(text.split("\n"), 1) if row.startswith("name:")][1]


def test_front_matter_field_error_points_at_the_field(files):
    text = files[SKILL].replace("kind: reply", "kind: chatter", 1)
    assert located(files, SKILL, text) == [(line_of(text, "kind: chatter"), "must be one of reply, strategy, not “chatter”")]


def test_body_template_error_points_at_the_line_with_the_tag(files):
    # Prompt blocks are templates (skill bodies are plain text): an undeclared variable is named on its line.
    block = "prompt/00-persona.md"
    text = files[block].rstrip("\n") + "\n\nQuote {{ not_a_variable }} exactly.\n"
    [(line, message)] = located(files, block, text)
    assert line == line_of(text, "not_a_variable") and "not declared" in message


def test_nested_json_field_points_at_its_key(files):
    tool = json.loads(files[TOOL])
    tool["function"]["parameters"]["properties"]["link_id"]["type"] = "strnig"
    text = json.dumps(tool, indent=2)
    lines = [line for line, _ in located(files, TOOL, text)]
    assert lines and set(lines) == {line_of(text, '"strnig"')}


def test_unknown_and_missing_fields_point_at_the_key_or_its_parent(files):
    tool = json.loads(files[TOOL])
    del tool["function"]["description"]
    tool["x_harness"]["retires"] = 1
    text = json.dumps(tool, indent=2)
    found = dict((message, line) for line, message in located(files, TOOL, text))
    assert found["is required"] == line_of(text, '"function"')
    assert found["unknown field; did you mean “retries”?"] == line_of(text, '"retires"')


def test_json_syntax_error_uses_the_parser_line(files):
    text = files[TOOL].replace('"strict": false', '"strict": false,,', 1)
    [(line, message)] = located(files, TOOL, text)
    assert line == line_of(text, ",,") and f"at line {line}" in message


def test_hook_and_settings_fields(files):
    hook = next(p for p in files if p.startswith("hooks/") and "regex:" in files[p])
    text = files[hook].replace("pattern:", "pattern: '('\n    ignored:", 1)
    found = located(files, hook, text)
    assert [line for line, m in found if m.startswith("unknown field")] == [line_of(text, "ignored:")]
    assert [line for line, m in found if m.startswith("invalid regular expression")] == [line_of(text, "pattern: '('")]
    settings = files["harness.yaml"].replace("max_turns: 4", "max_turns: 40")
    assert located(files, "harness.yaml", settings) == [(line_of(settings, "max_turns"),
                                                         "must be a whole number from 1 to 16, not 40")]


def test_builtin_bindings_are_checked_against_the_available_ones(files):
    bindings = {"builtin": {"demo.get_promotion"}, "sandbox": set()}
    others = {p: t for p, t in files.items() if not p.startswith("tools/") or p == TOOL}
    others = {p: t for p, t in others.items() if p.startswith(("harness.yaml", "tools/", "prompt/"))}
    parse_files(others, bindings=bindings)  # the demo tool binds to an available builtin
    text = skeleton("tool", "gift_wrap", binding="demo.gift_wrap")
    path = "tools/gift_wrap.json"
    parse_files({**others, path: text})  # form only: valid without knowing the bindings
    [error] = errors_of({**others, path: text}, bindings=bindings)
    assert error.path == f"{path}: x_harness.binding.target"
    assert error.message == "no builtin binding named “demo.gift_wrap” is available here: one of demo.get_promotion"
    assert error_line(text, error) == line_of(text, '"target"')
    parse_files({**others, path: skeleton("tool", "gift_wrap", binding="demo.get_promotion")}, bindings=bindings)


def test_a_tool_skeleton_needs_a_binding():
    with pytest.raises(ValueError, match="Choose the builtin"):
        skeleton("tool", "gift_wrap")
