"""The harness side of constrained decoding: the per-harness setting and what the loop hands a backend."""

import asyncio
import dataclasses

import pytest

from harness.model_protocol import ModelResponse, ToolConstraint
from harness.runtime import ToolRegistry, run_turn
from harness.spec import Settings, content_hash, parse_files, to_files, validate
from harness.spec.canonical import HARNESS_FILE
from harness.spec.errors import SpecInvalid
from harness.spec.model import Skill

from .test_runtime import TURN, make_spec, tool


class Recording:
    """A backend that answers a fixed reply and keeps the keyword arguments of every call."""

    name = "recording"

    def __init__(self, constrains: bool):
        if constrains:
            self.constrains_tool_calls = True
        self.calls: list[dict] = []

    async def complete(self, messages, tools, **kwargs):
        self.calls.append(kwargs)
        return ModelResponse(content="Hello!")


def spec_with(**settings):
    return make_spec(tools=[tool("get_info")], skills=[Skill(name="product-qa", description="Products.",
                                                             kind="reply", body="Answer.")],
                     settings=Settings(max_turns=4, reply_max_chars=60, deadline_s=5, **settings))


def test_the_setting_is_on_by_default_and_only_written_when_off():
    spec = spec_with()
    assert spec.settings.constrained_decoding is True
    assert "constrained_decoding" not in to_files(spec)[HARNESS_FILE]  # stored hashes stay what they were
    off = spec_with(constrained_decoding=False)
    files = to_files(off)
    assert "constrained_decoding: false" in files[HARNESS_FILE]
    again = parse_files(files)
    assert again.settings.constrained_decoding is False and again.content_hash == off.content_hash
    assert content_hash(files) != spec.content_hash


def test_a_non_boolean_setting_is_refused_naming_the_field():
    files = to_files(spec_with())
    files[HARNESS_FILE] = files[HARNESS_FILE].replace("settings:\n", "settings:\n  constrained_decoding: 'yes'\n")
    with pytest.raises(SpecInvalid) as raised:
        parse_files(files)
    assert "constrained_decoding" in str(raised.value)
    wrong = dataclasses.replace(spec_with(), settings=Settings(constrained_decoding="yes"))
    assert any(error.location == "settings.constrained_decoding" for error in validate(wrong))


def test_the_loop_hands_a_constraining_backend_the_harness_key():
    spec = spec_with()
    backend = Recording(constrains=True)
    result = asyncio.run(run_turn(spec, TURN, backend, ToolRegistry()))
    assert result.outcome == "replied"
    assert backend.calls[0]["constraint"] == ToolConstraint(key=spec.content_hash)
    model_step = next(s for s in result.trace["steps"] if s["kind"] == "model")
    assert model_step["constrained"] is True


def test_switched_off_per_harness_or_unsupported_by_the_backend_nothing_is_passed():
    off = Recording(constrains=True)
    result = asyncio.run(run_turn(spec_with(constrained_decoding=False), TURN, off, ToolRegistry()))
    assert "constraint" not in off.calls[0]
    assert next(s for s in result.trace["steps"] if s["kind"] == "model")["constrained"] is False
    plain = Recording(constrains=False)  # a backend that cannot constrain never sees the keyword
    asyncio.run(run_turn(spec_with(), TURN, plain, ToolRegistry()))
    assert "constraint" not in plain.calls[0]
