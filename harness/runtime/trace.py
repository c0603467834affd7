"""The structured trace of one turn (schema `harnessops.trace/v1`, see docs/runtime.md)."""

from __future__ import annotations

import time
import uuid
from typing import Any

SCHEMA = "harnessops.trace/v1"


class TraceRecorder:
    """Collects steps with their offsets from the start of the turn; `finish()` returns plain JSON data."""

    def __init__(self, *, harness_hash: str, backend: str, message: str, viewer_id: str, room_id: str,
                 arm: str = "", trace_id: str | None = None):
        self.started = time.perf_counter()
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "trace_id": trace_id or uuid.uuid4().hex,
            "harness_hash": harness_hash,
            "backend": backend,
            "arm": arm,
            "started_at": time.time(),
            "input": {"message": message, "viewer_id": viewer_id, "room_id": room_id},
            "steps": [],
        }
        self.skills_loaded: list[str] = []
        self.hooks_fired: list[str] = []
        self.tools_called: list[str] = []
        self.hook_errors: list[dict[str, Any]] = []  # conditions that could not be evaluated (see hooks.py)

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 3)

    def step(self, kind: str, **fields: Any) -> dict[str, Any]:
        step = {"kind": kind, "at_ms": self.elapsed_ms(), **fields}
        self.data["steps"].append(step)
        return step

    def finish(self, *, outcome: str, reply: str, silent: bool, reason: str = "") -> dict[str, Any]:
        models = [s for s in self.data["steps"] if s["kind"] == "model"]
        self.data.update(
            outcome=outcome,
            reason=reason,
            reply=reply,
            silent=silent,
            duration_ms=self.elapsed_ms(),
            model_calls=len(models),
            model=next((s["model"] for s in models if s.get("model")), None),  # which model answered
            model_latency_ms=round(sum(s.get("latency_ms", 0.0) for s in models), 3),
            ttft_ms=next((s["ttft_ms"] for s in models if s.get("ttft_ms") is not None), None),
            tokens_in=sum(s.get("tokens_in", 0) for s in models),
            tokens_out=sum(s.get("tokens_out", 0) for s in models),
            tokens_cached=sum(s.get("tokens_cached", 0) for s in models),
            skills_loaded=list(dict.fromkeys(self.skills_loaded)),
            hooks_fired=list(dict.fromkeys(self.hooks_fired)),
            tools_called=self.tools_called,
            hook_errors=self.hook_errors,
        )
        return self.data
