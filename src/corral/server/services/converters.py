"""Explicit converters between ORM rows, core dataclasses and API schemas."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from corral.core.allocation import Allocation, TaskAllocation, mig_instance_name
from corral.core.job import DEFAULT_ROLE, Job, JobSpec, JobState, RoleSpec
from corral.core.node import Device, Node, NodeState
from corral.schemas.api import AttemptOut, DeviceOut, EventOut, JobOut, NodeOut, TaskOut
from corral.schemas.manifest import JobManifest
from corral.server.db.models import EventRow, JobRow, NodeRow, TaskRow


def manifest_of(row: JobRow) -> JobManifest:
    return JobManifest.model_validate(row.manifest)


def spec_of(row: JobRow | Row) -> JobSpec:
    """The job's spec, memoized: a manifest never changes after submission, and the
    scheduling loop needs every pending job's spec on every cycle. ``row`` needs ``id``,
    ``submitted_at`` and ``user``, and ``manifest`` unless ``load_specs`` memoized it."""
    key = (row.id, row.submitted_at, row.user)
    spec = _SPECS.get(key)
    if spec is None:
        spec = _remember(key, JobManifest.model_validate(row.manifest).to_spec())
    return spec


def load_specs(session: Session, rows: Sequence[Row], batch: int = 500) -> None:
    """Memoize the specs of ``rows`` (with ``id``, ``submitted_at``, ``user``; no manifest)
    not memoized yet, reading their manifests in a few queries rather than one per job.
    The elements of a job array (rows with ``array_job_id``) share one manifest: its spec
    is the first element's when memoized, else read once per array."""
    missing = {r.id: (r.id, r.submitted_at, r.user) for r in rows}
    missing = {job_id: key for job_id, key in missing.items() if key not in _SPECS}
    members: dict[int, list[int]] = {}  # a representative -> the elements it stands for
    firsts: dict[int, int] = {}  # array id -> its representative here
    for row in rows:
        array_id = getattr(row, "array_job_id", None)
        if array_id is None or row.id not in missing:
            continue
        known = _SPECS.get((array_id, row.submitted_at, row.user))
        if known is not None:
            _remember(missing.pop(row.id), known)
            continue
        first = firsts.setdefault(array_id, row.id)
        members.setdefault(first, []).append(row.id)
    grouped = {job_id for group in members.values() for job_id in group}
    wanted = [job_id for job_id in missing if job_id not in grouped or job_id in members]
    for start in range(0, len(wanted), batch):
        chunk = wanted[start : start + batch]
        for job_id, manifest in session.execute(
            select(JobRow.id, JobRow.manifest).where(JobRow.id.in_(chunk))
        ):
            spec = _remember(missing[job_id], JobManifest.model_validate(manifest).to_spec())
            for member in members.get(job_id, ()):
                _remember(missing[member], spec)


def _remember(key: tuple[int, float, str], spec: JobSpec) -> JobSpec:
    if len(_SPECS) >= _SPEC_MEMO_SIZE:
        _SPECS.clear()
    _SPECS[key] = spec
    return spec


_SPEC_MEMO_SIZE = 100_000
_SPECS: dict[tuple[int, float, str], JobSpec] = {}


def job_of(row: JobRow | Row) -> Job:
    """A core job from its ORM row, or from a plain ``Row`` of the same columns (all but
    the manifest, once ``load_specs`` memoized its spec)."""
    return Job(
        id=row.id,
        spec=spec_of(row),
        state=JobState(row.state),
        priority=row.priority,
        preemptible=row.preemptible,
        submitted_at=row.submitted_at,
        attempt=row.attempt,
    )


JOB_COLUMNS = (  # the id, then every other column ``job_of`` reads, save the manifest
    JobRow.id,
    JobRow.user,
    JobRow.state,
    JobRow.priority,
    JobRow.preemptible,
    JobRow.submitted_at,
    JobRow.attempt,
)


