"""Tool bindings: what runs when the model calls a tool, with timeouts, retries and clean errors.

A binding never raises into the loop: timeouts, malformed output, permission
errors and exceptions become a `ToolOutcome` with `error` set, which the model
then sees as the tool's answer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from harness.runtime.turn import RoomContext
from harness.spec.model import Tool

MAX_RESULT_CHARS = 16_000
MAX_HTTP_BYTES = 256 * 1024


class ToolError(Exception):
    """A clean, model-facing failure ("no product with link id L999")."""


class ToolPermissionError(ToolError):
    """The caller may not do this (retries would not help)."""


@dataclass(frozen=True)
class ToolContext:
    room: RoomContext
    viewer_id: str


@dataclass(frozen=True)
class ToolOutcome:
    result: Any = None
    error: str = ""
    attempts: int = 1
    latency_ms: float = 0.0

    def for_model(self) -> str:
        """The tool message content the model reads."""
        if self.error:
            return json.dumps({"error": self.error}, ensure_ascii=False)
        text = json.dumps(self.result, ensure_ascii=False)
        return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "…(truncated)"


Builtin = Callable[[Mapping[str, Any], ToolContext], Any | Awaitable[Any]]
_BUILTINS: dict[str, Builtin] = {}


def register_builtin(target: str) -> Callable[[Builtin], Builtin]:
    """Register a Python callable as binding target `target` (used by `binding.kind: builtin`)."""

    def decorator(fn: Builtin) -> Builtin:
        _BUILTINS[target] = fn
        return fn

    return decorator


def builtin_names() -> list[str]:
    return sorted(_BUILTINS)


class ToolRegistry:
    """Resolves a tool's binding and runs it. `overrides` replaces targets (tests, the simulator's sandbox)."""

    def __init__(self, overrides: Mapping[str, Builtin] | None = None, http: httpx.AsyncClient | None = None):
        self.overrides = dict(overrides or {})
        self.http = http

    def _resolve(self, tool: Tool) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[Any]]:
        kind, target = tool.binding.kind, tool.binding.target
        fn = self.overrides.get(target) or self.overrides.get(f"{kind}:{target}")
        if fn is None and kind == "builtin":
            fn = _BUILTINS.get(target)
        if fn is None and kind == "http":
            return lambda args, ctx: self._http_call(target, args)
        if fn is None:
            raise ToolError(f"no {kind} binding named {target!r} is available here")
        if inspect.iscoroutinefunction(fn):
            return fn
        return lambda args, ctx: asyncio.to_thread(fn, args, ctx)

    async def execute(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        started = time.perf_counter()
        attempts = 0
        error = ""
        try:
            call = self._resolve(tool)
        except ToolError as exc:
            return ToolOutcome(error=str(exc), attempts=0)
        for attempts in range(1, tool.retries + 2):
            try:
                result = await asyncio.wait_for(call(args, ctx), timeout=tool.timeout_ms / 1000)
                json.dumps(result)  # malformed (unserialisable) output is an error, not a crash
                return ToolOutcome(result=result, attempts=attempts, latency_ms=_ms(started))
            except TimeoutError:
                error = f"timed out after {tool.timeout_ms} ms"
            except ToolPermissionError as exc:
                return ToolOutcome(error=f"permission denied: {exc}", attempts=attempts, latency_ms=_ms(started))
            except ToolError as exc:
                return ToolOutcome(error=str(exc), attempts=attempts, latency_ms=_ms(started))
            except (TypeError, ValueError) as exc:
                error = f"malformed tool output: {exc}"
            except Exception as exc:  # a binding bug must not take the turn down
                error = f"{type(exc).__name__}: {exc}"
        return ToolOutcome(error=error, attempts=attempts, latency_ms=_ms(started))

    async def _http_call(self, target: str, args: Mapping[str, Any]) -> Any:
        method, _, url_template = target.partition(" ")
        args = dict(args)
        url = url_template
        for name in list(args):
            placeholder = "{" + name + "}"
            if placeholder in url:
                url = url.replace(placeholder, quote(str(args.pop(name)), safe=""))
        client = self.http or httpx.AsyncClient()
        try:
            request = client.build_request(method.upper(), url, params=args if method.upper() == "GET" else None,
                                           json=None if method.upper() == "GET" else args)
            response = await client.send(request, stream=True)
            try:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_HTTP_BYTES:
                        raise ToolError(f"response larger than {MAX_HTTP_BYTES // 1024} KiB")
            finally:
                await response.aclose()
        finally:
            if self.http is None:
                await client.aclose()
        if response.status_code in (401, 403):
            raise ToolPermissionError(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise ToolError(f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ValueError(f"response is not JSON ({exc})") from None


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
