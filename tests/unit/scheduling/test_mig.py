"""MIG instances: a ``3g.40gb`` request takes one free instance of that profile from the
node's declared layout, packing devices; whole and fractional requests never land on a
device in MIG mode; the snapshot accounts instances exactly."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from corral.core.allocation import Allocation, DevicePick, TaskAllocation
from corral.core.job import PlacementPolicy
from corral.core.node import Device, Node
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.feasibility import never_fits, node_shapes
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.filters import fits_capacity, fits_free
from corral.scheduling.snapshot import Snapshot
from tests.builders import GB, JobBuilder, job, node

DEFAULT = SchedulerConfig()
TWO_3G = ("3g.40gb", "3g.40gb")


def mig_node(*layouts: tuple[str, ...], name: str = "m0", model: str = "A100") -> Node:
    """One device per layout; an empty layout is a device not in MIG mode."""
    return (
        node(name)
        .devices(*(Device(i, model, 80 * GB, mig=mig) for i, mig in enumerate(layouts)))
        .build()
    )


def held(job_id: int, node_name: str, gpu: int, slot: int) -> Allocation:
    task = TaskAllocation(0, node_name, 0, 0, gpus=(gpu,), mig_slots=(slot,))
    return Allocation(job_id, 0, (task,))


def run(nodes: Sequence[Node], builder: JobBuilder, *allocations: Allocation):
    state = ClusterState(nodes=tuple(nodes), allocations=tuple(allocations))
    return schedule(state, [builder.build()], DEFAULT, now=0.0)


def placement(nodes: Sequence[Node], builder: JobBuilder, *allocations: Allocation):
    """``(node, gpus, mig_slots)`` of the job's one task, or the pending reason."""
    decisions = run(nodes, builder, *allocations)
    if not decisions.placements:
        return decisions.pending[builder.build().id].reason
    (task,) = decisions.placements[0].tasks
    return task.node, task.gpus, task.mig_slots


@pytest.mark.parametrize(
    ("nodes", "builder", "allocations", "expected"),
    [
        pytest.param(
            [mig_node(("1g.10gb", "3g.40gb"))],
            job(1).gpus("3g.40gb"),
            (),
            ("m0", (0,), (1,)),
            id="right-profile",
        ),
        pytest.param(
            [mig_node(TWO_3G, TWO_3G)],
            job(1).gpus("3g.40gb"),
            (),
            ("m0", (0,), (0,)),
            id="ties-to-lowest-device-and-slot",
        ),
        pytest.param(
            [mig_node(TWO_3G, TWO_3G)],
            job(1).gpus("3g.40gb"),
            (held(9, "m0", 1, 0),),
            ("m0", (1,), (1,)),
            id="packs-onto-the-device-with-fewest-free",
        ),
        pytest.param(
            [mig_node(TWO_3G, TWO_3G)],
            job(1).gpus("3g.40gb"),
            (held(8, "m0", 0, 0), held(9, "m0", 0, 1)),
            ("m0", (1,), (0,)),
            id="full-device-skipped",
        ),
        pytest.param(
            [mig_node((), TWO_3G)],
            job(1).gpus("3g.40gb"),
            (),
            ("m0", (1,), (0,)),
            id="only-on-mig-devices",
        ),
        pytest.param(
            [mig_node(TWO_3G, name="h0", model="H100"), mig_node(TWO_3G, name="a0")],
            job(1).gpus("A100:3g.40gb"),
            (),
            ("a0", (0,), (0,)),
            id="model-prefix",
        ),
        pytest.param(
            [mig_node(TWO_3G, name="h0", model="H100"), mig_node(TWO_3G, name="a0")],
            job(1).gpus("3g.40gb").model("H100"),
            (),
            ("h0", (0,), (0,)),
            id="gpu-model",
        ),
        pytest.param(
            [mig_node(("3G.40GB",))],
            job(1).gpus("3g.40gb"),
            (),
            ("m0", (0,), (0,)),
            id="profile-case-insensitive",
        ),
        pytest.param(
            [mig_node(TWO_3G, ())],
            job(1).gpus(1),
            (),
            ("m0", (1,), ()),
            id="whole-gpu-skips-mig-device",
        ),
        pytest.param(
            [mig_node(TWO_3G, ())],
            job(1).gpus(0.5),
            (),
            ("m0", (1,), ()),
            id="fraction-skips-mig-device",
        ),
    ],
)
def test_placement(
    nodes: list[Node], builder: JobBuilder, allocations: tuple[Allocation, ...], expected: object
) -> None:
    assert placement(nodes, builder, *allocations) == expected


