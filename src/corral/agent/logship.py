"""Shipping a task's log to the server: the next piece, the per-task cap, freeing disk.

A task appends to its log file directly (the agent is not on its output path, so a task
survives an agent restart). The agent ships the file in pieces; the server acknowledges
the bytes it holds. Bytes the server holds are released on disk (a hole is punched in the
file, which keeps its size so that offsets stay valid); past the server's log cap the
oldest unshipped bytes are skipped (and released) instead of shipped, so neither the
node's disk nor the server's database holds more than about the cap per task.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
from dataclasses import dataclass
from pathlib import Path

LOG_CHUNK = 512 * 1024
"""Bytes of one running task's log per sync."""
FINAL_CHUNK = 4 * 1024 * 1024
"""Bytes of an exited task's log per sync: most logs end in the sync that reports the exit."""
SYNC_LOG_BUDGET = 8 * 1024 * 1024
"""Log bytes in one sync request, all tasks together."""

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


@dataclass
class LogCursor:
    """Where one task's log stands: ``server_offset`` bytes acknowledged by the server
    (-1: the server wants none of it), ``freed`` bytes at the start released on disk."""

    path: Path
    server_offset: int = 0
    freed: int = 0


@dataclass(frozen=True)
class Piece:
    """The next bytes to ship, from ``offset``; ``at_end``: they reach the end of the file.
    An ``offset`` past the server's means the bytes in between were dropped (log cap)."""

    offset: int
    data: bytes
    at_end: bool


def next_piece(cursor: LogCursor, limit: int, cap: int | None) -> Piece | None:
    """Up to ``limit`` bytes the server lacks; None when it wants none or the file is gone.

    With a ``cap``, at most the newest ``cap`` bytes past the server's offset are shipped:
    older ones are skipped, and released on disk."""
    if cursor.server_offset < 0:
        return None
    try:
        with cursor.path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = cursor.server_offset
            if cap and size - start > cap:
                start = size - cap
                release(cursor, start)
            handle.seek(start)
            data = handle.read(limit)
    except FileNotFoundError:
        return None
    return Piece(start, data, start + len(data) >= size)


def release(cursor: LogCursor, upto: int) -> None:
    """Free the disk blocks of the log's first ``upto`` bytes (best effort: where the file
    system cannot punch holes, the bytes stay until the log is deleted)."""
    if upto <= cursor.freed:
        return
    try:
        fd = os.open(cursor.path, os.O_WRONLY)
    except OSError:
        return
    try:
        if _punch_hole(fd, upto):
            cursor.freed = upto
    finally:
        os.close(fd)


def drained(cursor: LogCursor) -> bool:
    """True when the server holds the whole file (or wants none of it)."""
    if cursor.server_offset < 0:
        return True
    try:
        return cursor.server_offset >= cursor.path.stat().st_size
    except FileNotFoundError:
        return True


def _punch_hole(fd: int, length: int) -> bool:
    fallocate = _fallocate()
    if fallocate is None:
        return False
    mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
    with contextlib.suppress(OSError):
        return fallocate(fd, mode, 0, length) == 0
    return False


@functools.cache
def _fallocate():  # noqa: ANN202 - a ctypes function or None
    """libc's ``fallocate(2)`` wrapper (Linux), looked up once; None where there is none."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function
