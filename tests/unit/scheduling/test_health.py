"""The example scoring plugin: cooler, healthier, cheaper nodes first."""

from __future__ import annotations

import pytest

from corral.core.node import Node
from corral.scheduling.config import PluginRef, SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.plugins.health import health_score
from tests.builders import job, node


@pytest.mark.parametrize(
    ("cooler", "hotter"),
    [
        pytest.param({"gpu_temperature_c": 40}, {"gpu_temperature_c": 80}, id="temperature"),
        pytest.param({"memory_errors": 0}, {"memory_errors": 3}, id="ecc-errors"),
        pytest.param({"cost_per_hour": 2}, {"cost_per_hour": 9}, id="cost"),
        pytest.param({"gpu_temperature_c": 40}, {}, id="known-cool-beats-unknown"),
    ],
)
def test_health_score_orders_nodes(cooler: dict, hotter: dict) -> None:
    assert health_score(cooler) > health_score(hotter)
    assert 0 <= health_score(hotter) <= 100


def with_attributes(name: str, **attributes: float) -> Node:
    from dataclasses import replace

    return replace(node(name).gpus(8).build(), attributes=tuple(sorted(attributes.items())))


def test_configured_with_a_weight_it_steers_placement_to_the_cooler_node() -> None:
    nodes = (
        with_attributes("hot", gpu_temperature_c=85),
        with_attributes("cool", gpu_temperature_c=35),
    )
    config = SchedulerConfig(plugins=(PluginRef("cool-healthy", weight=5.0),))
    placed = schedule(ClusterState(nodes), [job(1).gpus(2).build()], config, 0.0).placements
    assert placed[0].nodes == ("cool",)
    plain = schedule(ClusterState(nodes), [job(1).gpus(2).build()], SchedulerConfig(), 0.0)
    assert plain.placements[0].nodes == ("cool",) or plain.placements[0].nodes == ("hot",)
