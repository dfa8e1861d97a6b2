"""Pauses between retries: exponential backoff with full jitter.

Every agent (or client) that lost the server retries after a random pause drawn from
``[0, min(cap, base * 2 ** (attempt - 1))]``, so that after a server restart they come
back spread out rather than all at once, each round ("Exponential Backoff And Jitter",
AWS Architecture Blog, 2015).
"""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff(
    attempt: int, base: float, cap: float, draw: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before retry number ``attempt`` (1: the first retry): uniform in
    ``[0, min(cap, base * 2 ** (attempt - 1))]``. ``draw`` returns a number in [0, 1)
    (tests pass their own)."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 64))  # (no overflow on long outages)
    return ceiling * draw()
