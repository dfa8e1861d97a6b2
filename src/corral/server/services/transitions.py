"""Apply a job or node state change to its row and record it in the history."""

from __future__ import annotations

from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.lifecycle import transition
from corral.core.node import NodeState
from corral.server.db.models import EventRow, JobRow, NodeRow


def move_job(session: Session, job: JobRow, target: JobState, reason: str, now: float) -> None:
    """Check ``job.state -> target`` against the table, apply it, append the event."""
    record = transition(JobState(job.state), target, now, reason)
    session.add(
        EventRow(
            entity="job",
            entity_id=str(job.id),
            attempt=job.attempt,
            at=now,
            from_state=record.from_state,
            to_state=record.to_state,
            reason=reason,
        )
    )
    job.state = target.value
    job.updated_at = now
    if target.terminal:
        job.ended_at = now
        job.position = None
    job.reason = reason


def move_node(session: Session, node: NodeRow, target: NodeState, reason: str, now: float) -> None:
    record = transition(NodeState(node.state), target, now, reason)
    session.add(
        EventRow(
            entity="node",
            entity_id=node.name,
            at=now,
            from_state=record.from_state,
            to_state=record.to_state,
            reason=reason,
        )
    )
    node.state = target.value
    node.reason = reason


def record_submission(session: Session, job: JobRow, now: float) -> None:
    session.add(
        EventRow(
            entity="job",
            entity_id=str(job.id),
            attempt=0,
            at=now,
            from_state="",
            to_state=JobState.PENDING.value,
            reason="submitted",
        )
    )
