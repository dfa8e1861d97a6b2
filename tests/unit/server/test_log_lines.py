"""What a reader sees in place of log bytes dropped past the log cap."""

from __future__ import annotations

from corral.server.services.logs import dropped_line


def test_dropped_lines() -> None:
    assert dropped_line(0, 123_456_789, 100 * 10**6) == (
        "[corral: the first 123,456,789 bytes of this log were dropped: it passed the log "
        "cap of 100 MB]\n"
    )
    assert dropped_line(500, 80, 1536) == (
        "[corral: 80 bytes of this log were dropped here: it passed the log cap of 1.5 KB]\n"
    )
