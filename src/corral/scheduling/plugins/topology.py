"""Network topology for gangs, and NVLink domains for single-node jobs.

Nodes carry their path in the network tree, outermost first: ``(zone, spine, leaf)``. A
job's ``topology.level`` asks that all its tasks share one domain of that level:

- ``leaf``, ``spine``, ``zone``: its nodes share the first 3, 2 or 1 parts of their path;
- ``node``: one node (``nodes: 1``); ``nvlink``: one node, and all its GPUs in one NVLink
  domain; ``any``: no constraint.

``mode: required`` places the gang inside one such domain or not at all; ``preferred``
takes the tightest level that fits now, from the requested one outwards. Among the
domains that fit, the one with the fewest nodes able to host the job wins, so larger free
domains stay whole for larger gangs. Pure helpers: ``domain_of``, ``group_by_domain``,
``common_level``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from corral.core.job import Job, Topology, TopologyLevel, TopologyMode
from corral.core.node import Node
from corral.scheduling.evaluation import as_candidates
from corral.scheduling.framework import NodeRequest, ScoredNode, Status, Unresolvable, Unschedulable
from corral.scheduling.plugins.gang import TopScoredNodes
from corral.scheduling.snapshot import NodeView

L = TopologyLevel
NETWORK_DEPTH = {L.ZONE: 1, L.SPINE: 2, L.LEAF: 3}
TIGHT_TO_LOOSE = (L.NVLINK, L.NODE, L.LEAF, L.SPINE, L.ZONE, L.ANY)


def domain_of(node: Node, level: TopologyLevel) -> tuple[str, ...] | None:
    """The node's domain at a network ``level`` (None if its path does not say)."""
    depth = NETWORK_DEPTH[level]
    return tuple(node.network[:depth]) if len(node.network) >= depth else None


def group_by_domain(
    nodes: Iterable[ScoredNode], level: TopologyLevel
) -> dict[tuple[str, ...], list[ScoredNode]]:
    groups: dict[tuple[str, ...], list[ScoredNode]] = defaultdict(list)
    for candidate in nodes:
        key = domain_of(candidate.node.node, level)
        if key is not None:
            groups[key].append(candidate)
    return groups


def common_level(nodes: Sequence[Node]) -> tuple[TopologyLevel, str]:
    """The tightest network level all ``nodes`` share, and that domain's name."""
    if len(nodes) == 1:
        return L.NODE, nodes[0].name
    for level in (L.LEAF, L.SPINE, L.ZONE):
        keys = {domain_of(n, level) for n in nodes}
        if len(keys) == 1 and None not in keys:
            return level, "/".join(next(iter(keys)))  # type: ignore[arg-type]
    return L.ANY, "the cluster"


def _leaf(node: Node) -> tuple[str, ...] | None:
    return domain_of(node, L.LEAF)


def _spine(node: Node) -> tuple[str, ...] | None:
    return domain_of(node, L.SPINE)


def _zone(node: Node) -> tuple[str, ...] | None:
    return domain_of(node, L.ZONE)


DOMAIN_KEYS = {L.LEAF: _leaf, L.SPINE: _spine, L.ZONE: _zone}  # stable keys for the index


class TopologyNodeSet:
    """NodeSetSelect: the best-scored nodes inside the tightest fitting domain."""

    name = "topology"

    def select(
        self, job: Job, request: NodeRequest, candidates: Sequence[ScoredNode]
    ) -> list[NodeView] | Unschedulable:
        want = job.spec.nodes
        topology = job.spec.topology or Topology()
        candidates = as_candidates(candidates)
        if len(candidates) < want or want == 1 or topology.level not in NETWORK_DEPTH:
            return TopScoredNodes().select(job, request, candidates)
        required = topology.mode is TopologyMode.REQUIRED
        start = TIGHT_TO_LOOSE.index(topology.level)
        for level in TIGHT_TO_LOOSE[start:] if not required else (topology.level,):
            if level is L.ANY:
                return candidates.best(want)
            sizes = candidates.domain_sizes(DOMAIN_KEYS[level])
            fitting = [(n, key) for key, n in sizes.items() if n >= want]
            if fitting:
                _, domain = min(fitting)
                return candidates.best_in(DOMAIN_KEYS[level], domain, want)
        largest = max(candidates.domain_sizes(DOMAIN_KEYS[topology.level]).values(), default=0)
        return Unschedulable(
            f"no {topology.level.value} domain has {want} nodes that can host it now "
            f"(the best has {largest})"
        )


def nvlink_free(node: NodeView, model: str | None) -> dict[int, int]:
    """Free whole GPUs per NVLink domain."""
    free: dict[int, int] = defaultdict(int)
    indices = set(node.free_whole(model))
    for device in node.node.devices:
        if device.index in indices:
            free[device.nvlink_domain] += 1
    return free


class NvlinkDomainFilter:
    """With ``topology: {level: nvlink, mode: required}``, the node's GPUs for the job
    must all come from one NVLink domain."""

    name = "nvlink-domain"

    def filter(self, request: NodeRequest, node: NodeView) -> Status:
        topology = request.topology
        if topology is None or topology.level is not L.NVLINK:
            return None
        if topology.mode is not TopologyMode.REQUIRED or not request.whole_gpus:
            return None
        need = request.whole_gpus
        sizes: dict[int, int] = defaultdict(int)
        for device in node.node.devices:
            if not device.mig:
                sizes[device.nvlink_domain] += 1
        if max(sizes.values(), default=0) < need:
            return Unresolvable(f"no NVLink domain of {need} GPUs")
        if max(nvlink_free(node, request.model).values(), default=0) < need:
            return Unschedulable(f"no NVLink domain with {need} free GPUs")
        return None


class TopologyDeviceSelect:
    """DeviceSelect: with ``level: nvlink``, all of the node's GPUs for the job come from
    one NVLink domain (the fullest that fits; required: or nothing, preferred: else as
    usual); otherwise the wrapped selection (NVLink-aware per task) decides."""

    name = "topology-devices"

    def __init__(self, inner: object | None = None) -> None:
        from corral.scheduling.plugins.devices import NvlinkDeviceSelect

        self.inner = inner or NvlinkDeviceSelect()

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        topology = request.topology
        if topology is None or topology.level is not L.NVLINK or not request.whole_gpus:
            return self.inner.select(request, node)  # type: ignore[attr-defined]
        free = nvlink_free(node, request.model)
        fitting = [d for d, n in free.items() if n >= request.whole_gpus]
        if not fitting:
            if topology.mode is TopologyMode.REQUIRED:
                return None
            return self.inner.select(request, node)  # type: ignore[attr-defined]
        domain = min(fitting, key=lambda d: (free[d], d))
        indices = sorted(
            d.index
            for d in node.node.devices
            if d.nvlink_domain == domain and d.index in set(node.free_whole(request.model))
        )[: request.whole_gpus]
        per_task = request.gpus_per_task
        return [tuple(indices[i * per_task : (i + 1) * per_task]) for i in range(request.tasks)]
