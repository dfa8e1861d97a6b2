"""Holds, dependencies and array throttles in the control plane (SPEC section 9).

A cycle hands the scheduler only the pending jobs that are neither held nor waiting on a
dependency (:func:`gate_pending`); the verdicts come from the pure
``core.dependency.evaluate`` over the depended-on jobs' states, read in one batched query
per cycle (plus one for ``singleton``, one for array ids and one for array elements),
whatever the number of pending jobs; jobs that share a dependency (an array's elements)
are evaluated once. A job whose dependency can no longer be satisfied is cancelled by the
cycle (:func:`apply_gates`). The elements an array's throttle holds back are left out
too (``services.throttle``, which builds on :class:`Gates`).

Dependencies name jobs that exist at submission, and ids grow, so a job only ever depends
on older jobs: no cycle can form.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from sqlalchemy import bindparam, case, func, or_, select, tuple_, update
from sqlalchemy.orm import Session

from corral.core.array import parse_job_ref
from corral.core.dependency import (
    ArrayObserved,
    Dependency,
    Gate,
    Observed,
    Seen,
    Verdict,
    evaluate,
    parse_dependency,
)
from corral.core.job import JobState
from corral.errors import ValidationError
from corral.server.db.models import JobRow
from corral.server.services.transitions import lock_job, move_job

HELD = "held"
CHUNK = 5000  # ids per IN list
_UNFINISHED = (JobState.PENDING.value, JobState.RUNNING.value, JobState.PREEMPTING.value)


@dataclass
class Gates:
    """The pending jobs a cycle leaves out, with their reasons."""

    blocked: dict[int, str] = field(default_factory=dict)  # held or waiting: job -> reason
    never: dict[int, str] = field(default_factory=dict)  # to cancel: job -> reason
    rows: dict[int, tuple] = field(default_factory=dict)  # (attempt, held, reason, pos, est)
    cancelled: list[int] = field(default_factory=list)  # as applied
    # elements of throttled arrays waiting on a dependency (not held), by array
    waiting_elements: dict[int, int] = field(default_factory=dict)
    # the reasons of throttled arrays' elements held back (``services.throttle``)
    throttled: list[tuple[int, int, str, bool]] = field(default_factory=list)

    @property
    def left_out(self) -> set[int]:
        return set(self.blocked) | set(self.never)


@lru_cache(maxsize=4096)
def parsed(text: str) -> Dependency:
    """A stored (already validated) dependency."""
    return parse_dependency(text)


def check_dependency(session: Session, text: str, user: str, admin: bool, name: str | None) -> str:
    """The canonical form of a submitted dependency; ``ValidationError`` unless every job
    it names exists and is ``user``'s (an admin's may name anyone's)."""
    try:
        dependency = parsed(text)
    except ValueError as exc:
        raise ValidationError(f"dependency: {exc}") from None
    ids, elements = [], []
    for ref in dependency.refs:
        try:
            job_id, task = parse_job_ref(ref)
        except ValueError:
            raise ValidationError(
                f"dependency: {ref!r} is not a job id (12) or an array element (12_3)"
            ) from None
        (ids if task is None else elements).append((job_id, task))
    if dependency.singleton and not name:
        raise ValidationError("dependency: singleton needs a job name (name:)")
    rows = session.execute(select(JobRow.id, JobRow.user).where(JobRow.id.in_([i for i, _ in ids])))
    owners: dict[tuple[int, int | None], str] = {(job_id, None): owner for job_id, owner in rows}
    if elements:
        rows = session.execute(
            select(JobRow.array_job_id, JobRow.array_task_id, JobRow.user).where(
                tuple_(JobRow.array_job_id, JobRow.array_task_id).in_(elements)
            )
        )
        owners |= {(array_id, task): owner for array_id, task, owner in rows}
    for key in [*ids, *elements]:
        owner = owners.get(key)
        if owner is None or (not admin and owner != user):  # others' jobs: not revealed
            what = f"id {key[0]}" if key[1] is None else f"{key[0]}_{key[1]}"
            raise ValidationError(f"dependency: no job with {what}")
    return str(dependency)


def gate_pending(session: Session) -> Gates:
    """Which pending jobs are held or wait on a dependency (and which never will run)."""
    gates = Gates()
    rows = list(
        session.execute(
            select(
                JobRow.id,
                JobRow.user,
                JobRow.name,
                JobRow.dependency,
                JobRow.attempt,
                JobRow.held,
                JobRow.reason,
                JobRow.position,
                JobRow.estimated_start,
                JobRow.array_job_id,
                JobRow.array_max,
            ).where(
                JobRow.state == JobState.PENDING.value,
                or_(JobRow.held.is_(True), JobRow.dependency.is_not(None)),
            )
        )
    )
    if not rows:
        return gates
    deps = {r.id: parsed(r.dependency) for r in rows if r.dependency and not r.held}
    observed = _observe(session, {ref for d in deps.values() for ref in d.refs})
    singles = {(r.user, r.name) for r in rows if r.id in deps and deps[r.id].singleton}
    earliest = _earliest_unfinished(session, singles)
    verdicts: dict[tuple[str, str | None], Gate] = {}  # an array's elements share theirs
    for row in rows:
        gates.rows[row.id] = tuple(row[4:9])
        if row.held:
            gates.blocked[row.id] = HELD
            continue
        first = earliest.get((row.user, row.name))
        blocker = str(first) if first is not None and first < row.id else None
        key = (row.dependency, blocker)
        gate = verdicts.get(key)
        if gate is None:
            gate = verdicts[key] = evaluate(deps[row.id], observed, blocker)
        if gate.verdict is Verdict.NEVER:
            gates.never[row.id] = gate.reason
        elif gate.verdict is Verdict.WAITING:
            gates.blocked[row.id] = gate.reason
        if gate.verdict is not Verdict.SATISFIED and row.array_max is not None:
            waiting = gates.waiting_elements
            waiting[row.array_job_id] = waiting.get(row.array_job_id, 0) + 1
    return gates


