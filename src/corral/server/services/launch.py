"""What an agent is told to run for a task: command and environment (SPEC 4 and 8)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.array import parsed_array
from corral.core.hostlist import compress
from corral.core.job import DEFAULT_ROLE
from corral.core.resources import MILLI, GpuKind, GpuRequest
from corral.kinds.base import JobNode, TaskContext
from corral.kinds.registry import get_kind
from corral.schemas.agent import DesiredTask, MountSpec
from corral.server.db.models import JobRow, NodeRow, TaskRow
from corral.server.services.converters import mig_names, spec_of

MAX_LAYOUTS = 4096  # attempts whose node slots are remembered (then it starts over)
# (job id, attempt, submitted at, user) -> (node, tasks there, first rank) per node slot
_SLOTS: dict[tuple, tuple[tuple[str, int, int], ...]] = {}


def job_layout(session: Session, job: JobRow) -> tuple[JobNode, ...]:
    """The nodes of ``job``'s current attempt in node-rank order, with their addresses
    (``127.0.0.1`` for a node no longer registered) and the job's tasks on each.

    An attempt's tasks are all placed at once and never move, so its slots are read once
    (not at every sync of every node of a large gang); addresses are read every time."""
    key = (job.id, job.attempt, job.submitted_at, job.user)
    slots = _SLOTS.get(key)
    if slots is None:
        slots = _SLOTS[key] = _slots(session, job)
        if len(_SLOTS) > MAX_LAYOUTS:
            _SLOTS.clear()
            _SLOTS[key] = slots
    names = {name for name, _, _ in slots}
    addresses = dict(
        session.execute(select(NodeRow.name, NodeRow.address).where(NodeRow.name.in_(names))).all()
    )
    spec = spec_of(job)
    return tuple(
        JobNode(
            name,
            addresses.get(name) or "127.0.0.1",
            count,
            spec.role_of(rank).name if rank < spec.world_size else DEFAULT_ROLE,
        )
        for name, count, rank in slots
    )


def _slots(session: Session, job: JobRow) -> tuple[tuple[str, int, int], ...]:
    tasks = session.execute(
        select(TaskRow.node, TaskRow.node_rank, TaskRow.rank)
        .where(TaskRow.job_id == job.id, TaskRow.attempt == job.attempt)
        .order_by(TaskRow.rank)
    ).all()
    slots: dict[int, list] = {}
    for name, node_rank, rank in tasks:
        slot = slots.setdefault(node_rank, [name, 0, rank])
        slot[1] += 1
    return tuple((name, count, rank) for _, (name, count, rank) in sorted(slots.items()))


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
    :func:`share_env`. Every task gets :func:`slurm_env` (SPEC 9), except the variables
    the job's own ``env`` sets; an element of a job array also ``CORRAL_ARRAY_JOB_ID``
    and ``CORRAL_ARRAY_TASK_ID`` (its array's id and its index). A job in an image
    (``docs/containers.md``) also names it, its mounts and its /dev/shm size; the caller
    gives ``node_gpus`` (:func:`share_node_gpus`) and adds ``CORRAL_JOB_TOKEN``."""
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
    if job.array_job_id is not None:
        env.update(
            CORRAL_ARRAY_JOB_ID=str(job.array_job_id),
            CORRAL_ARRAY_TASK_ID=str(job.array_task_id),
        )
    env.update(share_env(task))
    for key, value in slurm_env(job, task, nodes).items():
        env.setdefault(key, value)  # the job's env (already in env) wins
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
        image=spec.image,
        mounts=[
            MountSpec(source=m.source, target=m.target, read_only=m.read_only) for m in spec.mounts
        ],
        shm_size=spec.shm_size,
        node_gpus=list(task.gpus) if spec.image else [],
    )


def share_node_gpus(launches: Sequence[DesiredTask]) -> None:
    """Give each task in an image (``node_gpus``) every GPU its job attempt holds on the
    node, ``launches`` being all the node's: its container gets their device files, so that
    the job's local ranks reach each other's GPUs (peer to peer) as they do without one."""
    held: dict[tuple[int, int], set[int]] = {}
    for launch in launches:
        held.setdefault((launch.job_id, launch.attempt), set()).update(launch.gpus)
    for launch in launches:
        if launch.image:
            launch.node_gpus = sorted(held[(launch.job_id, launch.attempt)])


