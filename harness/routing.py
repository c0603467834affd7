"""What routes a harness's live requests (label → version, its experiment), remembered per process.

The reply API resolves a label (and looks for a running experiment) on every request; these change only
when someone moves a label or starts/stops an experiment. A process keeps what it resolved beside a
token per harness that lives in the shared cache (Redis); every such change replaces the token, so
every process sees the change on its next request at the cost of one cache read instead of the queries.

The token is replaced twice: inside the writer's transaction (a reader of a new token must not keep
what it read before the commit, so the second replacement after the commit invalidates that too) and
after the commit. A change is therefore visible to every request that starts after the writer returns.
Without a shared cache (embedded mode, one process serving) the local cache plays the same role.
"""

import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.db import transaction

_MAX_ENTRIES = 4096
_memo: dict[tuple[int, Any], tuple[str, Any]] = {}
_lock = threading.Lock()


def _token_key(harness_id: int) -> str:
    return f"routing:{harness_id}"


def routing_token(harness_id: int) -> str:
    """The current token of a harness's routing (made on first use; lost tokens are simply remade)."""
    key = _token_key(harness_id)
    token = cache.get(key)
    if token is None:
        cache.add(key, uuid.uuid4().hex, timeout=None)
        token = cache.get(key) or ""  # "" (cache unavailable) never matches a stored token below
    return token


def routing_changed(harness_id: int) -> None:
    """Call inside the transaction that changes a harness's labels or experiments."""
    def replace() -> None:
        cache.set(_token_key(harness_id), uuid.uuid4().hex, timeout=None)

    replace()
    transaction.on_commit(replace)


def remembered(harness_id: int, what: Any, compute: Callable[[], Any]) -> Any:
    """`compute()` (a read of this harness's routing), reused while the harness's token stays the same.

    An exception from `compute` (an unknown label) is raised and nothing is remembered."""
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
