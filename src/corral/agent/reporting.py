"""What the agent tells the server of its tasks: the keys tasks (and job steps' tasks) are
tracked under, and each one's report."""

from __future__ import annotations

from corral.agent.supervisor import TaskState, TaskStatus
from corral.schemas.agent import DesiredTask, StepReport, TaskAck, TaskReport

TaskKey = tuple[int, int, int]  # job id, attempt, rank
StepKey = tuple[int, int, int, int]  # job id, attempt, step, rank (of a step's task)


def task_key(item: DesiredTask | TaskAck) -> TaskKey | StepKey:
    """The key a task (or a step's task) of the server's answer is tracked under."""
    step = getattr(item, "step", 0)
    if step:
        return (item.job_id, item.attempt, step, item.rank)
    return (item.job_id, item.attempt, item.rank)


def task_report(key: TaskKey | StepKey, status: TaskStatus, node: str) -> TaskReport:
    """The task as the server should see it. An exit is reported at once, whatever of the
    log is still to ship: the job's devices are free when its processes are gone."""
    exited = status.state is TaskState.EXITED
    if status.state is TaskState.RUNNING:
        state = "running"
    else:
        state = "exited" if exited else "terminating"
    reason = status.reason
    if reason and "this node" in reason:
        reason = reason.replace("this node", f"node {node}")
    if len(key) == 4:
        ids: dict[str, int] = {"job_id": key[0], "attempt": key[1], "step": key[2], "rank": key[3]}
    else:
        ids = {"job_id": key[0], "attempt": key[1], "rank": key[2]}
    model = StepReport if len(key) == 4 else TaskReport
    return model(
        **ids,
        state=state,
        pid=status.pid,
        exit_code=status.exit_code if exited else None,
        started_at=status.started_at,
        ended_at=status.ended_at if exited else None,
        peak_memory=status.peak_memory,
        cpu_seconds=status.cpu_seconds,
        reason=reason[:1024] if reason else None,
    )
