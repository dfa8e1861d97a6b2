"""An example node-scoring plugin: prefer cooler, healthier, cheaper nodes.

It reads attributes that agents report with their node (``Node.attributes``):
``gpu_temperature_c`` (hottest GPU, Celsius), ``memory_errors`` (uncorrected ECC errors
since boot) and ``cost_per_hour``. A missing attribute is neutral. Enable it with a
weight in the scheduler configuration::

    plugins:
      - {name: cool-healthy, weight: 0.5, args: {max_temperature: 85}}

It only reorders nodes that passed the filters; it never makes a job unschedulable.
"""

from __future__ import annotations

from corral.scheduling.framework import NodeRequest
from corral.scheduling.snapshot import NodeView


def health_score(
    attributes: dict[str, float],
    max_temperature: float = 90.0,
    max_cost: float = 100.0,
) -> float:
    """0..100: 100 for a cool node with no memory errors and no cost; pure."""
    temperature = attributes.get("gpu_temperature_c")
    errors = attributes.get("memory_errors", 0.0)
    cost = attributes.get("cost_per_hour")
    parts = [
        50.0 if temperature is None else 100.0 * max(0.0, 1 - temperature / max_temperature),
        100.0 / (1.0 + errors),
        50.0 if cost is None else 100.0 * max(0.0, 1 - cost / max_cost),
    ]
    return sum(parts) / len(parts)


class CoolHealthyNodes:
    name = "cool-healthy"

    def __init__(
        self, weight: float = 1.0, max_temperature: float = 90.0, max_cost: float = 100.0
    ) -> None:
        self.weight = weight
        self.max_temperature = max_temperature
        self.max_cost = max_cost

    def score(self, request: NodeRequest, node: NodeView) -> float:
        return health_score(dict(node.node.attributes), self.max_temperature, self.max_cost)
