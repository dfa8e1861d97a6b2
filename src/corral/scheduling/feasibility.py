"""Submission-time check: could this job ever run on these nodes?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from corral.core.job import JobSpec, TopologyMode
from corral.core.node import Node
from corral.core.resources import GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import NodeSelectorFilter, fits_capacity
from corral.scheduling.plugins.topology import NETWORK_DEPTH, domain_of
from corral.scheduling.snapshot import NodeView

NodeShapes = list[tuple[Node, int]]


def node_shapes(nodes: Iterable[Node]) -> NodeShapes:
    """Nodes grouped by what feasibility looks at (devices, CPUs, memory, labels), with
    counts: clusters have few shapes, so checks run once per shape, not once per node."""
    shapes: dict[tuple, list] = {}
    for node in nodes:
        key = (node.devices, node.cpus, node.memory, node.labels, node.network)
        entry = shapes.setdefault(key, [node, 0])
        entry[1] += 1
    return [(node, count) for node, count in shapes.values()]


def never_fits(spec: JobSpec, shapes: NodeShapes, config: SchedulerConfig) -> str | None:
    """Why ``spec`` can never be placed on the nodes of ``shapes`` (all empty), or None.

    Node state is ignored (a draining or lost node may come back). With no nodes at all
    the answer is None: the job waits for agents to register.
    """
    config.queue(spec.queue)
    if not shapes:
        return None
    request = NodeRequest.of(spec, config.policy.placement)
    selector = NodeSelectorFilter()
    reasons: Counter[str] = Counter()
    able = 0
    for node, count in shapes:
        view = NodeView(node)
        status = selector.filter(request, view)
        reason = status.reason if status else fits_capacity(request, view)
        if reason:
            reasons[reason] += count
        else:
            able += count
    if able >= spec.nodes:
        return _topology_never_fits(spec, request, shapes, selector)
    what = f"{spec.nodes} node{'s' if spec.nodes > 1 else ''} with {request.describe()}"
    if request.gpus.kind is GpuKind.WHOLE:
        most = max(len(n.devices) for n, _ in shapes)
        what += f" (the largest node has {most} GPUs)"
    why = "; ".join(f"{n} node{'s' if n > 1 else ''}: {r}" for r, n in reasons.most_common(3))
    return (
        f"can never fit this cluster: needs {what}, but only {able} of "
        f"{sum(c for _, c in shapes)} nodes "
        f"could ever host it" + (f" ({why})" if why else "")
    )


def _topology_never_fits(
    spec: JobSpec, request: NodeRequest, shapes: NodeShapes, selector: NodeSelectorFilter
) -> str | None:
    """A required network topology: some domain of that level must hold enough nodes."""
    topology = spec.topology
    if (
        topology is None
        or topology.mode is not TopologyMode.REQUIRED
        or topology.level not in NETWORK_DEPTH
        or spec.nodes == 1
    ):
        return None
    sizes: Counter[tuple[str, ...]] = Counter()
    for node, count in shapes:
        view = NodeView(node)
        if selector.filter(request, view) is None and fits_capacity(request, view) is None:
            key = domain_of(node, topology.level)
            if key is not None:
                sizes[key] += count
    best = max(sizes.values(), default=0)
    if best >= spec.nodes:
        return None
    level = topology.level.value
    return (
        f"can never fit this cluster: topology {level} (required) needs {spec.nodes} nodes with "
        f"{request.describe()} in one {level} domain, but the largest has {best}"
        + ("" if sizes else " (no node declares a network path that deep)")
    )
