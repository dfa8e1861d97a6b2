"""Holds and dependencies in the control plane (SPEC section 9).

A cycle hands the scheduler only the pending jobs that are neither held nor waiting on a
dependency (:func:`gate_pending`); the verdicts come from the pure
``core.dependency.evaluate`` over the depended-on jobs' states, read in one batched query
per cycle (plus one for ``singleton``), whatever the number of pending jobs. A job whose
dependency can no longer be satisfied is cancelled by the cycle (:func:`apply_gates`).

Dependencies name jobs that exist at submission, and ids grow, so a job only ever depends
on older jobs: no cycle can form.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from sqlalchemy import bindparam, or_, select, tuple_, update
from sqlalchemy.orm import Session

from corral.core.dependency import Dependency, Observed, Verdict, evaluate, parse_dependency
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
    ids = []
    for ref in dependency.refs:
        if not ref.isdigit():
            raise ValidationError(f"dependency: {ref!r} is not a job id")
        ids.append(int(ref))
    if dependency.singleton and not name:
        raise ValidationError("dependency: singleton needs a job name (name:)")
    rows = session.execute(select(JobRow.id, JobRow.user).where(JobRow.id.in_(ids)))
    owners = {job_id: owner for job_id, owner in rows}
    for job_id in ids:
        owner = owners.get(job_id)
        if owner is None or (not admin and owner != user):  # others' jobs: not revealed
            raise ValidationError(f"dependency: no job with id {job_id}")
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
    for row in rows:
        gates.rows[row.id] = tuple(row[4:])
        if row.held:
            gates.blocked[row.id] = HELD
            continue
        first = earliest.get((row.user, row.name))
        blocker = str(first) if first is not None and first < row.id else None
        gate = evaluate(deps[row.id], observed, blocker)
        if gate.verdict is Verdict.NEVER:
            gates.never[row.id] = gate.reason
        elif gate.verdict is Verdict.WAITING:
            gates.blocked[row.id] = gate.reason
    return gates


def _chunks(values: Iterable, size: int = CHUNK) -> Iterable[list]:
    items = list(values)
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _observe(session: Session, refs: set[str]) -> dict[str, Observed]:
    """The depended-on jobs' states, by id as text (jobs gone are missing)."""
    out = {}
    for ids in _chunks(sorted(int(r) for r in refs)):
        query = select(JobRow.id, JobRow.state, JobRow.attempt, JobRow.started_at)
        for job_id, state, attempt, started_at in session.execute(query.where(JobRow.id.in_(ids))):
            ran = state != JobState.PENDING.value or attempt > 0 or started_at is not None
            out[str(job_id)] = Observed(JobState(state), ran)
    return out


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
