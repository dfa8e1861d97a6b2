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
    pending request could use (0 when nothing is pending).
    """

    time: float
    allocated_gpus: float
    pending_jobs: int
    running_jobs: int
    fragmented_gpus: float = 0.0


@dataclass(frozen=True)
class SimResult:
    jobs: tuple[JobRecord, ...]
    samples: tuple[Sample, ...]
    capacity_gpus: float  # GPUs of the cluster (all nodes)
    config_name: str = "default"
    seed: int = 0
