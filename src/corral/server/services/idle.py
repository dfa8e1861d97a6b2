"""Idle GPUs: flag running jobs whose GPUs stay near 0%, and apply their queue's policy.

Runs in the control loop's housekeeping. A job's GPUs are read from the telemetry store
(the latest sample of each GPU each of its tasks holds; one older than three sync
intervals counts as no reading). ``idle_since`` is set when they all first read at or
below the queue's ``idle.threshold``, and cleared when one reads above; once they have
stayed low for ``idle.after`` the job is flagged (``idle``, and an event), and the
queue's ``idle.action`` preempts it (grace period, requeue) or stops it (cancel).
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.idle import IdleAction, IdlePolicy, judge_idle
from corral.core.job import JobState
from corral.core.lifecycle import Transition
from corral.core.units import format_duration
from corral.server.context import Context
from corral.server.db.models import JobRow, TaskRow
from corral.server.leader import Term
from corral.server.services.notify import notify_jobs
from corral.server.services.transitions import move_job, record

FRESH_SYNCS = 3


def check_idle(ctx: Context, term: Term | None = None) -> list[int]:
    """Update every running job's idle state; returns the jobs preempted or stopped.

    Fenced by ``term`` when given. Telemetry is kept per replica, so with several replicas
    the leader judges the GPUs of the nodes whose agents sync with it; the others read as
    no reading (never idle)."""
    now = ctx.clock()
    fresh_after = now - FRESH_SYNCS * max(ctx.settings.heartbeat_interval, 1.0)
    acted = []
    with ctx.sessions.begin() as session:
        if term is not None:
            term.fence(session)
        jobs = {
            j.id: j
            for j in session.scalars(select(JobRow).where(JobRow.state == JobState.RUNNING.value))
        }
        if not jobs:
            return []
        tasks: dict[int, list[TaskRow]] = defaultdict(list)
        for task in session.scalars(
            select(TaskRow).where(TaskRow.job_id.in_(list(jobs)), TaskRow.released.is_(False))
        ):
            if task.attempt == jobs[task.job_id].attempt:
                tasks[task.job_id].append(task)
        for job_id, job in jobs.items():
            readings = []
            for task in tasks.get(job_id, ()):
                for gpu in task.gpus:
                    sample = ctx.telemetry.latest(task.node, gpu)
                    fresh = sample is not None and sample.at >= fresh_after
                    readings.append(sample.utilization if fresh else None)
            policy = ctx.config.idle_policy(job.queue)
            verdict = judge_idle(readings, job.idle_since, policy, now)
            if job.idle_since != verdict.idle_since:
                job.idle_since = verdict.idle_since
            if verdict.flagged and not job.idle:
                job.idle = True
                why = _why(policy)
                flag = Transition("running", "running", now, why)
                record(session, "job", str(job.id), job.attempt, flag)
                if verdict.act:
                    _act(session, job, policy, why, now)
                    acted.append(job_id)
            elif not verdict.flagged and job.idle:
                job.idle = False
        if term is not None and acted:
            term.announce(session, None)
    notify_jobs(ctx, acted)
    return acted


def _why(policy: IdlePolicy) -> str:
    return (
        f"idle: GPU utilization at or below {policy.threshold:g}% "
        f"for {format_duration(policy.after)}"
    )


def _act(session: Session, job: JobRow, policy: IdlePolicy, why: str, now: float) -> None:
    if policy.action is IdleAction.PREEMPT:
        target, how = JobState.PREEMPTING, "preempted"
    else:
        target, how = JobState.CANCELLED, "stopped"
    move_job(session, job, target, f"{why}; {how} by the queue's idle policy", now)
