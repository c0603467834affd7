"""The agent loop: input hooks → model ↔ tools (with tool hooks) → reply hooks → reply + trace.

`run_turn` never raises and never outlives the spec's deadline: whatever
happens (backend down, tool hanging, a hook rule that cannot evaluate) the
caller gets a `TurnResult` whose trace says what happened.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from functools import lru_cache
from typing import Any

from harness.model_protocol import BackendError, ModelBackend, ModelResponse, ToolCall, ToolConstraint
from harness.runtime.hooks import HookOutcome, SchemaCheck, engine_for
from harness.runtime.messages import assemble_messages, strip_reasoning, ungrounded_numbers
from harness.runtime.tools import ToolContext, ToolOutcome, ToolRegistry
from harness.runtime.trace import TraceRecorder
from harness.runtime.turn import TurnInput, TurnResult
from harness.spec import HarnessSpec
from harness.spec.prompt import shared_openai_tools

# A spoken reply is at most reply_max_chars (~3 characters a token, generously) plus room for a
# few tool calls' JSON; thinking is off by default (see docs/runtime.md). Capped for latency.
MAX_OUTPUT_TOKENS = 256
TOOL_CALL_TOKENS = 64


class _EndTurn(Exception):
    """Raised inside the loop to finish the turn with a given outcome."""

    def __init__(self, outcome: str, reply: str = "", silent: bool = False, reason: str = ""):
        super().__init__(reason)
        self.outcome, self.reply, self.silent, self.reason = outcome, reply, silent, reason


class _Turn:
    def __init__(self, spec: HarnessSpec, turn: TurnInput, backend: ModelBackend, tools: ToolRegistry,
                 trace: TraceRecorder, now: datetime | None):
        self.spec, self.turn, self.backend, self.tools, self.trace, self.now = spec, turn, backend, tools, trace, now
        self.settings = spec.settings
        self.hooks = engine_for(spec)
        self.ctx = ToolContext(room=turn.room, viewer_id=turn.viewer_id)
        self.loaded: list[str] = []
        self.retries: Counter[str] = Counter()
        self.feedback_rounds = 0

    # -- helpers --------------------------------------------------------------------------------

    def _record_hooks(self, event: str, outcome: HookOutcome, **where: Any) -> None:
        for decision in outcome.decisions:
            if decision.fired or decision.error:
                self.trace.step("hook", event=event, hook=decision.hook, fired=decision.fired,
                                action=decision.action, message=decision.message, error=decision.error,
                                failed_closed=decision.failed_closed, **where)
                if decision.fired:
                    self.trace.hooks_fired.append(decision.hook)
                if decision.error:
                    self.trace.hook_errors.append({"hook": decision.hook, "event": event, "error": decision.error,
                                                   "failed_closed": decision.failed_closed})

    def _fallback(self, reason: str, message: str = "") -> _EndTurn:
        reply = message or self.settings.fallback_reply
        return _EndTurn("fallback", reply=reply, silent=not reply, reason=reason)

    def _may_retry(self, hook: str) -> bool:
        return self.retries[hook] < self.hooks.max_retries.get(hook, 0) and \
            self.feedback_rounds < self.settings.max_hook_retries

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> tuple[str, str, bool, str]:
        try:
            await self._run()
        except _EndTurn as end:
            return end.outcome, end.reply, end.silent, end.reason
        raise AssertionError("the loop always ends with _EndTurn")

    async def _run(self) -> None:
        turn = self.turn
        outcome = self.hooks.run("input", {"message": turn.message, "viewer_id": turn.viewer_id,
                                           "room_id": turn.room.room_id})
        self._record_hooks("input", outcome)
        if outcome.action == "block":
            raise _EndTurn("silent", silent=True, reason=outcome.describe("input"))
        if outcome.action == "fallback":
            raise self._fallback(outcome.describe("input"), outcome.message)

        messages = assemble_messages(self.spec, turn, self.now)
        tools = shared_openai_tools(self.spec)  # read-only, shared by every turn of this spec version
        # What the first model call is sent, exactly (later calls append tool results and feedback, which
        # the steps record), so a trace shows the prompt and tool schemas rather than a reconstruction.
        self.trace.data["request"] = {"messages": [dict(m) for m in messages], "tools": tools}
        calls_this_attempt = 0
        while True:
            # The last call of an attempt may not call tools: the model must answer now.
            last_call = calls_this_attempt >= self.settings.max_turns - 1
            response = await self._call_model(messages, tools, tool_choice="none" if last_call and tools else "auto")
            calls_this_attempt += 1
            if response.tool_calls:
                if last_call:
                    raise self._fallback(f"still calling tools after {self.settings.max_turns} model calls")
                messages.append(_assistant_message(response))
                if sum(call.name != "load_skill" for call in response.tool_calls) <= 1:
                    # A skill loads from the spec without waiting: with at most one call that may wait,
                    # nothing would run beside it, so no tasks (a gather of two costs ~16 µs, 7 % of a turn).
                    results = [await self._run_tool(call) for call in response.tool_calls]
                else:
                    results = await asyncio.gather(*(self._run_tool(call) for call in response.tool_calls))
                for call, content in zip(response.tool_calls, results, strict=True):
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
                continue

            reply = strip_reasoning(response.content)
            outcome = self.hooks.run("reply", self._reply_context(reply, messages), value_key="reply")
            self._record_hooks("reply", outcome)
            if outcome.action == "allow":
                final = str(outcome.value or "").strip()
                if not final:
                    raise self._fallback("the model returned an empty reply")
                raise _EndTurn("replied", reply=final)
            if outcome.action == "block":
                raise _EndTurn("silent", silent=True, reason=f"reply hook {outcome.hook}")
            if outcome.action == "retry_with_feedback" and self._may_retry(outcome.hook):
                self.retries[outcome.hook] += 1
                self.feedback_rounds += 1
                self.trace.step("retry", hook=outcome.hook, feedback=outcome.message, rejected_reply=reply)
                messages.append({"role": "assistant", "content": reply})
                messages.append({"role": "user", "content": f"[harness feedback] {outcome.message}"})
                calls_this_attempt = 0
                continue
            if outcome.action == "retry_with_feedback":
                raise self._fallback(f"reply hook {outcome.hook}: retries exhausted")
            raise self._fallback(f"reply hook {outcome.hook}", outcome.message)

    def _reply_context(self, reply: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        reply_skills = {s.name for s in self.spec.skills if s.kind == "reply"}
        return {
            "reply": reply,
            "loaded_skills": list(self.loaded),
            "loaded_reply_skills": [name for name in self.loaded if name in reply_skills],
            "tools_called": list(self.trace.tools_called),
            "ungrounded_numbers": ungrounded_numbers(reply, messages, self.turn.room.facts),
            "retries": self.feedback_rounds,
        }

    async def _call_model(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, tool_choice: str
                          ) -> ModelResponse:
        constraint = _constraint(self.spec) if tools and getattr(self.backend, "constrains_tool_calls", False) else None
        step = self.trace.step("model", backend=getattr(self.backend, "name", "?"), tool_choice=tool_choice,
                               constrained=constraint is not None and tool_choice != "none")
        try:
            max_tokens = min(MAX_OUTPUT_TOKENS, TOOL_CALL_TOKENS + self.settings.reply_max_chars // 3)
            extra = {"constraint": constraint} if constraint is not None else {}
            response = await self.backend.complete(list(messages), tools, max_tokens=max_tokens,
                                                   tool_choice=tool_choice, **extra)
        except BackendError as exc:
            step.update(error=str(exc))
            raise _EndTurn("error", reply=self.settings.fallback_reply, silent=not self.settings.fallback_reply,
                           reason=f"model backend: {exc}") from None
        step.update(
            latency_ms=round(response.latency_ms, 3), ttft_ms=response.ttft_ms, tokens_in=response.tokens_in,
            tokens_cached=response.tokens_cached, tokens_out=response.tokens_out, content=response.content, reasoning=response.reasoning,
            finish_reason=response.finish_reason, model=response.raw.get("model") or step["backend"],
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls],
        )
        return response

    async def _run_tool(self, call: ToolCall) -> str:
        """Run one tool call through its hooks; returns the tool message content for the model."""
        step = self.trace.step("tool", call_id=call.id, name=call.name, arguments=call.arguments)
        self.trace.tools_called.append(call.name)
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return _tool_error(step, f"arguments are not valid JSON: {exc}")

        if call.name == "load_skill":
            return self._load_skill(step, args)
        try:
            tool = self.spec.tool(call.name)
        except KeyError:
            return _tool_error(step, f"unknown tool {call.name!r}; call one of the listed tools")
        problem = _argument_check(self.spec, tool.name).first_error(args)
        if problem is not None:
            where, message = problem
            return _tool_error(step, f"invalid arguments: {where or 'arguments'}: {message}")

        pre = self.hooks.run("pre_tool", {"tool": call.name, "args": args}, tool=call.name)
        self._record_hooks("pre_tool", pre, call_id=call.id)
        if pre.action == "deny":
            return _tool_error(step, pre.message or "this call is not allowed", denied_by=pre.hook,
                               **({"hook_error": True} if pre.failed_closed else {}))
        if pre.action == "fallback":
            raise self._fallback(pre.describe("pre_tool"), pre.message)

        # One key per call of this turn: a retried attempt of the same call reuses it.
        outcome: ToolOutcome = await self.tools.execute(
            tool, args, self.ctx, idempotency_key=f"{self.trace.data['trace_id']}:{call.id}")
        step.update(result=outcome.result, error=outcome.error, attempts=outcome.attempts,
                    latency_ms=outcome.latency_ms)
        if outcome.idempotency_key:
            step.update(idempotency_key=outcome.idempotency_key)
        post = self.hooks.run("post_tool", {"tool": call.name, "args": args, "result": outcome.result,
                                            "error": outcome.error}, tool=call.name)
        self._record_hooks("post_tool", post, call_id=call.id)
        if post.action == "deny":
            return json.dumps({"error": post.message or "this result was withheld"}, ensure_ascii=False)
        if post.action == "fallback":
            raise self._fallback(f"post_tool hook {post.hook}", post.message)
        if post.action == "retry_with_feedback" and self._may_retry(post.hook):
            self.retries[post.hook] += 1
            self.feedback_rounds += 1
            payload = json.loads(outcome.for_model())
            payload = payload if isinstance(payload, dict) else {"result": payload}
            return json.dumps({**payload, "feedback": post.message}, ensure_ascii=False)
        return outcome.for_model()

    def _load_skill(self, step: dict[str, Any], args: dict[str, Any]) -> str:
        name = str(args.get("name", ""))
        try:
            skill = self.spec.skill(name)
        except KeyError:
            return _tool_error(step, f"no skill named {name!r}; choose one from <available_skills>")
        self.loaded.append(name)
        self.trace.skills_loaded.append(name)
        step.update(result={"skill": name, "kind": skill.kind})
        return skill.body


@lru_cache(maxsize=1024)
def _constraint(spec: HarnessSpec) -> ToolConstraint | None:
    """The spec's decoding constraint (None when its settings switch it off), one object per spec version."""
    return ToolConstraint(key=spec.content_hash) if spec.settings.constrained_decoding else None


