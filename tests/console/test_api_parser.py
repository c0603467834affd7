"""The API's body parser: NUL characters (which PostgreSQL text cannot hold) arrive as U+FFFD, and a body that
cannot carry one is not walked value by value."""

import json

import pytest
from django.test import RequestFactory

from console import api


def parse(body: bytes):
    request = RequestFactory().post("/api/v1/events", data=body, content_type="application/json")
    return api.ApiParser().parse_body(request)


def test_nul_anywhere_in_the_payload_arrives_as_replacement_character():
    body = json.dumps({"k\x00": ["a\x00b", {"deep": "\x00"}], "n": 1, "t": True, "z": None}).encode()
    assert b"\\u0000" in body
    assert parse(body) == {"k\ufffd": ["a\ufffdb", {"deep": "\ufffd"}], "n": 1, "t": True, "z": None}


def test_a_utf16_body_is_cleaned_too():
    body = json.dumps({"message": "nul \x00 inside"}, ensure_ascii=False).encode("utf-16")
    assert parse(body) == {"message": "nul \ufffd inside"}


def test_a_body_without_nul_is_not_walked(monkeypatch):
    def walked(value):
        raise AssertionError("a body that cannot carry NUL was walked")

    monkeypatch.setattr(api, "without_nul", walked)
    payload = {"events": [{"event_id": f"e{i}", "viewer_id": "v\\u0001", "ts": "2026-01-01T00:00:00Z"}
                          for i in range(100)]}
    assert parse(json.dumps(payload).encode()) == payload
    # An escaped backslash before "u0000" is no NUL, but the cheap check cannot tell: it walks, and keeps the text.
    monkeypatch.undo()
    assert parse(json.dumps({"text": "\\u0000"}).encode()) == {"text": "\\u0000"}


def test_invalid_json_is_still_refused():
    with pytest.raises(ValueError):
        parse(b'{"message": "raw \x00 byte"}')
