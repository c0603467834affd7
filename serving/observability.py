"""What a reply tells the operators' stack: Prometheus figures (workspaces.metrics) and OpenTelemetry spans
(serving.otel), both read from the turn's trace once it is stored - the loop itself records nothing extra.

Both reply routes call `reply_observed` (serving.api, serving.lean_reply); it does no I/O (spans leave from the
exporter's own thread) and costs tens of microseconds (docs/observability.md).
"""

from collections.abc import Mapping
from typing import Any

from serving import otel
from workspaces import metrics

_BLOCKING = frozenset({"block", "deny", "fallback"})  # a hook that stopped a message, call or reply


def label_of(arm: str) -> str:
    """The bounded label of a selection's arm: the label's name, `pinned`, `draft` or `experiment`."""
    if arm.startswith("label:"):
        return arm.removeprefix("label:")
    if arm.startswith("pinned:"):
        return "pinned"
    return arm if arm == "draft" else "experiment"


def reply_observed(trace: Mapping[str, Any], *, harness: str, arm: str) -> None:
    label = label_of(arm)
    steps_observed(trace)
    outcome = str(trace.get("outcome", "error"))
    metrics.REPLIES.labels(outcome, harness, label).inc()
    metrics.REPLY_SECONDS.labels(outcome, label).observe(float(trace.get("duration_ms") or 0.0) / 1000)
    otel.turn_exported(trace, harness=harness, label=label)


def steps_observed(trace: Mapping[str, Any]) -> None:
    """Model, tool and hook figures of one turn's steps."""
    for step in trace.get("steps") or ():
        kind = step.get("kind")
        if kind == "model":
            backend = str(step.get("backend", "?")).split(":", 1)[0]
            if step.get("error"):
                metrics.MODEL_ERRORS.labels(backend).inc()
                continue
            metrics.MODEL_SECONDS.labels(backend).observe(float(step.get("latency_ms") or 0.0) / 1000)
            for name, field in (("prompt", "tokens_in"), ("cached", "tokens_cached"), ("completion", "tokens_out")):
                if step.get(field):
                    metrics.MODEL_TOKENS.labels(backend, name).inc(int(step[field]))
        elif kind == "tool":
            tool = _tool_label(step)
            if step.get("latency_ms") is not None:
                metrics.TOOL_SECONDS.labels(tool).observe(float(step["latency_ms"]) / 1000)
            if step.get("error") and not step.get("denied_by"):  # a denial is the hook's block, counted there
                metrics.TOOL_ERRORS.labels(tool).inc()
        elif kind == "hook":
            if step.get("fired") and step.get("action") in _BLOCKING:
                metrics.HOOK_BLOCKS.labels(str(step.get("event", "")), str(step.get("hook", "")),
                                           str(step["action"])).inc()
        elif kind == "retry":
            metrics.HOOK_RETRIES.labels(str(step.get("hook", ""))).inc()


def _tool_label(step: Mapping[str, Any]) -> str:
    # A name the model made up is not a series of its own: the label set stays the harness's tools.
    if str(step.get("error") or "").startswith("unknown tool"):
        return "(unknown)"
    return str(step.get("name", ""))[:64]


def events_observed(*, accepted: int, duplicates: int, rejected: int) -> None:
    for result, count in (("accepted", accepted), ("duplicate", duplicates), ("rejected", rejected)):
        if count:
            metrics.EVENTS.labels(result).inc(count)