@pytest.mark.parametrize(
    ("nodes", "builder", "allocations", "reason"),
    [
        pytest.param(
            [mig_node(TWO_3G)],
            job(1).gpus("3g.40gb"),
            (held(8, "m0", 0, 0), held(9, "m0", 0, 1)),
            "no free 3g.40gb MIG instance",
            id="none-free",
        ),
        pytest.param(
            [mig_node(("1g.10gb",), ("1g.10gb",))],
            job(1).gpus(1),
            (),
            "has 0 GPUs, needs 1",
            id="whole-gpu-never-on-mig-devices",
        ),
        pytest.param(
            [mig_node(("1g.10gb",))],
            job(1).gpus(0.5),
            (),
            "has no matching GPU to share",
            id="fraction-never-on-mig-devices",
        ),
        pytest.param(
            [mig_node((), ())],
            job(1).gpus("3g.40gb"),
            (),
            "declares no 3g.40gb MIG instance",
            id="never-on-non-mig-devices",
        ),
    ],
)
def test_not_placed(
    nodes: list[Node], builder: JobBuilder, allocations: tuple[Allocation, ...], reason: str
) -> None:
    assert reason in placement(nodes, builder, *allocations)


def test_none_free_is_unschedulable_not_unresolvable() -> None:
    decisions = run(
        [mig_node(TWO_3G)], job(1).gpus("3g.40gb"), held(8, "m0", 0, 0), held(9, "m0", 0, 1)
    )
    pending = decisions.pending[1]
    assert not pending.unresolvable
    assert "waiting for resources" in pending.reason


def test_two_jobs_in_one_cycle_take_distinct_instances() -> None:
    state = ClusterState(nodes=(mig_node(TWO_3G),))
    jobs = [job(1).gpus("3g.40gb").build(), job(2).gpus("3g.40gb").build()]
    decisions = schedule(state, jobs, DEFAULT, now=0.0)
    taken = {(t.gpus, t.mig_slots) for a in decisions.placements for t in a.tasks}
    assert taken == {((0,), (0,)), ((0,), (1,))}


@pytest.mark.parametrize(
    ("nodes", "builder", "reason"),
    [
        pytest.param([mig_node(TWO_3G)], job(1).gpus("3g.40gb"), None, id="declared"),
        pytest.param(
            [mig_node(TWO_3G)],
            job(1).gpus("2g.20gb"),
            "declares no 2g.20gb MIG instance",
            id="undeclared-profile",
        ),
        pytest.param(
            [mig_node(TWO_3G)],
            job(1).gpus("H100:3g.40gb"),
            "declares no 3g.40gb MIG instance on H100 GPUs",
            id="declared-on-another-model",
        ),
    ],
)
def test_never_fits(nodes: list[Node], builder: JobBuilder, reason: str | None) -> None:
    why = never_fits(builder.spec(), node_shapes(nodes), DEFAULT)
    assert (why is None) if reason is None else (reason in (why or ""))


def test_filters_capacity_and_free() -> None:
    target = mig_node(("1g.10gb", "3g.40gb"))
    request = NodeRequest.of(job(1).gpus("3g.40gb").spec(), PlacementPolicy.BINPACK)
    snapshot = Snapshot.build([target], [held(9, "m0", 0, 1)])
    view = snapshot.nodes["m0"]
    assert fits_capacity(request, view) is None
    assert fits_free(request, view) == "no free 3g.40gb MIG instance"
    assert view.free_mig("1g.10gb") == [(0, 0)]
    assert view.free_mig("1g.10gb", "H100") == []


def test_assume_and_release_restore_exactly() -> None:
    snapshot = Snapshot([mig_node(("1g.10gb", "1g.10gb", "1g.10gb"), ())])
    view = snapshot.nodes["m0"]

    def state() -> tuple:
        return (list(view.used_milli), [list(c) for c in view.mig_used], view.free_mig("1g.10gb"))

    empty = state()
    one, two = held(1, "m0", 0, 0), held(2, "m0", 0, 2)
    undo_one = snapshot.assume(one)
    undo_two = snapshot.assume(two)
    assert view.used_milli == [666, 0] and view.mig_used == [[1, 0, 1], []]
    assert view.free_mig("1g.10gb") == [(0, 1)]
    version = view.version
    redo = snapshot.release(one)  # what if it were preempted
    assert view.version > version and view.free_mig("1g.10gb") == [(0, 0), (0, 1)]
    redo()
    undo_two()
    undo_one()
    assert state() == empty and view.used_gpus == 0


def test_device_pick_carries_slots_and_tasks_check_them() -> None:
    pick = DevicePick((3,), (1,))
    assert pick == (3,) and pick.mig_slots == (1,)
    with pytest.raises(ValueError, match="do not match"):
        TaskAllocation(0, "m0", 0, 0, gpus=(1, 2), mig_slots=(0,))
