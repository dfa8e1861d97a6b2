"""Job steps: a running job starts more processes on its own nodes (Slurm's ``srun`` inside
an allocation, an MPI launcher's remote daemons). The agents learn of them through their
sync (``services.step_sync``); a step never counts towards the job's own outcome."""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Sequence

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.node import NodeState
from corral.errors import (
    ConflictError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from corral.schemas.steps import (
    FINAL_STEP_TASK_STATES,
    MAX_STEPS,
    StepIn,
    StepOut,
    StepTaskOut,
)
from corral.server.context import Context
from corral.server.db.models import JobRow, NodeRow, StepRow, StepTaskRow, TaskRow
from corral.server.services.nodes import LIVE_TASK_STATES
from corral.server.services.transitions import lock_job

NUMBERING_TRIES = 20  # a step's number taken by a concurrent creation: numbered again
MAX_STEP_TASKS = 65_536  # tasks in one step
MAX_ATTEMPT_STEP_TASKS = 1_000_000  # step tasks in one attempt of a job
LOST_EXIT_CODE = 1  # what a step task lost without an exit code counts as
CANCELLED_EXIT_CODE = 143  # one cancelled before it started: as if SIGTERM ended it


class StepService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def create(
        self, job_id: int, body: StepIn, created_by: str, attempt: int | None = None
    ) -> StepOut:
        """Start a step on the job's nodes (``attempt``: the one the caller's job token
        names; the job must be running it). Its nodes' agents are nudged at once."""
        for tries_left in range(NUMBERING_TRIES - 1, -1, -1):
            try:
                with self.ctx.sessions.begin() as session:
                    out = self._create(session, job_id, body, created_by, attempt)
                break
            except IntegrityError:  # another step took the number at once: number again
                if not tries_left:
                    raise
                time.sleep(random.uniform(0.0, 0.01))  # concurrent launchers: out of step
        self.ctx.watch.bump({t.node for t in out.tasks})
        return out

    def _create(
        self, session: Session, job_id: int, body: StepIn, created_by: str, attempt: int | None
    ) -> StepOut:
        now = self.ctx.clock()
        job = lock_job(session, job_id)
        if job is None:
            raise NotFoundError(f"no job with id {job_id}")
        check_attempt(job, attempt)
        if job.state != JobState.RUNNING.value:
            raise ConflictError(_not_running(job))
        nodes = self._nodes(session, job, body.nodes)
        size = len(nodes) * body.tasks_per_node
        if size > MAX_STEP_TASKS:
            raise ValidationError(
                f"a step has at most {MAX_STEP_TASKS:,} tasks; {len(nodes)} nodes x "
                f"{body.tasks_per_node} tasks per node is {size:,}"
            )
        latest, started = session.execute(
            select(func.max(StepRow.step), func.coalesce(func.sum(StepRow.size), 0)).where(
                StepRow.job_id == job.id, StepRow.attempt == job.attempt
            )
        ).one()
        number = (latest or 0) + 1
        if number > MAX_STEPS:
            raise LimitExceededError(
                f"job {job.id} has started {MAX_STEPS:,} steps in this attempt, the most allowed"
            )
        if started + size > MAX_ATTEMPT_STEP_TASKS:
            raise LimitExceededError(
                f"job {job.id} has started {started:,} step tasks in this attempt; at most "
                f"{MAX_ATTEMPT_STEP_TASKS:,} are allowed"
            )
        step = StepRow(
            job_id=job.id,
            attempt=job.attempt,
            step=number,
            command=body.command,
            env=dict(body.env),
            workdir=body.workdir,
            tasks_per_node=body.tasks_per_node,
            size=size,
            created_by=created_by,
            created_at=now,
        )
        tasks = [
            StepTaskRow(
                job_id=job.id,
                attempt=job.attempt,
                step=number,
                rank=index * body.tasks_per_node + local,
                node=node,
                local_rank=local,
                state="pending",
                log_size=0,
                log_dropped=0,
            )
            for index, node in enumerate(nodes)
            for local in range(body.tasks_per_node)
        ]
        session.add(step)
        session.add_all(tasks)
        session.flush()
        return step_out(step, tasks, job)

    @staticmethod
    def _nodes(session: Session, job: JobRow, asked: Sequence[str] | None) -> list[str]:
        """The nodes to run on: ``asked`` (checked), else every node where the job's
        attempt still runs a task, in node rank order."""
        tasks = session.execute(
            select(TaskRow.node, TaskRow.state, TaskRow.released)
            .where(TaskRow.job_id == job.id, TaskRow.attempt == job.attempt)
            .order_by(TaskRow.node_rank, TaskRow.rank)
        ).all()
        allocation = list(dict.fromkeys(node for node, _, _ in tasks))
        live = [
            n
            for n in allocation
            if any(node == n and s in LIVE_TASK_STATES and not r for node, s, r in tasks)
        ]
        if asked is None:
            return live
        outside = [n for n in asked if n not in allocation]
        if outside:
            raise ValidationError(
                f"{_names(outside)} not in job {job.id}'s allocation; its nodes are "
                f"{', '.join(allocation)}"
            )
        ended = [n for n in asked if n not in live]
        if ended:
            still = ", ".join(live) or "none"
            raise ConflictError(
                f"job {job.id}'s tasks on {_names(ended)} have ended: a step runs only where "
                f"the job still runs a task (now: {still})"
            )
        return list(asked)

    def check_current(self, job_id: int, attempt: int) -> None:
        """``PermissionDeniedError`` unless ``attempt`` (a job token's) is the current one."""
        with self.ctx.sessions() as session:
            check_attempt(_job(session, job_id), attempt)

    def list(self, job_id: int, attempt: int | None = None, limit: int = 1000) -> list[StepOut]:
        """The latest ``limit`` steps of an attempt (default: the job's current), oldest
        first."""
        with self.ctx.sessions() as session:
            job = _job(session, job_id)
            attempt = job.attempt if attempt is None else attempt
            steps = list(
                session.scalars(
                    select(StepRow)
                    .where(StepRow.job_id == job_id, StepRow.attempt == attempt)
                    .order_by(StepRow.step.desc())
                    .limit(limit)
                )
            )[::-1]
            if not steps:
                return []
            rows = session.scalars(
                select(StepTaskRow)
                .where(
                    StepTaskRow.job_id == job_id,
                    StepTaskRow.attempt == attempt,
                    StepTaskRow.step >= steps[0].step,
                )
                .order_by(StepTaskRow.step, StepTaskRow.rank)
            )
            by_step: dict[int, list[StepTaskRow]] = {s.step: [] for s in steps}
            for task in rows:
                by_step[task.step].append(task)
            lost = _lost_nodes(session, [t for ts in by_step.values() for t in ts])
            return [step_out(s, by_step[s.step], job, lost) for s in steps]

    def get(self, job_id: int, number: int, attempt: int | None = None) -> StepOut:
        with self.ctx.sessions() as session:
            job = _job(session, job_id)
            step, tasks = _step(session, job, number, attempt)
            return step_out(step, tasks, job, _lost_nodes(session, tasks))

    def cancel(self, job_id: int, number: int, attempt: int | None = None) -> StepOut:
        """Stop the step's tasks (SIGTERM, then SIGKILL after the job's grace period);
        those not started yet never start. Idempotent."""
        with self.ctx.sessions.begin() as session:
            job = lock_job(session, job_id)
            if job is None:
                raise NotFoundError(f"no job with id {job_id}")
            step, tasks = _step(session, job, number, attempt)
            live = [t for t in tasks if t.state not in FINAL_STEP_TASK_STATES]
            if step.cancelled_at is None and live:
                step.cancelled_at = self.ctx.clock()
            out = step_out(step, tasks, job, _lost_nodes(session, tasks))
        self.ctx.watch.bump({t.node for t in live})
        return out


def check_attempt(job: JobRow, attempt: int | None) -> None:
    """``PermissionDeniedError`` unless ``attempt`` (a job token's) is the job's current
    one; None (a user's or an admin's token) passes."""
    if attempt is not None and attempt != job.attempt:
        raise PermissionDeniedError(
            f"this job token is for attempt {attempt} of job {job.id}; "
            f"its current attempt is {job.attempt}"
        )


def step_out(
    step: StepRow, tasks: Sequence[StepTaskRow], job: JobRow, lost_nodes: Collection[str] = ()
) -> StepOut:
    """The step as the API shows it. A task still live in the database whose attempt is
    over while its node is lost (no agent will report it) shows as lost."""
    over = job.attempt != step.attempt or job.state != JobState.RUNNING.value
    shown = []
    for task in tasks:
        out = StepTaskOut(
            rank=task.rank,
            node=task.node,
            local_rank=task.local_rank,
            state=task.state,
            pid=task.pid,
            exit_code=task.exit_code,
            started_at=task.started_at,
            ended_at=task.ended_at,
            reason=task.reason,
        )
        if over and task.node in lost_nodes and task.state not in FINAL_STEP_TASK_STATES:
            out.state, out.reason = "lost", f"node {task.node} was lost"
        shown.append(out)
    if all(t.state in FINAL_STEP_TASK_STATES for t in shown):
        state = "ended"
    else:
        state = "pending" if all(t.state == "pending" for t in shown) else "running"
    return StepOut(
        job_id=step.job_id,
        attempt=step.attempt,
        step=step.step,
        command=step.command,
        state=state,
        created_at=step.created_at,
        created_by=step.created_by,
        cancelled=step.cancelled_at is not None,
        exit_code=step_exit_code(shown) if state == "ended" else None,
        tasks=shown,
    )


def step_exit_code(tasks: Sequence[StepTaskOut]) -> int:
    """The first non-zero exit code by end time, else 0 (see ``StepOut.exit_code``)."""
    codes = []
    for task in tasks:
        code = task.exit_code
        if task.state == "lost" and code is None:
            code = LOST_EXIT_CODE
        elif task.state == "cancelled":
            code = CANCELLED_EXIT_CODE
        if code:
            codes.append((task.ended_at or 0.0, task.rank, code))
    return min(codes)[2] if codes else 0


def _not_running(job: JobRow) -> str:
    state = JobState(job.state)
    if state is JobState.PENDING:
        return f"job {job.id} is pending: steps run only while it runs"
    if state.terminal:
        return f"job {job.id} already ended ({job.state}): steps run only while it runs"
    return f"job {job.id} is {job.state}: steps run only while it runs"


def _names(nodes: Sequence[str]) -> str:
    return ("node " if len(nodes) == 1 else "nodes ") + ", ".join(nodes)


def _job(session: Session, job_id: int) -> JobRow:
    job = session.get(JobRow, job_id)
    if job is None:
        raise NotFoundError(f"no job with id {job_id}")
    return job


def _step(
    session: Session, job: JobRow, number: int, attempt: int | None
) -> tuple[StepRow, list[StepTaskRow]]:
    attempt = job.attempt if attempt is None else attempt
    step = session.scalar(
        select(StepRow).where(
            StepRow.job_id == job.id, StepRow.attempt == attempt, StepRow.step == number
        )
    )
    if step is None:
        raise NotFoundError(f"job {job.id} has no step {number} in attempt {attempt}")
    tasks = session.scalars(
        select(StepTaskRow)
        .where(
            StepTaskRow.job_id == job.id,
            StepTaskRow.attempt == attempt,
            StepTaskRow.step == number,
        )
        .order_by(StepTaskRow.rank)
    )
    return step, list(tasks)


def _lost_nodes(session: Session, tasks: Sequence[StepTaskRow]) -> set[str]:
    """The nodes of the live ``tasks`` that are lost (or no longer registered)."""
    names = {t.node for t in tasks if t.state not in FINAL_STEP_TASK_STATES}
    if not names:
        return set()
    states = dict(
        session.execute(select(NodeRow.name, NodeRow.state).where(NodeRow.name.in_(names))).all()
    )
    return {n for n in names if states.get(n, NodeState.LOST.value) == NodeState.LOST.value}
