"""Job and node lifecycles as transition tables.

Every state change goes through :func:`transition`, which checks the table and returns
the record to append to the object's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from corral.core.job import JobState
from corral.core.node import NodeState
from corral.errors import ConflictError

J = JobState
N = NodeState

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    J.PENDING: frozenset({J.RUNNING, J.CANCELLED, J.FAILED}),
    # running -> pending is a requeue (node lost); preempting -> pending is a preemption requeue
    J.RUNNING: frozenset({J.SUCCEEDED, J.FAILED, J.CANCELLED, J.PREEMPTING, J.PENDING}),
    J.PREEMPTING: frozenset({J.PENDING, J.FAILED, J.CANCELLED}),
    J.SUCCEEDED: frozenset(),
    J.FAILED: frozenset(),
    J.CANCELLED: frozenset(),
}

NODE_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    N.READY: frozenset({N.DRAINING, N.LOST}),
    N.DRAINING: frozenset({N.READY, N.LOST}),
    N.LOST: frozenset({N.READY, N.DRAINING}),
}


@dataclass(frozen=True)
class Transition:
    """One entry of a job's or node's history."""

    from_state: str
    to_state: str
    at: float
    reason: str


def can_transition(current: StrEnum, target: StrEnum) -> bool:
    table: dict = JOB_TRANSITIONS if isinstance(current, JobState) else NODE_TRANSITIONS
    return target in table[current]


def transition(current: StrEnum, target: StrEnum, at: float, reason: str) -> Transition:
    """Check ``current -> target`` against its table; return the history record.

    Raises ``ConflictError`` for a transition the table does not allow.
    """
    if not can_transition(current, target):
        kind = "job" if isinstance(current, JobState) else "node"
        raise ConflictError(f"a {current.value} {kind} cannot become {target.value}")
    return Transition(str(current.value), str(target.value), at, reason)
