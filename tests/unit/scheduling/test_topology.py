"""Network topology for gangs and NVLink domains inside a node."""

from __future__ import annotations

import pytest

from corral.errors import ValidationError
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.feasibility import never_fits, node_shapes
from corral.schemas.manifest import parse_manifest
from tests.builders import allocation, job, node

# zone-a / spine-1 / leaf-1: n0 n1      zone-a / spine-1 / leaf-2: n2 n3 n4
# zone-a / spine-2 / leaf-3: n5 n6 n7 n8
PATHS = {
    **{f"n{i}": ("zone-a", "spine-1", "leaf-1") for i in (0, 1)},
    **{f"n{i}": ("zone-a", "spine-1", "leaf-2") for i in (2, 3, 4)},
    **{f"n{i}": ("zone-a", "spine-2", "leaf-3") for i in (5, 6, 7, 8)},
}
NODES = tuple(node(name).gpus(8).network(*path).build() for name, path in PATHS.items())


def place(builder, busy=()):  # noqa: ANN001, ANN201
    decisions = schedule(
        ClusterState(NODES, tuple(busy)), [builder.build()], SchedulerConfig(), 0.0
    )
    return decisions


@pytest.mark.parametrize(
    ("nodes", "level", "expected"),
    [
        pytest.param(2, "leaf", {"n0", "n1"}, id="smallest-leaf-that-fits"),
        pytest.param(3, "leaf", {"n2", "n3", "n4"}, id="three-fit-leaf-2"),
        pytest.param(4, "leaf", {"n5", "n6", "n7", "n8"}, id="four-only-in-leaf-3"),
        pytest.param(5, "spine", {"n0", "n1", "n2", "n3", "n4"}, id="spine-1-fits-five"),
    ],
)
def test_required_topology_keeps_the_gang_in_the_smallest_fitting_domain(
    nodes: int, level: str, expected: set[str]
) -> None:
    decisions = place(job(1).gpus(8).nodes(nodes).topology(level))
    assert set(decisions.placements[0].nodes) == expected
    assert decisions.placements[0].note.startswith(f"within {level} zone-a/")


def test_required_topology_that_does_not_fit_now_waits_with_a_reason() -> None:
    busy = [allocation(90).task("n5", gpus=list(range(8))).build()]  # leaf-3 down to 3 free
    decisions = place(job(1).gpus(8).nodes(4).topology("leaf"), busy)
    assert decisions.placements == ()
    assert "no leaf domain has 4 nodes that can host it now (the best has 3)" in (
        decisions.pending[1].reason
    )


def test_preferred_topology_takes_the_next_level_and_says_so() -> None:
    decisions = place(job(1).gpus(8).nodes(5).topology("leaf", "preferred"))
    placed = decisions.placements[0]
    assert set(placed.nodes) == {"n0", "n1", "n2", "n3", "n4"}
    assert placed.note == "within spine zone-a/spine-1 (leaf preferred; none had room)"


def test_no_topology_ignores_the_network() -> None:
    decisions = place(job(1).gpus(8).nodes(3))
    assert len(decisions.placements[0].nodes) == 3 and decisions.placements[0].note == ""


@pytest.mark.parametrize(
    ("builder", "refused"),
    [
        pytest.param(job(1).gpus(8).nodes(5).topology("leaf"), "largest has 4", id="leaf-5"),
        pytest.param(job(1).gpus(8).nodes(5).topology("spine"), None, id="spine-5"),
        pytest.param(job(1).gpus(8).nodes(5).topology("leaf", "preferred"), None, id="preferred"),
        pytest.param(job(1).gpus(8).nodes(9).topology("zone"), None, id="zone-9"),
    ],
)
def test_required_topologies_that_can_never_fit_are_refused(builder, refused: str | None) -> None:
    why = never_fits(builder.spec(), node_shapes(NODES), SchedulerConfig())
    assert (why is None) if refused is None else (refused in why)


def test_node_and_nvlink_levels_are_for_single_node_jobs() -> None:
    with pytest.raises(ValidationError, match="topology.level: nvlink keeps a job on one node"):
        parse_manifest({"command": "x", "nodes": 2, "topology": {"level": "nvlink"}})


# --- NVLink domains ----------------------------------------------------------------------

NVL = (node("g").gpus(8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).build(),)


def nvlink(builder, busy=()):  # noqa: ANN001, ANN201
    return schedule(ClusterState(NVL, tuple(busy)), [builder.build()], SchedulerConfig(), 0.0)


def test_nvlink_required_takes_all_gpus_from_one_domain() -> None:
    busy = [allocation(90).task("g", gpus=[0]).build()]
    decisions = nvlink(job(1).gpus(4).tasks(2).topology("nvlink"), busy)
    tasks = decisions.placements[0].tasks
    assert [t.gpus for t in tasks] == [(4, 5), (6, 7)]


def test_nvlink_required_that_no_domain_can_hold_is_unresolvable() -> None:
    decisions = nvlink(job(1).gpus(6).topology("nvlink"))
    assert decisions.placements == () and decisions.pending[1].unresolvable
    assert "no NVLink domain of 6 GPUs" in decisions.pending[1].reason


def test_nvlink_preferred_falls_back_to_spanning_domains() -> None:
    decisions = nvlink(job(1).gpus(6).topology("nvlink", "preferred"))
    assert sorted(decisions.placements[0].tasks[0].gpus) == [0, 1, 2, 3, 4, 5]