def slurm_env(job: JobRow, task: TaskRow, nodes: Sequence[JobNode]) -> dict[str, str]:
    """What Slurm sets in a job step's tasks (SPEC 9), so that code reading ``SLURM_*``
    (PyTorch Lightning, submitit, JAX's cluster detection) runs unchanged.

    The ids equal section 4's: ``SLURM_PROCID`` is ``RANK``, ``SLURM_LOCALID``
    ``LOCAL_RANK``, ``SLURM_NODEID`` ``NODE_RANK``, ``SLURM_NTASKS`` ``WORLD_SIZE`` and
    ``SLURM_NTASKS_PER_NODE`` ``LOCAL_WORLD_SIZE``. The node lists (``SLURM_JOB_NODELIST``,
    ``SLURM_NODELIST``, ``SLURM_STEP_NODELIST``) name the job's distinct machines in
    node-rank order (a hostlist that keeps order: its first host holds rank 0, as under
    Slurm, where scripts take it for the master), and ``SLURM_JOB_NUM_NODES`` counts them.
    ``SLURM_CPUS_PER_TASK`` only when the job (its role) asks for CPUs,
    ``SLURM_GPUS_ON_NODE`` only when it holds GPUs on the node, ``SLURM_SUBMIT_DIR`` only
    when it has a ``workdir``. An element of a job array also gets :func:`array_env`. No
    ``SLURM_JOBID`` alias (Open MPI's ``mpirun`` would take it for a Slurm allocation and
    launch through ``srun``)."""
    spec = spec_of(job)
    role = spec.role_of(task.rank)
    names = list(dict.fromkeys(node.name for node in nodes)) or [task.node]
    nodelist = compress(names, sort=False)
    env = {
        "SLURM_JOB_ID": str(job.id),
        "SLURM_JOB_NAME": job.name or _command_name(spec.command),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(names)),
        "SLURM_NNODES": str(len(names)),
        "SLURM_STEP_NUM_NODES": str(len(names)),
        "SLURM_NTASKS": str(spec.world_size),
        "SLURM_NTASKS_PER_NODE": str(role.tasks_per_node),
        "SLURM_PROCID": str(task.rank),
        "SLURM_LOCALID": str(task.local_rank),
        "SLURM_NODEID": str(task.node_rank),
    }
    part = spec.parts[role.index]
    if part.cpus:
        env["SLURM_CPUS_PER_TASK"] = str(max(1, int(part.cpus / part.tasks_per_node)))
    roles = {r.name: p for r, p in zip(spec.roles, spec.parts, strict=False)}  # none: ()
    gpus = sum(
        _devices(roles.get(node.role, part).gpus) for node in nodes if node.name == task.node
    ) or _devices(part.gpus)
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = str(gpus)
    if spec.workdir:
        env["SLURM_SUBMIT_DIR"] = spec.workdir
    env.update(array_env(job))
    return env


def array_env(job: JobRow) -> dict[str, str]:
    """Slurm's variables of an element of a job array (none for another job):
    ``SLURM_ARRAY_JOB_ID`` (the array's id: its first element's job id),
    ``SLURM_ARRAY_TASK_ID`` (the element's index), ``SLURM_ARRAY_TASK_COUNT``,
    ``SLURM_ARRAY_TASK_MIN``, ``SLURM_ARRAY_TASK_MAX`` (the array's indices) and
    ``SLURM_ARRAY_TASK_STEP`` (their spacing when even, as ``1-7:2`` gives 2; else 1)."""
    text = (job.manifest or {}).get("array")
    if job.array_job_id is None or job.array_task_id is None or not text:
        return {}
    spec = parsed_array(text)
    return {
        "SLURM_ARRAY_JOB_ID": str(job.array_job_id),
        "SLURM_ARRAY_TASK_ID": str(job.array_task_id),
        "SLURM_ARRAY_TASK_COUNT": str(spec.count),
        "SLURM_ARRAY_TASK_MIN": str(spec.min),
        "SLURM_ARRAY_TASK_MAX": str(spec.max),
        "SLURM_ARRAY_TASK_STEP": str(spec.step),
    }


def _command_name(command: tuple[str, ...] | str) -> str:
    """The job name Slurm gives a job without one: its program's base name (``wrap``
    for a shell command line, as ``sbatch --wrap``)."""
    if isinstance(command, str) or not command:
        return "wrap"
    return posixpath.basename(command[0]) or command[0]


def _devices(gpus: GpuRequest) -> int:
    """GPUs a node's request holds: whole GPUs or MIG instances, one shared GPU."""
    if gpus.kind is GpuKind.FRACTION:
        return 1
    if gpus.kind in (GpuKind.WHOLE, GpuKind.MIG):
        return max(gpus.count, 1)
    return 0


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
