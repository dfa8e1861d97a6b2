"""Parsing and formatting of durations and byte sizes as they appear in manifests.

Durations: numbers are seconds; strings take a unit suffix (``90s``, ``15m``, ``4h``,
``2d``, ``1h30m``). Sizes: numbers are bytes; strings take a decimal or binary suffix
(``20GB``, ``256GiB``, ``1TB``, ``512M``). Both raise ``ValueError`` with a message that
shows the expected form.
"""

from __future__ import annotations

import math
import re

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``value``; a bare number is seconds. Never negative."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 90s, 15m or 4h, got {_shown(value)}")
    if isinstance(value, int | float):
        seconds = _float(value, "duration")
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not parts or _DURATION_PART.sub("", text).strip():
                raise ValueError(
                    f"expected a duration such as 90s, 15m or 4h, got {_shown(value)}"
                ) from None
            seconds = sum(float(n) * _DURATION_UNITS[u.lower()] for n, u in parts)
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"a duration must be a finite number >= 0, got {_shown(value)}")
    return seconds


def parse_size(value: str | int | float) -> int:
    """Bytes in ``value``; a bare number is bytes. Never negative."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 20GB or 256GiB, got {_shown(value)}")
    if isinstance(value, int | float):
        number, unit = _float(value, "size"), ""
    else:
        match = _SIZE.match(value)
        if not match or match.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"expected a size such as 20GB or 256GiB, got {_shown(value)}")
        number, unit = float(match.group(1)), match.group(2).lower()
    if number < 0 or math.isinf(number) or math.isnan(number):
        raise ValueError(f"a size must be a finite number >= 0, got {_shown(value)}")
    return int(number * _SIZE_UNITS[unit])


def _shown(value: object) -> str:
    """``repr(value)``, cut short: an error message need not repeat 400 digits."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _float(value: int | float, what: str) -> float:
    """``float(value)``; an integer too large for a float is a ``ValueError``."""
    try:
        return float(value)
    except OverflowError:
        digits = int(int(value).bit_length() * 0.30103) + 1
        raise ValueError(
            f"a {what} must be a finite number >= 0, got an integer of about {digits} digits"
        ) from None


def format_duration(seconds: float | None) -> str:
    """``3725 -> '1h2m'``; short and human, for tables. Total: any float gives a string
    (an infinite or absurd one says so rather than failing)."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds >= 1000 * 365 * 86400:  # a thousand years and more: no need for days
        return "forever" if math.isinf(seconds) else f"{seconds / (365 * 86400):.3g} years"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


_SIZE_STEPS = (
    ("EB", 1000**6),
    ("PB", 1000**5),
    ("TB", 1000**4),
    ("GB", 1000**3),
    ("MB", 1000**2),
    ("KB", 1000),
)


def format_size(num_bytes: int | None) -> str:
    """``80_000_000_000 -> '80GB'`` (decimal units, as GPU vendors write them)."""
    if num_bytes is None:
        return "-"
    if num_bytes >= 1000**7:  # past exabytes: an exponent, never a 40-digit number
        return f"{float(num_bytes):.3g}B"
    for unit, factor in _SIZE_STEPS:
        if num_bytes >= factor:
            value = num_bytes / factor
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{num_bytes}B"
