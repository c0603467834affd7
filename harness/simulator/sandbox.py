"""Sandboxed demo tools bound to a simulated room, with fault injection.

`SandboxTools(room).registry()` is a `ToolRegistry` that serves every `demo.*`
binding target (and `sandbox:demo.*`) from `room`, so the demo harness, or any
variant of it that keeps the binding targets, runs against the simulator's
world. Clean behaviour is the demo builtins' (`harness.runtime.demo_tools`),
plus the room's coupon rules for `issue_coupon` (eligible product, at most the
promotion's percentage, one per viewer) and a presentation queue.

Faults, as the seed report's simulator injects them:
- `timeout`: the call sleeps `timeout_s` (30 s), far past any tool timeout; the
  runtime's `wait_for` cancels it and reports "timed out after N ms".
- `malformed`: the call returns an upstream error page as bytes, which is not
  JSON; the runtime reports "malformed tool output".
- `permission`: the call raises `ToolPermissionError` ("permission denied: …").
- `empty`: the call returns `[]` (list tools) or `{}` (object tools).

`forced_faults` (tool name → kind, as in `Case.faults`) applies to every call of
that tool; `fault_rates` draws a fault per call (each retry attempt is a call)
from a seeded generator. Every call is recorded in `calls` for the judge.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.runtime import demo_tools
from harness.runtime.tools import ToolContext, ToolError, ToolPermissionError, ToolRegistry
from harness.runtime.turn import RoomContext
from harness.simulator.cases import FAULTS, Case

__all__ = ["SandboxTools", "SandboxCall", "SANDBOX_TARGETS", "MALFORMED_BODY"]

# tool name → (clean implementation from the demo builtins, what an `empty` fault returns)
_CLEAN: dict[str, tuple[Callable[[Mapping[str, Any], ToolContext], Any], Any]] = {
    "get_product_info_by_link_id": (demo_tools.get_product_info_by_link_id, {}),
    "search_products": (demo_tools.search_products, []),
    "search_faq": (demo_tools.search_faq, []),
    "get_promotion": (demo_tools.get_promotion, []),
    "get_order_status": (demo_tools.get_order_status, {}),
    "issue_coupon": (demo_tools.issue_coupon, {}),
    "adjust_presentation_order": (demo_tools.adjust_presentation_order, {}),
}
SANDBOX_TARGETS: Mapping[str, str] = {name: f"demo.{name}" for name in _CLEAN}
MALFORMED_BODY = b"<html><head><title>502 Bad Gateway</title></head><body>upstream \xff\xfe garbled</body></html>"


@dataclass
class SandboxCall:
    """One call of a sandbox tool (one attempt: the runtime's retries are separate calls)."""

    seq: int
    name: str
    target: str
    args: dict[str, Any]
    viewer_id: str
    fault: str = ""      # "" (clean) or one of cases.FAULTS
    error: str = ""      # the clean error the world raised (not found, another viewer's order, coupon rules)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxTools:
    """The demo tools served from `room`, with seeded fault injection and a record of every call."""

    def __init__(self, room: Mapping[str, Any] | RoomContext, *, fault_rates: Mapping[str, float] | None = None,
                 forced_faults: Mapping[str, str] | None = None, seed: int | str = 0, timeout_s: float = 30.0,
                 enforce_coupon_rules: bool = True):
        self.world = room if isinstance(room, RoomContext) else RoomContext.from_dict(room)
        self.rates = _parse_rates(fault_rates or {})
        self.forced = {_tool_name(k): _check_kind(v) for k, v in (forced_faults or {}).items()}
        self.timeout_s = timeout_s
        self.enforce_coupon_rules = enforce_coupon_rules
        self._rng = random.Random(f"sandbox:{seed}")
        self.calls: list[SandboxCall] = []
        self.coupons: list[dict[str, Any]] = []
        self.queue: list[dict[str, Any]] = []

    @classmethod
    def for_case(cls, case: Case, **kwargs: Any) -> SandboxTools:
        """A sandbox for one case: its room, its forced faults (`case.faults`)."""
        return cls(case.room, forced_faults={**case.faults, **kwargs.pop("forced_faults", {})}, **kwargs)

    # -- the registry -----------------------------------------------------------------------------------

    def callables(self) -> dict[str, Callable[[Mapping[str, Any], ToolContext], Awaitable[Any]]]:
        """Binding target → async callable, for every demo tool."""
        return {SANDBOX_TARGETS[name]: self._bind(name) for name in _CLEAN}

    def registry(self, **kwargs: Any) -> ToolRegistry:
        """A `ToolRegistry` serving `demo.x` and `sandbox:demo.x` from this sandbox."""
        overrides: dict[str, Any] = {}
        for target, fn in self.callables().items():
            overrides[target] = fn
            overrides[f"sandbox:{target}"] = fn
        return ToolRegistry(overrides=overrides, **kwargs)

    def calls_to(self, name: str) -> list[SandboxCall]:
        return [c for c in self.calls if c.name == _tool_name(name)]

    def reset(self) -> None:
        self.calls.clear()
        self.coupons.clear()
        self.queue.clear()

    # -- faults ---------------------------------------------------------------------------------------------

    def draw_fault(self, name: str) -> str:
        """The fault for the next call of tool `name`: forced, drawn from the rates, or "" (clean)."""
        name = _tool_name(name)
        if name in self.forced:
            return self.forced[name]
        rates = {**self.rates.get("*", {}), **self.rates.get(name, {})}
        if not rates:
            return ""
        draw, total = self._rng.random(), 0.0
        for kind in FAULTS:
            total += rates.get(kind, 0.0)
            if draw < total:
                return kind
        return ""

    def _bind(self, name: str) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[Any]]:
        clean, empty = _CLEAN[name]

        async def call(args: Mapping[str, Any], ctx: ToolContext) -> Any:
            record = SandboxCall(seq=len(self.calls) + 1, name=name, target=SANDBOX_TARGETS[name],
                                 args=copy.deepcopy(dict(args)), viewer_id=ctx.viewer_id, fault=self.draw_fault(name))
            self.calls.append(record)
            if record.fault == "timeout":
                await asyncio.sleep(self.timeout_s)
            elif record.fault == "malformed":
                return {"status": 502, "body": MALFORMED_BODY}
            elif record.fault == "permission":
                raise ToolPermissionError("the sandboxed service refused this caller (HTTP 403)")
            elif record.fault == "empty":
                return copy.deepcopy(empty)
            world_ctx = ToolContext(room=self.world, viewer_id=ctx.viewer_id)
            try:
                if name == "issue_coupon" and self.enforce_coupon_rules:
                    self._check_coupon(args, ctx.viewer_id)
                result = clean(args, world_ctx)
            except ToolError as exc:
                record.error = f"permission denied: {exc}" if isinstance(exc, ToolPermissionError) else str(exc)
                raise
            if name == "issue_coupon":
                self.coupons.append({"viewer_id": ctx.viewer_id, **result})
            elif name == "adjust_presentation_order":
                self.queue.append({"viewer_id": ctx.viewer_id, **result})
            return copy.deepcopy(result)

        call.__name__ = f"sandbox_{name}"
        return call

    def _check_coupon(self, args: Mapping[str, Any], viewer_id: str) -> None:
        link_id, pct = str(args.get("link_id")), int(args.get("discount_pct", 0))
        if self.world.product(link_id) is None:
            return  # the demo tool reports the unknown product
        promo = next((p for p in self.world.promotions
                      if link_id in (p.get("link_ids") or ()) and (p.get("coupon") or p.get("coupon_allowed"))), None)
        if promo is None:
            raise ToolError(f"no viewer coupon is available for {link_id}")
        if promo.get("discount_pct") is not None and pct > int(promo["discount_pct"]):
            raise ToolError(f"the coupon for {link_id} is at most {promo['discount_pct']}% off")
        limit = int(promo.get("per_viewer_limit") or 0)
        issued = [c for c in self.coupons if c["viewer_id"] == viewer_id]
        if limit and len(issued) >= limit:
            raise ToolError("this viewer already has a coupon from this stream")


def _tool_name(key: str) -> str:
    name = key.removeprefix("sandbox:").removeprefix("demo.")
    if name not in _CLEAN:
        raise ValueError(f"unknown sandbox tool {key!r}; one of {sorted(_CLEAN)}")
    return name


def _check_kind(kind: str) -> str:
    if kind not in FAULTS:
        raise ValueError(f"unknown fault {kind!r}; one of {list(FAULTS)}")
    return kind


def _parse_rates(rates: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """`{"timeout": 0.05}` (every tool) or `{"get_order_status:permission": 0.2}` (one tool) → per tool."""
    parsed: dict[str, dict[str, float]] = {}
    for key, rate in rates.items():
        tool, _, kind = key.rpartition(":")
        tool = _tool_name(tool) if tool else "*"
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"fault rate {key}={rate} is not within 0..1")
        parsed.setdefault(tool, {})[_check_kind(kind)] = float(rate)
    for tool in parsed:
        combined = {**parsed.get("*", {}), **parsed.get(tool, {})}
        if sum(combined.values()) > 1.0 + 1e-9:
            raise ValueError(f"fault rates for {tool} add up to more than 1")
    return parsed
