"""What an agent is told to run for a task: command and environment (SPEC 4 and 8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.job import DEFAULT_ROLE
from corral.core.resources import MILLI
from corral.kinds.base import JobNode, TaskContext
from corral.kinds.registry import get_kind
from corral.schemas.agent import DesiredTask
from corral.server.db.models import JobRow, NodeRow, TaskRow
from corral.server.services.converters import mig_names, spec_of


def job_layout(session: Session, job: JobRow) -> tuple[JobNode, ...]:
    """The nodes of ``job``'s current attempt in node-rank order, with their addresses
    (``127.0.0.1`` for a node no longer registered) and the job's tasks on each."""
    tasks = session.execute(
        select(TaskRow.node, TaskRow.node_rank, TaskRow.rank)
        .where(TaskRow.job_id == job.id, TaskRow.attempt == job.attempt)
        .order_by(TaskRow.rank)
    ).all()
    names = {t.node for t in tasks}
    addresses = dict(
        session.execute(select(NodeRow.name, NodeRow.address).where(NodeRow.name.in_(names))).all()
    )
    spec = spec_of(job)
    slots: dict[int, list] = {}
    for name, node_rank, rank in tasks:
        slot = slots.setdefault(node_rank, [name, 0, rank])
        slot[1] += 1
    return tuple(
        JobNode(
            name,
            addresses.get(name) or "127.0.0.1",
            count,
            spec.role_of(rank).name if rank < spec.world_size else DEFAULT_ROLE,
        )
        for _, (name, count, rank) in sorted(slots.items())
    )


def task_launch(
    job: JobRow,
    task: TaskRow,
    nodes: Sequence[JobNode],
    tpu: dict[str, str] | None = None,
    devices: Sequence[Mapping[str, Any]] = (),
) -> DesiredTask:
    """The process a task runs: what its job kind (``corral.kinds``) says, with the
    environment of SPEC sections 4 and 8.

    ``nodes`` is the job's layout (:func:`job_layout`): rank 0's node gives
    ``MASTER_ADDR``. ``devices`` are the node's registered devices (``DeviceIn`` as
    stored), whose MIG instance UUIDs name a MIG task's instances in
    ``CUDA_VISIBLE_DEVICES``.

    A task of a TPU slice also gets ``tpu`` (the slice's shared TPU variables) and
    ``TPU_WORKER_ID`` (its rank: hosts are ranked in worker order); it holds no GPUs, so
    ``CUDA_VISIBLE_DEVICES`` is empty. A task holding a share of a GPU also gets
    :func:`share_env`. (The caller adds ``CORRAL_JOB_TOKEN``.)"""
    spec = spec_of(job)
    role = spec.role_of(task.rank)
    master_addr = nodes[0].address if nodes else "127.0.0.1"
    master_port = job.master_port or 29500
    env = dict(role.env)
    env.update(
        CORRAL_JOB_ID=str(job.id),
        CORRAL_JOB_NAME=job.name or "",
        CORRAL_ATTEMPT=str(job.attempt),
        CORRAL_NODE=task.node,
        CORRAL_NODES=",".join(n.name for n in nodes),
        CORRAL_GRACE_PERIOD=f"{spec.grace_period:g}",
        CORRAL_KIND=spec.kind,
        CORRAL_ROLE=role.name,
        CORRAL_ROLE_RANK=str(role.rank),
        CORRAL_ROLE_WORLD_SIZE=str(role.world_size),
        RANK=str(task.rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_RANK=str(task.local_rank),
        LOCAL_WORLD_SIZE=str(role.tasks_per_node),
        NODE_RANK=str(task.node_rank),
        NNODES=str(spec.node_count),
        GROUP_RANK=str(task.node_rank),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        CUDA_VISIBLE_DEVICES=visible_devices(task, devices),
    )
    env.update(share_env(task))
    if tpu:
        env.update(tpu, TPU_WORKER_ID=str(task.rank), CUDA_VISIBLE_DEVICES="")
    context = TaskContext(
        spec=spec,
        job_id=job.id,
        attempt=job.attempt,
        rank=task.rank,
        local_rank=task.local_rank,
        node_rank=task.node_rank,
        node=task.node,
        role=role,
        nodes=tuple(nodes),
        master_addr=master_addr,
        master_port=master_port,
        gpus=tuple(task.gpus),
        env=env,
    )
    launch = get_kind(spec.kind).launch(context)
    env.update(launch.env)
    command = launch.command
    return DesiredTask(
        job_id=job.id,
        attempt=job.attempt,
        rank=task.rank,
        command=list(command) if isinstance(command, tuple) else command,
        env=env,
        workdir=spec.workdir,
        grace_period=spec.grace_period,
        gpus=list(task.gpus),
        user=job.unix_user,
        cpus=task.cpus or None,
        memory=task.memory or None,
    )


def visible_devices(task: TaskRow, devices: Sequence[Mapping[str, Any]] = ()) -> str:
    """``CUDA_VISIBLE_DEVICES``: the GPU indices, or for a MIG task its instances.

    A MIG instance is named by the UUID its agent registered for it (``mig_uuids`` of the
    device in ``devices``, from NVML: ``MIG-<uuid>``); a device without them (simulated or
    declared) names it ``MIG-<node>-<gpu index>-<slot>``, deterministic.
    """
    if task.mig_slots:
        return ",".join(mig_names(task, devices))
    return ",".join(str(i) for i in task.gpus)


def share_env(task: TaskRow) -> dict[str, str]:
    """What a task holding a share of a GPU (``gpu_milli`` < 1000) is told of it:
    ``CORRAL_GPU_FRACTION`` (the share as a decimal, ``0.5``), ``CORRAL_GPU_MEMORY`` (the
    device memory promised to it in bytes, when the request had ``gpu_memory``) and
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (``round(100 * share)``, at least 1).

    Nothing for whole GPUs, MIG instances or no GPU: an absent ``CORRAL_GPU_FRACTION``
    means whole devices. Corral does not know whether a node runs the MPS control daemon,
    so the MPS variable is set for every share: CUDA reads it only in a process that
    connects to an MPS server, and runs as usual without one.
    """
    milli = task.gpu_milli or MILLI
    if not task.gpus or task.mig_slots or milli >= MILLI:
        return {}
    env = {
        "CORRAL_GPU_FRACTION": f"{milli / MILLI:g}",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, round(milli / 10))),
    }
    if task.gpu_memory:
        env["CORRAL_GPU_MEMORY"] = str(task.gpu_memory)
    return env
