"""Small fluent builders for the pure core: jobs, nodes, allocations and cluster states.

    job(1).gpus(8).nodes(2).tasks(8).priority(10).submitted(5.0).build()  -> Job
    node("n0").gpus(8, model="H100", nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).build()  -> Node
    allocation(7).task("n0", gpus=[0, 1]).build()  -> Allocation

Every builder produces the real frozen dataclasses of ``corral.core``; nothing is mocked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, JobSpec, JobState, PlacementPolicy, RoleSpec
from corral.core.node import Device, Node, NodeState
from corral.core.resources import MILLI, parse_gpus
from corral.core.units import parse_size
from corral.scheduling.config import Policy, SchedulerConfig
from corral.scheduling.cycle import ClusterState

GB = 1000**3


class JobBuilder:
    """A pending job; ``build()`` gives a ``Job``, ``spec()`` its ``JobSpec`` alone."""

    def __init__(self, job_id: int) -> None:
        self._id = job_id
        self._spec = JobSpec(command=("true",))
        self._state = JobState.PENDING
        self._priority = 0
        self._preemptible = True
        self._submitted = float(job_id)
        self._attempt = 0

    def _with(self, **changes: object) -> JobBuilder:
        self._spec = replace(self._spec, **changes)
        return self

    def gpus(self, value: int | float | str) -> JobBuilder:
        """GPUs per node, in any manifest form: ``8``, ``"H100:8"``, ``0.25``."""
        return self._with(gpus=parse_gpus(value))

    def model(self, pattern: str) -> JobBuilder:
        return self._with(gpu_model=pattern)

    def gpu_memory(self, size: int | str) -> JobBuilder:
        return self._with(gpu_memory=parse_size(size))

    def nodes(self, count: int) -> JobBuilder:
        return self._with(nodes=count)

    def tasks(self, per_node: int) -> JobBuilder:
        return self._with(tasks_per_node=per_node)

    def cpus(self, count: float) -> JobBuilder:
        return self._with(cpus=count)

    def memory(self, size: int | str) -> JobBuilder:
        return self._with(memory=parse_size(size))

    def queue(self, name: str) -> JobBuilder:
        return self._with(queue=name)

    def placement(self, policy: PlacementPolicy | str) -> JobBuilder:
        return self._with(placement=PlacementPolicy(policy))

    def selector(self, **labels: str) -> JobBuilder:
        return self._with(node_selector=tuple(sorted(labels.items())))

    def runtime_estimate(self, seconds: float) -> JobBuilder:
        return self._with(runtime_estimate=float(seconds))

    def topology(self, level: str, mode: str = "required") -> JobBuilder:
        from corral.core.job import Topology, TopologyLevel, TopologyMode

        return self._with(topology=Topology(TopologyLevel(level), TopologyMode(mode)))

    def time_limit(self, seconds: float) -> JobBuilder:
        return self._with(time_limit=float(seconds))

    def named(self, name: str) -> JobBuilder:
        return self._with(name=name)

    def priority(self, value: int) -> JobBuilder:
        self._priority = value
        return self

    def preemptible(self, value: bool = True) -> JobBuilder:
        self._preemptible = value
        return self

    def submitted(self, at: float) -> JobBuilder:
        self._submitted = at
        return self

    def state(self, state: JobState) -> JobBuilder:
        self._state = state
        return self

    def attempt(self, number: int) -> JobBuilder:
        self._attempt = number
        return self

    def roles(self, *roles: RoleSpec) -> JobBuilder:
        """Roles instead of one shape (``role("ps").cpus(2)`` builders or ``RoleSpec``)."""
        return self._with(roles=tuple(roles))

    def spec(self) -> JobSpec:
        return self._spec

    def build(self) -> Job:
        return Job(
            id=self._id,
            spec=self._spec,
            state=self._state,
            priority=self._priority,
            preemptible=self._preemptible,
            submitted_at=self._submitted,
            attempt=self._attempt,
        )


class NodeBuilder:
    """A ready node with no devices, 96 CPUs and 1TB of memory unless told otherwise."""

    def __init__(self, name: str) -> None:
        self._node = Node(name=name, cpus=96.0, memory=1000 * GB)

    def _with(self, **changes: object) -> NodeBuilder:
        self._node = replace(self._node, **changes)
        return self

    def gpus(
        self,
        count: int,
        model: str = "H100",
        memory: int | str = 80 * GB,
        nvlink: Sequence[Sequence[int]] | None = None,
    ) -> NodeBuilder:
        """``count`` GPUs indexed 0..count-1; ``nvlink`` groups give their domains."""
        domain = {i: d for d, group in enumerate(nvlink or ()) for i in group}
        devices = tuple(
            Device(index=i, model=model, memory=parse_size(memory), nvlink_domain=domain.get(i, 0))
            for i in range(count)
        )
        return self._with(devices=devices)

    def devices(self, *devices: Device) -> NodeBuilder:
        """Explicit devices, for mixed models or odd indices."""
        return self._with(devices=tuple(devices))

    def cpus(self, count: float) -> NodeBuilder:
        return self._with(cpus=float(count))

    def memory(self, size: int | str) -> NodeBuilder:
        return self._with(memory=parse_size(size))

    def labels(self, **labels: str) -> NodeBuilder:
        return self._with(labels=tuple(sorted(labels.items())))

    def network(self, *path: str) -> NodeBuilder:
        return self._with(network=path)

    def state(self, state: NodeState) -> NodeBuilder:
        return self._with(state=state)

    def build(self) -> Node:
        return self._node


class AllocationBuilder:
    """An allocation already holding resources; tasks are added in rank order."""

    def __init__(self, job_id: int) -> None:
        self._job_id = job_id
        self._tasks: list[TaskAllocation] = []
        self._priority = 0
        self._preemptible = True
        self._extra: dict[str, object] = {}

    def task(
        self,
        node: str,
        gpus: Sequence[int] = (),
        share: float = 1.0,
        cpus: float = 0.0,
        memory: int | str = 0,
    ) -> AllocationBuilder:
        """One more task on ``node``, holding ``share`` of each device in ``gpus``."""
        nodes = list(dict.fromkeys(t.node for t in self._tasks))
        if node not in nodes:
            nodes.append(node)
        node_rank = nodes.index(node)
        local_rank = sum(1 for t in self._tasks if t.node == node)
        self._tasks.append(
            TaskAllocation(
                rank=len(self._tasks),
                node=node,
                node_rank=node_rank,
                local_rank=local_rank,
                gpus=tuple(gpus),
                gpu_milli=round(share * MILLI),
                cpus=cpus,
                memory=parse_size(memory),
            )
        )
        return self

    def priority(self, value: int, preemptible: bool = True) -> AllocationBuilder:
        self._priority, self._preemptible = value, preemptible
        return self

    def queue(self, name: str) -> AllocationBuilder:
        self._extra["queue"] = name
        return self

    def started(self, at: float) -> AllocationBuilder:
        self._extra["started_at"] = float(at)
        return self

    def checkpoint(self, at: float) -> AllocationBuilder:
        """The job's last reported checkpoint."""
        self._extra["last_checkpoint"] = float(at)
        return self

    def ends(self, at: float) -> AllocationBuilder:
        self._extra["expected_end"] = float(at)
        return self

    def whole_node(self, node: str, gpus: int = 8) -> AllocationBuilder:
        """One task holding GPUs 0..gpus-1 of ``node``."""
        return self.task(node, gpus=range(gpus))

    def build(self) -> Allocation:
        return Allocation(
            self._job_id,
            0,
            tuple(self._tasks),
            self._priority,
            self._preemptible,
            **self._extra,  # type: ignore[arg-type]
        )


