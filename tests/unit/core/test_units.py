"""Durations and sizes as manifests write them, and their short human forms."""

from __future__ import annotations

import pytest

from corral.core.units import format_duration, format_size, parse_duration, parse_size

GB = 1000**3
GIB = 1024**3


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param(90, 90.0, id="int-is-seconds"),
        pytest.param(1.5, 1.5, id="float-is-seconds"),
        pytest.param(0, 0.0, id="zero"),
        pytest.param("45", 45.0, id="numeric-string"),
        pytest.param(" 30 ", 30.0, id="numeric-string-padded"),
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("15m", 900.0, id="minutes"),
        pytest.param("4h", 14400.0, id="hours"),
        pytest.param("2d", 172800.0, id="days"),
        pytest.param("1w", 604800.0, id="weeks"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1.5h", 5400.0, id="fractional-hours"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param("1h 30m 15s", 5415.0, id="compound-with-spaces"),
        pytest.param("2H", 7200.0, id="upper-case-unit"),
        pytest.param("7d", 7 * 86400.0, id="fair-share-half-life"),
    ],
)
def test_parse_duration_accepts(value: str | int | float, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("4 hours?", id="words"),
        pytest.param("", id="empty"),
        pytest.param("h", id="unit-without-number"),
        pytest.param("abc", id="garbage"),
        pytest.param("10x", id="unknown-unit"),
        pytest.param("1h30", id="trailing-number"),
        pytest.param("-5s", id="negative-with-unit"),
        pytest.param(-1, id="negative-number"),
        pytest.param("-1", id="negative-string"),
        pytest.param("nan", id="nan"),
        pytest.param(float("inf"), id="infinite"),
        pytest.param(True, id="bool"),
    ],
)
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)  # type: ignore[arg-type]


def test_parse_duration_error_shows_expected_form() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("4 hours?")
    assert "90s" in str(info.value)
    assert "'4 hours?'" in str(info.value)


@pytest.mark.parametrize(
    ("value", "num_bytes"),
    [
        pytest.param(0, 0, id="zero"),
        pytest.param(1024, 1024, id="int-is-bytes"),
        pytest.param(1.9, 1, id="float-truncates"),
        pytest.param("512", 512, id="numeric-string"),
        pytest.param("20GB", 20 * GB, id="decimal-gb"),
        pytest.param("20gb", 20 * GB, id="lower-case"),
        pytest.param("20 GB", 20 * GB, id="space-before-unit"),
        pytest.param("20G", 20 * GB, id="short-decimal"),
        pytest.param("256GiB", 256 * GIB, id="binary-gib"),
        pytest.param("256Gi", 256 * GIB, id="short-binary"),
        pytest.param("1TB", 1000**4, id="terabyte"),
        pytest.param("1TiB", 1024**4, id="tebibyte"),
        pytest.param("512M", 512 * 1000**2, id="megabyte"),
        pytest.param("4KiB", 4096, id="kibibyte"),
        pytest.param("1.5GB", 1_500_000_000, id="fractional"),
        pytest.param("100B", 100, id="bytes-suffix"),
    ],
)
def test_parse_size_accepts(value: str | int | float, num_bytes: int) -> None:
    assert parse_size(value) == num_bytes
    assert isinstance(parse_size(value), int)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("lots", id="garbage"),
        pytest.param("", id="empty"),
        pytest.param("GB", id="unit-without-number"),
        pytest.param("20XB", id="unknown-unit"),
        pytest.param("-1GB", id="negative-string"),
        pytest.param(-1, id="negative-number"),
        pytest.param("1e3", id="exponent"),
        pytest.param(float("nan"), id="nan"),
        pytest.param(True, id="bool"),
    ],
)
def test_parse_size_refuses(value: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "-", id="none"),
        pytest.param(0, "0s", id="zero"),
        pytest.param(-5, "0s", id="negative-clamped"),
        pytest.param(59, "59s", id="under-a-minute"),
        pytest.param(60, "1m00s", id="one-minute"),
        pytest.param(90, "1m30s", id="minutes-and-seconds"),
        pytest.param(3725, "1h02m", id="hours-and-minutes"),
        pytest.param(47 * 3600 + 59 * 60, "47h59m", id="just-under-two-days"),
        pytest.param(48 * 3600, "2d0h", id="two-days"),
        pytest.param(3 * 86400 + 5 * 3600, "3d5h", id="days-and-hours"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [
        pytest.param(None, "-", id="none"),
        pytest.param(0, "0B", id="zero"),
        pytest.param(999, "999B", id="bytes"),
        pytest.param(1000, "1KB", id="kilobyte"),
        pytest.param(1536, "1.5KB", id="fractional-kilobyte"),
        pytest.param(80 * GB, "80GB", id="gpu-memory"),
        pytest.param(1_500_000_000_000, "1.5TB", id="fractional-terabyte"),
        pytest.param(5 * 1000**2, "5MB", id="megabytes"),
    ],
)
def test_format_size(num_bytes: int | None, text: str) -> None:
    assert format_size(num_bytes) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("80GB", id="gb"),
        pytest.param("1TB", id="tb"),
        pytest.param("512MB", id="mb"),
    ],
)
def test_format_size_round_trips_decimal_sizes(text: str) -> None:
    assert format_size(parse_size(text)) == text
