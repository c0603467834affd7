"""Redis from the event loop for the reply's admission: one connection per loop, its commands pipelined.

redis-py's asyncio client cost ≈ 210 µs of CPU an EVALSHA here (its pool and lock, its connection object and
parser: ≈ 300 Python calls); the same command on a connection of our own, shared by the loop's requests, ≈ 85 µs
(docs/performance.md). Redis answers a connection's commands in the order they came, so each command sent
queues a future and each reply read resolves the oldest one: no lock, and the requests of a burst share the
connection. RESP2, and only what the admission needs: EVALSHA (EVAL when Redis no longer has the script), and
AUTH and SELECT from the URL, over TCP or a Unix socket. Any other URL (TLS: rediss://) keeps redis-py's client
(`supported`). Errors are redis-py's, so callers catch one family.
"""

import asyncio
import hashlib
from collections import deque

import redis
from redis.connection import parse_url

REPLY_TIMEOUT_S = 5.0  # as redis-py 8's default socket timeout: a connection this silent is dropped


def supported(url: str) -> bool:
    return url.startswith(("redis://", "unix://"))


class LoopRedis(asyncio.Protocol):
    """One connection; `await script(...)` from any task of the loop that made it."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._waiting: deque[tuple[asyncio.Future, float]] = deque()  # (future, when sent), oldest first
        self._buffer = bytearray()
        self._lost: Exception | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    @classmethod
    async def connect(cls, url: str) -> "LoopRedis":
        options = parse_url(url)
        loop = asyncio.get_running_loop()
        connecting = (loop.create_unix_connection(cls, options["path"]) if "path" in options else
                      loop.create_connection(cls, options.get("host", "localhost"), int(options.get("port", 6379))))
        try:
            _transport, client = await asyncio.wait_for(connecting, REPLY_TIMEOUT_S)
        except OSError as error:  # TimeoutError included
            raise redis.ConnectionError(f"Redis at {url.rpartition('@')[2]}: {error}") from error
        hello = []
        if options.get("password"):
            user = options.get("username")
            hello.append(client._sent((b"AUTH", user, options["password"]) if user else (b"AUTH", options["password"])))
        if int(options.get("db") or 0):
            hello.append(client._sent((b"SELECT", int(options["db"]))))
        try:
            for answer in hello:
                await answer
        except redis.RedisError:
            client.close()
            raise
        return client

    @property
    def usable(self) -> bool:
        return self._lost is None

    async def script(self, source: str, sha: str, keys: list[str], args: list) -> object:
        """The script's answer: EVALSHA, and EVAL once when Redis answers NOSCRIPT (restarted, or flushed)."""
        try:
            return await self._sent((b"EVALSHA", sha, len(keys), *keys, *args))
        except redis.exceptions.NoScriptError:
            return await self._sent((b"EVAL", source, len(keys), *keys, *args))

    def close(self) -> None:
        self._fail(redis.ConnectionError("the connection was closed"))

    # --- the wire ------------------------------------------------------------------------------------------

    def _sent(self, command: tuple) -> asyncio.Future:
        if self._lost is not None:
            raise self._lost
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._waiting.append((answer, loop.time()))
        self._transport.write(_packed(command))
        if self._watchdog is None:
            self._watchdog = loop.call_later(REPLY_TIMEOUT_S, self._check_silence)
        return answer

    def connection_made(self, transport) -> None:
        self._transport = transport

    def connection_lost(self, error: Exception | None) -> None:
        self._fail(redis.ConnectionError(f"Redis closed the connection{f': {error}' if error else ''}"))

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        position = 0
        while self._waiting:
            try:
                parsed = _reply(self._buffer, position)
            except ValueError as error:  # not RESP: nothing later on this connection can be trusted
                self._fail(redis.ConnectionError(f"Redis sent what is not a reply: {error}"))
                return
            if parsed is None:
                break
            value, position = parsed
            answer, _sent_at = self._waiting.popleft()
            if not answer.done():  # its request was cancelled: the reply is still consumed, in its turn
                if isinstance(value, redis.ResponseError):
                    answer.set_exception(value)
                else:
                    answer.set_result(value)
        del self._buffer[:position]

    def _check_silence(self) -> None:
        self._watchdog = None
        if not self._waiting:
            return
        loop = asyncio.get_running_loop()
        oldest = self._waiting[0][1]
        if loop.time() - oldest >= REPLY_TIMEOUT_S:
            self._fail(redis.TimeoutError(f"Redis did not answer in {REPLY_TIMEOUT_S:g} s"))
        else:
            self._watchdog = loop.call_at(oldest + REPLY_TIMEOUT_S, self._check_silence)

    def _fail(self, error: Exception) -> None:
        """Every command waiting gets `error`; the connection is closed and refuses new commands."""
        if self._lost is None:
            self._lost = error
        while self._waiting:
            answer, _sent_at = self._waiting.popleft()
            if not answer.done():
                answer.set_exception(error)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._transport is not None:
            self._transport.close()


def _packed(command: tuple) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for argument in command:
        value = argument if isinstance(argument, bytes) else str(argument).encode()
        parts.append(b"$%d\r\n%b\r\n" % (len(value), value))
    return b"".join(parts)


def _reply(buffer: bytearray, start: int) -> tuple[object, int] | None:
    """The RESP2 value at `start` and where the next begins, or None while it has not all arrived. An error
    reply is returned as redis-py's exception for it (not raised: the connection stays usable)."""
    end = buffer.find(b"\r\n", start)
    if end < 0:
        return None
    kind, line, after = buffer[start:start + 1], bytes(buffer[start + 1:end]), end + 2
    if kind == b":":
        return int(line), after
    if kind == b"$":
        length = int(line)
        if length < 0:
            return None, after
        if len(buffer) < after + length + 2:
            return None
        return bytes(buffer[after:after + length]), after + length + 2
    if kind == b"*":
        count = int(line)
        if count < 0:
            return None, after
        items = []
        for _ in range(count):
            parsed = _reply(buffer, after)
            if parsed is None:
                return None
            item, after = parsed
            items.append(item)
        return items, after
    if kind == b"+":
        return line.decode(), after
    if kind == b"-":
        text = line.decode("utf-8", "replace")
        error = redis.exceptions.NoScriptError if text.startswith("NOSCRIPT") else redis.ResponseError
        return error(text), after
    raise ValueError(f"unknown reply type {bytes(kind)!r}")


_clients: dict = {}  # event loop → the task that connects its client (a connection belongs to its loop)


async def loop_redis(url: str) -> LoopRedis:
    """This loop's connection to `url` (made on first use, made again once lost)."""
    loop = asyncio.get_running_loop()
    connecting = _clients.get(loop)
    if connecting is not None and connecting.done() and (connecting.exception() is not None
                                                         or not connecting.result().usable):
        connecting = None
    if connecting is None:
        for stale in [other for other in _clients if other.is_closed()]:
            del _clients[stale]
        connecting = _clients[loop] = loop.create_task(LoopRedis.connect(url))  # a burst waits for one connect
    return await asyncio.shield(connecting)


def script_sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 (Redis names scripts by their SHA-1)