def job(job_id: int) -> JobBuilder:
    return JobBuilder(job_id)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def allocation(job_id: int) -> AllocationBuilder:
    return AllocationBuilder(job_id)


def gpu_nodes(count: int, gpus: int = 8, prefix: str = "n", **kwargs: object) -> list[Node]:
    """``count`` identical ready nodes ``n0..``, each with ``gpus`` GPUs."""
    return [node(f"{prefix}{i}").gpus(gpus, **kwargs).build() for i in range(count)]  # type: ignore[arg-type]


def cluster(*nodes: Node | NodeBuilder, allocations: Sequence[Allocation] = ()) -> ClusterState:
    """A ``ClusterState`` from nodes (built or builders) and the allocations they hold."""
    built = tuple(n.build() if isinstance(n, NodeBuilder) else n for n in nodes)
    return ClusterState(nodes=built, allocations=tuple(allocations))


def legacy(**policy: object) -> SchedulerConfig:
    """The configuration that was the default before the ``jct`` order: fair share in
    submission order, strict (no backfill), no preemption, packing; ``policy`` overrides.
    For tests of the cycle's mechanics that the new defaults would blur."""
    base = {"order": "fair-share", "backfill": False, "preemption": False, "sharing": "packing"}
    return SchedulerConfig(policy=Policy(**{**base, **policy}))  # type: ignore[arg-type]


def role(name: str, nodes: int = 1, gpus: int | float | str = 0, **fields: object) -> RoleSpec:
    """A role of a heterogeneous job: ``role("worker", 2, gpus=8, cpus=4)``."""
    return RoleSpec(name=name, nodes=nodes, gpus=parse_gpus(gpus), **fields)  # type: ignore[arg-type]
