"""A bounded, short-lived cache of verified API tokens (secret hash -> token row).

Saves the token lookup on most calls. A revocation through this replica takes effect at
once (:meth:`TokenCache.clear` on every revocation); one through another replica takes
effect here within ``ttl`` seconds, when the cached entry expires. Only live tokens are
cached: an unknown or revoked secret is looked up every time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from corral.server.db.models import TokenRow

DEFAULT_TTL = 5.0  # seconds a verified token is trusted without a lookup
DEFAULT_SIZE = 4096  # tokens


class TokenCache:
    def __init__(
        self,
        ttl: float = DEFAULT_TTL,
        maxsize: int = DEFAULT_SIZE,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._entries: TTLCache[str, TokenRow] = TTLCache(maxsize, ttl, timer=timer)
        self._lock = threading.Lock()
        self._generation = 0  # bumped by clear(): a lookup that raced it is not cached

    def get(self, secret_hash: str) -> TokenRow | None:
        if self.ttl <= 0:
            return None
        with self._lock:
            return self._entries.get(secret_hash)

    def generation(self) -> int:
        """Pass to :meth:`put` with a row read after this call."""
        return self._generation

    def put(self, secret_hash: str, row: TokenRow, generation: int) -> None:
        """Cache a live token read from the database, unless a revocation cleared the
        cache since ``generation`` was taken (the row may predate it)."""
        if self.ttl <= 0:
            return
        with self._lock:
            if generation == self._generation:
                self._entries[secret_hash] = row

    def clear(self) -> None:
        """Forget every token (after a revocation on this replica)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()
