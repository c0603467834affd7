"""Pooled aiohttp sessions, one per event loop and key, for the clients that call out on every turn: the model
client (serving.backends.openai) and HTTP tool bindings (harness.runtime.tools). aiohttp rather than httpx: a
streamed model call of 12 chunks cost 0.52 ms of CPU through aiohttp against 1.52 ms through httpx, and a small
JSON GET ≈ 60 µs against ≈ 470 µs (docs/performance.md).

A session belongs to the loop that made it. A task kept beside it closes it when the loop's runner cancels what
is left (asyncio.run and asgiref's async_to_sync both do), so a job's or a sync view's loop leaves no session
open behind it; `LoopSessions.close_running` closes them earlier.
"""

import asyncio
import functools
import ipaddress
import os
import threading
import urllib.request
from collections.abc import Callable, Hashable
from urllib.parse import urlsplit

import aiohttp


@functools.cache
def ssl_context():
    """Building one costs 20-40 ms (it loads the CA bundle): once per process, with the CA bundle httpx uses."""
    import httpx

    return httpx.create_ssl_context()


class LoopSessions:
    """aiohttp sessions shared per (running event loop, key); `make` builds a missing one."""

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, dict[Hashable, tuple[aiohttp.ClientSession, asyncio.Task]]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], aiohttp.ClientSession]) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        with self._lock:
            sessions = self._by_loop.get(loop)
            if sessions is None:
                for ended in [other for other in self._by_loop if other.is_closed()]:
                    del self._by_loop[ended]
                sessions = self._by_loop[loop] = {}
            shared = sessions.get(key)
            if shared is None or shared[0].closed:
                session = make()
                shared = sessions[key] = (session, loop.create_task(self._closed_with_its_loop(session, key)))
        return shared[0]

    async def _closed_with_its_loop(self, session: aiohttp.ClientSession, key: Hashable) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_future()  # until the loop's runner cancels what is left
        finally:
            with self._lock:
                sessions = self._by_loop.get(loop, {})
                if key in sessions and sessions[key][0] is session:
                    del sessions[key]
                if not sessions:
                    self._by_loop.pop(loop, None)
            await session.close()

    async def close_running(self) -> None:
        """Close the sessions of the running event loop (a job's own loop may call it before it ends)."""
        with self._lock:
            shared = list(self._by_loop.pop(asyncio.get_running_loop(), {}).values())
        for session, keeper in shared:
            keeper.cancel()
            await session.close()


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def proxy_for(url: str) -> str | None:
    """The proxy a request to `url` goes through, from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY and NO_PROXY (either
    case, as curl and httpx read them); None for a direct connection. A loopback server is always reached
    directly, as Go's and Chrome's clients do: a model server on this host is never behind the proxy. Chosen
    here once per URL: with trust_env aiohttp reads the proxy settings in a thread for every request."""
    settings = tuple(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARIABLES)
    if not any(settings[:3]):
        return None
    parts = urlsplit(url)
    return _proxy_chosen(parts.scheme, parts.netloc, settings)


@functools.lru_cache(maxsize=256)
def _proxy_chosen(scheme: str, netloc: str, settings: tuple) -> str | None:  # settings: the variables' values
    host = (urlsplit(f"//{netloc}").hostname or "").lower()
    try:
        loopback = host == "localhost" or host.endswith(".localhost") or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback or urllib.request.proxy_bypass_environment(netloc):
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(scheme) or proxies.get("all")
