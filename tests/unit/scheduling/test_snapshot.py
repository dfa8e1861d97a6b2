"""The snapshot: free capacity per node, and assume/release that undo exactly."""

from __future__ import annotations

import pytest

from corral.core.allocation import Allocation
from corral.core.node import Device
from corral.scheduling.snapshot import NodeView, Snapshot
from tests.builders import GB, allocation, node

NODES = (
    node("n0").gpus(8).cpus(96).memory("1TB").build(),
    node("n1").gpus(4, model="A100").cpus(32).memory("256GB").build(),
)


def state(snapshot: Snapshot) -> dict[str, tuple]:
    """Everything a view tracks, for exact before/after comparisons."""
    return {
        name: (view.free_cpus, view.free_memory, tuple(view.used_milli), tuple(view.shared))
        for name, view in snapshot.nodes.items()
    }


# These allocations fit alongside one another: no device is double-booked.
WHOLE = allocation(1).task("n0", gpus=[0, 1], cpus=8, memory="64GB").build()
GANG = (
    allocation(2)
    .task("n0", gpus=[2, 3], cpus=10.5, memory="10GB")
    .task("n1", gpus=[0, 1, 2], cpus=3.3, memory="1GB")
    .build()
)
SHARE = allocation(3).task("n1", gpus=[3], share=0.25, cpus=0.1).build()
SHARE_2 = allocation(4).task("n1", gpus=[3], share=0.5, cpus=0.2).build()
ELSEWHERE = allocation(5).task("gone", gpus=[0], cpus=4).build()
ODD_INDEX = allocation(6).task("n0", gpus=[42]).build()


@pytest.mark.parametrize(
    ("alloc", "expected"),
    [
        pytest.param(
            WHOLE,
            {"n0": (88.0, 936 * GB, (1000, 1000, 0, 0, 0, 0, 0, 0), (False,) * 8)},
            id="whole-gpus",
        ),
        pytest.param(
            GANG,
            {
                "n0": (85.5, 990 * GB, (0, 0, 1000, 1000, 0, 0, 0, 0), (False,) * 8),
                "n1": (28.7, 255 * GB, (1000, 1000, 1000, 0), (False,) * 4),
            },
            id="gang-across-nodes",
        ),
        pytest.param(
            SHARE,
            {"n1": (31.9, 256 * GB, (0, 0, 0, 250), (False, False, False, True))},
            id="fraction-marks-shared",
        ),
        pytest.param(ELSEWHERE, {}, id="unknown-node-ignored"),
        pytest.param(ODD_INDEX, {}, id="unknown-device-ignored"),
    ],
)
def test_assume_takes_resources(alloc: Allocation, expected: dict[str, tuple]) -> None:
    snapshot = Snapshot(NODES)
    before = state(snapshot)
    snapshot.assume(alloc)
    after = state(snapshot)
    changed = {name: after[name] for name in after if after[name] != before[name]}
    assert changed.keys() == expected.keys()
    for name, (cpus, memory, used, shared) in expected.items():
        got_cpus, got_memory, got_used, got_shared = changed[name]
        assert got_cpus == pytest.approx(cpus)
        assert (got_memory, got_used, got_shared) == (memory, used, shared)


SEQUENCES = [
    pytest.param((), id="empty"),
    pytest.param((WHOLE,), id="whole"),
    pytest.param((WHOLE, GANG), id="whole-then-gang"),
    pytest.param((SHARE,), id="one-share"),
    pytest.param((SHARE, SHARE_2), id="two-shares-one-device"),
    pytest.param((GANG, SHARE, WHOLE, SHARE_2), id="mixed"),
]


@pytest.mark.parametrize("held", SEQUENCES)
@pytest.mark.parametrize(
    "trial", [WHOLE, GANG, SHARE, SHARE_2], ids=["whole", "gang", "share", "share2"]
)
def test_assume_then_undo_restores_exactly(held: tuple[Allocation, ...], trial: Allocation) -> None:
    snapshot = Snapshot.build(NODES, [a for a in held if a is not trial])
    before = state(snapshot)
    undo = snapshot.assume(trial)
    assert state(snapshot) != before
    undo()
    assert state(snapshot) == before


@pytest.mark.parametrize("held", SEQUENCES[1:])
def test_release_then_undo_restores_exactly(held: tuple[Allocation, ...]) -> None:
    snapshot = Snapshot.build(NODES, held)
    before = state(snapshot)
    for victim in held:
        undo = snapshot.release(victim)
        assert state(snapshot) != before
        undo()
        assert state(snapshot) == before


def test_releasing_everything_gives_an_empty_cluster() -> None:
    held = (GANG, SHARE, WHOLE, SHARE_2)
    snapshot = Snapshot.build(NODES, held)
    undos = [snapshot.release(a) for a in held]
    assert state(snapshot) == state(Snapshot(NODES))
    for undo in reversed(undos):
        undo()
    assert state(snapshot) == state(Snapshot.build(NODES, held))


def test_nested_what_if_unwinds_in_any_order() -> None:
    snapshot = Snapshot.build(NODES, (WHOLE, SHARE))
    before = state(snapshot)
    undo_release = snapshot.release(WHOLE)
    undo_assume = snapshot.assume(GANG)
    undo_release()
    undo_assume()
    assert state(snapshot) == before


def test_last_share_leaving_clears_the_shared_flag() -> None:
    snapshot = Snapshot.build(NODES, (SHARE, SHARE_2))
    view = snapshot.nodes["n1"]
    snapshot.release(SHARE)
    assert (view.used_milli[3], view.shared[3]) == (500, True)
    snapshot.release(SHARE_2)
    assert (view.used_milli[3], view.shared[3]) == (0, False)
    assert view.free_whole() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("model", "free", "matching"),
    [
        pytest.param(None, [2, 4], 3, id="any-model"),
        pytest.param("H100", [2], 2, id="prefix"),
        pytest.param("A100", [4], 1, id="other-model"),
        pytest.param("V100", [], 0, id="no-such-model"),
    ],
)
def test_free_whole_and_matching(model: str | None, free: list[int], matching: int) -> None:
    mixed = node("m").devices(
        Device(0, "H100-SXM", 80 * GB),
        Device(2, "H100-SXM", 80 * GB),
        Device(4, "A100", 40 * GB),
        Device(6, "A100", 40 * GB, mig=("3g.20gb",)),
    )
    snapshot = Snapshot.build([mixed.build()], [allocation(1).task("m", gpus=[0]).build()])
    view = snapshot.nodes["m"]
    assert view.free_whole(model) == free
    assert view.matching(model) == matching
    assert view.position(4) == 2


def test_used_gpus_counts_fractions() -> None:
    snapshot = Snapshot.build(NODES, (SHARE, SHARE_2, GANG))
    assert snapshot.nodes["n1"].used_gpus == pytest.approx(3.75)
    assert snapshot.nodes["n0"].used_gpus == pytest.approx(2.0)


def test_views_keep_node_order() -> None:
    assert [v.name for v in Snapshot(reversed(NODES)).views()] == ["n1", "n0"]
    assert isinstance(Snapshot(NODES).views()[0], NodeView)
