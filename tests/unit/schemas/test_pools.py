"""Pools in the cluster file and ``autoscaling:`` in scheduler.yaml (SPEC section 10):
the contract's example, unit nodes and their labels, and refusals that name the field."""

from __future__ import annotations

import textwrap

import pytest

from corral.core.pools import POOL_LABEL, UNIT_LABEL, PoolFailures
from corral.core.tpu import POD_LABEL
from corral.errors import ValidationError
from corral.providers.registry import check_pools
from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config

EXAMPLE = textwrap.dedent(
    """\
    pools:
      - name: h100-spot
        node: {gpus: {count: 8, model: H100}, cpus: 96, memory: 1TB, labels: {pool: spot}}
        min: 0
        max: 16
        provider: local
        provisioning_time: 3m
        cost_per_hour: 98.3
        spot: true
      - name: v5p-32
        tpu: {generation: v5p, shape: [2, 2, 4], chips_per_host: [2, 2, 1]}
        min: 0
        max: 2
    """
)


def test_the_contract_example_gives_a_node_pool_and_a_tpu_slice_pool() -> None:
    spot, tpu = load_cluster(EXAMPLE).to_pools()
    assert (spot.name, spot.min, spot.max, spot.provider) == ("h100-spot", 0, 16, "local")
    assert (spot.provisioning_time, spot.cost_per_hour, spot.spot) == (180.0, 98.3, True)
    assert spot.hosts_per_unit == 1 and not spot.tpu
    (node,) = spot.unit_nodes(spot.unit_name(3))
    assert node.name == "h100-spot-3" and node.gpu_count == 8 and node.cpus == 96
    assert node.label_map == {"pool": "spot", POOL_LABEL: "h100-spot", UNIT_LABEL: "h100-spot-3"}
    assert spot.describe_unit() == "a node (8x H100)"
    assert tpu.tpu and tpu.hosts_per_unit == 4 and tpu.max == 2
    hosts = tpu.unit_nodes("v5p-32-1")
    assert [h.name for h in hosts] == [f"v5p-32-1-h00{i}" for i in range(4)]
    assert {h.label_map[POD_LABEL] for h in hosts} == {"v5p-32-1"}  # each slice its own pod
    assert all(h.tpu_chips == 4 and h.tpu_host is not None for h in hosts)
    assert tpu.describe_unit() == "a v5p 2x2x4 slice (4 hosts)"
    assert tpu.unit_cost_per_hour == 0.0 and spot.unit_cost_per_hour == 98.3


def test_a_file_with_only_pools_is_a_cluster() -> None:
    cluster = load_cluster("pools: [{name: p, node: {gpus: {count: 1}}, max: 2}]")
    assert cluster.to_nodes() == [] and len(cluster.to_pools()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "pools: [{name: p, node: {gpus: {count: 1}}, min: 3, max: 2}]",
            "pools.0: min: 3 is above max: 2",
            id="min-above-max",
        ),
        pytest.param(
            "pools: [{name: p, node: {gpus: {count: 1}}, max: 2, cost_per_hour: -1}]",
            "pools.0.cost_per_hour",
            id="negative-cost",
        ),
        pytest.param(
            "pools: [{name: p, node: {cpus: 0}, max: 2}]",
            "no job could use it",
            id="useless-template",
        ),
        pytest.param(
            "pools: [{name: p, node: {gpus: {count: 1}, memory: 0}, max: 2}]",
            "node.memory: 0 bytes",
            id="no-memory",
        ),
        pytest.param("pools: [{name: p, max: 2}]", "give either node:", id="no-template"),
        pytest.param(
            "pools: [{name: p, node: {gpus: {count: 1}}}]", "pools.0.max", id="max-missing"
        ),
        pytest.param(
            "pools: [{name: p, node: {gpus: {count: 1}}, max: 2, provisioning_time: soon}]",
            "pools.0.provisioning_time",
            id="bad-duration",
        ),
        pytest.param(
            "pools: [{name: p, node: {gpus: {count: 1}}, max: 2, interruption_rate: 0.1}]",
            "only a spot pool",
            id="interruptions-of-on-demand",
        ),
        pytest.param(
            "pools: [{name: 'p q', node: {gpus: {count: 1}}, max: 2}]",
            "pools.0.name",
            id="bad-name",
        ),
    ],
)
def test_bad_pools_are_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        load_cluster(text, "cluster.yaml").to_pools()
    assert message in info.value.message


def test_pools_that_share_a_name_or_clash_with_a_node_are_refused() -> None:
    twice = "pools: [{name: p, node: {cpus: 4}, max: 1}, {name: p, node: {cpus: 8}, max: 1}]"
    with pytest.raises(ValidationError, match="pool 'p' is declared twice"):
        load_cluster(twice).to_pools()
    clash = "nodes: [{name: p-2}]\npools: [{name: p, node: {cpus: 4}, max: 5}]"
    with pytest.raises(ValidationError, match="node 'p-2' is declared with such a name"):
        load_cluster(clash).to_pools()
    fine = "nodes: [{name: p-main}]\npools: [{name: p, node: {cpus: 4}, max: 5}]"
    assert len(load_cluster(fine).to_pools()) == 1


def test_unknown_and_simulator_only_providers_are_refused_by_the_control_plane() -> None:
    unknown = load_cluster("pools: [{name: p, node: {cpus: 4}, max: 1, provider: gcp}]")
    with pytest.raises(ValidationError, match=r"pools.0.provider: unknown provider 'gcp' \(known"):
        check_pools(unknown.to_pools())
    sim = load_cluster("pools: [{name: p, node: {cpus: 4}, max: 1, provider: sim}]").to_pools()
    with pytest.raises(ValidationError, match="'sim' is the simulator's"):
        check_pools(sim)
    check_pools(sim, simulated=True)


def test_autoscaling_settings_and_their_refusals() -> None:
    config = load_config(
        "autoscaling: {scale_down_idle: 5m, max_cost_per_hour: 500,"
        " policies: [queue-demand, {name: duty-cycle, args: {target: 0.7}}]}"
    ).autoscaling
    assert config.scale_down_idle == 300 and config.max_cost_per_hour == 500
    assert config.policies == (("queue-demand", ()), ("duty-cycle", (("target", 0.7),)))
    assert load_config(None).autoscaling.policies == (("queue-demand", ()),)
    for text, message in (
        ("autoscaling: {max_cost_per_hour: -1}", "autoscaling.max_cost_per_hour"),
        ("autoscaling: {scale_down_idle: never}", "autoscaling.scale_down_idle"),
        ("autoscaling: {policies: [a, a]}", "'a' is named twice"),
        ("autoscaling: {policies: []}", "autoscaling.policies"),
        ("autoscaling: {scale_dwn_idle: 5m}", "scale_dwn_idle"),
    ):
        with pytest.raises(ValidationError) as info:
            load_config(text)
        assert message in info.value.message, (text, info.value.message)


def test_backoff_doubles_per_failure_up_to_its_cap() -> None:
    config = load_config("autoscaling: {backoff: 60s, max_backoff: 5m}").autoscaling
    assert config.retry_after(PoolFailures()) == float("-inf")
    assert [config.retry_after(PoolFailures(n, 1000.0)) for n in (1, 2, 3, 4)] == [
        1060.0,
        1120.0,
        1240.0,
        1300.0,
    ]
