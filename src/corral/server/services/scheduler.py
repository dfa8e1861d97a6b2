"""The scheduling cycle in the control plane: load, call the pure scheduler, apply.

A cycle plans in one transaction (reads only: SQLite takes its one write lock at the first
write, so the pure and slowest part never runs while submissions wait on it) and applies
in the next, fenced by the leader's term (see ``server.leader``). Placing a job, and
updating a pending job's reason, are guarded updates (``state = pending`` and the same
attempt) so a job cancelled meanwhile is never started nor given a pending reason; a
victim is locked and re-read before it is preempted (on PostgreSQL the reads are READ
COMMITTED, not a snapshot).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import Row, bindparam, insert, select, update
from sqlalchemy.orm import Session

from corral.core.allocation import Allocation
from corral.core.job import TERMINAL_STATES, Job, JobSpec, JobState
from corral.core.units import format_duration
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.fairshare import Usage, UsageLedger
from corral.scheduling.mix import gpu_supply
from corral.scheduling.registry import build_profile
from corral.server.context import Context
from corral.server.db.models import EventRow, JobRow, NodeRow, QueueUsageRow, TaskRow
from corral.server.leader import Term
from corral.server.services.converters import JOB_COLUMNS, allocations_of, node_of, spec_of
from corral.server.services.dependencies import HELD, Gates, apply_gates, gate_pending
from corral.server.services.estimates import RunTimeHistory
from corral.server.services.notify import notify_jobs
from corral.server.services.throttle import apply_throttled, throttled_pending
from corral.server.services.transitions import lock_job, move_job

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class CycleResult:
    placed: int
    pending: int
    duration: float
    waiting: tuple[Job, ...] = ()  # the jobs left pending, in the cycle's order


@dataclass(frozen=True)
class LoadedCluster:
    """The cluster as the scheduler sees it, loaded from the database."""

    node_rows: list[NodeRow]
    held: list[TaskRow]  # tasks that hold resources
    held_jobs: dict[int, JobRow]  # their jobs, by id
    state: ClusterState


def load_cluster(session: Session, runtimes: RunTimeHistory | None = None) -> LoadedCluster:
    """Nodes and every allocation that holds resources (with expected ends: from their run
    time estimates, else from ``runtimes``' predictions): what a cycle schedules on, and
    what on-demand answers (``services.advice``) look at."""
    node_rows = list(session.scalars(select(NodeRow)))
    held = list(session.scalars(select(TaskRow).where(TaskRow.released.is_(False))))
    held_jobs = _held_jobs(session, held)
    state = ClusterState(
        nodes=tuple(node_of(r) for r in node_rows),
        allocations=tuple(allocations_of(held, held_jobs, _predictions(held_jobs, runtimes))),
        preempting=frozenset(
            j.id for j in held_jobs.values() if j.state == JobState.PREEMPTING.value
        ),
    )
    return LoadedCluster(node_rows, held, held_jobs, state)


PENDING_COLUMNS = (  # what ``job_of`` reads, an array's throttle, then what a cycle updates
    *JOB_COLUMNS,
    JobRow.array_job_id,
    JobRow.array_task_id,
    JobRow.array_max,
    JobRow.reason,
    JobRow.position,
    JobRow.estimated_start,
)


@dataclass(frozen=True)
class CyclePlan:
    """What one cycle decided, before anything is written."""

    cluster: LoadedCluster
    pending: list[Row]  # PENDING_COLUMNS of each pending job
    usage: UsageLedger
    decisions: Decisions
    now: float
    gates: Gates = field(default_factory=Gates)  # held, waiting and throttled jobs, left out
    jobs: tuple[Job, ...] = ()  # the pending jobs offered to the scheduler
    estimated: bool = True  # the decisions carry estimated starts (else: keep the stored)


# seconds between the cycles that estimate waiting jobs' starts (see _estimates_due)
ESTIMATE_PERIOD = 2.0


def run_cycle(ctx: Context, term: Term | None = None) -> CycleResult:
    """One scheduling cycle: plan (reads only), then apply in a second, short transaction,
    fenced by ``term`` when given (``FencedError`` if another replica took the lease over),
    so the lease stays locked only while the decisions are written."""
    with ctx.sessions() as session:
        with session.begin():
            plan = plan_cycle(ctx, session)
        with session.begin():
            if term is not None:
                term.fence(session)
            placed, preempted = apply_cycle(ctx, session, plan)
            nodes = {node for alloc in plan.decisions.placements for node in alloc.nodes}
            victims = set(preempted)
            nodes |= {t.node for t in plan.cluster.held if t.job_id in victims}
            if term is not None and nodes:
                term.announce(session, nodes)
    ctx.watch.bump({node for alloc in plan.decisions.placements for node in alloc.nodes})
    notify_jobs(ctx, preempted)
    waiting = any(reason != HELD for reason in plan.gates.blocked.values())
    if plan.gates.cancelled or (placed and waiting):  # dependents may be decided now
        ctx.wake()
    reasons = plan.decisions.pending
    waiting = sorted(
        (j for j in plan.jobs if j.id in reasons), key=lambda j: reasons[j.id].position
    )
    return CycleResult(placed, len(plan.pending) - placed, ctx.clock() - plan.now, tuple(waiting))


def plan_cycle(ctx: Context, session: Session) -> CyclePlan:
    """Load the cluster and the pending jobs and call the pure scheduler; writes nothing."""
    now = ctx.clock()
    cluster = load_cluster(session, ctx.runtimes)
    # Plain rows, not ORM objects: thousands of pending jobs are read every cycle. The
    # elements of throttled arrays are read apart, only those it may start.
    pending_rows = list(
        session.execute(
            select(*PENDING_COLUMNS).where(
                JobRow.state == JobState.PENDING.value, JobRow.array_max.is_(None)
            )
        )
    )
    gates = gate_pending(session)  # held, or waiting on a dependency: left out
    if gates.rows:
        left_out = gates.left_out
        pending_rows = [row for row in pending_rows if row[0] not in left_out]
    pending_rows += throttled_pending(session, PENDING_COLUMNS, gates)
    ctx.runtimes.refresh(session)
    pending = ctx.pending_jobs.jobs(session, pending_rows)
    learn_mix(ctx, session, cluster, pending)
    pending = ctx.runtimes.predicted(pending, [row.user for row in pending_rows])
    _, stored = stored_usage(session, ctx.config.policy.fair_share_half_life, now)
    usage = stored.advance(now, cluster.state.allocations)
    state = replace(cluster.state, usage=usage)
    estimate = _estimates_due(ctx)
    decisions = schedule(state, pending, ctx.config, now, ctx.profile, estimate, defer=False)
    return CyclePlan(cluster, pending_rows, usage, decisions, now, gates, tuple(pending), estimate)


def _estimates_due(ctx: Context) -> bool:
    """Whether this cycle computes the waiting jobs' estimated starts: at most every
    ``ESTIMATE_PERIOD`` seconds. The forward plan costs more than the rest of a cycle, and
    under a stream of short jobs cycles come several times a second; in between, each job
    keeps the estimate last written."""
    moment = time.monotonic()
    if ctx.estimated_at is not None and moment - ctx.estimated_at < ESTIMATE_PERIOD:
        return False
    ctx.estimated_at = moment
    return True


def learn_mix(
    ctx: Context, session: Session, cluster: LoadedCluster, pending: Sequence[Job]
) -> None:
    """Show ``ctx.mixes`` the jobs pending and holding resources (and, the first time, the
    last ones to end) and the nodes' GPUs; when the request mix moved materially, the
    ``corral`` sharing policy gets a new profile with it (``scheduling/mix.py``)."""
    learner = ctx.mixes
    if learner is None:
        return
    if not learner.seeded:
        learner.seed(_recent_specs(session, learner.window))
    held = ((job.id, spec_of(job)) for job in cluster.held_jobs.values())
    learner.sync(itertools.chain(((job.id, job.spec) for job in pending), held))
    learned = learner.refresh(gpu_supply(cluster.state.nodes))
    if learned is not None:
        ctx.profile = build_profile(ctx.config, learned=learned)


def _recent_specs(session: Session, count: int) -> list[JobSpec]:
    """The specs of the last ``count`` jobs to end (by id), oldest first; a manifest that
    no longer parses is skipped (history is only a hint)."""
    rows = session.execute(
        select(JobRow.id, JobRow.submitted_at, JobRow.user, JobRow.manifest)
        .where(JobRow.state.in_([s.value for s in TERMINAL_STATES]))
        .order_by(JobRow.id.desc())
        .limit(count)
    )
    specs = []
    for row in reversed(list(rows)):
        try:
            specs.append(spec_of(row))
        except ValueError:
            continue
    return specs


def apply_cycle(ctx: Context, session: Session, plan: CyclePlan) -> tuple[int, list[int]]:
    """Write a plan's decisions (guarded updates); returns the number placed and the ids
    of the jobs preempted."""
    store_usage(session, ctx.config, plan.usage, plan.now)
    ports = _ports_in_use(session, plan.cluster.held)
    by_id = {r[0]: r for r in plan.pending}  # plain rows: indexing, not attributes
    placed = _apply(session, plan.decisions, by_id, plan.cluster.node_rows, ports, plan.now)
    _write_reasons(session, plan.decisions, by_id, plan.estimated)
    preempted = _preempt(session, plan.decisions, plan.cluster.held_jobs, plan.now)
    plan.gates.cancelled = apply_gates(session, plan.gates, plan.now)
    apply_throttled(session, plan.gates.throttled)
    return placed, preempted


def _apply(
    session: Session,
    decisions: Decisions,
    pending: dict[int, Row],
    nodes: list[NodeRow],
    ports: dict[str, set[int]],
    now: float,
) -> int:
    by_name = {n.name: n for n in nodes}
    placed = 0
    # Straight to the connection, with statements built once: no autoflush between the
    # guarded updates, and the events and tasks of all placements inserted in one batch
    # each (ORM objects and a new statement per placement cost more than the writes).
    connection = session.connection()
    tasks: list[dict] = []
    events: list[dict] = []
    for alloc in decisions.placements:
        job = pending[alloc.job_id]
        port = _pick_port(by_name.get(alloc.tasks[0].node), ports)
        reason = f"placed on {', '.join(alloc.nodes)}" + (f" ({alloc.note})" if alloc.note else "")
        guarded = connection.execute(
            _PLACE,
            {"jid": job.id, "jattempt": alloc.attempt, "r": reason, "port": port, "now": now},
        )
        if guarded.rowcount != 1:
            continue
        events.append(
            {
                "entity": "job",
                "entity_id": str(job.id),
                "attempt": alloc.attempt,
                "at": now,
                "from_state": JobState.PENDING.value,
                "to_state": JobState.RUNNING.value,
                "reason": reason,
            }
        )
        tasks += _task_rows(alloc)
        placed += 1
    if events:
        connection.execute(insert(EventRow.__table__), events)
        connection.execute(insert(TaskRow.__table__), tasks)
    return placed


def _write_reasons(
    session: Session, decisions: Decisions, pending: dict[int, Row], estimated: bool
) -> None:
    """Write each waiting job's reason, position and estimated start where they changed
    (``estimated``: the decisions carry estimates; else each job keeps its stored one)."""
    changed = []
    for job_id, pend in decisions.pending.items():
        job = pending[job_id]
        estimate = pend.estimated_start
        if estimate is None and not estimated:  # not estimated this cycle: keep the last
            estimate = job[-1]
        now_known = (pend.reason, pend.position, estimate)
        if job[-3:] != now_known:  # the last PENDING_COLUMNS
            changed.append(
                dict(
                    zip(
                        ("jid", "jattempt", "r", "p", "e"),
                        (job_id, job.attempt, *now_known),
                        strict=True,
                    )
                )
            )
    if changed:  # guarded too: a job cancelled meanwhile keeps its own reason
        session.connection().execute(_PENDING_REASON, changed)


_JOBS = JobRow.__table__
_PLACE = (  # pending -> running, unless cancelled, held or moved on meanwhile
    update(_JOBS)
    .where(
        _JOBS.c.id == bindparam("jid"),
        _JOBS.c.state == JobState.PENDING.value,
        _JOBS.c.attempt == bindparam("jattempt"),
        _JOBS.c.held.is_(False),
    )
    .values(
        state=JobState.RUNNING.value,
        reason=bindparam("r"),
        position=None,
        estimated_start=None,
        master_port=bindparam("port"),
        started_at=None,
        updated_at=bindparam("now"),
    )
)
_PENDING_REASON = (
    update(JobRow.__table__)
    .where(
        JobRow.__table__.c.id == bindparam("jid"),
        JobRow.__table__.c.state == JobState.PENDING.value,
        JobRow.__table__.c.attempt == bindparam("jattempt"),
        JobRow.__table__.c.held.is_(False),
    )
    .values(reason=bindparam("r"), position=bindparam("p"), estimated_start=bindparam("e"))
)


def _preempt(
    session: Session, decisions: Decisions, held_jobs: dict[int, JobRow], now: float
) -> list[int]:
    """Signal the scheduler's victims (running -> preempting); returns their ids."""
    preempted = []
    for job_id, why in sorted(decisions.preemptions):  # the lock order of agent syncs
        job = lock_job(session, job_id) if job_id in held_jobs else None
        if job is not None and job.state == JobState.RUNNING.value:
            move_job(session, job, JobState.PREEMPTING, why, now)
            preempted.append(job_id)
    return preempted


def stored_usage(
    session: Session, half_life: float, now: float
) -> tuple[dict[str, QueueUsageRow], UsageLedger]:
    """The fair-share ledger as the last cycle stored it (empty, as of ``now``, before the
    first), with its rows by queue."""
    rows = {r.queue: r for r in session.scalars(select(QueueUsageRow))}
    at = min((r.at for r in rows.values()), default=now)
    usage = tuple(sorted((q, Usage(r.gpu, r.cpu, r.memory)) for q, r in rows.items()))
    return rows, UsageLedger(at, half_life, usage)


def store_usage(session: Session, config: SchedulerConfig, ledger: UsageLedger, now: float) -> None:
    """Store ``ledger`` as of ``now``: a row per queue it knows or the config declares (so
    the time of the last update is kept from the first cycle on). Work that ended between
    two cycles is counted up to the cycle before it ended: at most one interval short."""
    rows, _ = stored_usage(session, config.policy.fair_share_half_life, now)
    known = dict(ledger.usage)
    for queue in config.queues:
        known.setdefault(queue.name, Usage())
    for queue, used in known.items():
        row = rows.get(queue)
        if row is None:
            row = QueueUsageRow(queue=queue)
            session.add(row)
        row.gpu, row.cpu, row.memory, row.at = used.gpu, used.cpu, used.memory, now


def _predictions(jobs: dict[int, JobRow], runtimes: RunTimeHistory | None) -> dict[int, float]:
    """The learned run times of running jobs without an estimate of their own."""
    if runtimes is None:
        return {}
    out = {}
    for job_id, row in jobs.items():
        found = runtimes.predict(row)
        if found is not None:
            out[job_id] = found.seconds
    return out


def _held_jobs(session: Session, held: list[TaskRow]) -> dict[int, JobRow]:
    """The jobs of the tasks that hold resources, by id."""
    ids = {t.job_id for t in held}
    return {j.id: j for j in session.scalars(select(JobRow).where(JobRow.id.in_(ids)))}


def _task_rows(alloc: Allocation) -> list[dict]:
    """The rows of a placement's tasks (``tasks`` columns), as they start: assigned."""
    return [
        {
            "job_id": alloc.job_id,
            "attempt": alloc.attempt,
            "rank": task.rank,
            "node": task.node,
            "node_rank": task.node_rank,
            "local_rank": task.local_rank,
            "gpus": list(task.gpus),
            "gpu_milli": task.gpu_milli,
            "gpu_memory": task.gpu_memory,
            "mig_slots": list(task.mig_slots),
            "cpus": task.cpus,
            "memory": task.memory,
            "state": "assigned",
            "released": False,
            "log_size": 0,
        }
        for task in alloc.tasks
    ]


def _ports_in_use(session: Session, held: list[TaskRow]) -> dict[str, set[int]]:
    """Master ports of jobs holding resources, by the node of their rank 0."""
    masters = {(t.job_id, t.attempt): t.node for t in held if t.rank == 0}
    if not masters:
        return {}
    used: dict[str, set[int]] = {}
    rows = session.execute(
        select(JobRow.id, JobRow.attempt, JobRow.master_port).where(
            JobRow.id.in_({job_id for job_id, _ in masters})
        )
    )
    for job_id, attempt, port in rows:
        node = masters.get((job_id, attempt))
        if node and port:
            used.setdefault(node, set()).add(port)
    return used


def _pick_port(node: NodeRow | None, ports: dict[str, set[int]]) -> int:
    """A port the master node's agent reported free and no running job of it uses."""
    if node is None:
        return DEFAULT_MASTER_PORT
    used = ports.setdefault(node.name, set())
    port = next((p for p in node.free_ports or [] if p not in used), None)
    if port is None:
        port = next(
            p for p in range(DEFAULT_MASTER_PORT, DEFAULT_MASTER_PORT + 10000) if p not in used
        )
    used.add(port)
    return port


def enforce_time_limits(ctx: Context, term: Term | None = None) -> list[int]:
    """Fail running jobs past their ``time_limit``; their tasks are then stopped.

    Fenced by ``term`` when given."""
    now = ctx.clock()
    ended = []
    with ctx.sessions.begin() as session:
        if term is not None:
            term.fence(session)
        overdue = session.scalars(
            select(JobRow).where(
                JobRow.state == JobState.RUNNING.value,
                JobRow.time_limit.is_not(None),
                JobRow.started_at + JobRow.time_limit < now,
            )
        )
        for job in overdue:
            limit = format_duration(job.time_limit)
            move_job(session, job, JobState.FAILED, f"time limit {limit} exceeded", now)
            ended.append(job.id)
        if term is not None and ended:
            term.announce(session, None)
    notify_jobs(ctx, ended)
    return ended
