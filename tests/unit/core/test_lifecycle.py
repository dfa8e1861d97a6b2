"""Job and node lifecycles: every allowed transition, and refused ones raise ConflictError."""

from __future__ import annotations

from enum import StrEnum

import pytest

from corral.core.job import JobState
from corral.core.lifecycle import (
    JOB_TRANSITIONS,
    NODE_TRANSITIONS,
    Transition,
    can_transition,
    transition,
)
from corral.core.node import NodeState
from corral.errors import ConflictError

J = JobState
N = NodeState

# Written out by hand (not derived from the tables) so that a change to a table shows up here.
ALLOWED_JOB = [
    (J.PENDING, J.RUNNING),
    (J.PENDING, J.CANCELLED),
    (J.PENDING, J.FAILED),
    (J.RUNNING, J.SUCCEEDED),
    (J.RUNNING, J.FAILED),
    (J.RUNNING, J.CANCELLED),
    (J.RUNNING, J.PREEMPTING),
    (J.RUNNING, J.PENDING),  # requeue after node loss
    (J.PREEMPTING, J.PENDING),  # requeue after preemption
    (J.PREEMPTING, J.FAILED),
    (J.PREEMPTING, J.CANCELLED),
]
ALLOWED_NODE = [
    (N.READY, N.DRAINING),
    (N.READY, N.LOST),
    (N.DRAINING, N.READY),
    (N.DRAINING, N.LOST),
    (N.LOST, N.READY),
    (N.LOST, N.DRAINING),
]
ALLOWED = ALLOWED_JOB + ALLOWED_NODE

REFUSED = [
    (J.PENDING, J.SUCCEEDED),
    (J.PENDING, J.PREEMPTING),
    (J.PENDING, J.PENDING),
    (J.RUNNING, J.RUNNING),
    (J.PREEMPTING, J.RUNNING),
    (J.PREEMPTING, J.SUCCEEDED),  # a preempted job that exits 0 is requeued, not done
    (J.SUCCEEDED, J.RUNNING),
    (J.SUCCEEDED, J.PENDING),
    (J.FAILED, J.PENDING),
    (J.FAILED, J.SUCCEEDED),
    (J.CANCELLED, J.RUNNING),
    (J.CANCELLED, J.PENDING),
    (N.READY, N.READY),
    (N.DRAINING, N.DRAINING),
    (N.LOST, N.LOST),
]


def _id(pair: tuple[StrEnum, StrEnum]) -> str:
    kind = "job" if isinstance(pair[0], JobState) else "node"
    return f"{kind}:{pair[0].value}->{pair[1].value}"


@pytest.mark.parametrize(("current", "target"), ALLOWED, ids=[_id(p) for p in ALLOWED])
def test_allowed_transition_returns_history_record(current: StrEnum, target: StrEnum) -> None:
    assert can_transition(current, target)
    record = transition(current, target, at=12.5, reason="because")
    assert record == Transition(current.value, target.value, 12.5, "because")


@pytest.mark.parametrize(("current", "target"), REFUSED, ids=[_id(p) for p in REFUSED])
def test_refused_transition_raises_conflict(current: StrEnum, target: StrEnum) -> None:
    assert not can_transition(current, target)
    kind = "job" if isinstance(current, JobState) else "node"
    with pytest.raises(ConflictError) as info:
        transition(current, target, at=0.0, reason="nope")
    assert info.value.message == f"a {current.value} {kind} cannot become {target.value}"
    assert info.value.status_code == 409


def test_hand_written_tables_match_the_module() -> None:
    job_pairs = {(a, b) for a, targets in JOB_TRANSITIONS.items() for b in targets}
    node_pairs = {(a, b) for a, targets in NODE_TRANSITIONS.items() for b in targets}
    assert job_pairs == set(ALLOWED_JOB)
    assert node_pairs == set(ALLOWED_NODE)


@pytest.mark.parametrize("state", list(JobState), ids=[s.value for s in JobState])
def test_every_job_state_has_a_row(state: JobState) -> None:
    assert state in JOB_TRANSITIONS
    # terminal states are dead ends, every other state can end somewhere
    assert (not JOB_TRANSITIONS[state]) == state.terminal


@pytest.mark.parametrize("state", list(NodeState), ids=[s.value for s in NodeState])
def test_every_node_state_has_a_row(state: NodeState) -> None:
    assert NODE_TRANSITIONS[state]


@pytest.mark.parametrize(
    ("current", "target"),
    [
        pytest.param(J.PENDING, N.READY, id="job-to-node-state"),
        pytest.param(N.READY, J.RUNNING, id="node-to-job-state"),
    ],
)
def test_mixed_kinds_are_refused(current: StrEnum, target: StrEnum) -> None:
    assert not can_transition(current, target)
    with pytest.raises(ConflictError):
        transition(current, target, at=0.0, reason="")
