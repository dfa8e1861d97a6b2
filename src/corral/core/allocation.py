"""Where each task of a job runs: node, device indices, shares and MIG instances."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from corral.core.resources import MILLI

MIG_SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100): a 3g profile is 3/7


@dataclass(frozen=True)
class TaskAllocation:
    """One task's place: global ``rank``, its node, and the devices it holds there.

    ``gpu_milli`` is the share of each listed device the task holds (1000 = whole).
    ``mig_slots``, when not empty, is aligned with ``gpus``: the task holds the MIG
    instance at that position of each device's ``Device.mig`` tuple, not the device.
    """

    rank: int
    node: str
    node_rank: int
    local_rank: int
    gpus: tuple[int, ...] = ()
    gpu_milli: int = MILLI
    cpus: float = 0.0
    memory: int = 0
    mig_slots: tuple[int, ...] = ()
    gpu_memory: int = 0  # device memory promised to a share on each listed device (bytes)

    def __post_init__(self) -> None:
        if self.mig_slots and len(self.mig_slots) != len(self.gpus):
            raise ValueError(f"mig_slots {self.mig_slots} do not match gpus {self.gpus}")


class DevicePick(tuple[int, ...]):
    """One task's device indices as chosen by device selection, with the MIG slot taken
    on each (aligned; empty for whole GPUs and shares). A tuple, so it is what the
    ``DeviceSelect`` protocol returns; the cycle reads ``mig_slots`` off it."""

    mig_slots: tuple[int, ...]

    def __new__(cls, gpus: tuple[int, ...], mig_slots: tuple[int, ...] = ()) -> DevicePick:
        pick = super().__new__(cls, gpus)
        pick.mig_slots = tuple(mig_slots)
        return pick


def mig_instance_name(node: str, index: int, slot: int) -> str:
    """The name a task sees for a MIG instance (in ``CUDA_VISIBLE_DEVICES``).

    Deterministic, for simulated and declared devices: ``MIG-<node>-<gpu index>-<slot>``.
    On real GPUs the control plane uses the ``MIG-<uuid>`` the agent registered instead
    (``server.services.converters.mig_names``).
    """
    return f"MIG-{node}-{index}-{slot}"


@dataclass(frozen=True)
class Allocation:
    """All tasks of one attempt of a job, in rank order."""

    job_id: int
    attempt: int
    tasks: tuple[TaskAllocation, ...]
    priority: int = 0
    preemptible: bool = True
    expected_end: float = math.inf  # when it should let go (start + run-time estimate)
    note: str = ""  # what the placement got, for the job's events (e.g. its topology)
    queue: str = "default"  # the job's queue (quota accounting, fair share)
    started_at: float | None = None  # when this attempt started (None: unknown)
    # the job's last reported checkpoint (None: never; inf: it saves when signalled)
    last_checkpoint: float | None = None
    requeue: bool = True  # a preempted attempt goes back to pending (False: the job fails)

    @property
    def gpus(self) -> float:
        """GPUs held in total: each listed device counts ``gpu_milli / 1000`` (1 for a whole
        GPU, 0.25 for a quarter share). A MIG instance counts ``1 / MIG_SLICES`` of a GPU
        (one compute slice): the allocation does not record the instance's profile, so
        ``corral.scheduling.quota`` reads it from the node for the exact ``Ng / 7``."""
        total = 0.0
        for task in self.tasks:
            if task.mig_slots:
                total += len(task.mig_slots) / MIG_SLICES
            else:
                total += len(task.gpus) * task.gpu_milli / MILLI
        return total

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes in node-rank order."""
        return tuple(self.by_node)

    @cached_property
    def by_node(self) -> dict[str, tuple[TaskAllocation, ...]]:
        """The tasks on each node, nodes in node-rank order (computed once; read only)."""
        groups: dict[str, list[TaskAllocation]] = {}
        for task in self.tasks:
            groups.setdefault(task.node, []).append(task)
        return {node: tuple(tasks) for node, tasks in groups.items()}
