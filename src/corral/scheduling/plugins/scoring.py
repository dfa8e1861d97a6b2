"""Built-in node scores: bin-packing and spreading.

``binpack`` prefers the fullest node that fits, so whole nodes stay free for big gangs;
``spread`` prefers the emptiest. The job's placement policy picks which one counts.
"""

from __future__ import annotations

from corral.core.job import PlacementPolicy
from corral.scheduling.framework import NodeRequest
from corral.scheduling.snapshot import NodeView


def utilization_after(request: NodeRequest, node: NodeView) -> float:
    """Fraction of the node's GPUs (or CPUs, for CPU-only nodes) in use after placing."""
    total = len(node.node.devices)
    if total:
        added = request.whole_gpus + request.gpus.milli / 1000
        return min(1.0, (node.used_gpus + added) / total)
    if node.node.cpus:
        used = node.node.cpus - node.free_cpus + request.cpus
        return min(1.0, used / node.node.cpus)
    return 0.0


class PackingScore:
    """100 for a node left full, 0 for one left empty (reversed for ``spread``)."""

    name = "packing"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def score(self, request: NodeRequest, node: NodeView) -> float:
        filled = utilization_after(request, node) * 100.0
        return filled if request.placement is PlacementPolicy.BINPACK else 100.0 - filled
