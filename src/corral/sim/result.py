"""What a simulation produces: one record per job and samples of the cluster over time."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"  # e.g. killed at its time limit, or lost with requeue: false
    REFUSED = "refused"  # can never fit the cluster: refused at submission, as the server does
    CANCELLED = "cancelled"  # its dependency could never be satisfied
    UNFINISHED = "unfinished"  # still pending or running when the simulation stopped


@dataclass(frozen=True)
class TaskPlace:
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class JobRecord:
    """One job's life. ``gpus`` is what it holds while running (fractions count as such).

    ``run_time`` is its true duration (the work it needs); ``lost_gpu_seconds`` the GPU
    time thrown away by preemptions and failures (work since the last checkpoint).
    ``placement`` is its last placement, one entry per task in rank order.
    """

    name: str
    queue: str
    submit_time: float
    start_time: float | None  # first start
    end_time: float | None
    state: Outcome
    gpus: float
    run_time: float
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    placement: tuple[TaskPlace, ...] = ()
    reason: str | None = None  # why it was refused, failed or left unfinished
    promised_start: float | None = None  # the first start the scheduler estimated for it
    # seconds of its waits spent on pool units it then started on being provisioned
    provisioning_wait: float = 0.0

    @property
    def jct(self) -> float | None:
        """Job completion time: end minus submit, for completed jobs."""
        if self.state is not Outcome.COMPLETED or self.end_time is None:
            return None
        return self.end_time - self.submit_time

    @property
    def wait(self) -> float | None:
        """Queueing delay before the first start."""
        return None if self.start_time is None else self.start_time - self.submit_time


@dataclass(frozen=True)
class Sample:
    """The cluster at ``time`` (taken after each scheduling cycle that changed something).

    ``allocated_gpus``: GPUs held by running jobs. ``fragmented_gpus``: free GPUs that no
    pending request could use (0 when nothing is pending). ``paid_gpus``: with pools, the
    GPUs of the fixed nodes and of every pool unit requested and not yet deleted.
    """

    time: float
    allocated_gpus: float
    pending_jobs: int
    running_jobs: int
    fragmented_gpus: float = 0.0
    paid_gpus: float | None = None  # with pools: GPUs paid for now (fixed and pool nodes)


@dataclass(frozen=True)
class PoolRecord:
    """One pool's bill and use over a run (``corral.sim.pools`` defines each value).

    ``node_hours``: node-time paid, each unit from its request to its deletion (units left
    at the end: until ``SimResult.end_time``); ``provisioning_hours``: the part of it
    before the units were ready. ``cost``: ``node_hours * cost_per_hour``.
    ``gpu_hours_paid``/``gpu_hours_used``: GPU-time paid on its nodes, and allocated to
    jobs on them. ``peak_units``: the most units it paid for at once.
    """

    name: str
    min: int
    max: int
    cost_per_hour: float  # per node
    spot: bool
    node_hours: float
    provisioning_hours: float
    cost: float
    gpu_hours_paid: float
    gpu_hours_used: float
    units_provisioned: int
    units_deleted: int
    units_interrupted: int
    peak_units: int


@dataclass(frozen=True)
class SimResult:
    """``capacity_gpus``: GPUs of the cluster; with pools, the fixed nodes' and every pool
    at its ``max`` (the most it could have). ``pools`` (empty without pools), with
    ``fixed_gpus`` (the fixed nodes' GPUs) and ``end_time`` (the end of the pools' bill:
    the last job's end or the last unit's deletion, whichever is later)."""

    jobs: tuple[JobRecord, ...]
    samples: tuple[Sample, ...]
    capacity_gpus: float
    config_name: str = "default"
    seed: int = 0
    pools: tuple[PoolRecord, ...] = ()
    fixed_gpus: float = 0.0
    end_time: float | None = None
