"""The agent sync's side of job steps: record what an agent reports of its step tasks and
their logs, end those it no longer runs or never will, and list those it should run.

A step task runs on its node only while the job runs there: the job is running in the
step's attempt and still holds a live task on that node. It runs as that task would: the
task's account, environment (with the job token), grace period and working directory, in
a cgroup of its own with an even share of the job's per-node CPUs and memory.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.schemas.agent import (
    DesiredStepTask,
    DesiredTask,
    StepAck,
    StepLogChunk,
    StepReport,
    SyncRequest,
)
from corral.schemas.steps import FINAL_STEP_TASK_STATES
from corral.server.db.models import JobRow, StepRow, StepTaskRow
from corral.server.services.logs import store_chunk

LIVE_STEP_STATES = ("pending", "running")
StepKey = tuple[int, int, int, int]  # job id, attempt, step, rank

_JOINED = and_(
    StepRow.job_id == StepTaskRow.job_id,
    StepRow.attempt == StepTaskRow.attempt,
    StepRow.step == StepTaskRow.step,
)


def sync_steps(
    session: Session,
    req: SyncRequest,
    launches: Sequence[DesiredTask],
    log_cap: int,
    now: float,
) -> tuple[list[DesiredStepTask], list[StepAck]]:
    """Apply the step part of ``req`` (in the sync's transaction); ``launches`` are the
    job tasks the node should run. Returns the step tasks it should run and the acks."""
    reported = {_key(r) for r in req.steps}
    keys = reported | {_key(c) for c in req.step_logs}
    rows = _rows(session, req.node, keys)
    running = {(t.job_id, t.attempt) for t in launches}  # jobs that still run here
    for report in req.steps:
        found = rows.get(_key(report))
        if found is None or found[0].state in FINAL_STEP_TASK_STATES:
            continue
        task, step, job = found
        task.pid = report.pid or task.pid
        if task.started_at is None:
            task.started_at = report.started_at or now
        if report.state == "exited":
            task.state, task.exit_code = "exited", report.exit_code
            task.ended_at = report.ended_at or now
            task.reason = report.reason or _stopped_why(task, step, job, running, req.node)
        else:
            task.state = "running"
    for chunk in req.step_logs:  # also of tasks that ended: their logs may trail the exit
        found = rows.get(_key(chunk))
        if found is not None and chunk.offset >= found[0].log_size:
            store_chunk(session, found[0], chunk.offset, base64.b64decode(chunk.data), log_cap)
    acks = [
        StepAck(
            job_id=key[0],
            attempt=key[1],
            step=key[2],
            rank=key[3],
            log_offset=rows[key][0].log_size if key in rows else -1,
            final=key not in rows or rows[key][0].state in FINAL_STEP_TASK_STATES,
        )
        for key in sorted(keys)
    ]
    desired = desired_steps(session, req.node, launches)
    _end_unreported(session, req.node, reported, {_key(d) for d in desired}, running, now)
    return desired, acks


def desired_steps(
    session: Session, node: str, launches: Sequence[DesiredTask]
) -> list[DesiredStepTask]:
    """The step tasks ``node`` should run, given the job tasks it should run."""
    bases: dict[tuple[int, int], list[DesiredTask]] = defaultdict(list)
    for launch in sorted(launches, key=lambda t: t.rank):
        bases[(launch.job_id, launch.attempt)].append(launch)
    if not bases:
        return []
    rows = session.execute(
        select(StepTaskRow, StepRow)
        .join(StepRow, _JOINED)
        .where(
            StepTaskRow.node == node,
            StepTaskRow.state.in_(LIVE_STEP_STATES),
            StepTaskRow.job_id.in_({job for job, _ in bases}),
            StepRow.cancelled_at.is_(None),
        )
        .order_by(StepTaskRow.job_id, StepTaskRow.step, StepTaskRow.rank)
    ).all()
    return [
        step_launch(task, step, bases[(task.job_id, task.attempt)])
        for task, step in rows
        if (task.job_id, task.attempt) in bases
    ]


def step_launch(task: StepTaskRow, step: StepRow, bases: Sequence[DesiredTask]) -> DesiredStepTask:
    """What a step task runs: the step's command in the environment of the job's first task
    on the node (``bases``: the job's tasks there, by rank), whose GPUs it sees all of, plus
    the step's ``env`` and ``CORRAL_STEP_*``; in the job's container, if it has one."""
    base = bases[0]
    env = dict(base.env)
    if len(bases) > 1:
        gpus = (b.env.get("CUDA_VISIBLE_DEVICES", "") for b in bases)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g for g in gpus if g)
    env.update(step.env)
    env.update(
        CORRAL_STEP_ID=str(step.step),
        CORRAL_STEP_RANK=str(task.rank),
        CORRAL_STEP_WORLD_SIZE=str(step.size),
        CORRAL_STEP_LOCAL_RANK=str(task.local_rank),
        CORRAL_STEP_LOCAL_WORLD_SIZE=str(step.tasks_per_node),
        CORRAL_STEP_NODE_RANK=str(task.rank // step.tasks_per_node),
    )
    share = step.tasks_per_node
    cpus = sum(b.cpus or 0 for b in bases) / share
    memory = sum(b.memory or 0 for b in bases) // share
    return DesiredStepTask(
        job_id=task.job_id,
        attempt=task.attempt,
        step=task.step,
        rank=task.rank,
        command=step.command,
        env=env,
        workdir=step.workdir or base.workdir,
        grace_period=base.grace_period,
        user=base.user,
        cpus=cpus or None,
        memory=memory or None,
        # in the job's container, with the device files of the GPUs it sees
        gpus=sorted({gpu for b in bases for gpu in b.gpus}),
        image=base.image,
        mounts=base.mounts,
        shm_size=base.shm_size,
        node_gpus=base.node_gpus,
    )


def _end_unreported(
    session: Session,
    node: str,
    reported: set[StepKey],
    desired: set[StepKey],
    running: set[tuple[int, int]],
    now: float,
) -> None:
    """End the node's live step tasks its agent does not report: a running one is lost
    (the agent no longer runs it); a pending one that is no longer wanted never started.

    The agent builds each request after applying the previous answer, so a task it was
    ever sent is in its report."""
    rows = session.execute(
        select(StepTaskRow, StepRow, JobRow)
        .join(StepRow, _JOINED)
        .join(JobRow, JobRow.id == StepTaskRow.job_id)
        .where(StepTaskRow.node == node, StepTaskRow.state.in_(LIVE_STEP_STATES))
    ).all()
    for task, step, job in rows:
        key = _key(task)
        if key in reported or (task.state == "pending" and key in desired):
            continue
        task.ended_at = now
        if task.state == "running":
            task.state = "lost"
            task.reason = f"the agent of node {node} no longer runs it"
        elif step.cancelled_at is not None:
            task.state, task.reason = "cancelled", "the step was cancelled before it started"
        else:
            task.state = "lost"
            why = _stopped_why(task, step, job, running, node)
            task.reason = f"never started: {why}" if why else "never started"


def _stopped_why(
    task: StepTaskRow, step: StepRow, job: JobRow, running: set[tuple[int, int]], node: str
) -> str | None:
    """Why the step task was stopped (or never started), if the server stopped wanting it;
    ``running``: the jobs (and attempts) that still run a task on ``node``."""
    if step.cancelled_at is not None:
        return "the step was cancelled"
    if job.attempt != task.attempt or job.state != JobState.RUNNING.value:
        state = job.state if job.attempt == task.attempt else "requeued"
        return f"job {job.id} stopped running ({state})"
    if (task.job_id, task.attempt) not in running:
        return f"the job's tasks on node {node} ended"
    return None


def _rows(
    session: Session, node: str, keys: Iterable[StepKey]
) -> dict[StepKey, tuple[StepTaskRow, StepRow, JobRow]]:
    keys = set(keys)
    if not keys:
        return {}
    rows = session.execute(
        select(StepTaskRow, StepRow, JobRow)
        .join(StepRow, _JOINED)
        .join(JobRow, JobRow.id == StepTaskRow.job_id)
        .where(
            StepTaskRow.node == node,
            StepTaskRow.job_id.in_({k[0] for k in keys}),
            StepTaskRow.step.in_({k[2] for k in keys}),
        )
    ).all()
    found = {}
    for task, step, job in rows:
        if _key(task) in keys:
            found[_key(task)] = (task, step, job)
    return found


def _key(item: StepTaskRow | StepReport | StepLogChunk | DesiredStepTask) -> StepKey:
    return (item.job_id, item.attempt, item.step, item.rank)
