"""Jobs: the validated spec of a manifest, and the job as the scheduler sees it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

from corral.core.container import Mount
from corral.core.resources import GpuKind, GpuRequest
from corral.core.tpu import TpuRequest


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PREEMPTING = "preempting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def active(self) -> bool:
        """Placed on nodes (tasks may be running)."""
        return self in (JobState.RUNNING, JobState.PREEMPTING)


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class TopologyLevel(StrEnum):
    NVLINK = "nvlink"
    NODE = "node"
    LEAF = "leaf"
    SPINE = "spine"
    ZONE = "zone"
    ANY = "any"


class TopologyMode(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


class PlacementPolicy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"


@dataclass(frozen=True)
class Topology:
    level: TopologyLevel = TopologyLevel.ANY
    mode: TopologyMode = TopologyMode.PREFERRED


DEFAULT_ROLE = "worker"  # the role of every task of a job that lists no roles
DEFAULT_KIND = "pytorch"


@dataclass(frozen=True)
class RoleSpec:
    """One named group of a heterogeneous job (SPEC section 8): its own shape, placed
    with the others as one gang. ``command``/``env`` None/empty: the job's (``env`` is
    added to the job's). A ``daemon`` role serves the others: the job ends when every task
    of its other roles has ended (its outcome is theirs), and its daemons are then
    stopped; a daemon that fails while the job runs still fails the job."""

    name: str
    nodes: int = 1
    tasks_per_node: int = 1
    gpus: GpuRequest = field(default_factory=GpuRequest)
    gpu_model: str | None = None
    gpu_memory: int | None = None
    cpus: float | None = None
    memory: int | None = None
    topology: Topology | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] | str | None = None
    env: tuple[tuple[str, str], ...] = ()
    daemon: bool = False

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    def size(self) -> tuple:
        """Orders roles by how much one node of the role asks for (GPUs first)."""
        gpus = self.gpus
        amount = gpus.count if gpus.kind is GpuKind.WHOLE else gpus.milli / 1000
        has = gpus.kind is not GpuKind.NONE
        return (has, amount, self.cpus or 0.0, self.memory or 0, self.nodes)


@dataclass(frozen=True)
class TaskRole:
    """Where one task of a job stands among its roles (``JobSpec.role_of``)."""

    index: int  # the role's position in ``JobSpec.roles`` (0 for a job without roles)
    name: str
    rank: int  # among the role's tasks
    world_size: int  # the role's tasks
    node_rank: int  # among the role's nodes
    nodes: int
    tasks_per_node: int
    daemon: bool
    command: tuple[str, ...] | str
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class JobSpec:
    """A validated manifest (SPEC section 2). Resources are per node.

    A job with ``roles`` (SPEC section 8) is placed as one gang of all of them; its
    top-level shape (``nodes``, ``tasks_per_node``, ``gpus``, ``cpus``, ...) is then its
    largest role's, derived here, so that what sizes one node of a job (preemption's victim
    search, quick fit checks) sees its biggest need (``topology`` stays the job's: it
    applies to the whole job, a role's to that role); totals (``total_gpus``,
    ``world_size``) and placement go over every role (``parts``). Ranks are numbered role
    after role in the order listed, nodes likewise. ``kind`` names the job kind plugin
    (``corral.kinds``) and ``kind_options`` its block of the manifest (key, JSON value).

    A TPU slice (``tpu``) has one task per host: ``nodes`` is the slice's host count on
    the cluster's pods (0 until submission sizes it, see ``feasibility.with_tpu_hosts``),
    and ``gpus`` says ``tpu=<generation>`` (filled in when left empty) so that each node's
    request names the chips it needs.
    """

    command: tuple[str, ...] | str
    name: str | None = None
    queue: str = "default"
    priority: str | int | None = None
    nodes: int = 1
    tasks_per_node: int = 1
    gpus: GpuRequest = field(default_factory=GpuRequest)
    gpu_model: str | None = None
    gpu_memory: int | None = None
    cpus: float | None = None
    memory: int | None = None
    tpu: TpuRequest | None = None
    topology: Topology | None = None
    placement: PlacementPolicy | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    time_limit: float | None = None
    runtime_estimate: float | None = None
    preemptible: bool | None = None
    grace_period: float = 30.0
    requeue: bool = True
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    # the container the tasks run in (``core.container``): an image, host paths mounted
    # into it, the size of its /dev/shm (bytes); no image: the node's own filesystem
    image: str | None = None
    mounts: tuple[Mount, ...] = ()
    shm_size: int | None = None
    kind: str = DEFAULT_KIND
    roles: tuple[RoleSpec, ...] = ()
    kind_options: tuple[tuple[str, str], ...] = ()
    # the job's outcome is its first task's (rank 0: ``sbatch``'s batch script); every
    # other task serves it like a daemon role's (set by a kind's ``expand``, not stored)
    first_task_decides: bool = False

    def __post_init__(self) -> None:
        if self.roles:
            primary = max(self.roles, key=RoleSpec.size)
            for name in ("nodes", "tasks_per_node", "gpus", "gpu_model", "gpu_memory"):
                object.__setattr__(self, name, getattr(primary, name))  # derived, see above
            object.__setattr__(self, "cpus", primary.cpus)
            object.__setattr__(self, "memory", primary.memory)
        generation = self.tpu.generation if self.tpu else None
        if self.gpus.tpu == generation:
            return
        if generation and self.gpus == GpuRequest():
            object.__setattr__(self, "gpus", GpuRequest(tpu=generation))  # derived, see above
            return
        if not generation:
            raise ValueError(f"gpus ask for {self.gpus.tpu} TPU chips but no TPU slice")
        raise ValueError(f"a TPU slice ({self.tpu}) and GPUs ({self.gpus}) exclude each other")

    @property
    def expected_runtime(self) -> float:
        """``runtime_estimate``, else ``time_limit``, else infinity (unknown)."""
        return self.runtime_estimate or self.time_limit or math.inf

    @property
    def world_size(self) -> int:
        if self.roles:
            return sum(role.world_size for role in self.roles)
        return self.nodes * self.tasks_per_node

    @property
    def node_count(self) -> int:
        """Nodes of the whole job (each role's counted; roles may share a machine)."""
        if self.roles:
            return sum(role.nodes for role in self.roles)
        return self.nodes

    @cached_property
    def parts(self) -> tuple[JobSpec, ...]:
        """The job as homogeneous gangs: itself, or one spec per role (in role order),
        each with the role's shape, node selector (added to the job's) and topology."""
        if not self.roles:
            return (self,)
        return tuple(
            replace(
                self,
                roles=(),
                nodes=role.nodes,
                tasks_per_node=role.tasks_per_node,
                gpus=role.gpus,
                gpu_model=role.gpu_model,
                gpu_memory=role.gpu_memory,
                cpus=role.cpus,
                memory=role.memory,
                topology=role.topology,
                node_selector=tuple(
                    sorted({**dict(self.node_selector), **dict(role.node_selector)}.items())
                ),
            )
            for role in self.roles
        )

    @property
    def shape_key(self) -> tuple:
        """What, beside one node's request, makes two jobs place alike."""
        return (self.nodes, self.tpu, self.roles)

    def role_of(self, rank: int) -> TaskRole:
        """The role of the task of global ``rank`` (ranks go role after role)."""
        offset = 0
        for index, role in enumerate(self.roles):
            if rank < offset + role.world_size:
                local = rank - offset
                return TaskRole(
                    index,
                    role.name,
                    local,
                    role.world_size,
                    local // role.tasks_per_node,
                    role.nodes,
                    role.tasks_per_node,
                    role.daemon,
                    self.command if role.command is None else role.command,
                    tuple(sorted({**dict(self.env), **dict(role.env)}.items())),
                )
            offset += role.world_size
        if self.roles:
            raise ValueError(f"rank {rank} is past the job's {offset} tasks")
        return TaskRole(
            0,
            DEFAULT_ROLE,
            rank,
            self.world_size,
            rank // self.tasks_per_node,
            self.nodes,
            self.tasks_per_node,
            self.first_task_decides and rank > 0,
            self.command,
            self.env,
        )

    @property
    def model_pattern(self) -> str | None:
        """The GPU model constraint: ``gpu_model``, else the ``H100:8`` prefix."""
        return self.gpu_model or self.gpus.model

    @property
    def gpus_per_task(self) -> int:
        """Whole GPUs each task gets (the node's GPUs split evenly)."""
        if self.gpus.kind is not GpuKind.WHOLE:
            return 0
        return self.gpus.count // self.tasks_per_node

    @cached_property  # (frozen: computed once; the jct order reads it every cycle)
    def total_gpus(self) -> float:
        """GPUs of the whole job, fractions counted as such (for display and accounting)."""
        if self.roles:
            return sum(part.total_gpus for part in self.parts)
        if self.gpus.kind is GpuKind.WHOLE:
            return float(self.gpus.count * self.nodes)
        if self.gpus.kind is GpuKind.FRACTION:
            return self.gpus.milli / 1000 * self.nodes
        if self.gpus.kind is GpuKind.MIG:
            return float(self.nodes)
        return 0.0


@dataclass(frozen=True)
class Job:
    """A job as the scheduler sees it: the spec plus what the control plane resolved."""

    id: int
    spec: JobSpec
    state: JobState
    priority: int
    preemptible: bool
    submitted_at: float
    attempt: int = 0
    ran: float = 0.0  # seconds of work kept from earlier attempts (its progress so far)
    predicted_runtime: float | None = None  # learned from similar jobs (scheduling.estimates)

    @property
    def queue(self) -> str:
        return self.spec.queue

    @cached_property  # (frozen: computed once per job object; read on every cycle)
    def expected_runtime(self) -> float:
        """What the scheduler plans with: the spec's ``runtime_estimate``, else the
        prediction (capped by the ``time_limit``), else the ``time_limit``, else infinity."""
        spec = self.spec
        if spec.runtime_estimate:
            return spec.runtime_estimate
        if self.predicted_runtime:
            return min(self.predicted_runtime, spec.time_limit or math.inf)
        return spec.time_limit or math.inf

    @cached_property
    def expected_remaining(self) -> float:
        """Seconds it is expected to run from its next start: the expected run time less
        the work kept; a job that has outrun its estimate is expected to run as long again
        (never less than a minute). Infinity when nothing is known."""
        total = self.expected_runtime
        if math.isinf(total):
            return total
        left = total - self.ran
        return left if left > 0 else max(self.ran, total, 60.0)