def _chunks(values: Iterable, size: int = CHUNK) -> Iterable[list]:
    items = list(values)
    for start in range(0, len(items), size):
        yield items[start : start + size]


_STARTED = or_(
    JobRow.state != JobState.PENDING.value, JobRow.attempt > 0, JobRow.started_at.is_not(None)
)


def _observe(session: Session, refs: set[str]) -> dict[str, Seen]:
    """The depended-on jobs' states, by reference (jobs gone are missing): a job by its
    id; an array's id, the whole array (its elements counted); ``12_3``, that element."""
    out: dict[str, Seen] = {}
    ids = sorted(int(r) for r in refs if r.isdigit())
    arrays = []
    for chunk in _chunks(ids):
        query = select(
            JobRow.id, JobRow.state, JobRow.attempt, JobRow.started_at, JobRow.array_job_id
        )
        for job_id, state, attempt, started_at, array_id in session.execute(
            query.where(JobRow.id.in_(chunk))
        ):
            if array_id == job_id:
                arrays.append(job_id)
                continue
            ran = state != JobState.PENDING.value or attempt > 0 or started_at is not None
            out[str(job_id)] = Observed(JobState(state), ran)
    for array_id, seen in _observe_arrays(session, arrays).items():
        out[str(array_id)] = seen
    elements = [parse_job_ref(r) for r in refs if not r.isdigit()]
    for chunk in _chunks(sorted(elements)):
        query = select(
            JobRow.array_job_id,
            JobRow.array_task_id,
            JobRow.state,
            JobRow.attempt,
            JobRow.started_at,
        ).where(tuple_(JobRow.array_job_id, JobRow.array_task_id).in_(chunk))
        for array_id, task, state, attempt, started_at in session.execute(query):
            ran = state != JobState.PENDING.value or attempt > 0 or started_at is not None
            out[f"{array_id}_{task}"] = Observed(JobState(state), ran)
    return out


def _observe_arrays(session: Session, array_ids: list[int]) -> dict[int, ArrayObserved]:
    """Whole arrays as dependencies see them: their elements counted by state, and how
    many ever started."""
    counts: dict[int, dict[str, int]] = {}
    for chunk in _chunks(array_ids):
        rows = session.execute(
            select(
                JobRow.array_job_id,
                JobRow.state,
                func.count(),
                func.sum(case((_STARTED, 1), else_=0)),
            )
            .where(JobRow.array_job_id.in_(chunk))
            .group_by(JobRow.array_job_id, JobRow.state)
        )
        for array_id, state, count, started in rows:
            seen = counts.setdefault(array_id, {"total": 0, "started": 0})
            seen["total"] += count
            seen["started"] += int(started or 0)
            seen[state] = count
    return {
        array_id: ArrayObserved(
            total=c["total"],
            started=c["started"],
            succeeded=c.get(JobState.SUCCEEDED.value, 0),
            failed=c.get(JobState.FAILED.value, 0),
            cancelled=c.get(JobState.CANCELLED.value, 0),
        )
        for array_id, c in counts.items()
    }


def _earliest_unfinished(
    session: Session, keys: set[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The oldest unfinished job of each (user, name)."""
    out: dict[tuple[str, str], int] = {}
    for chunk in _chunks(sorted(keys)):
        rows = session.execute(
            select(JobRow.user, JobRow.name, JobRow.id).where(
                JobRow.state.in_(_UNFINISHED), tuple_(JobRow.user, JobRow.name).in_(chunk)
            )
        )
        for user, name, job_id in rows:
            key = (user, name)
            out[key] = min(job_id, out.get(key, job_id))
    return out


_GATED_REASON = (
    update(JobRow.__table__)
    .where(
        JobRow.__table__.c.id == bindparam("jid"),
        JobRow.__table__.c.state == JobState.PENDING.value,
        JobRow.__table__.c.attempt == bindparam("jattempt"),
        JobRow.__table__.c.held == bindparam("jheld"),
    )
    .values(reason=bindparam("r"), position=None, estimated_start=None)
)


def apply_gates(session: Session, gates: Gates, now: float) -> list[int]:
    """Store the reasons of the jobs left out (guarded: a job held, released or cancelled
    meanwhile keeps its own) and cancel those whose dependency will never be satisfied;
    returns the ids cancelled."""
    changed = []
    for job_id, reason in gates.blocked.items():
        attempt, held, *known = gates.rows[job_id]
        if known != [reason, None, None]:
            changed.append({"jid": job_id, "jattempt": attempt, "jheld": held, "r": reason})
    if changed:
        session.connection().execute(_GATED_REASON, changed)
    cancelled = []
    for job_id in sorted(gates.never):  # in id order, as other writers lock jobs
        job = lock_job(session, job_id)
        attempt = gates.rows[job_id][0]
        if job is None or job.state != JobState.PENDING.value or job.held:
            continue
        if job.attempt == attempt:
            move_job(session, job, JobState.CANCELLED, gates.never[job_id], now)
            cancelled.append(job_id)
    return cancelled
