"""Jobs: the validated spec of a manifest, and the job as the scheduler sees it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

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


@dataclass(frozen=True)
class JobSpec:
    """A validated manifest (SPEC section 2). Resources are per node.

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

    def __post_init__(self) -> None:
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
        return self.nodes * self.tasks_per_node

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
