"""A reply turn as OpenTelemetry spans (GenAI semantic conventions), sent to the operator's collector over OTLP/HTTP.

Off unless the standard variables name a collector: OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (with OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES as the SDK reads them); OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off.

The spans are made from the finished turn's stored trace (its steps carry their offsets and durations), after the
trace is written, by a thread of their own: the agent loop is not instrumented, and a reply only hands its trace
over (a queue put; building a turn's spans costs ≈ 150 µs of CPU, which the reply would otherwise wait for).
A BatchSpanProcessor exports them from its own thread, so a slow or dead collector never holds a reply; when
either queue is full, spans are dropped, not waited for. The OpenTelemetry trace id is the
stored trace's id (both are 128-bit), and `harnessops.trace_id` says so on the turn's span.

Prompt, reply, tool arguments and results are viewer and merchant text: they go only where the operator turns
content capture on (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true), as the GenAI conventions ask.
No Django here.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"configured": False, "provider": None, "tracer": None, "builder": None}
PENDING_MAX = 2048  # turns waiting for their spans; more are dropped (counted in `dropped`)
dropped = 0
_pending_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("otel_trace_id", default=None)

# The turn's backend family → gen_ai.provider.name (the conventions' names where one fits).
_PROVIDERS = {"openai": "openai", "local": "llama.cpp", "checkpoint": "llama.cpp", "scripted": "harnessops.scripted",
              "transformers": "huggingface.transformers"}
_FAILED = frozenset({"fallback", "deadline", "error"})


def enabled_by_environment(environ: Mapping[str, str] = os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def content_capture(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() in ("true", "1")


def tracer():
    """This process's tracer, set up on first use from the environment; None when export is off."""
    if _state["configured"]:
        return _state["tracer"]
    with _lock:
        if not _state["configured"]:
            _state["tracer"] = _configured_tracer() if enabled_by_environment() else None
            _state["configured"] = True
    return _state["tracer"]


