"""Per-user submission rate: a token bucket per user, kept in this replica's memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.errors import LimitExceededError
from corral.scheduling.config import Limits


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class SubmitLimiter:
    """``take(user, limits)`` spends one submission or raises ``LimitExceededError`` with
    the seconds until one is available. Each replica keeps its own buckets, so with R
    replicas a user may submit up to R times the configured rate."""

    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, user: str, limits: Limits) -> None:
        rate = limits.submissions_per_second
        if rate is None:
            return
        burst = float(limits.submission_burst or max(1.0, rate))
        now = self.clock()
        with self._lock:
            bucket = self._buckets.setdefault(user, _Bucket(burst, now))
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens < 1.0:
                wait = (1.0 - bucket.tokens) / rate
                raise LimitExceededError(
                    f"too many submissions: {user} may submit {rate:g} job(s) per second "
                    f"(burst {burst:g}); retry in {wait:.1f}s",
                    retry_after=wait,
                )
            bucket.tokens -= 1.0
