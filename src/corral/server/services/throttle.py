"""Array throttles in the control plane: with ``%MAX`` at most MAX elements of an array
run (or are being preempted) at once (SPEC section 9).

The elements of throttled arrays are not read with the other pending jobs: per array, a
cycle counts the pending and the running elements (two grouped queries over all throttled
arrays) and reads only the lowest-index pending elements it may still start, the ones it
offers the scheduler (one query per array with room). The others are never read: one
update per array gives them their reason, changing only the rows whose reason differs.
An array of 10,000 elements with ``%10`` thus costs the scheduler what 10 jobs do, and the
database a few scans inside SQL (``docs/benchmarks.md``). The rule is the simulator's
(``core.array.throttle``): room for ``MAX`` minus the running, lowest indices first.

Held elements are neither offered nor counted; elements waiting on a dependency
(``services.dependencies``) are skipped when offering, and keep their own reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, bindparam, func, select, update
from sqlalchemy.orm import Session

from corral.core.array import throttle_reason
from corral.core.job import JobState
from corral.server.db.models import JobRow
from corral.server.services.dependencies import Gates

_JOBS = JobRow.__table__
_ACTIVE = (JobState.RUNNING.value, JobState.PREEMPTING.value)


def throttled_pending(session: Session, columns: Sequence, gates: Gates) -> list[Row]:
    """The elements of throttled arrays to offer the scheduler this cycle (rows of
    ``columns``, which hold ``array_task_id``), in index order within each array: as many
    of its lowest-index pending elements (neither held nor waiting on a dependency, see
    ``gates``) as its throttle leaves room for. The arrays whose other elements wait go
    to ``gates.throttled``."""
    counts = list(
        session.execute(
            select(JobRow.array_job_id, JobRow.array_max, func.count())
            .where(
                JobRow.state == JobState.PENDING.value,
                JobRow.array_max.is_not(None),
                JobRow.held.is_(False),
            )
            .group_by(JobRow.array_job_id, JobRow.array_max)
        )
    )
    if not counts:
        return []
    running = _running(session, [array_id for array_id, _, _ in counts])
    left_out = gates.left_out
    offered: list[Row] = []
    for array_id, limit, pending in counts:
        waiting = gates.waiting_elements.get(array_id, 0)
        room = max(0, limit - running.get(array_id, 0))
        taken: list[Row] = []
        if room and pending > waiting:
            rows = session.execute(
                select(*columns)
                .where(
                    JobRow.array_job_id == array_id,
                    JobRow.state == JobState.PENDING.value,
                    JobRow.held.is_(False),
                )
                .order_by(JobRow.array_task_id)
                .limit(room + waiting)
            )
            taken = [row for row in rows if row[0] not in left_out][:room]
        if pending - waiting > len(taken):  # some wait for the throttle
            last = taken[-1].array_task_id if taken else -1
            gates.throttled.append((array_id, last, throttle_reason(array_id, limit), waiting > 0))
        offered += taken
    return offered


def _running(session: Session, arrays: list[int]) -> dict[int, int]:
    """Each of ``arrays``' elements running or being preempted (read by state: running
    jobs are few, an array's elements many)."""
    wanted = set(arrays)
    rows = session.execute(
        select(JobRow.array_job_id, func.count())
        .where(JobRow.state.in_(_ACTIVE), JobRow.array_max.is_not(None))
        .group_by(JobRow.array_job_id)
    )
    return {array_id: count for array_id, count in rows if array_id in wanted}


def _reason_update(skip_dependent: bool):  # noqa: ANN202 -- a statement
    where = [
        _JOBS.c.array_job_id == bindparam("a"),
        _JOBS.c.state == JobState.PENDING.value,
        _JOBS.c.held.is_(False),
        _JOBS.c.array_task_id > bindparam("last"),
        _JOBS.c.reason.is_distinct_from(bindparam("r")),
    ]
    if skip_dependent:  # those wait on their dependency, with its reason
        where.append(_JOBS.c.dependency.is_(None))
    return (
        update(_JOBS)
        .where(*where)
        .values(reason=bindparam("r"), position=None, estimated_start=None)
    )


_REASON = {skip: _reason_update(skip) for skip in (False, True)}


def apply_throttled(session: Session, throttled: list[tuple[int, int, str, bool]]) -> None:
    """Give the elements a throttle held back (those past the last one offered) their
    reason, where it differs; guarded: one started, held or cancelled meanwhile keeps
    its own."""
    connection = session.connection()
    for array_id, last, reason, skip_dependent in throttled:
        connection.execute(_REASON[skip_dependent], {"a": array_id, "last": last, "r": reason})
