"""The file editor in Chromium: CodeMirror marks a validation error on the line the validator names, and
unsaved changes are never dropped silently (switching files, other forms, leaving the page)."""

import json

import pytest
from playwright.sync_api import expect

from harness.models import Draft
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SKILL = "skills/product-qa/SKILL.md"
TOOL = "tools/get_promotion.json"


def line_of(text: str, needle: str, occurrence: int = 0) -> int:
    return [n for n, line in enumerate(text.split("\n"), 1) if needle in line][occurrence]


def open_editor(page, base: str, path: str) -> str:
    """Open the draft editor on `path`; the text it shows."""
    page.goto(f"{base}/w/acme/harnesses/avatar/edit/?path={path}")
    expect(page.locator(".code-editor[data-ready='1']")).to_be_visible()
    return page.locator("textarea[name=text]").input_value()


def replace_text(page, text: str) -> None:
    page.locator(".cm-content").fill(text)


def expect_marker_on(page, line: int) -> None:
    expect(page.locator(".code-editor")).to_have_attribute("data-marked-lines", str(line))
    # What CodeMirror drew: the error range on that line of the document, a marker in the lint gutter.
    expect(page.locator(".cm-line").nth(line - 1).locator(".cm-lintRange-error")).to_have_count(1)
    expect(page.locator(".cm-gutter-lint .cm-lint-marker-error")).to_have_count(1)
    expect(page.locator(f"#errors li[data-line='{line}']")).to_have_count(1)


@pytest.fixture
def editor_page(live_server, page, members, harness):
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    yield page, live_server.url
    assert errors == []


def test_error_marker_sits_on_the_line_the_validator_names(editor_page):
    page, base = editor_page
    original = open_editor(page, base, SKILL)
    expect(page.locator(".cm-lineNumbers")).to_contain_text("1")  # line numbers
    expect(page.locator(".code-editor[data-marked-lines='']")).to_have_count(1)

    # A duplicate key inside the YAML front matter: counted from the top of the file ('---' is line 1).
    broken = original.replace("\nkind: reply", "\nname: product-qa\nkind: reply", 1)
    replace_text(page, broken)
    expect(page.locator("#errors")).to_contain_text("duplicate key")
    expect_marker_on(page, line_of(broken, "name: product-qa", 1))

    # A field error in the front matter.
    broken = original.replace("kind: reply", "kind: chatter", 1)
    replace_text(page, broken)
    expect(page.locator("#errors")).to_contain_text("chatter")
    expect_marker_on(page, line_of(broken, "kind: chatter"))

    # Fixed: no marker, "valid".
    replace_text(page, original)
    expect(page.locator("#valid")).to_be_visible()
    expect(page.locator(".code-editor")).to_have_attribute("data-marked-lines", "")
    expect(page.locator(".cm-lintRange-error")).to_have_count(0)

    # JSON: a nested unknown field, and syntax highlighting of the JSON keys.
    original = open_editor(page, base, TOOL)
    expect(page.locator(".cm-line span[class]").first).to_be_visible()  # highlighted tokens
    tool = json.loads(original)
    tool["x_harness"]["retires"] = tool["x_harness"].pop("retries")
    broken = json.dumps(tool, indent=2) + "\n"
    replace_text(page, broken)
    expect(page.locator("#errors")).to_contain_text("retires")
    expect_marker_on(page, line_of(broken, '"retires"'))

    # Clicking the error puts the cursor on its line.
    page.locator("#errors li[data-line]").click()
    expect(page.locator(".cm-activeLine")).to_contain_text('"retires"')


def test_unsaved_changes_are_never_lost_silently(editor_page, harness):
    page, base = editor_page
    original = open_editor(page, base, SKILL)
    expect(page.locator("#unsaved")).to_have_text("")
    edited = original.rstrip("\n") + "\n- Mention the size guide for apparel.\n"
    replace_text(page, edited)
    expect(page.locator("#unsaved")).to_contain_text("unsaved changes")
    expect(page.locator("#valid")).to_be_visible()

    # Switching to another file asks first; declining keeps the page and the text.
    dialogs = []

    def decline(dialog):
        dialogs.append((dialog.type, dialog.message))
        dialog.dismiss()

    page.on("dialog", decline)
    page.click("a[href='?path=harness.yaml']")
    expect(page.locator("#unsaved")).to_contain_text("unsaved changes")
    assert dialogs == [("confirm", f"{SKILL} has unsaved changes. Leave without saving them?")]
    assert SKILL in page.url
    assert page.locator("textarea[name=text]").input_value() == edited

    # Another form on the page (commit the saved draft) asks too.
    page.fill("input[name=message]", "no")
    page.click("#commit")
    assert len(dialogs) == 2 and SKILL in page.url

    # Leaving the page any other way: the browser's own prompt.
    assert page.evaluate("""() => {
        const event = new Event("beforeunload", {cancelable: true});
        window.dispatchEvent(event);
        return event.defaultPrevented;
    }""") is True
    page.remove_listener("dialog", decline)

    # Saving is not leaving: no prompt, the text is in the draft, and then switching files is free.
    page.on("dialog", lambda dialog: dialogs.append((dialog.type, dialog.message)) or dialog.dismiss())
    page.click("#save")
    expect(page.locator(".messages")).to_contain_text("Saved")
    assert Draft.objects.get(harness=harness).files[SKILL] == edited
    expect(page.locator("#unsaved")).to_have_text("")
    page.click("a[href='?path=harness.yaml']")
    expect(page).to_have_url(f"{base}/w/acme/harnesses/avatar/edit/?path=harness.yaml")
    assert len(dialogs) == 2


def test_leaving_with_unsaved_changes_shows_the_browsers_prompt(editor_page):
    page, base = editor_page
    original = open_editor(page, base, SKILL)
    page.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type("- One more rule.")
    assert page.locator("textarea[name=text]").input_value() == original + "- One more rule."
    shown = []
    page.on("dialog", lambda dialog: (shown.append(dialog.type), dialog.dismiss()))
    page.close(run_before_unload=True)
    page.wait_for_timeout(500)
    assert shown == ["beforeunload"]
    assert not page.is_closed()  # dismissed: the operator stays with their text
