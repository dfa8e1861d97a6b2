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