def _configured_tracer():
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class StoredTraceIds(RandomIdGenerator):
        """The turn's OpenTelemetry trace id is its stored trace id."""

        def generate_trace_id(self) -> int:
            return _pending_trace_id.get() or super().generate_trace_id()

    # OTEL_SERVICE_NAME (and OTEL_RESOURCE_ATTRIBUTES) override this default, as Resource.create reads them.
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "harnessops"})
    provider = TracerProvider(resource=resource, id_generator=StoredTraceIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _state["provider"] = provider
    return provider.get_tracer("harnessops.serving")


def flush(timeout_ms: int = 5000) -> bool:
    """Build the spans of every turn handed over, and export them (tests; a process about to stop)."""
    builder = _state["builder"]
    if builder is not None:
        builder.pending.join()
    provider = _state["provider"]
    return provider.force_flush(timeout_ms) if provider is not None else True


class _Builder:
    """The thread that turns handed-over traces into spans."""

    def __init__(self, active):
        import queue

        self.active = active
        self.pending: queue.Queue = queue.Queue(maxsize=PENDING_MAX)
        threading.Thread(target=self.run, name="otel-spans", daemon=True).start()

    def hand_over(self, item) -> None:
        global dropped
        import queue

        try:
            self.pending.put_nowait(item)
        except queue.Full:
            dropped += 1

    def run(self) -> None:
        while True:
            item = self.pending.get()
            try:
                if item is None:
                    return
                trace, harness, label, capture = item
                try:
                    _export(self.active, trace, harness=harness, label=label, capture=capture)
                except Exception:  # noqa: BLE001 (telemetry never takes the process down)
                    import logging

                    logging.getLogger(__name__).warning("could not export the spans of trace %s",
                                                        trace.get("trace_id"), exc_info=True)
            finally:
                self.pending.task_done()


def reset() -> None:
    """Shut the exporter down and read the environment again on next use (tests; a process reconfigured)."""
    with _lock:
        provider, builder = _state["provider"], _state["builder"]
        _state.update(configured=False, provider=None, tracer=None, builder=None)
    if builder is not None:
        builder.pending.put(None)
    if provider is not None:
        provider.shutdown()


def turn_exported(trace: Mapping[str, Any], *, harness: str, label: str) -> None:
    """Hand one finished turn (its trace no longer changes) to the span builder; a no-op when export is off."""
    active = tracer()
    if active is None:
        return
    builder = _state["builder"]
    if builder is None:
        with _lock:
            builder = _state["builder"] = _state["builder"] or _Builder(active)
    builder.hand_over((trace, harness, label, content_capture()))


def _ns(started_at: float, at_ms: float) -> int:
    return int(started_at * 1e9) + int(at_ms * 1e6)


def _export(active, trace: Mapping[str, Any], *, harness: str, label: str, capture: bool) -> None:
    from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

    started_at = float(trace["started_at"])
    duration = float(trace.get("duration_ms") or 0.0)
    outcome = str(trace.get("outcome", ""))
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": harness,
        "harnessops.trace_id": str(trace["trace_id"]), "harnessops.outcome": outcome,
        "harnessops.label": label, "harnessops.arm": str(trace.get("arm", "")),
        "harnessops.harness_hash": str(trace.get("harness_hash", "")),
        "harnessops.room_id": str((trace.get("input") or {}).get("room_id", "")),
        "harnessops.model_calls": int(trace.get("model_calls") or 0),
        "gen_ai.usage.input_tokens": int(trace.get("tokens_in") or 0),
        "gen_ai.usage.output_tokens": int(trace.get("tokens_out") or 0),
    }
    if trace.get("reason"):
        attributes["harnessops.reason"] = str(trace["reason"])
    if capture:
        attributes["harnessops.input.message"] = str((trace.get("input") or {}).get("message", ""))
        attributes["harnessops.output.reply"] = str(trace.get("reply", ""))
    try:
        token = _pending_trace_id.set(int(str(trace["trace_id"]), 16) or None)
    except ValueError:
        token = _pending_trace_id.set(None)  # an id that is not 128-bit hex: a new OpenTelemetry id
    try:
        turn = active.start_span(f"invoke_agent {harness}", kind=SpanKind.SERVER, attributes=attributes,
                                 start_time=_ns(started_at, 0.0))
    finally:
        _pending_trace_id.reset(token)
    if outcome in _FAILED:
        turn.set_status(Status(StatusCode.ERROR, f"{outcome}: {trace.get('reason', '')}"[:200]))
    turn_context = set_span_in_context(turn)
    steps = list(trace.get("steps") or ())
    tool_spans: dict[str, Any] = {}
    for index, step in enumerate(steps):
        at = float(step.get("at_ms") or 0.0)
        following = next((float(s.get("at_ms") or 0.0) for s in steps[index + 1:]), duration)
        kind = step.get("kind")
        if kind == "model":
            _model_span(active, step, turn_context, started_at, at, following, capture)
        elif kind == "tool":
            span = active.start_span(f"execute_tool {step.get('name', '')}", context=turn_context,
                                     kind=SpanKind.INTERNAL, start_time=_ns(started_at, at), attributes={
                                         "gen_ai.operation.name": "execute_tool",
                                         "gen_ai.tool.name": str(step.get("name", "")),
                                         "gen_ai.tool.call.id": str(step.get("call_id", "")),
                                         "harnessops.tool.attempts": int(step.get("attempts") or 0)})
            if step.get("error"):
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, str(step["error"])[:200]))
            if capture:
                span.set_attribute("gen_ai.tool.call.arguments", str(step.get("arguments", "")))
                span.set_attribute("gen_ai.tool.call.result", json.dumps(step.get("result"), default=str))
            end = at + float(step["latency_ms"]) if step.get("latency_ms") is not None else following
            tool_spans[str(step.get("call_id", ""))] = (span, max(end, following))
        elif kind == "hook":
            parent = tool_spans.get(str(step.get("call_id", "")))
            context = set_span_in_context(parent[0]) if parent else turn_context
            hook = active.start_span(f"hook {step.get('event', '')} {step.get('hook', '')}", context=context,
                                     kind=SpanKind.INTERNAL, start_time=_ns(started_at, at), attributes={
                                         "harnessops.hook.event": str(step.get("event", "")),
                                         "harnessops.hook.name": str(step.get("hook", "")),
                                         "harnessops.hook.fired": bool(step.get("fired")),
                                         "harnessops.hook.action": str(step.get("action") or "")})
            if step.get("error"):
                hook.set_attribute("error.type", "hook_error")
            if capture and step.get("message"):
                hook.set_attribute("harnessops.hook.message", str(step["message"]))
            hook.end(end_time=_ns(started_at, at))
        elif kind == "retry":
            turn.add_event("harnessops.retry", {"harnessops.hook.name": str(step.get("hook", ""))},
                           timestamp=_ns(started_at, at))
    for span, end in tool_spans.values():
        span.end(end_time=_ns(started_at, end))
    turn.end(end_time=_ns(started_at, duration))


def _model_span(active, step, parent_context, started_at: float, at: float, following: float, capture: bool):
    from opentelemetry.trace import SpanKind, Status, StatusCode

    backend = str(step.get("backend", ""))
    model = str(step.get("model") or backend)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _PROVIDERS.get(backend.split(":", 1)[0], backend.split(":", 1)[0]),
        "gen_ai.request.model": model, "harnessops.backend": backend,
        "harnessops.tool_choice": str(step.get("tool_choice", "")),
    }
    attributes["gen_ai.system"] = attributes["gen_ai.provider.name"]  # the name before semconv 1.37
    if "tokens_in" in step:
        attributes.update({"gen_ai.response.model": model,
                           "gen_ai.usage.input_tokens": int(step.get("tokens_in") or 0),
                           "gen_ai.usage.output_tokens": int(step.get("tokens_out") or 0),
                           "gen_ai.usage.cache_read.input_tokens": int(step.get("tokens_cached") or 0),
                           "gen_ai.response.finish_reasons": [str(step.get("finish_reason") or "")]})
    if step.get("ttft_ms") is not None:
        attributes["harnessops.ttft_ms"] = float(step["ttft_ms"])
    if capture:
        attributes["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "content": step.get("content", ""), "tool_calls": step.get("tool_calls", [])}],
            ensure_ascii=False, default=str)
    span = active.start_span(f"chat {model}", context=parent_context, kind=SpanKind.CLIENT,
                             start_time=_ns(started_at, at), attributes=attributes)
    if step.get("error"):
        span.set_attribute("error.type", "backend_error")
        span.set_status(Status(StatusCode.ERROR, str(step["error"])[:200]))
    end = at + float(step["latency_ms"]) if step.get("latency_ms") is not None else following
    span.end(end_time=_ns(started_at, end))
