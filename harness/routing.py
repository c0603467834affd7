"""What routes a harness's live requests (label → version, its experiment), remembered per process.

The reply API resolves a label (and looks for a running experiment) on every request; these change only
when someone moves a label or starts/stops an experiment. A process keeps what it resolved beside a
token per harness that lives in the shared cache (Redis); every such change replaces the token, so
every process sees the change on its next request at the cost of one cache read instead of the queries.

The token is replaced twice: inside the writer's transaction (a reader of a new token must not keep
what it read before the commit, so the second replacement after the commit invalidates that too) and
after the commit. A change is therefore visible to every request that starts after the writer returns.
Without a shared cache (embedded mode, one process serving) the local cache plays the same role.

A token is a random integer, which Django's Redis cache stores as plain digits: the reply API reads it with
its rate limit in one Redis round trip (`tokens_read`) instead of asking the cache again here.
"""

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.core.cache import cache
from django.db import transaction

_MAX_ENTRIES = 4096
_memo: dict[tuple[int, Any], tuple[str, Any]] = {}
_lock = threading.Lock()
# Tokens this request has read already (see `tokens_read`); None outside one.
_read: ContextVar[dict[int, int] | None] = ContextVar("routing_tokens_read", default=None)
# True while a caller on the event loop may only use what is remembered (see `from_memory`).
_memory_only: ContextVar[bool] = ContextVar("routing_memory_only", default=False)


class NotRemembered(LookupError):
    """Under `from_memory`: answering needs a read of the database."""


def token_key(harness_id: int) -> str:
    """The cache key (before the cache's prefix) of a harness's token."""
    return f"routing:{harness_id}"


def new_token() -> int:
    return secrets.randbits(62) + 1  # never 0, which stands for "no token"


@contextmanager
def tokens_read(tokens: dict[int, int]) -> Iterator[None]:
    """Within one request: use these tokens (harness id → token, just read from the shared cache by the
    caller) and keep each token read here, so a request asks the cache about a harness at most once."""
    reset = _read.set(dict(tokens))
    try:
        yield
    finally:
        _read.reset(reset)


@contextmanager
def from_memory() -> Iterator[None]:
    """Within: `remembered` answers only from memory (with the tokens of `tokens_read`) and raises NotRemembered
    where it would compute, so a caller on the event loop finds out, without a query, whether it can answer."""
    reset = _memory_only.set(True)
    try:
        yield
    finally:
        _memory_only.reset(reset)


def memory_only() -> bool:
    """Whether the caller is inside `from_memory` (a selector that would query must raise NotRemembered)."""
    return _memory_only.get()


def routing_token(harness_id: int) -> int:
    """The current token of a harness's routing (made on first use; lost tokens are simply remade)."""
    known = _read.get()
    if known is not None and harness_id in known:
        return known[harness_id]
    token = current_tokens(token_key(harness_id))[0]
    if known is not None and token:
        known[harness_id] = token
    return token


def current_tokens(*keys: str) -> list[int]:
    """The tokens under `keys` (cache keys) in one cache read, each made when missing; 0 where the cache
    cannot say, which never matches a token kept beside something remembered."""
    found = cache.get_many(keys)
    missing = [key for key in keys if key not in found]
    if missing:
        for key in missing:
            cache.add(key, new_token(), timeout=None)
        found.update(cache.get_many(missing))
    return [token if isinstance(token, int) else 0 for token in (found.get(key) for key in keys)]


def routing_changed(harness_id: int) -> None:
    """Call inside the transaction that changes a harness's labels or experiments (or its row)."""
    token_replaced(token_key(harness_id))


def token_replaced(key: str) -> None:
    """Replace the token under `key` now and again after the commit (see the module's docstring); call inside
    the transaction that changes what the token stands for."""
    def replace() -> None:
        cache.set(key, new_token(), timeout=None)

    replace()
    transaction.on_commit(replace)


def remembered(harness_id: int, what: Any, compute: Callable[[], Any]) -> Any:
    """`compute()` (a read of this harness's routing), reused while the harness's token stays the same.

    An exception from `compute` (an unknown label) is raised and nothing is remembered."""
    if _memory_only.get():
        known = _read.get() or {}
        hit = _memo.get((harness_id, what))
        if harness_id in known and hit is not None and hit[0] == known[harness_id]:
            return hit[1]
        raise NotRemembered(what)
    token = routing_token(harness_id)
    if not token:
        return compute()
    key = (harness_id, what)
    hit = _memo.get(key)
    if hit is not None and hit[0] == token:
        return hit[1]
    value = compute()
    with _lock:
        if len(_memo) >= _MAX_ENTRIES:
            _memo.clear()
        _memo[key] = (token, value)
    return value