@lru_cache(maxsize=1024)
def _argument_check(spec: HarnessSpec, tool: str) -> SchemaCheck:
    """A tool's argument validator, built once per spec version (specs hash by content)."""
    return SchemaCheck(spec.tool(tool).parameters)


def _tool_error(step: dict[str, Any], message: str, **extra: Any) -> str:
    step.update(error=message, **extra)
    return json.dumps({"error": message}, ensure_ascii=False)


def _assistant_message(response: ModelResponse) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": strip_reasoning(response.content) or None,
        "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                       for c in response.tool_calls],
    }


async def run_turn(spec: HarnessSpec, turn: TurnInput, backend: ModelBackend, tools: ToolRegistry | None = None,
                   *, arm: str = "", trace_id: str | None = None, now: datetime | None = None,
                   deadline_s: float | None = None) -> TurnResult:
    """Answer one viewer message under `spec`. Never raises; returns within the deadline (default the spec's)."""
    trace = TraceRecorder(harness_hash=spec.content_hash, backend=getattr(backend, "name", "?"),
                          message=turn.message, viewer_id=turn.viewer_id, room_id=turn.room.room_id,
                          arm=arm, trace_id=trace_id)
    state = _Turn(spec, turn, backend, tools or ToolRegistry(), trace, now)
    deadline = spec.settings.deadline_s if deadline_s is None else deadline_s
    try:
        async with asyncio.timeout(deadline):  # (not wait_for: no extra task per turn)
            outcome, reply, silent, reason = await state.run()
    except TimeoutError:
        reply = spec.settings.fallback_reply
        outcome, silent, reason = "deadline", not reply, f"deadline of {deadline:g} s reached"
    except Exception as exc:  # the caller is a live room: record the bug, answer with the fallback
        reply = spec.settings.fallback_reply
        outcome, silent, reason = "error", not reply, f"{type(exc).__name__}: {exc}"
    data = trace.finish(outcome=outcome, reply="" if silent else reply, silent=silent, reason=reason)
    return TurnResult(reply="" if silent else reply, silent=silent, outcome=outcome, trace=data)


async def stream_turn(spec: HarnessSpec, turn: TurnInput, backend: ModelBackend, tools: ToolRegistry | None = None,
                      *, chunk_chars: int = 24, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
    """Server-sent-event payloads: reply deltas, then a final event with the whole result.

    Deltas are released only after the reply hooks allowed the reply (a hook may
    still rewrite or refuse it), so nothing a hook would stop reaches a viewer.
    """
    result = await run_turn(spec, turn, backend, tools, **kwargs)
    for text in reply_chunks(result.reply, chunk_chars):
        yield {"type": "delta", "text": text}
    yield {"type": "final", "reply": result.reply, "silent": result.silent, "outcome": result.outcome,
           "trace_id": result.trace["trace_id"], "latency_ms": result.latency_ms}


def reply_chunks(reply: str, chunk_chars: int = 24) -> list[str]:
    """An accepted reply cut into deltas for streaming, on word boundaries where possible."""
    chunks, current = [], ""
    for word in reply.split(" "):
        piece = f"{current} {word}" if current else word
        if len(piece) > chunk_chars and current:
            chunks.append(current + " ")
            current = word
        else:
            current = piece
    if current:
        chunks.append(current)
    return chunks
