"""Tool bindings: what runs when the model calls a tool, with timeouts, retries and clean errors.

A binding never raises into the loop: timeouts, malformed output, permission
errors and exceptions become a `ToolOutcome` with `error` set, which the model
then sees as the tool's answer.

Writes are not retried blindly: every call carries an idempotency key (the same
on each attempt), and a `side_effect: write` tool is retried only when its
binding accepts that key (it was registered as idempotent); otherwise one
attempt, because a timed-out write may well have happened.

HTTP bindings go through an `HttpPolicy`: the host is resolved first and
private, loopback, link-local and other non-public addresses are refused unless
the workspace allow-lists the host; a non-empty allowlist also limits public hosts.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlsplit

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
    # Set per call by `ToolRegistry.execute`, the same on every attempt: an idempotent binding
    # performs a write at most once per key.
    idempotency_key: str = ""


@dataclass(frozen=True)
class ToolOutcome:
    result: Any = None
    error: str = ""
    attempts: int = 1
    latency_ms: float = 0.0
    idempotency_key: str = ""

    def for_model(self) -> str:
        """The tool message content the model reads."""
        if self.error:
            return json.dumps({"error": self.error}, ensure_ascii=False)
        text = json.dumps(self.result, ensure_ascii=False)
        return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "…(truncated)"


Builtin = Callable[[Mapping[str, Any], ToolContext], Any | Awaitable[Any]]
_BUILTINS: dict[str, Builtin] = {}
_IDEMPOTENT_BUILTINS: set[str] = set()
_INLINE_BUILTINS: set[str] = set()


def register_builtin(target: str, *, idempotent: bool = False, inline: bool = False
                     ) -> Callable[[Builtin], Builtin]:
    """Register a Python callable as binding target `target` (used by `binding.kind: builtin`).

    `idempotent=True` promises that the callable honours `ctx.idempotency_key` (a repeated key does not
    write again), which is what allows a `side_effect: write` tool bound to it to be retried.
    `inline=True` promises a synchronous callable that never blocks (no I/O, microseconds of work): it
    runs on the event loop instead of a worker thread, whose hand-off costs more than such a call.
    """

    def decorator(fn: Builtin) -> Builtin:
        _BUILTINS[target] = fn
        if idempotent:
            _IDEMPOTENT_BUILTINS.add(target)
        if inline:
            _INLINE_BUILTINS.add(target)
        return fn

    return decorator


def builtin_names() -> list[str]:
    return sorted(_BUILTINS)


_RUN_SUPPLIED: dict[str, dict[str, set[str]]] = {}  # harness name → binding kind → targets


def declare_run_supplied(harness: str, kind: str, *targets: str) -> None:
    """Name `kind` binding targets that the caller who runs the harness named `harness` passes to each run as
    `ToolRegistry(overrides=…)` instead of registering them (the evolution proposer's read tools close over
    one diagnosis). Only that harness may bind them: run anywhere else, such a tool would have nothing
    behind it, so every other harness reports the binding as unknown."""
    _RUN_SUPPLIED.setdefault(harness, {}).setdefault(kind, set()).update(targets)


def run_supplied_targets(harness: str) -> dict[str, frozenset[str]]:
    """The targets the caller running `harness` supplies, by binding kind (none for any other harness)."""
    return {kind: frozenset(targets) for kind, targets in _RUN_SUPPLIED.get(harness, {}).items()}


@dataclass(frozen=True)
class HttpPolicy:
    """Where HTTP bindings may connect. `allowed_hosts`: host names or IP networks (`10.0.0.0/8`).

    Empty: any host whose addresses are all public. Non-empty: only the listed hosts, and a listed
    host may resolve to a private, loopback or link-local address (an internal service on purpose).
    """

    allowed_hosts: tuple[str, ...] = ()

    def _listed(self, host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        for entry in self.allowed_hosts:
            entry = entry.strip().lower()
            if not entry:
                continue
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if entry == host:
                    return True
                continue
            if address is not None and address in network:
                return True
        return False

    async def resolve(self, url: str) -> tuple[str, str]:
        """The (host, IP address) to connect to for `url`; raises ToolPermissionError when refused."""
        host = (urlsplit(url).hostname or "").lower()
        if not host:
            raise ToolError(f"no host in {url!r}")
        try:
            addresses = [ipaddress.ip_address(host)]  # a literal address needs no lookup
        except ValueError:
            port = urlsplit(url).port or (443 if url.lower().startswith("https") else 80)
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise ToolError(f"cannot resolve {host}: {exc.strerror or exc}") from None
            found = dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos)
            addresses = sorted(found, key=lambda a: a.version)  # IPv4 first: the address connected to
        if self.allowed_hosts and not (self._listed(host, None) or all(self._listed(host, a) for a in addresses)):
            raise ToolPermissionError(f"host {host} is not in this workspace's HTTP tool allowlist")
        for address in addresses:
            if not _is_public(address) and not (self._listed(host, None) or self._listed(host, address)):
                raise ToolPermissionError(f"host {host} resolves to non-public address {address}; "
                                          "allow-list it for this workspace to call it")
        return host, str(addresses[0])


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


class ToolRegistry:
    """Resolves a tool's binding and runs it. `overrides` replaces targets (tests, the simulator's sandbox).

    `idempotent` names override targets (or `http:<target>`) that honour `ctx.idempotency_key`;
    `http_policy` limits where HTTP bindings connect (default: public addresses only).
    """

    def __init__(self, overrides: Mapping[str, Builtin] | None = None, http: httpx.AsyncClient | None = None,
                 *, idempotent: Iterable[str] = (), http_policy: HttpPolicy | None = None):
        self.overrides = dict(overrides or {})
        self.http = http
        self.idempotent = frozenset(idempotent)
        self.http_policy = http_policy or HttpPolicy()

    def accepts_idempotency_key(self, tool: Tool) -> bool:
        kind, target = tool.binding.kind, tool.binding.target
        if target in self.idempotent or f"{kind}:{target}" in self.idempotent:
            return True
        if kind == "builtin" and target not in self.overrides and f"{kind}:{target}" not in self.overrides:
            return target in _IDEMPOTENT_BUILTINS
        return False

    def _resolve(self, tool: Tool) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[Any]]:
        kind, target = tool.binding.kind, tool.binding.target
        fn = self.overrides.get(target) or self.overrides.get(f"{kind}:{target}")
        if fn is None and kind == "builtin":
            fn = _BUILTINS.get(target)
            if fn is not None and target in _INLINE_BUILTINS and not inspect.iscoroutinefunction(fn):
                return _inline(fn)
        if fn is None and kind == "http":
            return lambda args, ctx: self._http_call(target, args, ctx.idempotency_key)
        if fn is None:
            raise ToolError(f"no {kind} binding named {target!r} is available here")
        if inspect.iscoroutinefunction(fn):
            return fn
        return lambda args, ctx: asyncio.to_thread(fn, args, ctx)

    def max_attempts(self, tool: Tool) -> int:
        """Retries are only safe for reads, or for writes whose binding dedupes by idempotency key."""
        if tool.side_effect == "write" and not self.accepts_idempotency_key(tool):
            return 1
        return tool.retries + 1

    async def execute(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext, *,
                      idempotency_key: str = "") -> ToolOutcome:
        """Run one tool call; `idempotency_key` identifies the call (a fresh one when not given)."""
        started = time.perf_counter()
        attempts, error = 0, ""
        ctx = replace(ctx, idempotency_key=idempotency_key or ctx.idempotency_key or uuid.uuid4().hex)
        key = ctx.idempotency_key if tool.side_effect == "write" else ""

        def done(attempts: int, **fields: Any) -> ToolOutcome:
            return ToolOutcome(attempts=attempts, latency_ms=_ms(started), idempotency_key=key, **fields)

        try:
            call = self._resolve(tool)
        except ToolError as exc:
            return ToolOutcome(error=str(exc), attempts=0, idempotency_key=key)
        for attempts in range(1, self.max_attempts(tool) + 1):
            try:
                if getattr(call, "inline", False):  # runs to completion without yielding: no timeout applies
                    result = await call(args, ctx)
                else:
                    result = await asyncio.wait_for(call(args, ctx), timeout=tool.timeout_ms / 1000)
                json.dumps(result)  # malformed (unserialisable) output is an error, not a crash
                return done(attempts, result=result)
            except TimeoutError:
                error = f"timed out after {tool.timeout_ms} ms"
            except ToolPermissionError as exc:
                return done(attempts, error=f"permission denied: {exc}")
            except ToolError as exc:
                return done(attempts, error=str(exc))
            except (TypeError, ValueError) as exc:
                error = f"malformed tool output: {exc}"
            except Exception as exc:  # a binding bug must not take the turn down
                error = f"{type(exc).__name__}: {exc}"
        if attempts < tool.retries + 1:
            error += " (a write without an idempotency key is not retried: it may have happened)"
        return done(attempts, error=error)

    async def _http_call(self, target: str, args: Mapping[str, Any], idempotency_key: str = "") -> Any:
        method, _, url_template = target.partition(" ")
        args = dict(args)
        url = url_template
        for name in list(args):
            placeholder = "{" + name + "}"
            if placeholder in url:
                url = url.replace(placeholder, quote(str(args.pop(name)), safe=""))
        host, address = await self.http_policy.resolve(url)
        # Connect to the address just checked (no second lookup a rebinding DNS could answer differently);
        # Host header and TLS server name stay the original host.
        parts = urlsplit(url)
        netloc = f"[{address}]" if ":" in address else address
        pinned = parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")).geturl()
        headers = {"Host": parts.netloc.rpartition("@")[2]}
        if idempotency_key and method.upper() != "GET":
            headers["Idempotency-Key"] = idempotency_key
        client = self.http or _shared_http(host)
        request = client.build_request(method.upper(), pinned, params=args if method.upper() == "GET" else None,
                                       json=None if method.upper() == "GET" else args, headers=headers,
                                       extensions={"sni_hostname": host})
        response = await client.send(request, stream=True)
        try:
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_HTTP_BYTES:
                    raise ToolError(f"response larger than {MAX_HTTP_BYTES // 1024} KiB")
        finally:
            await response.aclose()
        if response.status_code in (401, 403):
            raise ToolPermissionError(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise ToolError(f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ValueError(f"response is not JSON ({exc})") from None


# One client per event loop and host for HTTP bindings, so a tool call reuses the connections (and the TLS
# context, 20-40 ms to build) of earlier calls to the same host. Per host because connections are made to the
# pinned address: one made for one host name must not carry another's requests. Ended loops' pools are dropped.
_HTTP_CLIENTS: dict[tuple[asyncio.AbstractEventLoop, str], httpx.AsyncClient] = {}
_HTTP_LOCK = threading.Lock()


def _shared_http(host: str) -> httpx.AsyncClient:
    key = (asyncio.get_running_loop(), host)
    with _HTTP_LOCK:
        client = _HTTP_CLIENTS.get(key)
        if client is None or client.is_closed:
            for ended in [other for other in _HTTP_CLIENTS if other[0].is_closed()]:
                del _HTTP_CLIENTS[ended]
            client = _HTTP_CLIENTS[key] = httpx.AsyncClient()
    return client


def _inline(fn: Builtin) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[Any]]:
    async def call(args: Mapping[str, Any], ctx: ToolContext) -> Any:
        return fn(args, ctx)

    call.inline = True
    return call


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