class PendingJobs:
    """The core jobs of the last cycle's pending rows, reused while a row's scheduling
    columns are unchanged: a cycle re-reads every pending job, and most are as they were.
    Used by the control loop's thread; each cycle keeps only what it read."""

    def __init__(self) -> None:
        self._jobs: dict[int, tuple[tuple[Any, ...], Job]] = {}

    def jobs(self, session: Session, rows: Sequence[Row]) -> list[Job]:
        """``job_of`` of each of ``rows``: plain rows that start with ``JOB_COLUMNS``."""
        known, end = self._jobs, len(JOB_COLUMNS)
        keyed = [(row, row[1:end]) for row in rows]  # slices of plain rows: no attribute access
        fresh = [row for row, key in keyed if known.get(row[0], _NONE)[0] != key]
        load_specs(session, fresh)
        for row in fresh:
            known[row.id] = (row[1:end], job_of(row))
        self._jobs = kept = {row[0]: known[row[0]] for row in rows}
        return [kept[row[0]][1] for row in rows]


_NONE: tuple[tuple[Any, ...], None] = ((), None)


def node_of(row: NodeRow) -> Node:
    return Node(
        name=row.name,
        devices=tuple(
            Device(
                index=d["index"],
                model=d["model"],
                memory=d["memory"],
                nvlink_domain=d.get("nvlink_domain", 0),
                uuid=d.get("uuid"),
                mig=tuple(d.get("mig", ())),
                kind=d.get("kind", "gpu"),
            )
            for d in row.devices
        ),
        cpus=row.cpus,
        memory=row.memory,
        network=tuple(row.network),
        labels=tuple(sorted(row.labels.items())),
        attributes=tuple(sorted((row.attributes or {}).items())),
        state=NodeState(row.state),
        address=row.address,
    )


def task_allocation_of(row: TaskRow) -> TaskAllocation:
    return TaskAllocation(
        rank=row.rank,
        node=row.node,
        node_rank=row.node_rank,
        local_rank=row.local_rank,
        gpus=tuple(row.gpus),
        gpu_milli=row.gpu_milli,
        gpu_memory=row.gpu_memory or 0,
        cpus=row.cpus,
        memory=row.memory,
        mig_slots=tuple(row.mig_slots or ()),
    )


def allocations_of(
    tasks: Iterable[TaskRow],
    jobs: Mapping[int, JobRow] | None = None,
    predicted: Mapping[int, float] | None = None,
) -> list[Allocation]:
    """Group held task rows into per-attempt allocations (rank order), with what the
    scheduler needs of each job found in ``jobs`` (priority, queue, start, last checkpoint,
    expected end: start plus run-time estimate, else the learned run time in ``predicted``
    capped by the time limit, else the time limit, else never)."""
    jobs = jobs or {}
    predicted = predicted or {}
    groups: dict[tuple[int, int], list[TaskRow]] = defaultdict(list)
    for task in tasks:
        groups[(task.job_id, task.attempt)].append(task)
    allocations = []
    for (job_id, attempt), rows in groups.items():
        placed = tuple(task_allocation_of(t) for t in sorted(rows, key=_rank))
        job = jobs.get(job_id)
        if job is None:
            allocations.append(Allocation(job_id, attempt, placed))
            continue
        started = job.started_at or job.updated_at
        spec = spec_of(job)
        runtime = spec.expected_runtime
        if not spec.runtime_estimate and job_id in predicted:  # learned, capped by the limit
            runtime = min(predicted[job_id], spec.time_limit or math.inf)
        allocations.append(
            Allocation(
                job_id,
                attempt,
                placed,
                priority=job.priority,
                preemptible=job.preemptible,
                expected_end=started + runtime,
                queue=job.queue,
                started_at=started,
                last_checkpoint=job.last_checkpoint_at,
                requeue=spec.requeue,
            )
        )
    return allocations


def _rank(task: TaskRow) -> int:
    return task.rank


