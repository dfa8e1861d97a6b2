"""Job outcomes from task outcomes: success, failure, requeue after preemption or loss."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from corral.core.job import JobSpec, JobState
from corral.server.db.models import JobRow, TaskRow
from corral.server.services.converters import spec_of
from corral.server.services.transitions import move_job

FINAL_TASK_STATES = ("exited", "lost", "skipped")  # skipped: never started


def settle_job(session: Session, job: JobRow, tasks: Sequence[TaskRow], now: float) -> None:
    """Move ``job`` on once its current attempt's ``tasks`` say so.

    Running: the first task to exit non-zero fails the job (its peers are then stopped);
    all tasks exiting 0 succeed it, or, for a job with daemon roles (a Ray job's workers,
    an MPI job's rank holders), all tasks of its other roles, or for an ``sbatch`` job its
    first task (its daemons are then stopped). Preempting: once every task has let go of
    its devices, the job is requeued when it exited 0 or asks for ``requeue``, else it fails.
    """
    current = [t for t in tasks if t.attempt == job.attempt]
    if not current:
        return
    if job.state == JobState.RUNNING.value:
        failed = sorted(
            (t for t in current if t.state == "exited" and t.exit_code != 0), key=_ended
        )
        if failed:
            first = failed[0]
            job.exit_code = first.exit_code
            move_job(session, job, JobState.FAILED, task_failure(first), now)
        else:
            spec = spec_of(job)
            daemons = daemon_ranks(spec)
            ending = [t for t in current if t.rank not in daemons]
            if ending and all(t.state == "exited" for t in ending):
                job.exit_code = 0
                what = "the task" if len(ending) == 1 else f"all {len(ending)} tasks"
                why = f"{what} exited 0"
                if daemons:
                    serving = len(daemons)
                    why += (
                        "; the task serving it was stopped"
                        if serving == 1
                        else f"; the {serving} tasks serving it were stopped"
                    )
                move_job(session, job, JobState.SUCCEEDED, why, now)
    elif job.state == JobState.PREEMPTING.value and all(t.released for t in current):
        clean = all(t.state == "exited" and t.exit_code == 0 for t in current)
        if clean or _requeue(job):
            how = "exited 0 after SIGTERM" if clean else "stopped"
            requeue(session, job, f"preempted; {how}; requeued", now)
        else:
            codes = sorted({str(t.exit_code) for t in current if t.exit_code})
            job.exit_code = next((t.exit_code for t in current if t.exit_code), None)
            why = next((f": {t.reason}" for t in current if t.reason), "")
            move_job(
                session,
                job,
                JobState.FAILED,
                f"preempted; exited with code {', '.join(codes) or '?'} and requeue is false" + why,
                now,
            )


def daemon_ranks(spec: JobSpec) -> set[int]:
    """Ranks of the tasks of ``spec``'s daemon roles (``RoleSpec.daemon``), or every rank
    but 0 for a job whose first task decides its outcome (``sbatch``'s)."""
    if spec.first_task_decides:
        return set(range(1, spec.world_size))
    ranks: set[int] = set()
    offset = 0
    for role in spec.roles:
        if role.daemon:
            ranks.update(range(offset, offset + role.world_size))
        offset += role.world_size
    return ranks


def task_failure(task: TaskRow) -> str:
    """Why a failed task failed: ``task 0 on node-a exited with code 137: out of memory:
    ...`` (the agent's reason, when it gave one)."""
    how = "failed" if task.exit_code is None else f"exited with code {task.exit_code}"
    why = f": {task.reason}" if task.reason else ""
    return f"task {task.rank} on {task.node} {how}{why}"


def requeue(session: Session, job: JobRow, reason: str, now: float) -> None:
    """Back to pending as the next attempt (same id, same checkpoint directory)."""
    move_job(session, job, JobState.PENDING, reason, now)
    job.attempt += 1
    job.started_at = None
    job.exit_code = None
    job.master_port = None
    job.idle_since = None
    job.idle = False


def lose_tasks(
    session: Session,
    job: JobRow,
    lost: Sequence[TaskRow],
    why: str,
    now: float,
    release: bool,
) -> None:
    """Tasks whose node is gone: requeue or fail their job's attempt.

    With ``release`` their devices are free at once (their processes are known to be gone);
    otherwise they stay held until the node's agent says the processes ended, so that a
    node that comes back never runs new work beside the old.
    """
    for task in lost:
        if task.state not in FINAL_TASK_STATES:
            task.state = "lost"
            task.ended_at = now
        task.released = task.released or release
    if not any(t.attempt == job.attempt for t in lost) or not JobState(job.state).active:
        return
    if _requeue(job):
        requeue(session, job, f"{why}; requeued", now)
    else:
        move_job(session, job, JobState.FAILED, f"{why}; requeue is false", now)


def _requeue(job: JobRow) -> bool:
    return spec_of(job).requeue


def _ended(task: TaskRow) -> float:
    return task.ended_at or 0.0
