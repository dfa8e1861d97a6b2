"""Pure pieces of authentication and limits: job tokens, the submission bucket, --since."""

from __future__ import annotations

import pytest

from corral.cli.auth import parse_since
from corral.errors import LimitExceededError, ValidationError
from corral.scheduling.config import Limits
from corral.server.db.models import TokenRow
from corral.server.services.auth import job_token, parse_job_token
from corral.server.services.auth_cache import TokenCache
from corral.server.services.ratelimit import SubmitLimiter

KEY = b"k" * 32


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        (job_token(KEY, 7, 2), (7, 2)),
        (job_token(b"other key", 7, 2), None),
        (job_token(KEY, 7, 2).replace("crj_7.", "crj_8."), None),  # another job, same MAC
        ("crj_7.2", None),
        ("crj_a.b.c", None),
        ("crl_plain", None),
    ],
    ids=["genuine", "other-key", "swapped-job", "truncated", "garbage", "api-token"],
)
def test_job_tokens(secret: str, expected: tuple[int, int] | None) -> None:
    assert parse_job_token(KEY, secret) == expected


def test_job_token_is_stable_and_per_attempt() -> None:
    assert job_token(KEY, 1, 0) == job_token(KEY, 1, 0)
    assert job_token(KEY, 1, 0) != job_token(KEY, 1, 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_submission_bucket_refills_at_the_rate_per_user() -> None:
    clock = FakeClock()
    limiter = SubmitLimiter(clock=clock)
    limits = Limits(submissions_per_second=2.0, submission_burst=3)
    for _ in range(3):
        limiter.take("a", limits)
    with pytest.raises(LimitExceededError) as refused:
        limiter.take("a", limits)
    assert refused.value.retry_after == pytest.approx(0.5)
    limiter.take("b", limits)  # buckets are per user
    clock.now += 0.5
    limiter.take("a", limits)
    with pytest.raises(LimitExceededError):
        limiter.take("a", limits)
    clock.now += 100
    for _ in range(3):  # refills up to the burst, no further
        limiter.take("a", limits)
    with pytest.raises(LimitExceededError):
        limiter.take("a", limits)


def test_no_rate_means_unlimited() -> None:
    limiter = SubmitLimiter(clock=FakeClock())
    for _ in range(1000):
        limiter.take("a", Limits(submissions_per_second=None))


def test_users_get_a_default_rate_and_admins_do_not() -> None:
    limiter = SubmitLimiter(clock=FakeClock())
    for _ in range(500):  # the default burst
        limiter.take("user", Limits())
    with pytest.raises(LimitExceededError, match="50 job\\(s\\) per second \\(burst 500\\)"):
        limiter.take("user", Limits())
    for _ in range(1000):
        limiter.take("admin", Limits().for_caller(admin=True))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("90s", 910.0), ("1h", 1000.0 - 3600), ("30", 970.0), ("1700000000", 1.7e9)],
)
def test_since(value: str, expected: float) -> None:
    assert parse_since(value, now=1000.0) == expected


def test_since_refuses_nonsense() -> None:
    with pytest.raises(ValidationError, match="--since"):
        parse_since("last tuesday", now=0)
    assert parse_since("2026-01-01T00:00:00+00:00") == 1767225600.0


def test_token_cache_expires_entries_and_clear_forgets_them() -> None:
    clock = FakeClock()
    cache = TokenCache(ttl=5.0, maxsize=2, timer=clock)
    row = TokenRow(id=1, user="bob", role="user")
    cache.put("h1", row, cache.generation())
    assert cache.get("h1") is row
    clock.now += 4.9
    assert cache.get("h1") is row
    clock.now += 0.2
    assert cache.get("h1") is None  # expired: looked up again
    for n in range(3):  # bounded
        cache.put(f"k{n}", row, cache.generation())
    assert sum(cache.get(f"k{n}") is not None for n in range(3)) == 2
    cache.clear()
    assert all(cache.get(f"k{n}") is None for n in range(3))


def test_token_cache_ignores_a_lookup_that_raced_a_revocation() -> None:
    cache = TokenCache(ttl=5.0, timer=FakeClock())
    generation = cache.generation()  # a lookup starts...
    cache.clear()  # ...a revocation on this replica ends...
    cache.put("h", TokenRow(id=1, user="bob", role="user"), generation)  # ...it finishes
    assert cache.get("h") is None
    assert TokenCache(ttl=0).get("h") is None  # ttl 0: no cache
