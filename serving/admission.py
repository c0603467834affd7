"""Admitting a reply request in one Redis round trip: its key's per-minute rate limit, the API-access
generation (workspaces.access; see `services.api_key_remembered`) and the routing token of the harness that will
probably answer (`harness.routing`), read together by one Lua script instead of five cache commands.

Without Redis (embedded mode: one process, Django's local-memory cache) the same answers come from the
cache one by one. When Redis is configured but cannot be reached, a reply is still admitted: the key's limit is
counted in this process alone (so with N server processes a key may get up to N times its limit until Redis is
back), the generation and tokens read as unknown (the database decides), and the outage is logged and shown by
/healthz (`workspaces.tokens.cache_failed`).
"""

import functools
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches

from harness import routing
from serving import redis_loop
from serving.selectors import room_token_key
from workspaces.access import API_ACCESS_GENERATION
from workspaces.tokens import cache_answered, cache_failed, new_token

# The tokens from KEYS[first] on, each made when missing (ARGV[2], a fresh one), as `routing.routing_token` makes
# them: what a process keeps under a token must not answer again once the token was lost (evicted, flushed) and
# written anew.
_TOKENS_READ = """
for i = {first}, #KEYS do
  out[i] = redis.call('GET', KEYS[i])
  if not out[i] then
    redis.call('SET', KEYS[i], ARGV[2])
    out[i] = ARGV[2]
  end
end
return out
"""
# SET NX + INCR is what Django's cache.add + cache.incr did, without the eviction race between them; then the
# API-access generation and the tokens.
_ADMIT = """
redis.call('SET', KEYS[1], 0, 'NX', 'EX', ARGV[1])
local out = {redis.call('INCR', KEYS[1]), redis.call('GET', KEYS[2])}
""" + _TOKENS_READ.format(first=3)
_ADMIT_SHA = redis_loop.script_sha(_ADMIT)
# Tokens alone, without counting a request: the reply route on the loop reads a harness's token this way when its
# admission could not name the harness (a room not read here yet). ARGV[1] is unused, as in _ADMIT's place.
_TOKENS = "local out = {}\n" + _TOKENS_READ.format(first=1)
_TOKENS_SHA = redis_loop.script_sha(_TOKENS)
WINDOW_TIMEOUT_S = 90
# The ASGI scope key under which serving.lean_reply hands Django's reply route a request it admitted already.
HANDED_OVER_ADMISSION = "harnessops.reply_admission"  # a one-minute window's counter outlives its minute a little

_client_lock = threading.Lock()
_script = None
# A blackholed Redis must not hold a reply for the OS's minutes-long TCP timeout.
REDIS_TIMEOUTS = {"socket_connect_timeout": 1.0, "socket_timeout": 2.0}


@dataclass(frozen=True)
class Admission:
    over_limit: bool
    keys_generation: int  # 0: unknown
    routing_tokens: dict[int, int] = field(default_factory=dict)  # harness id → token, for routing.tokens_read
    room_token: int = 0  # the room's (serving.selectors.room_token_key), when asked for; 0: unknown


def _redis_script():
    """One client and one registered script per process. Django's Redis cache builds a new client (and
    copies its table of response callbacks) for every command, which cost more CPU than the commands."""
    global _script
    if _script is None:
        import redis

        with _client_lock:
            if _script is None:
                _script = redis.Redis.from_url(settings.REDIS_URL, **REDIS_TIMEOUTS).register_script(_ADMIT)
    return _script


def _number(raw) -> int:
    """An integer the cache stored as plain digits; 0 for anything else (missing, or an older pickled value)."""
    return int(raw) if raw is not None and raw.isdigit() else 0


