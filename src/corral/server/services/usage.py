"""Accounting: GPU-hours allocated and used, waits and preemptions, by queue, user or job.

For a window ``[since, until]``:

- allocated: each task's GPUs (a share counts its fraction, a MIG instance its part of the
  GPU) times the part of its run (start to end, or to now while it runs) inside the window;
- used: the GPU-seconds the task's GPUs were busy (allocation weighted by the reported
  utilization, accumulated at each sync), the part inside the window taken in proportion
  to time (telemetry is not kept per interval);
- jobs: jobs submitted in the window or with a task running in it; waits: submission to
  the first start of those that started; preemptions: those recorded in the window;
- CPU seconds: what the agents reported of each task, the part inside the window taken in
  proportion to time, as GPU time used; peak memory: the highest any one task reached.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import or_, select

from corral.errors import ValidationError
from corral.schemas.api import UsageOut, UsageRow
from corral.server.context import Context
from corral.server.db.models import EventRow, JobRow, NodeRow, TaskRow

GROUPINGS = ("queue", "user", "job")


def overlap(start: float, end: float, since: float, until: float) -> float:
    """Seconds of ``[start, end]`` inside ``[since, until]`` (0 if they do not meet)."""
    return max(0.0, min(end, until) - max(start, since))


@dataclass
class _Tally:
    jobs: set[int] = field(default_factory=set)
    allocated: float = 0.0  # GPU-seconds
    used: float = 0.0
    waits: list[float] = field(default_factory=list)
    preemptions: int = 0
    cpu_seconds: float = 0.0
    peak_memory: int | None = None


def usage(
    ctx: Context, by: str, since: float | None, until: float | None, owner: str | None = None
) -> UsageOut:
    """The accounting rows of the window, one per queue, user or job, sorted by key; with
    ``owner``, of that user's jobs only."""
    if by not in GROUPINGS:
        raise ValidationError(f"by: expected one of {', '.join(GROUPINGS)}, got {by!r}")
    now = ctx.clock()
    until = now if until is None else until
    since = 0.0 if since is None else since
    if since > until:
        raise ValidationError(f"since ({since:g}) is after until ({until:g})")
    with ctx.sessions() as session:
        tasks = list(
            session.scalars(
                select(TaskRow).where(
                    TaskRow.started_at.is_not(None),
                    TaskRow.started_at <= until,
                    or_(TaskRow.ended_at.is_(None), TaskRow.ended_at >= since),
                )
            )
        )
        ids = {t.job_id for t in tasks}
        jobs = {
            j.id: j
            for j in session.scalars(
                select(JobRow).where(
                    or_(
                        JobRow.id.in_(ids),
                        (JobRow.submitted_at >= since) & (JobRow.submitted_at <= until),
                    )
                )
            )
        }
        preempted = list(
            session.scalars(
                select(EventRow.entity_id).where(
                    EventRow.entity == "job",
                    EventRow.to_state == "preempting",
                    EventRow.at >= since,
                    EventRow.at <= until,
                )
            )
        )
        mig_sizes = {
            n.name: {d["index"]: len(d.get("mig") or ()) for d in n.devices}
            for n in session.scalars(select(NodeRow))
        }
    if owner is not None:
        jobs = {i: j for i, j in jobs.items() if j.user == owner}
    key = _key(by)
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    for job in jobs.values():
        tally = tallies[key(job)]
        tally.jobs.add(job.id)
        if job.started_at is not None and job.attempt == 0:
            tally.waits.append(max(0.0, job.started_at - job.submitted_at))
    _first_waits(tasks, jobs, tallies, key)
    for task in tasks:
        job = jobs.get(task.job_id)
        if job is None:
            continue
        start, end = task.started_at or 0.0, task.ended_at or now
        inside = overlap(start, end, since, until)
        if inside <= 0:
            continue
        tally = tallies[key(job)]
        tally.allocated += _gpus(task, mig_sizes.get(task.node, {})) * inside
        if end > start:
            tally.used += (task.gpu_seconds_used or 0.0) * inside / (end - start)
            tally.cpu_seconds += (task.cpu_seconds or 0.0) * inside / (end - start)
        if task.peak_memory is not None:
            tally.peak_memory = max(tally.peak_memory or 0, task.peak_memory)
    for entity_id in preempted:
        job = jobs.get(int(entity_id))
        if job is not None:
            tallies[key(job)].preemptions += 1
    rows = [_row(name, t, jobs, by) for name, t in tallies.items()]
    rows.sort(key=lambda r: (int(r.key) if by == "job" else 0, r.key))
    return UsageOut(by=by, since=since, until=until, rows=rows)


def _first_waits(
    tasks: list[TaskRow], jobs: dict[int, JobRow], tallies: dict[str, _Tally], key: Callable
) -> None:
    """Waits of requeued jobs: submission to the first start of attempt 0's tasks."""
    firsts: dict[int, float] = {}
    for task in tasks:
        if task.attempt == 0 and task.started_at is not None:
            firsts[task.job_id] = min(firsts.get(task.job_id, task.started_at), task.started_at)
    for job_id, start in firsts.items():
        job = jobs.get(job_id)
        if job is not None and job.attempt > 0:
            tallies[key(job)].waits.append(max(0.0, start - job.submitted_at))


def _gpus(task: TaskRow, mig_sizes: dict[int, int]) -> float:
    total = 0.0
    for index in task.gpus:
        mig = mig_sizes.get(index) if task.mig_slots else None
        total += 1 / mig if mig else task.gpu_milli / 1000
    return total


def _key(by: str) -> Callable[[JobRow], str]:
    if by == "queue":
        return lambda job: job.queue
    if by == "user":
        return lambda job: job.user
    return lambda job: str(job.id)


def _row(name: str, t: _Tally, jobs: dict[int, JobRow], by: str) -> UsageRow:
    job = jobs[int(name)] if by == "job" else None
    return UsageRow(
        key=name,
        jobs=len(t.jobs),
        gpu_hours_allocated=t.allocated / 3600,
        gpu_hours_used=t.used / 3600,
        avg_wait=round(sum(t.waits) / len(t.waits), 3) if t.waits else None,
        max_wait=round(max(t.waits), 3) if t.waits else None,
        preemptions=t.preemptions,
        cpu_seconds=round(t.cpu_seconds, 3),
        peak_memory=t.peak_memory,
        queue=job.queue if job else None,
        user=job.user if job else None,
        name=job.name if job else None,
    )
