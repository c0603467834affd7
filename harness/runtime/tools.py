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
import functools
import inspect
import ipaddress
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp

from harness.http_pool import LoopSessions, proxy_for, ssl_context
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

    @functools.cached_property
    def _parsed(self) -> tuple[frozenset[str], tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]]:
        """The allowlist's host names and its networks, parsed on first use rather than on every call."""
        names, networks = set(), []
        for entry in self.allowed_hosts:
            entry = entry.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                names.add(entry)
        return frozenset(names), tuple(networks)

    def _listed(self, host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        names, networks = self._parsed
        return host in names or (address is not None and any(address in network for network in networks))

    async def resolve(self, url: str) -> tuple[str, str]:
        """The (host, IP address) to connect to for `url`; raises ToolPermissionError when refused."""
        host = (urlsplit(url).hostname or "").lower()
        if not host:
            raise ToolError(f"no host in {url!r}")
        try:
            addresses = [ipaddress.ip_address(host)]  # a literal address needs no lookup
        except ValueError:
            port = urlsplit(url).port or (443 if url.lower().startswith("https") else 80)
            addresses = await _addresses(host, port)
        if self.allowed_hosts and not (self._listed(host, None) or all(self._listed(host, a) for a in addresses)):
            raise ToolPermissionError(f"host {host} is not in this workspace's HTTP tool allowlist")
        for address in addresses:
            if not _is_public(address) and not (self._listed(host, None) or self._listed(host, address)):
                raise ToolPermissionError(f"host {host} resolves to non-public address {address}; "
                                          "allow-list it for this workspace to call it")
        return host, str(addresses[0])


# A host's addresses as last looked up, for DNS_KEPT_S (as aiohttp's resolver keeps them): a lookup runs in a
# thread, ≈ 240 µs of a call's CPU. The policy still checks the addresses on every call, and the call dials the
# address checked.
DNS_KEPT_S = 10.0
_DNS_KEPT_MAX = 1024
_dns_kept: dict[tuple[str, int], tuple[float, list]] = {}


async def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    kept = _dns_kept.get((host, port))
    if kept is not None and time.monotonic() - kept[0] < DNS_KEPT_S:
        return kept[1]
    looked_up_at = time.monotonic()
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolError(f"cannot resolve {host}: {exc.strerror or exc}") from None
    found = dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos)
    addresses = sorted(found, key=lambda a: a.version)  # IPv4 first: the address connected to
    _dns_kept.pop((host, port), None)
    if len(_dns_kept) >= _DNS_KEPT_MAX:  # the one looked up longest ago goes
        del _dns_kept[next(iter(_dns_kept))]
    _dns_kept[host, port] = (looked_up_at, addresses)
    return addresses


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


class ToolRegistry:
    """Resolves a tool's binding and runs it. `overrides` replaces targets (tests, the simulator's sandbox).

    `idempotent` names override targets (or `http:<target>`) that honour `ctx.idempotency_key`;
    `http_policy` limits where HTTP bindings connect (default: public addresses only).
    """

    def __init__(self, overrides: Mapping[str, Builtin] | None = None, *, idempotent: Iterable[str] = (),
                 http_policy: HttpPolicy | None = None):
        self.overrides = dict(overrides or {})
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
        pinned = parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else ""), fragment="").geturl()
        headers = {"Host": parts.netloc.rpartition("@")[2]}
        get = method.upper() == "GET"
        if get and args:  # the query as httpx wrote it: a list repeats its name, spaces as %20
            pinned += ("&" if parts.query else "?") + urlencode(
                [(name, _query_text(item)) for name, value in args.items()
                 for item in (value if isinstance(value, list | tuple) else (value,))], quote_via=quote)
        data = None
        if not get:  # JSON as httpx encoded it: compact, UTF-8
            data = json.dumps(args, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
            if idempotency_key:
                headers["Idempotency-Key"] = idempotency_key
        async with _shared_http(host).request(
                method.upper(), pinned, data=data, headers=headers,
                # TLS names the host (SNI, and the certificate checked against it), not the address dialled.
                server_hostname=host if parts.scheme == "https" else None,
                allow_redirects=False,  # a redirect is the answer: following it would skip the host policy
                proxy=proxy_for(pinned)) as response:
            body = bytearray()
            async for chunk in response.content.iter_any():
                body += chunk
                if len(body) > MAX_HTTP_BYTES:
                    raise ToolError(f"response larger than {MAX_HTTP_BYTES // 1024} KiB")
            status, location = response.status, response.headers.get("Location", "")
        if status in (401, 403):
            raise ToolPermissionError(f"HTTP {status}")
        if 300 <= status < 400:
            raise ToolError(f"HTTP {status}: the redirect to {location[:200]!r} is not followed")
        if status >= 400:
            raise ToolError(f"HTTP {status}: {bytes(body[:200]).decode(errors='replace')}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ValueError(f"response is not JSON ({exc})") from None


# One session per event loop and host for HTTP bindings, so a tool call reuses the connections of earlier calls
# to the same host. Per host because connections are made to the pinned address: one made for one host name must
# not carry another's requests.
_HTTP_SESSIONS = LoopSessions()


def _shared_http(host: str) -> aiohttp.ClientSession:
    return _HTTP_SESSIONS.get(host, lambda: aiohttp.ClientSession(
        # Idle connections kept 4 s, under the 5 s many servers keep them: a call is not sent on a closing one.
        connector=aiohttp.TCPConnector(ssl=ssl_context(), keepalive_timeout=4.0),
        timeout=aiohttp.ClientTimeout(total=None),  # the tool's own timeout bounds the call
        trust_env=False))  # the proxy is chosen per URL (`proxy_for`)


def _query_text(value: Any) -> str:
    """A query value as httpx wrote it: true/false, nothing for None, else its text."""
    if value is True or value is False:
        return "true" if value else "false"
    return "" if value is None else str(value)


def _inline(fn: Builtin) -> Callable[[Mapping[str, Any], ToolContext], Awaitable[Any]]:
    async def call(args: Mapping[str, Any], ctx: ToolContext) -> Any:
        return fn(args, ctx)

    call.inline = True
    return call


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
