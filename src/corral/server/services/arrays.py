"""Job arrays in the control plane (SPEC section 9; the syntax in ``core.array``).

Each element is a job row of its own (its own id, attempts, logs, events and exit code)
with ``array_job_id`` (the array's id: its first element's job id, as in Slurm),
``array_task_id`` (its index) and ``array_max`` (the throttle). A submission stores the
first element with the other submissions of its batch; the database copies it into the
other elements, and writes their events, in two ``INSERT ... SELECT`` statements over the
indices (:func:`store_elements`): an array of 10,000 is one request of a fraction of a
second, with no per-element work in Python. Cancelling or holding a whole array acts on
its pending elements in two statements, whatever their number (:func:`act_on_array`).

Names: ``12_3`` is element 3 of array 12 (:func:`resolve`); ``12`` alone is job 12,
which for the actions of :func:`names_array` (cancel, hold, release) means the whole
array when 12 is an array's id, as ``scancel 12`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    String,
    and_,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from corral.core.array import (
    array_state,
    element_name,
    parse_job_ref,
    parsed_array,
    state_counts,
)
from corral.core.job import JobState
from corral.errors import ConflictError, NotFoundError, ValidationError
from corral.schemas.api import ArrayOut, JobOut
from corral.server.db.models import EventRow, JobRow
from corral.server.services.transitions import lock_job, move_job

_JOBS = JobRow.__table__
_ACTIVE = (JobState.RUNNING.value, JobState.PREEMPTING.value)
CHUNK = 5000  # ids per IN list


# -- storing ---------------------------------------------------------------------------


def store_elements(
    connection: Connection, first_id: int, spec_text: str, now: float, event: str
) -> list[int]:
    """Store every element of an array but the first (already stored as ``first_id``), as
    copies of the first made by the database (``INSERT ... SELECT`` over the indices: no
    per-element work here), each with its submission event (``event``: its reason); mark
    the first as the array's. Returns the elements' job ids in index order."""
    spec = parsed_array(spec_text)
    connection.execute(update(_JOBS).where(_JOBS.c.id == first_id).values(array_job_id=first_id))
    if spec.count > 1:
        series = _series(connection, list(spec.indices[1:]))
        copied = [c for c in _JOBS.c if c.name not in ("id", "array_task_id")]
        rows = (
            select(*copied, series.c.value)
            .select_from(_JOBS)
            .join(series, true())
            .where(_JOBS.c.id == first_id)
        )
        names = [*(c.name for c in copied), "array_task_id"]
        connection.execute(insert(_JOBS).from_select(names, rows))
        others = [_JOBS.c.array_job_id == first_id, _JOBS.c.id != first_id]
        _record_events(connection, _JOBS, others, "", JobState.PENDING.value, event, now)
    query = (
        select(_JOBS.c.id).where(_JOBS.c.array_job_id == first_id).order_by(_JOBS.c.array_task_id)
    )
    return list(connection.execute(query).scalars())


def _series(connection: Connection, numbers: list[int]) -> Any:
    """``numbers`` as a table of one column, ``value``, in the database's own terms: one
    parameter, however many."""
    if connection.dialect.name == "postgresql":
        values = bindparam("numbers", numbers, type_=postgresql.ARRAY(Integer))
        return func.unnest(values).table_valued("value").render_derived(name="numbers")
    return func.json_each(bindparam("numbers", json.dumps(numbers))).table_valued("value")


def _record_events(
    connection: Connection,
    jobs: Any,
    where: list[Any],
    from_state: str,
    to_state: str,
    reason: str,
    now: float,
) -> None:
    """One event per job of ``jobs`` (a selectable with the jobs table's columns) that
    matches ``where``, written by the database (``INSERT ... SELECT``)."""
    rows = (
        select(
            literal("job"),
            cast(_JOBS.c.id, String),
            _JOBS.c.attempt,
            literal(now),
            literal(from_state),
            literal(to_state),
            literal(reason),
        )
        .select_from(jobs)
        .where(*where)
    )
    columns = ["entity", "entity_id", "attempt", "at", "from_state", "to_state", "reason"]
    connection.execute(insert(EventRow.__table__).from_select(columns, rows))


def array_values(spec_text: str | None) -> dict[str, Any]:
    """The array columns of a submission's first row (all None for a plain job)."""
    if not spec_text:
        return {"array_job_id": None, "array_task_id": None, "array_max": None}
    spec = parsed_array(spec_text)
    return {"array_job_id": None, "array_task_id": spec.min, "array_max": spec.max_running}


def array_out(
    spec_text: str, job_id: int, states: Mapping[str, int], job_ids: Sequence[int] = ()
) -> ArrayOut:
    spec = parsed_array(spec_text)
    return ArrayOut(
        job_id=job_id,
        spec=str(spec),
        tasks=spec.tasks,
        count=spec.count,
        max_running=spec.max_running,
        states=dict(states),
        job_ids=list(job_ids),
    )


# -- names -----------------------------------------------------------------------------


def resolve(session: Session, ref: str) -> int:
    """The job id a name stands for: ``12`` is job 12, ``12_3`` element 3 of array 12;
    ``ValidationError`` for a malformed one, ``NotFoundError`` for a missing one."""
    try:
        job_id, task = parse_job_ref(ref)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    if task is None:
        return job_id
    found = session.scalar(
        select(JobRow.id).where(JobRow.array_job_id == job_id, JobRow.array_task_id == task)
    )
    if found is None:
        raise NotFoundError(f"no job {element_name(job_id, task)}")
    return found


def names_array(ref: str, row: JobRow) -> bool:
    """Whether ``ref`` (resolved to ``row``) names a whole array: a plain id that is an
    array's id."""
    return "_" not in ref and row.array_job_id is not None and row.array_job_id == row.id


def states_of(session: Session, array_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Each array's elements counted by state."""
    out: dict[int, dict[str, int]] = {}
    for chunk in _chunks(sorted(set(array_ids))):
        rows = session.execute(
            select(JobRow.array_job_id, JobRow.state, func.count())
            .where(JobRow.array_job_id.in_(chunk))
            .group_by(JobRow.array_job_id, JobRow.state)
        )
        for array_id, state, count in rows:
            out.setdefault(array_id, {})[state] = count
    return out


def with_array(session: Session, row: JobRow, job: JobOut) -> JobOut:
    """``job`` (``row``'s view) with its array's summary, for an element."""
    if row.array_job_id is None or not row.manifest.get("array"):
        return job
    states = states_of(session, [row.array_job_id]).get(row.array_job_id, {})
    job.array = array_out(row.manifest["array"], row.array_job_id, states)
    return job


# -- acting on a whole array -------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """What cancel, hold or release does to an array's elements: pending ones (those held,
    ``held=True``; not held, ``False``; either, ``None``) get ``values``, and with
    ``cancel`` running ones are cancelled too."""

    verb: str  # in the events: "cancelled by user"
    held: bool | None
    values: Mapping[str, Any]  # the pending elements' new column values
    none_left: str  # the refusal when it applies to no element ("{array}": the array)
    cancel: bool = False


def act_on_array(session: Session, array_id: int, action: Action, now: float) -> list[int]:
    """Apply ``action`` to every element of array ``array_id`` it applies to: pending
    ones in one guarded update with their events, running ones (cancel) one by one as
    ``JobService.cancel`` does. Returns the ids of the running elements cancelled (to
    notify); ``ConflictError`` if it applies to none."""
    states = (JobState.PENDING.value, *(_ACTIVE if action.cancel else ()))
    query = select(JobRow.id, JobRow.state).where(
        JobRow.array_job_id == array_id, JobRow.state.in_(states)
    )
    if action.held is not None:
        query = query.where(JobRow.held.is_(action.held))
    found = list(session.execute(query))
    if not found:
        raise ConflictError(action.none_left.format(array=array_id))
    active = sorted(i for i, s in found if s != JobState.PENDING.value)
    reason = f"{action.verb} by user"
    if len(active) < len(found):
        _update_pending(session, array_id, action, reason, now)
    notified = []
    for job_id in active:  # a few: running elements are bounded by the cluster (and throttle)
        job = lock_job(session, job_id)
        if job is not None and job.state in _ACTIVE:
            move_job(session, job, JobState.CANCELLED, reason, now)
            notified.append(job_id)
    return notified


def _update_pending(
    session: Session, array_id: int, action: Action, reason: str, now: float
) -> None:
    """One update for the array's pending elements (those that are pending still: each
    gets its event in the same transaction, from the rows it changed)."""
    connection = session.connection()
    where = and_(_JOBS.c.array_job_id == array_id, _JOBS.c.state == JobState.PENDING.value)
    if action.held is not None:
        where = and_(where, _JOBS.c.held.is_(action.held))
    values = {**action.values, "position": None, "estimated_start": None, "updated_at": now}
    if action.cancel:
        values |= {"state": JobState.CANCELLED.value, "reason": reason, "ended_at": now}
    to_state = values.get("state", JobState.PENDING.value)
    changed = connection.execute(update(_JOBS).where(where).values(values).returning(_JOBS.c.id))
    ids = list(changed.scalars())
    if ids:
        series = _series(connection, ids)
        jobs = _JOBS.join(series, _JOBS.c.id == series.c.value)
        _record_events(connection, jobs, [], JobState.PENDING.value, to_state, reason, now)


# -- listing ------------------------------------------------------------------------------


def group_key() -> Any:
    """A job's key in a grouped listing: its array's id, or its own."""
    return func.coalesce(JobRow.array_job_id, JobRow.id)


def grouped_keys(
    session: Session, where: Sequence[Any], limit: int, before: int | None = None
) -> list[int]:
    """The newest ``limit`` jobs and arrays (an array by its id) with a row matching
    ``where`` (and a key below ``before``), oldest first."""
    key = group_key()
    cursor = [] if before is None else [key < before]
    query = select(key).where(*where, *cursor).group_by(key).order_by(key.desc())
    return sorted(k for (k,) in session.execute(query.limit(limit)))


def array_rows(session: Session, array_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """What the row standing for each array shows: its elements by state, the earliest
    start, the latest end (once all ended), the earliest estimated start of a pending
    element."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in _chunks(sorted(set(array_ids))):
        pending = JobRow.state == JobState.PENDING.value
        rows = session.execute(
            select(
                JobRow.array_job_id,
                JobRow.state,
                func.count(),
                func.min(JobRow.started_at),
                func.max(JobRow.ended_at),
                func.min(case((pending, JobRow.estimated_start), else_=None)),
            )
            .where(JobRow.array_job_id.in_(chunk))
            .group_by(JobRow.array_job_id, JobRow.state)
        )
        for array_id, state, count, started, ended, estimate in rows:
            seen = out.setdefault(array_id, {"states": {}, "started": [], "ended": [], "est": []})
            seen["states"][state] = count
            seen["started"].append(started)
            seen["ended"].append(ended)
            seen["est"].append(estimate)
    return out


def as_array_row(job: JobOut, spec_text: str, seen: Mapping[str, Any]) -> JobOut:
    """The row standing for a whole array in a grouped list, from its first element's:
    the array's id, one state for the array (``core.array.array_state``), its elements
    counted by state as the reason, no tasks nor attempts."""
    states = seen["states"]
    state = array_state(states)
    terminal = all(JobState(s).terminal for s in states)
    starts = [t for t in seen["started"] if t is not None]
    ends = [t for t in seen["ended"] if t is not None]
    estimates = [t for t in seen["est"] if t is not None]
    return job.model_copy(
        update={
            "state": state,
            "reason": state_counts(states),
            "position": None,
            "estimated_start": min(estimates) if estimates else None,
            "started_at": min(starts) if starts else None,
            "ended_at": max(ends) if ends and terminal else None,
            "exit_code": None,
            "array_task_id": None,
            "array": array_out(spec_text, job.id, states),
            "tasks": [],
            "attempts": [],
        }
    )


def _chunks(values: Sequence[int], size: int = CHUNK) -> list[Sequence[int]]:
    return [values[i : i + size] for i in range(0, len(values), size)]
