"""Logging of the daemons (``corral server``, ``corral agent``): a level, and text or
JSON lines on stderr.

JSON: one object per line with ``time`` (ISO 8601, UTC), ``level``, ``logger`` and
``message``, plus ``exception`` (the traceback) when a record carries one.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import TextIO

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Level(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class Format(StrEnum):
    text = "text"
    json = "json"


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(
    level: Level | str = Level.info, fmt: Format | str = Format.text, stream: TextIO | None = None
) -> None:
    """Send every log record at ``level`` or above to ``stream`` (stderr) in ``fmt``,
    replacing the root logger's handlers. A name not of :class:`Level` or :class:`Format`
    (any case) raises ``ValueError``."""
    level, fmt = Level(str(level).lower()), Format(str(fmt).lower())
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt is Format.json else logging.Formatter(TEXT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


class _StderrHandler(logging.StreamHandler):
    """Writes each record to ``sys.stderr`` as it is then, not as it was when configured:
    a command run in-process (a test's CLI runner) swaps stderr and closes its copy."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass
