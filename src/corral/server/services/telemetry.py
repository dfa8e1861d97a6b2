"""GPU telemetry from agent syncs: keep it, account GPU time used, drain on GPU errors.

Called inside the sync's transaction. A GPU whose uncorrectable-ECC or critical-Xid count
rises above what the node's row says was already acted on (``nodes.gpu_errors``; every
count is new on a node's first report) drains the node, with the errors as the reason,
and loses its tasks: their jobs are requeued or failed per ``requeue``, and the devices
stay held until the agent says the processes ended. The node stays drained until an
admin undrains it; only errors counted after that drain it again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.node import NodeState
from corral.schemas.agent import GpuTelemetry
from corral.schemas.api import TelemetrySample
from corral.server.context import Context
from corral.server.db.models import JobRow, NodeRow, TaskRow
from corral.server.services.settle import lose_tasks
from corral.server.services.transitions import move_node

HOLDING_STATES = ("assigned", "running", "terminating")
MAX_GAP_SYNCS = 3  # a gap longer than this many heartbeat intervals is not counted as use


@dataclass
class IngestOutcome:
    drained: bool = False
    jobs: set[int] = field(default_factory=set)  # jobs whose tasks were lost to GPU errors


def ingest(
    ctx: Context, session: Session, node: NodeRow, readings: Sequence[GpuTelemetry], now: float
) -> IngestOutcome:
    """Record one sync's readings of ``node``'s GPUs (see the module's docstring)."""
    tasks = list(
        session.scalars(
            select(TaskRow).where(
                TaskRow.node == node.name,
                TaskRow.released.is_(False),
                TaskRow.state.in_(HOLDING_STATES),
            )
        )
    )
    holders: dict[int, set[int]] = defaultdict(set)
    for task in tasks:
        for index in task.gpus:
            holders[index].add(task.job_id)
    _account(ctx, node, tasks, readings, now)
    ctx.telemetry.add(
        node.name, now, readings, {i: tuple(sorted(jobs)) for i, jobs in holders.items()}
    )
    return _check_errors(session, node, readings, tasks, now)


def _account(
    ctx: Context,
    node: NodeRow,
    tasks: Sequence[TaskRow],
    readings: Sequence[GpuTelemetry],
    now: float,
) -> None:
    """Add each running task's GPU-seconds used since the previous reading of its GPUs."""
    by_index = {r.index: r for r in readings}
    instances = {d["index"]: len(d.get("mig") or ()) for d in node.devices}
    longest = MAX_GAP_SYNCS * ctx.settings.heartbeat_interval
    for task in tasks:
        if task.state != "running":
            continue
        used = 0.0
        for index in task.gpus:
            reading, previous = by_index.get(index), ctx.telemetry.latest(node.name, index)
            if reading is None or previous is None:
                continue
            gap = now - previous.at
            if not 0 < gap <= longest:
                continue
            mig = instances.get(index) if task.mig_slots else None
            share = 1 / mig if mig else min(1.0, task.gpu_milli / 1000)
            used += reading.utilization / 100 * share * gap
        if used:
            task.gpu_seconds_used = (task.gpu_seconds_used or 0.0) + used


def _check_errors(
    session: Session,
    node: NodeRow,
    readings: Sequence[GpuTelemetry],
    tasks: Sequence[TaskRow],
    now: float,
) -> IngestOutcome:
    seen = {int(k): list(v) for k, v in (node.gpu_errors or {}).items()}
    problems = []
    for r in readings:
        ecc, xid = seen.get(r.index, [0, 0])
        if r.ecc_errors > ecc or r.xid_errors > xid:
            what = []
            if r.ecc_errors > ecc:
                what.append(f"{r.ecc_errors - ecc} uncorrectable ECC error(s)")
            if r.xid_errors > xid:
                code = f" (Xid {r.last_xid})" if r.last_xid is not None else ""
                what.append(f"{r.xid_errors - xid} critical Xid event(s){code}")
            problems.append(f"GPU {r.index}: {', '.join(what)}")
        if [r.ecc_errors, r.xid_errors] != [ecc, xid]:  # new errors, or counters reset
            seen[r.index] = [r.ecc_errors, r.xid_errors]
    if seen != {int(k): list(v) for k, v in (node.gpu_errors or {}).items()}:
        node.gpu_errors = {str(k): v for k, v in sorted(seen.items())}
    if not problems or node.state == NodeState.LOST.value:
        return IngestOutcome()
    reason = f"GPU errors: {'; '.join(problems)}; drained until an admin undrains it"
    if node.state == NodeState.READY.value:
        move_node(session, node, NodeState.DRAINING, reason, now)
    else:
        node.reason = reason
    why = f"GPU errors on {node.name} ({'; '.join(problems)})"
    by_job: dict[int, list[TaskRow]] = defaultdict(list)
    for task in tasks:
        by_job[task.job_id].append(task)
    for job_id, lost in by_job.items():
        job = session.get(JobRow, job_id)
        if job is not None:
            lose_tasks(session, job, lost, why, now, release=False)
    return IngestOutcome(drained=True, jobs=set(by_job))


def node_telemetry(
    ctx: Context, node: str, since: float, viewer: str | None = None
) -> list[TelemetrySample]:
    """The node's samples; with ``viewer`` (a user, not an admin) naming only their jobs."""
    samples = [s.out() for s in ctx.telemetry.node_samples(node, since)]
    ids = {j for s in samples for j in s.job_ids} | {s.job_id for s in samples if s.job_id}
    if viewer is None or not ids:
        return samples
    with ctx.sessions() as session:
        own = set(
            session.scalars(select(JobRow.id).where(JobRow.id.in_(ids), JobRow.user == viewer))
        )
    for sample in samples:
        sample.job_ids = [j for j in sample.job_ids if j in own]
        sample.job_id = sample.job_id if sample.job_id in own else None
    return samples


def job_telemetry(ctx: Context, job_id: int, since: float) -> list[TelemetrySample]:
    return [s.out() for s in ctx.telemetry.job_samples(job_id, since)]
