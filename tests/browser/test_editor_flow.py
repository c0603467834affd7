"""An operator logs in, edits a skill, sees a validation error, fixes it, commits, diffs and promotes."""

import re

import pytest
from playwright.sync_api import expect

from harness.models import HarnessVersion, Label
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_edit_commit_diff_promote(live_server, page, members, harness):
    base = live_server.url
    page.goto(f"{base}/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Harnesses")

    page.click("text=avatar")
    page.click("text=Edit")
    skill_path = next(p for p in sorted(harness.head.files) if p.endswith("SKILL.md"))
    skill_name = skill_path.split("/")[1]
    page.click(f"a[href='?path={skill_path}']")
    expect(page.locator(".code-editor[data-ready='1']")).to_be_visible()
    original = page.locator("textarea[name=text]").input_value()  # the form field behind the code editor
    editor = page.locator(".cm-content")

    # A name that breaks the Agent Skills rules: htmx validates while typing, nothing is saved.
    editor.fill(original.replace(f"name: {skill_name}", "name: Bad--Name", 1))
    expect(page.locator("#errors")).to_contain_text(skill_path)
    page.click("#save")
    expect(page.locator("#errors")).to_be_visible()
    expect(page.locator(".code-editor")).to_have_attribute("data-marked-lines", "2")  # `name:` under the '---'

    # Fix it: a valid change this time.
    editor.fill(original.rstrip("\n") + "\n- Always greet returning viewers by name.\n")
    expect(page.locator("#valid")).to_be_visible()
    page.click("#save")
    expect(page.locator(".messages")).to_contain_text("Saved")

    page.fill("input[name=message]", "Greet returning viewers")
    page.click("#commit")
    expect(page.locator(".messages")).to_contain_text("Committed avatar@v2")
    assert HarnessVersion.objects.filter(harness=harness).count() == 2

    page.click("a:has-text('changes')")
    expect(page.locator(".diff .add")).to_contain_text("Always greet returning viewers")
    expect(page.locator("#diff-summary")).to_contain_text("1 module(s) changed")

    page.goto(f"{base}/w/acme/harnesses/avatar/")
    page.fill("#promote input[name=label]", "staging")
    page.select_option("#promote select[name=version]", "2")
    page.fill("#promote input[name=reason]", "Ready for the evening stream")
    page.click("#promote button[type=submit]")
    expect(page.locator(".label[data-label=staging]")).to_contain_text("v2")
    assert Label.objects.get(harness=harness, name="staging").version.number == 2
