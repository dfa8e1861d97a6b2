"""Task logs: stored in chunks as agents ship them, at most ``log_cap`` bytes per task.

Offsets are positions in the whole log as the task wrote it. ``TaskRow.log_size`` is how
far the server has accounted for (what the agent's acks call ``log_offset``), and
``TaskRow.log_dropped`` how many of those bytes are not stored: the oldest, deleted once a
task's stored log passes the cap, and any the agent skipped (a chunk past ``log_size``).
Readers keep the offset protocol: a gap in the stored chunks is skipped, with one line
saying how many bytes were dropped there. A job step's task (``StepTaskRow``) keeps its log
the same way, apart from the job's tasks (``LogChunkRow.step``).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from corral.core.units import format_size
from corral.server.db.models import LogChunkRow, StepTaskRow, TaskRow

TRIM_BATCH = 256  # chunks looked at per query while trimming
LogOwner = TaskRow | StepTaskRow  # a process whose log is kept


def store_chunk(session: Session, task: LogOwner, offset: int, data: bytes, cap: int) -> None:
    """Store ``data``, found at ``offset`` of ``task``'s log (see the module docstring).

    A chunk before ``log_size`` repeats what the server has (ignored); one past it means
    the agent dropped the bytes in between (counted as dropped). Of a chunk longer than
    ``cap`` only its last ``cap`` bytes are kept. Past ``cap`` stored bytes, the oldest
    chunks are deleted."""
    if offset < task.log_size:
        return
    task.log_dropped = task.log_dropped or 0
    if offset > task.log_size:
        task.log_dropped += offset - task.log_size
        task.log_size = offset
    if not data:
        return
    if len(data) > cap:
        skipped = len(data) - cap
        task.log_dropped += skipped
        task.log_size += skipped
        data = data[skipped:]
    session.add(
        LogChunkRow(
            job_id=task.job_id,
            attempt=task.attempt,
            step=step_of(task),
            rank=task.rank,
            offset=task.log_size,
            data=data,
        )
    )
    task.log_size += len(data)
    excess = task.log_size - task.log_dropped - cap
    if excess > 0:
        task.log_dropped += _trim(session, task, excess)


def _trim(session: Session, task: LogOwner, excess: int) -> int:
    """Delete the task's oldest chunks until at least ``excess`` bytes are gone; returns
    how many were. (The newest chunk is never among them: it alone fits the cap.)"""
    freed, after = 0, -1
    while freed < excess:
        rows = session.execute(
            select(LogChunkRow.id, LogChunkRow.offset, func.length(LogChunkRow.data))
            .where(*_of(task), LogChunkRow.offset > after)
            .order_by(LogChunkRow.offset)
            .limit(TRIM_BATCH)
        ).all()
        if not rows:
            break
        doomed = []
        for chunk_id, offset, size in rows:
            if freed >= excess:
                break
            doomed.append(chunk_id)
            freed += size
            after = offset
        session.execute(delete(LogChunkRow).where(LogChunkRow.id.in_(doomed)))
    return freed


def read_log(
    session: Session,
    task: LogOwner | None,
    key: tuple[int, int, int],
    offset: int,
    limit: int,
    cap: int,
    step: int = 0,
) -> tuple[str, int]:
    """The text of one task's log (``key``: job id, attempt, rank; of step ``step``'s task
    of that rank unless 0) from ``offset``, up to about ``limit`` bytes, and the offset to
    continue from. A gap (bytes dropped) reads as one line that says so, and the offset
    moves past it."""
    job_id, attempt, rank = key
    chunks: Iterable[LogChunkRow] = session.scalars(
        select(LogChunkRow)
        .where(
            LogChunkRow.job_id == job_id,
            LogChunkRow.attempt == attempt,
            LogChunkRow.step == step,
            LogChunkRow.rank == rank,
            LogChunkRow.offset + func.length(LogChunkRow.data) > offset,
        )
        .order_by(LogChunkRow.offset)
    )
    parts: list[str] = []
    data = bytearray()
    position = offset
    full = False
    for chunk in chunks:
        if chunk.offset > position:
            parts += [_text(data), dropped_line(position, chunk.offset - position, cap)]
            data = bytearray()
            position = chunk.offset
        data += chunk.data[position - chunk.offset :]
        position = chunk.offset + len(chunk.data)
        if len(data) >= limit:
            full = True
            break
    if not full and task is not None and task.log_size > position:
        # dropped bytes after the last stored chunk (the agent skipped them)
        parts += [_text(data), dropped_line(position, task.log_size - position, cap)]
        data = bytearray()
        position = task.log_size
    parts.append(_text(data))
    return "".join(parts), position


def dropped_line(position: int, count: int, cap: int) -> str:
    """The line a reader sees in place of ``count`` bytes dropped at ``position``."""
    where = f"the first {count:,} bytes" if position == 0 else f"{count:,} bytes"
    here = "" if position == 0 else " here"
    return (
        f"[corral: {where} of this log were dropped{here}: it passed the log cap of "
        f"{_spaced(format_size(cap))}]\n"
    )


def _spaced(size: str) -> str:
    """``100MB`` as ``100 MB``."""
    digits = size.rstrip("KMGTPEB")
    return f"{digits} {size[len(digits) :]}" if digits != size else size


def _text(data: bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")


def step_of(task: LogOwner) -> int:
    """The step whose task ``task`` is; 0 for a task of the job itself."""
    return task.step if isinstance(task, StepTaskRow) else 0


def _of(task: LogOwner) -> tuple:
    return (
        LogChunkRow.job_id == task.job_id,
        LogChunkRow.attempt == task.attempt,
        LogChunkRow.step == step_of(task),
        LogChunkRow.rank == task.rank,
    )
