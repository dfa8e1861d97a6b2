"""Where each task of a job runs: node, device indices and shares."""

from __future__ import annotations

import math
from dataclasses import dataclass

from corral.core.resources import MILLI


@dataclass(frozen=True)
class TaskAllocation:
    """One task's place: global ``rank``, its node, and the devices it holds there.

    ``gpu_milli`` is the share of each listed device the task holds (1000 = whole).
    """

    rank: int
    node: str
    node_rank: int
    local_rank: int
    gpus: tuple[int, ...] = ()
    gpu_milli: int = MILLI
    cpus: float = 0.0
    memory: int = 0


@dataclass(frozen=True)
class Allocation:
    """All tasks of one attempt of a job, in rank order."""

    job_id: int
    attempt: int
    tasks: tuple[TaskAllocation, ...]
    priority: int = 0
    preemptible: bool = True
    expected_end: float = math.inf  # when it should let go (start + run-time estimate)

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes in node-rank order."""
        seen: dict[str, None] = {}
        for task in self.tasks:
            seen.setdefault(task.node, None)
        return tuple(seen)
