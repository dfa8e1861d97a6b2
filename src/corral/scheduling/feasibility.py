"""Submission-time check: could this job ever run on these nodes?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from corral.core.job import JobSpec
from corral.core.node import Node
from corral.core.resources import GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import NodeSelectorFilter, fits_capacity
from corral.scheduling.snapshot import NodeView

NodeShapes = list[tuple[Node, int]]


def node_shapes(nodes: Iterable[Node]) -> NodeShapes:
    """Nodes grouped by what feasibility looks at (devices, CPUs, memory, labels), with
    counts: clusters have few shapes, so checks run once per shape, not once per node."""
    shapes: dict[tuple, list] = {}
    for node in nodes:
        key = (node.devices, node.cpus, node.memory, node.labels)
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
        return None
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
