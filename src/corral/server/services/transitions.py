"""Apply a job or node state change to its row and record it in the history."""

from __future__ import annotations

from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.lifecycle import Transition, transition
from corral.core.node import NodeState
from corral.server.db.models import EventRow, JobRow, NodeRow


def record(session: Session, entity: str, entity_id: str, attempt: int, change: Transition) -> None:
    """Append one transition to the ``events`` history."""
    session.add(
        EventRow(
            entity=entity,
            entity_id=entity_id,
            attempt=attempt,
            at=change.at,
            from_state=change.from_state,
            to_state=change.to_state,
            reason=change.reason,
        )
    )


def lock_job(session: Session, job_id: int) -> JobRow | None:
    """The job's row, read afresh and locked until the transaction ends (``FOR UPDATE``).

    Every transaction that moves a job from what it reads (settling from task outcomes,
    cancel, preempt, losing a node) locks the job first: under PostgreSQL's READ COMMITTED
    two agents reporting the last tasks of one gang at once would otherwise each miss the
    other's exit and leave the job running forever, and a cancel could be overwritten by a
    concurrent settle. SQLite serializes writers and ignores the clause. Pending changes are
    flushed first, since the row is reloaded.
    """
    session.flush()
    return session.get(JobRow, job_id, with_for_update=True, populate_existing=True)


def move_job(session: Session, job: JobRow, target: JobState, reason: str, now: float) -> None:
    """Check ``job.state -> target`` against the table, apply it, append the event."""
    record(
        session,
        "job",
        str(job.id),
        job.attempt,
        transition(JobState(job.state), target, now, reason),
    )
    job.state = target.value
    job.updated_at = now
    if target.terminal:
        job.ended_at = now
        job.position = None
    job.reason = reason


def move_node(session: Session, node: NodeRow, target: NodeState, reason: str, now: float) -> None:
    record(session, "node", node.name, 0, transition(NodeState(node.state), target, now, reason))
    node.state = target.value
    node.reason = reason


def record_submission(session: Session, job: JobRow, now: float) -> None:
    record(session, "job", str(job.id), 0, Transition("", JobState.PENDING.value, now, "submitted"))