def mig_names(task: TaskRow, devices: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The names of a MIG task's instances, as its ``CUDA_VISIBLE_DEVICES`` has them: the
    UUID its agent registered for the instance (``mig_uuids`` of the device in
    ``devices``, the node's registered devices; from NVML: ``MIG-<uuid>``), else (simulated
    or declared devices) ``MIG-<node>-<gpu index>-<slot>``, deterministic."""
    uuids = {d["index"]: d.get("mig_uuids") or () for d in devices}
    return [
        uuids[index][slot]
        if 0 <= slot < len(uuids.get(index, ()))
        else mig_instance_name(task.node, index, slot)
        for index, slot in zip(task.gpus, task.mig_slots or (), strict=True)
    ]


def task_out(
    row: TaskRow, devices: Sequence[Mapping[str, Any]] = (), spec: JobSpec | None = None
) -> TaskOut:
    """The API view of a task; ``devices``: its node's registered devices (MIG UUIDs);
    ``spec``: its job's, for its role."""
    role = spec.role_of(row.rank) if spec is not None and row.rank < spec.world_size else None
    return TaskOut(
        role=role.name if role else DEFAULT_ROLE,
        role_rank=role.rank if role else row.rank,
        daemon=role.daemon if role else False,
        rank=row.rank,
        node=row.node,
        node_rank=row.node_rank,
        local_rank=row.local_rank,
        gpus=list(row.gpus),
        gpu_share=row.gpu_milli / 1000,
        mig=mig_names(row, devices) if row.mig_slots else [],
        state=row.state,
        pid=row.pid,
        exit_code=row.exit_code,
        started_at=row.started_at,
        ended_at=row.ended_at,
        peak_memory=row.peak_memory,
        cpu_seconds=row.cpu_seconds,
        reason=row.reason,
    )


def job_out(
    row: JobRow,
    tasks: Sequence[TaskRow] = (),
    events: Sequence[EventRow] = (),
    devices: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> JobOut:
    """The API view of a job; ``tasks`` (all attempts) and ``events`` for details;
    ``devices``: registered devices by node, for the names of MIG instances."""
    manifest = row.manifest
    resources = manifest.get("resources", {})
    spec = spec_of(row)
    current = sorted((t for t in tasks if t.attempt == row.attempt), key=_rank)
    return JobOut(
        id=row.id,
        name=row.name,
        user=row.user,
        queue=row.queue,
        state=row.state,
        unix_user=row.unix_user,
        priority=row.priority,
        priority_class=row.priority_class,
        preemptible=row.preemptible,
        attempt=row.attempt,
        nodes=spec.node_count,
        tasks_per_node=spec.tasks_per_node,
        kind=spec.kind,
        world_size=spec.world_size,
        roles=[role_summary(r) for r in spec.roles],
        gpus=str(resources.get("gpus", 0)) if not spec.roles else role_gpus(spec),
        total_gpus=spec.total_gpus,
        reason=row.reason,
        position=row.position,
        estimated_start=row.estimated_start if row.state == JobState.PENDING.value else None,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        exit_code=row.exit_code,
        manifest=manifest,
        last_checkpoint_at=row.last_checkpoint_at,
        idle_since=row.idle_since,
        idle=bool(row.idle),
        held=bool(row.held),
        dependency=row.dependency,
        array_job_id=row.array_job_id,
        array_task_id=row.array_task_id,
        tasks=[task_out(t, (devices or {}).get(t.node, ()), spec) for t in current],
        attempts=_attempts(tasks, events),
        events=[
            EventOut(
                at=e.at,
                attempt=e.attempt,
                from_state=e.from_state,
                to_state=e.to_state,
                reason=e.reason,
            )
            for e in events
        ],
    )


def _attempts(tasks: Sequence[TaskRow], events: Sequence[EventRow]) -> list[AttemptOut]:
    by_attempt: dict[int, list[TaskRow]] = defaultdict(list)
    for task in tasks:
        by_attempt[task.attempt].append(task)
    outcomes: dict[int, str] = {}
    for event in events:
        # the first move out of running/preempting ends the attempt (a note on the same
        # state, such as an idle flag, does not)
        moved = event.from_state != event.to_state
        if moved and event.from_state in (JobState.RUNNING, JobState.PREEMPTING):
            outcomes.setdefault(event.attempt, f"{event.to_state}: {event.reason}")
    result = []
    for attempt, rows in sorted(by_attempt.items()):
        nodes = list(dict.fromkeys(t.node for t in sorted(rows, key=_rank)))
        starts = [t.started_at for t in rows if t.started_at is not None]
        ends = [t.ended_at for t in rows if t.ended_at is not None]
        result.append(
            AttemptOut(
                attempt=attempt,
                nodes=nodes,
                started_at=min(starts) if starts else None,
                ended_at=max(ends) if len(ends) == len(rows) and ends else None,
                outcome=outcomes.get(attempt),
            )
        )
    return result


def node_out(
    row: NodeRow, held: Sequence[TaskRow], visible: Callable[[int], bool] | None = None
) -> NodeOut:
    """The API view of a node with the tasks ``held`` on it. With ``visible``, only the
    job ids it admits are named (a user sees their own jobs; the devices' use still
    counts every job)."""
    used: dict[int, list[int]] = defaultdict(list)
    share: dict[int, float] = defaultdict(float)
    instances = {d["index"]: len(d.get("mig") or ()) for d in row.devices}
    for task in held:
        for index in task.gpus:
            used[index].append(task.job_id)
            # a MIG task holds one instance of the device, not gpu_milli of it
            mig = instances.get(index) if task.mig_slots else None
            share[index] += 1 / mig if mig else task.gpu_milli / 1000
    devices = [
        DeviceOut(
            index=d["index"],
            model=d["model"],
            memory=d["memory"],
            nvlink_domain=d.get("nvlink_domain", 0),
            uuid=d.get("uuid"),
            used_by=sorted({j for j in used.get(d["index"], []) if visible is None or visible(j)}),
            share_used=round(min(1.0, share.get(d["index"], 0.0)), 3),
            kind=d.get("kind", "gpu"),
        )
        for d in row.devices
    ]
    gpus = [d for d in devices if d.kind != "tpu"]
    chips = [d for d in devices if d.kind == "tpu"]
    return NodeOut(
        name=row.name,
        state=row.state,
        address=row.address,
        gpus=len(gpus),
        gpus_used=round(sum(d.share_used for d in gpus), 3),
        tpu_chips=len(chips),
        tpu_chips_used=sum(1 for d in chips if d.share_used > 0),
        models=sorted({d["model"] for d in row.devices}),
        cpus=row.cpus,
        memory=row.memory,
        network=list(row.network),
        labels=dict(row.labels),
        attributes=dict(row.attributes or {}),
        last_heartbeat=row.last_heartbeat,
        jobs=sorted({t.job_id for t in held if visible is None or visible(t.job_id)}),
        devices=devices,
        reason=row.reason,
    )


def role_summary(role: RoleSpec) -> str:
    """``worker: 2 nodes x 8 GPUs, 4 tasks per node``, for the API and ``corral show``."""
    nodes = f"{role.nodes} node{'s' if role.nodes > 1 else ''}"
    gpus = (
        f" x {role.gpus} GPU{'s' if str(role.gpus) != '1' else ''}" if str(role.gpus) != "0" else ""
    )
    extra = [f"{role.cpus:g} CPUs"] if role.cpus else []
    if role.tasks_per_node > 1:
        extra.append(f"{role.tasks_per_node} tasks per node")
    if role.daemon:
        extra.append("serves the others")
    return f"{role.name}: {nodes}{gpus}" + (f" ({', '.join(extra)})" if extra else "")


def role_gpus(spec: JobSpec) -> str:
    """Per-node GPUs of each role: ``ps:0 worker:8``."""
    return " ".join(f"{role.name}:{role.gpus}" for role in spec.roles)
