"""What routes a harness's live requests (label → version, its experiment), remembered per process.

The reply API resolves a label (and looks for a running experiment) on every request; these change only
when someone moves a label or starts/stops an experiment. A process keeps what it resolved beside a
token per harness (workspaces.tokens: replaced by every such change, read in one cache round trip), so
every process sees the change on its next request at the cost of one cache read instead of the queries.
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from workspaces.tokens import current_tokens, token_replaced

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


def routing_changed(harness_id: int) -> None:
    """Call inside the transaction that changes a harness's labels or experiments (or its row)."""
    token_replaced(token_key(harness_id))


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
