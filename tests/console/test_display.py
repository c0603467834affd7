"""The display filters and tags turn stored values into tables, sentences and JSON — never a Python repr."""

from types import MappingProxyType

from django.template import Context, Template

from console.templatetags.display import as_json, as_text, hook_condition, plain
from harness.spec.model import Condition


def render(source: str, **context) -> str:
    return Template("{% load display %}" + source).render(Context(context))


def test_plain_values_read_as_text():
    assert plain(None) == "—" and plain(True) == "yes" and plain(3) == "3"
    assert plain({"a": 1, "b": [1, 2]}) == "a: 1; b: 1, 2"
    assert plain([]) == "(none)" and plain({}) == "(empty)"


def test_value_table_nests_records_and_escapes():
    html = render("{% value_table v %}", v=[{"name": "<b>x</b>", "specs": {"size": "M"}}, {"name": "y", "price": 3}])
    assert "<th>name</th>" in html and "<th>specs</th>" in html and "<th>price</th>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "<th>size</th><td>M</td>" in html
    assert "{'" not in html and "[{" not in html
    assert "(nothing)" in render('{% value_table v "(nothing)" %}', v={})


def test_change_table_marks_changed_fields():
    html = render("{% change_table b a %}", b={"version": 1, "reason": "go"}, a={"version": 2, "reason": "go"})
    rows = html.split("<tr")
    changed = next(r for r in rows if "<th>version</th>" in r)
    same = next(r for r in rows if "<th>reason</th>" in r)
    assert 'class="changed"' in changed and 'class="changed"' not in same
    assert render("{% change_table b a %}", b=None, a=None).strip() == ""
    created = render("{% change_table b a %}", b=None, a={"scopes": ["read", "write"]})
    assert "read, write" in created and "['read'" not in created


def test_hook_conditions_read_as_written():
    assert hook_condition(Condition.cel("size(x) == 0")) == "size(x) == 0"
    assert hook_condition(Condition.regex("reply", r"\d+%", "i")) == r"reply matches /\d+%/i"
    assert hook_condition(Condition.length("reply", max="reply_max_chars")) == "reply is longer than reply_max_chars"
    assert hook_condition(Condition.length("reply", min=1, max=5)) == "reply is shorter than 1 or longer than 5"
    assert hook_condition(Condition.json_schema("args", {"type": "object"})) == \
        "args does not validate against the JSON schema"
    assert hook_condition(Condition.always()) == "always"


def test_json_for_raw_views():
    assert as_json(MappingProxyType({"a": (1, 2)})) == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert as_text("plain text") == "plain text" and as_text({"ok": True}).startswith("{\n")
