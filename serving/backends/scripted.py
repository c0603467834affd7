"""A deterministic backend for tests: it replays a list of steps, one per `complete()` call.

A step is a `ModelResponse`, a `str` (plain content), or a callable `(messages, tools)` returning
either; a callable may raise `BackendError` to script a model failure. Every call is recorded in
`calls` (a deep copy of what the runtime sent), so tests can assert on the prompt the model saw.
"""

import asyncio
import copy
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.model_protocol import BackendError, ModelResponse, ToolCall
from serving.backends.registry import register_backend

Step = ModelResponse | str | Callable[[list[dict[str, Any]], list[dict[str, Any]]], ModelResponse | str]


@dataclass(frozen=True)
class ScriptedCall:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    temperature: float
    tool_choice: str


@register_backend("scripted")
class ScriptedBackend:
    name = "scripted"

    def __init__(self, steps: Sequence[Step], *, delay_s: float = 0.0, cycle: bool = False, record: bool = True):
        self.steps = list(steps)
        self.delay_s = delay_s
        self.cycle = cycle  # replay the steps forever, recording nothing (stand-in servers, benchmarks)
        self.record = record and not cycle  # keep a copy of every call's messages in `calls` (for tests to read)
        self.calls: list[ScriptedCall] = []
        self.served = 0

    @property
    def remaining(self) -> int:
        return len(self.steps) if self.cycle else len(self.steps) - self.served

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        tool_choice: str = "auto",
    ) -> ModelResponse:
        started = time.perf_counter()
        index = self.served
        self.served += 1
        if self.cycle and self.steps:
            index %= len(self.steps)
        elif self.record:
            # The step is consumed when the call starts, even if a deadline cancels the delay below.
            self.calls.append(ScriptedCall(copy.deepcopy(messages), copy.deepcopy(tools), max_tokens,
                                           temperature, tool_choice))
        if index >= len(self.steps):
            raise BackendError(f"scripted backend exhausted: call {index + 1}, {len(self.steps)} steps")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        step = self.steps[index]
        if callable(step):
            step = step(messages, tools)
        if isinstance(step, str):
            step = ModelResponse(content=step, tokens_out=len(step.split()))
        if not isinstance(step, ModelResponse):
            raise BackendError(f"scripted step {index + 1} is a {type(step).__name__}, not a ModelResponse")
        if not step.tokens_in:  # the scripted model counts words as tokens, its prompt's as its replies'
            step = dataclasses.replace(step, tokens_in=sum(len(str(m.get("content") or "").split())
                                                           for m in messages))
        if step.tool_calls and step.finish_reason == "stop":
            step = dataclasses.replace(step, finish_reason="tool_calls")
        if not step.latency_ms:
            elapsed_ms = (time.perf_counter() - started) * 1000
            step = dataclasses.replace(step, latency_ms=elapsed_ms,
                                       ttft_ms=step.ttft_ms if step.ttft_ms is not None else elapsed_ms)
        return step


def step_from_json(value: Any, index: int = 0) -> Step:
    """One step of a JSON script: a string, `{"content", "reasoning", "tool_calls": [{"name",
    "arguments"}]}` (arguments an object or raw text), or `{"error": "message"}` (a BackendError)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"script step {index + 1}: expected a string or an object")
    if "error" in value:
        message = str(value["error"])

        def fail(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelResponse:
            raise BackendError(message)

        return fail
    calls = []
    for n, call in enumerate(value.get("tool_calls", ())):
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCall(id=call.get("id", f"call_{index}_{n}"), name=call["name"], arguments=arguments))
    content = value.get("content") or ""
    return ModelResponse(content=content, reasoning=value.get("reasoning") or "", tool_calls=tuple(calls),
                         tokens_in=int(value.get("tokens_in", 0)),
                         tokens_out=int(value.get("tokens_out", len(content.split()))),
                         tokens_cached=int(value.get("tokens_cached", 0)),
                         finish_reason=value.get("finish_reason", "tool_calls" if calls else "stop"))


def steps_from_json(values: list[Any]) -> list[Step]:
    return [step_from_json(value, index) for index, value in enumerate(values)]