def reply_admit(*, key: str, limit_per_minute: int, harness_id: int | None) -> Admission:
    """Count this request in `key`'s window of the current minute and read what the reply route needs."""
    if not getattr(settings, "REDIS_URL", None):
        from serving.services import rate_limit_hit

        return Admission(over_limit=rate_limit_hit(key=key, limit_per_minute=limit_per_minute),
                         keys_generation=cache.get(API_ACCESS_GENERATION) or 0)
    import redis

    keys = _admit_keys(key, harness_id)
    try:
        replies = _redis_script()(keys=keys, args=[WINDOW_TIMEOUT_S, new_token()])
    except redis.RedisError as error:
        cache_failed("admitting a reply", error)
        return Admission(over_limit=_counted_here(key, limit_per_minute), keys_generation=0)
    cache_answered()
    return _admission(replies, limit_per_minute, harness_id)


_local_windows: dict[str, tuple[int, int]] = {}  # key → (minute, replies counted here), while Redis is away


def _counted_here(key: str, limit_per_minute: int) -> bool:
    """This process's own fixed one-minute window for `key` (module docstring); True when over the limit."""
    minute = int(time.time() // 60)
    with _client_lock:
        if len(_local_windows) > 10_000:
            _local_windows.clear()
        start, count = _local_windows.get(key, (minute, 0))
        count = count + 1 if start == minute else 1
        _local_windows[key] = (minute, count)
    return count > limit_per_minute


async def reply_admit_async(*, key: str, limit_per_minute: int, harness_id: int | None,
                            room: tuple[int, str]) -> Admission:
    """`reply_admit` on the event loop (serving.lean_reply), which reads the token of `room` (workspace id,
    room id) too: the loop's own pipelined connection (serving.redis_loop), or redis-py's asyncio client for a
    URL it does not take; needs REDIS_URL."""
    keys = _admit_keys(key, harness_id, _process_cache().make_key, room_token_key(*room))
    replies = await _script_on_loop(_ADMIT, _ADMIT_SHA, keys, [WINDOW_TIMEOUT_S, new_token()])
    *replies, room_token = replies
    return _admission(replies, limit_per_minute, harness_id, room_token=_number(room_token))


def _admit_keys(key: str, harness_id: int | None, make_key=None, *more: str) -> list[str]:
    names = [f"ratelimit:{key}:{int(time.time() // 60)}", API_ACCESS_GENERATION]
    if harness_id is not None:
        names.append(routing.token_key(harness_id))
    make_key = make_key or cache.make_key  # this context's cache unless the caller brings one
    return [make_key(name) for name in (*names, *more)]


@functools.cache
def _process_cache():
    """The default cache's backend for making keys on the loop (where `cache` would build one for every task)."""
    return caches.create_connection(DEFAULT_CACHE_ALIAS)


def _admission(replies: list, limit_per_minute: int, harness_id: int | None, room_token: int = 0) -> Admission:
    count, generation, *token = replies
    tokens = {harness_id: _number(token[0])} if token and _number(token[0]) else {}
    return Admission(over_limit=count > limit_per_minute, keys_generation=_number(generation), routing_tokens=tokens,
                     room_token=room_token)


async def routing_token_async(harness_id: int) -> int:
    """The routing token of `harness_id` read on the event loop, made when missing (0: Redis cannot say)."""
    keys = [_process_cache().make_key(routing.token_key(harness_id))]
    (token,) = await _script_on_loop(_TOKENS, _TOKENS_SHA, keys, [0, new_token()])
    return _number(token)


async def _script_on_loop(source: str, sha: str, keys: list[str], args: list):
    """A script's answer on the loop's own pipelined connection (serving.redis_loop), or on redis-py's asyncio
    client for a URL that it does not take."""
    if redis_loop.supported(settings.REDIS_URL):
        client = await redis_loop.loop_redis(settings.REDIS_URL)
        return await client.script(source, sha, keys, args)
    return await _async_script(source)(keys=keys, args=args)


_async_clients: dict = {}  # event loop → its redis-py client and the scripts registered on it (by source)


def _async_script(source: str):
    import asyncio

    import redis.asyncio

    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        for stale in [other for other in _async_clients if other.is_closed()]:
            del _async_clients[stale]
        client = _async_clients[loop] = (redis.asyncio.Redis.from_url(settings.REDIS_URL), {})
    redis_client, scripts = client
    if source not in scripts:
        scripts[source] = redis_client.register_script(source)
    return scripts[source]
