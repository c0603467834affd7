"""The draft editor's server side: markers on the validator's line (counted from the top of the file), the
code editor's configuration, and tool bindings checked against the builtins this installation has."""

import json
import re

import pytest

from harness.models import Draft

pytestmark = pytest.mark.django_db

SKILL = "skills/product-qa/SKILL.md"
EDIT = "/w/acme/harnesses/avatar/edit/"


def markers(response) -> list[dict]:
    match = re.search(rb'<script id="editor-markers" type="application/json">(.*?)</script>', response.content, re.S)
    return json.loads(match.group(1))


def test_check_marks_the_line_of_each_error_in_the_open_file(client, members, harness):
    client.force_login(members["operator"])
    text = harness.head.files[SKILL].replace("kind: reply", "kind: chatter", 1)
    response = client.post(EDIT + "check/", {"path": SKILL, "text": text}, HTTP_HX_REQUEST="true")
    line = text.split("\n").index("kind: chatter") + 1
    assert markers(response) == [{"line": line, "message": "kind: must be one of reply, strategy, not “chatter”"}]
    assert f'data-line="{line}"'.encode() in response.content and f"line {line}".encode() in response.content

    valid = client.post(EDIT + "check/", {"path": SKILL, "text": harness.head.files[SKILL]}, HTTP_HX_REQUEST="true")
    assert markers(valid) == [] and b'id="valid"' in valid.content


def test_errors_in_other_files_are_listed_without_a_marker(client, members, harness):
    client.force_login(members["operator"])
    broken = harness.head.files["harness.yaml"].replace("max_turns: 4", "max_turns: 40")
    assert client.post(EDIT, {"path": "harness.yaml", "text": broken}).status_code == 422  # not saved
    # A prompt block that names a variable harness.yaml no longer declares is an error in that block.
    response = client.post(EDIT + "check/", {"path": "harness.yaml",
                                             "text": broken.replace("  store_name: Maple & Co. Live\n", "")},
                           HTTP_HX_REQUEST="true")
    listed = re.findall(rb'<li class="mono"( data-line="\d+")?', response.content)
    line = broken.split("\n").index("  max_turns: 40") + 1
    assert markers(response) == [{"line": line, "message": "settings.max_turns: must be a whole number from 1 to 16, not 40"}]
    assert len(listed) > 1 and sum(1 for attribute in listed if attribute) == 1


def test_editor_page_configures_the_code_editor(client, members, harness):
    client.force_login(members["operator"])
    page = client.get(EDIT + f"?path={SKILL}").content.decode()
    assert 'data-code-editor data-language="markdown"' in page and "/static/build/editor.js" in page
    assert 'data-language="json"' in client.get(EDIT + "?path=tools/get_promotion.json").content.decode()
    assert 'data-language="yaml"' in client.get(EDIT + "?path=harness.yaml").content.decode()
    # The saved text travels beside the editor, so the page knows what is unsaved.
    assert '<script id="editor-saved" type="application/json">' in page


def test_a_new_tool_binds_to_a_builtin_that_exists(client, members, harness):
    client.force_login(members["operator"])
    page = client.get(EDIT).content.decode()
    assert "<option>demo.search_products</option>" in page
    response = client.post(EDIT + "add/", {"kind": "tool", "module": "gift_wrap", "binding": "demo.search_products"})
    assert response.status_code == 302
    draft = Draft.objects.get(harness=harness)
    tool = json.loads(draft.files["tools/gift_wrap.json"])
    assert tool["x_harness"]["binding"] == {"kind": "builtin", "target": "demo.search_products"}

    # A builtin that does not exist here is an error, never "✓ valid".
    response = client.post(EDIT + "add/", {"kind": "tool", "module": "gift_card", "binding": "demo.gift_card"},
                           follow=True)
    assert "tools/gift_card.json" not in Draft.objects.get(harness=harness).files
    assert "no builtin binding named “demo.gift_card” is available here" in response.content.decode()
    text = json.dumps({**tool, "function": {**tool["function"], "name": "gift_wrap"},
                       "x_harness": {**tool["x_harness"], "binding": {"kind": "builtin", "target": "demo.nope"}}},
                      indent=2)
    check = client.post(EDIT + "check/", {"path": "tools/gift_wrap.json", "text": text}, HTTP_HX_REQUEST="true")
    assert b'id="valid"' not in check.content
    assert markers(check) == [{"line": text.split("\n").index('      "target": "demo.nope"') + 1,
                               "message": "x_harness.binding.target: no builtin binding named “demo.nope” is available "
                                          "here: one of " + ", ".join(sorted(_builtins()))}]
    response = client.post(EDIT + "add/", {"kind": "tool", "module": "gift_box"}, follow=True)
    assert "Choose the builtin the new tool binds to." in response.content.decode()


def _builtins():
    from harness.runtime.tools import builtin_names

    return builtin_names()
