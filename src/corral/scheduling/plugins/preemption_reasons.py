"""Why a victim is preempted, in one line for its preemption event.

``preempted for job 3 (priority 1000 > 100): loses 1.5 GPU-hours since its last
checkpoint 45m ago; chosen as the cheapest of 4 candidate sets (the next would lose
3.0 GPU-hours over 2 jobs)``: the job it makes room for, why it was eligible (given by the
caller: a kind of preemption says its own), the work it loses (``victims.work_lost``) and
how its set compared with the others the search ranked (``victims.Plan``). Pure.
"""

from __future__ import annotations

import math

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.units import format_duration
from corral.scheduling.plugins.jct import expected_size, remaining_size
from corral.scheduling.plugins.victims import Cost, Plan, Victim, cost_of, work_lost


def explain_victim(job_id: int, eligible: str, lost: str, chosen: str) -> str:
    """The line for one victim: ``preempted for job {job_id} ({eligible}): {lost}; {chosen}``
    (``chosen`` may be empty)."""
    return f"preempted for job {job_id} ({eligible}): {lost}" + (f"; {chosen}" if chosen else "")


def eligibility(job: Job, victim: Victim, now: float | None = None) -> str:
    """Why ``victim`` may be preempted for ``job`` (priority, reclaim or completion time;
    with ``now``, the completion-time reason gives both expected sizes)."""
    if victim.reclaim:
        return f"reclaimed: queue {victim.alloc.queue} borrows beyond its quota"
    if victim.for_jct:
        why = f"equal priority {job.priority}, for completion time: it has far more work left"
        if now is None:
            return why
        left, needs = remaining_size(victim.alloc, now), expected_size(job)
        return f"{why}, about {gpu_hours(left)} GPU-hours against {gpu_hours(needs)}"
    return f"priority {job.priority} > {victim.priority}"


def lost_work(alloc: Allocation, now: float) -> str:
    """``loses 1.5 GPU-hours since its last checkpoint 45m00s ago`` (or since its start)."""
    checkpoint = alloc.last_checkpoint
    if checkpoint is not None and math.isinf(checkpoint):
        return "loses nothing: it saves its state when signalled"
    lost = f"loses {gpu_hours(work_lost(alloc, now))} GPU-hours"
    if checkpoint is not None:
        return f"{lost} since its last checkpoint {format_duration(now - checkpoint)} ago"
    if alloc.started_at is None:
        return "never checkpointed; its start, and so the work it loses, is unknown"
    ran = format_duration(now - alloc.started_at)
    return f"never checkpointed: {lost} since its start {ran} ago"


def choice(plan: Plan) -> str:
    """How the plan's victim set was chosen among the sets the search ranked."""
    if plan.candidates <= 1:
        return "the only candidate set"
    text = f"chosen as the cheapest of {plan.candidates} candidate sets"
    notes = []
    if plan.passed:
        text += " that let it start"
        notes.append(f"{plan.passed} cheaper {'one' if plan.passed == 1 else 'ones'} did not")
    if plan.runner_up is not None:
        notes.append(f"the next would {_cost(plan.runner_up, cost_of(plan.victims))}")
    return text + (f" ({'; '.join(notes)})" if notes else "")


def explanations(job: Job, plan: Plan, now: float) -> tuple[tuple[int, str], ...]:
    """``(victim job id, its line)`` for every victim of ``plan``, by job id."""
    chosen = choice(plan)
    return tuple(
        (
            v.job_id,
            explain_victim(job.id, eligibility(job, v, now), lost_work(v.alloc, now), chosen),
        )
        for v in sorted(plan.victims, key=lambda v: v.job_id)
    )


def gpu_hours(gpu_seconds: float) -> str:
    hours = gpu_seconds / 3600
    return f"{hours:.2f}" if 0 < hours < 0.1 else f"{hours:.1f}"


def _cost(cost: Cost, chosen: Cost) -> str:
    """``lose 3.0 GPU-hours over 2 jobs`` (and the priority it would reach, if higher)."""
    priority, loss, count = cost
    text = f"lose {gpu_hours(loss)} GPU-hours over {count} job{'s' if count != 1 else ''}"
    return f"preempt priority {priority} and {text}" if priority > chosen[0] else text
