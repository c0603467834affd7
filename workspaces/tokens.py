"""Shared-cache tokens: what lets a process trust what it remembered.

A process that keeps something read from the database (a harness's routing, a room, an API key) keeps it beside
the token it read under a key in the shared cache (Redis). Every writer that changes what the key stands for
replaces the token, so every process sees the change on its next read of the token instead of asking the
database each time.

The token is replaced twice: inside the writer's transaction (a reader of a new token must not keep what it read
before the commit, so the second replacement after the commit invalidates that too) and after the commit. A
change is therefore visible to every request that starts after the writer returns. Without a shared cache
(embedded mode, one process serving) the local cache plays the same role.

A token is a random integer, which Django's Redis cache stores as plain digits, so the reply API can read tokens
with its rate limit in one Redis round trip.
"""

import secrets

from django.core.cache import cache
from django.db import transaction


def new_token() -> int:
    return secrets.randbits(62) + 1  # never 0, which stands for "no token"


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


def token_replaced(key: str) -> None:
    """Replace the token under `key` now and again after the commit (see the module's docstring); call inside
    the transaction that changes what the token stands for."""
    def replace() -> None:
        cache.set(key, new_token(), timeout=None)

    replace()
    transaction.on_commit(replace)
