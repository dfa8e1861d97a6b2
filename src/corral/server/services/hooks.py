"""Node hook failures that agents report (``corral agent --prolog/--epilog``).

Called inside the sync's transaction. Any failure drains the node, with the hook's reason
(which quotes its last output line) and the job's id; a node already draining keeps
draining, with this reason. A failed prolog also means that the job's tasks on the node
never started: they are given back (skipped, their devices free at once) and the job is
requeued as a new attempt, which the drained node takes no part in, without counting as
its failure. Only when tasks of that attempt had already started on other nodes does the
job's ``requeue`` decide, as for a lost node. A failed epilog leaves the job as it is.
A report repeated after a lost answer changes nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.node import NodeState
from corral.schemas.agent import HookFailure
from corral.server.db.models import NodeRow, TaskRow
from corral.server.services.converters import spec_of
from corral.server.services.settle import FINAL_TASK_STATES, requeue
from corral.server.services.transitions import lock_job, move_job, move_node


def hook_failures(
    session: Session, node: NodeRow, failures: Sequence[HookFailure], now: float
) -> set[int]:
    """Act on ``failures`` of ``node``'s hooks (see the module's docstring); returns the ids
    of the jobs whose tasks were given back."""
    jobs = set()
    for failure in failures:
        _drain(session, node, f"{failure.reason} (job {failure.job_id})", now)
        if failure.hook == "prolog" and _give_back(session, node.name, failure, now):
            jobs.add(failure.job_id)
    return jobs


def _drain(session: Session, node: NodeRow, reason: str, now: float) -> None:
    if node.state == NodeState.READY.value:
        move_node(session, node, NodeState.DRAINING, reason, now)
    elif node.state == NodeState.DRAINING.value:
        node.reason = reason


def _give_back(session: Session, node: str, failure: HookFailure, now: float) -> bool:
    """Skip the attempt's tasks on ``node``, which never started; requeue the job if that
    attempt is still its running one. False if there was nothing to give back."""
    job = lock_job(session, failure.job_id)
    if job is None:
        return False
    tasks = list(
        session.scalars(
            select(TaskRow).where(TaskRow.job_id == job.id, TaskRow.attempt == failure.attempt)
        )
    )
    here = [t for t in tasks if t.node == node and t.state not in FINAL_TASK_STATES]
    for task in here:
        task.state = "skipped"
        task.ended_at = now
        task.released = True
        task.reason = f"never started: {failure.reason}"[:1024]
    if not here or job.attempt != failure.attempt or job.state != JobState.RUNNING.value:
        return bool(here)  # (a preempting job is settled by its tasks, these included)
    why = f"node {node} drained: {failure.reason}"
    if any(t.started_at for t in tasks) and not spec_of(job).requeue:
        move_job(session, job, JobState.FAILED, f"{why}; requeue is false", now)
    else:
        requeue(session, job, f"{why}; requeued", now)
    return True
