"""The autoscaler's index (``scheduling.scaling_index``): units sorted into what a pass
reads, kept as the cluster changes, and the same plans with it as without it."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from corral.core.allocation import Allocation
from corral.core.node import Node, NodeState
from corral.core.pools import Unit, UnitPhase
from corral.scheduling.autoscaler import autoscale
from corral.scheduling.scaling import AutoscaleInput, ScalePlan
from corral.scheduling.scaling_consolidate import Rooms
from corral.scheduling.scaling_index import (
    DRAINING,
    FAILED,
    FLYING,
    FRESH,
    FULL,
    IDLE,
    LIGHT,
    MOVABLE,
    PARTIAL,
    PROVISIONING,
    READY,
    ROOMY,
    SETTLE,
    Coming,
    ScalingIndex,
)
from corral.scheduling.scaling_usage import NodeUsage
from tests.builders import allocation, job, node
from tests.unit.scheduling.autoscaler_helpers import (
    CONFIG,
    NOW,
    PROFILE,
    gpu_pool,
    registered,
    tpu_pool,
    unit,
)

POOL = gpu_pool(max=20)
SLICES = tpu_pool(max=4)


def index_of(
    units: Sequence[Unit], allocations: Sequence[Allocation] = (), fixed: Sequence[Node] = ()
) -> ScalingIndex:
    nodes = [*fixed, *registered([POOL, SLICES], units)]
    return ScalingIndex.of([POOL, SLICES], units, nodes, allocations)


def small(job_id: int, name: str, gpus: int = 2) -> Allocation:
    return allocation(job_id).task(name, gpus=range(gpus)).build()


# --- what a unit is sorted into -----------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "held", "classes"),
    [
        pytest.param(unit(POOL, 0, idle_since=NOW - 5), [], {READY, IDLE, FRESH}, id="idle"),
        pytest.param(
            unit(POOL, 0), [small(1, "h100-0")], {READY, (PARTIAL, 6), LIGHT}, id="partly-used"
        ),
        pytest.param(
            unit(POOL, 0),
            [allocation(1).task("h100-0", gpus=[0]).checkpoint(NOW).build()],
            {READY, (PARTIAL, 7), LIGHT, MOVABLE},
            id="partly-used-by-a-job-that-may-move",
        ),
        pytest.param(
            unit(POOL, 0), [allocation(1).whole_node("h100-0").build()], {READY, FULL}, id="full"
        ),
        pytest.param(
            unit(POOL, 0),
            [allocation(1).task("h100-0", gpus=range(8), share=0.5).build()],
            {READY, (PARTIAL, 8), LIGHT},
            id="shared",
        ),
        pytest.param(
            unit(POOL, 0, UnitPhase.PROVISIONING), [], {PROVISIONING, FLYING}, id="in-flight"
        ),
        pytest.param(unit(POOL, 0, UnitPhase.DRAINING), [], {DRAINING, SETTLE}, id="drained"),
        pytest.param(
            unit(POOL, 0, UnitPhase.DRAINING), [small(1, "h100-0")], {DRAINING}, id="draining"
        ),
        pytest.param(
            unit(POOL, 0, UnitPhase.DRAINING, deadline=NOW + 60),
            [small(1, "h100-0")],
            {DRAINING, SETTLE},
            id="noticed",
        ),
        pytest.param(unit(POOL, 0, UnitPhase.FAILED), [], {FAILED}, id="failed"),
        pytest.param(unit(SLICES, 0), [], {READY, FRESH}, id="slice-idle"),
        pytest.param(
            unit(SLICES, 0),
            [allocation(1).task("v5p-0-h000", gpus=range(4)).build()],
            {READY, ROOMY, LIGHT},
            id="slice-with-free-hosts",
        ),
    ],
)
def test_a_unit_is_sorted_by_its_phase_and_what_its_nodes_hold(
    record: Unit, held: list[Allocation], classes: set[object]
) -> None:
    index = index_of([record], held)
    assert set(index.pool(record.pool).classes()) == classes


def test_a_unit_whose_node_has_not_registered_is_no_capacity() -> None:
    index = ScalingIndex.of([POOL], [unit(POOL, 0)], [], [])
    assert set(index.pool("h100").classes()) == {READY}


def test_idle_units_come_longest_idle_first_while_due() -> None:
    units = [unit(POOL, i, idle_since=NOW - 100 * i) for i in range(5)]
    index = index_of(units)
    due = index.pool("h100").idle_until(lambda since: NOW - since >= 250)
    assert [u.name for u in due] == ["h100-4", "h100-3"]


# --- keeping it -----------------------------------------------------------------------------


def test_a_unit_put_again_keeps_its_place_and_one_dropped_goes_last() -> None:
    units = [unit(POOL, i) for i in range(3)]
    index = index_of(units)
    index.put_unit(replace(units[0], idle_since=NOW))
    index.drop_unit("h100-1")
    index.put_unit(units[1])
    assert index.pool("h100").classes()[READY] == ["h100-0", "h100-2", "h100-1"]


def test_allocations_and_nodes_move_units_between_classes() -> None:
    record = unit(POOL, 0)
    index = ScalingIndex.of([POOL], [record])
    assert FRESH not in index.pool("h100").classes()  # its node has not registered
    index.put_node(POOL.unit_nodes("h100-0")[0])
    assert FRESH in index.pool("h100").classes()
    busy = small(7, "h100-0")
    index.hold(busy)
    assert (PARTIAL, 6) in index.pool("h100").classes()
    index.release(busy)
    assert FRESH in index.pool("h100").classes()
    index.drop_node("h100-0")
    assert set(index.pool("h100").classes()) == {READY}


def test_node_usage_kept_is_node_usage_counted() -> None:
    allocations = [
        small(1, "a"),
        allocation(2).task("a", gpus=[3], share=0.25, cpus=2.5).task("b", gpus=[0]).build(),
        allocation(3).task("b", gpus=[1, 2], cpus=1.5).build(),
    ]
    usage = NodeUsage()
    for alloc in allocations:
        usage.add(alloc)
    usage.add(small(9, "b"))
    usage.remove(small(9, "b"))
    counted = NodeUsage.of(allocations)
    assert (usage.held, usage.shared, usage.cpus) == (counted.held, counted.shared, counted.cpus)
    assert [usage.on(n) for n in "ab"] == [counted.on(n) for n in "ab"]


def test_the_fixed_nodes_keep_the_nodes_order() -> None:
    fixed = [node(f"n{i}").gpus(8).build() for i in range(3)]
    index = ScalingIndex.of([POOL], [], fixed, [])
    assert [n.name for n in index.fixed_ready()] == ["n0", "n1", "n2"]
    index.put_node(replace(fixed[1], state=NodeState.DRAINING))
    index.put_node(node("n3").build())
    assert [n.name for n in index.fixed_ready()] == ["n0", "n2", "n3"]


def test_unit_node_names_are_those_of_unit_nodes() -> None:
    for pool in (POOL, SLICES):
        assert pool.unit_node_names("x-3") == tuple(n.name for n in pool.unit_nodes("x-3"))


# --- the same plans -----------------------------------------------------------------------


def random_cluster(seed: int) -> AutoscaleInput:
    """Units of every phase, some nodes registered, busy, partly or wholly used."""
    rng = random.Random(seed)
    units, allocations = [], []
    for pool in (POOL, SLICES):
        for i in range(rng.randint(0, 12)):
            phase = rng.choice([*UnitPhase, UnitPhase.READY, UnitPhase.READY])
            idle = rng.choice([None, NOW - 30, NOW - 3600])
            deadline = rng.choice([None, None, NOW - 1, NOW + 60])
            units.append(unit(pool, i, phase, idle_since=idle, deadline=deadline))
    nodes = [n for n in registered([POOL, SLICES], units) if rng.random() < 0.9]
    for job_id, n in enumerate(nodes, 100):
        if rng.random() < 0.5:
            gpus = rng.choice([1, 4, len(n.devices)])
            built = allocation(job_id).task(n.name, gpus=range(gpus), cpus=rng.choice([0, 8]))
            allocations.append(built.checkpoint(rng.choice([NOW, math.inf])).build())
    pending = [job(1).gpus(8).nodes(2), job(2).gpus(2), job(3).gpus(8), job(4).gpus(1)]
    return AutoscaleInput(
        (POOL, SLICES),
        tuple(units),
        tuple(nodes),
        tuple(allocations),
        tuple(j.build() for j in pending[: rng.randint(0, 4)]),
        NOW,
    )


def kept(inp: AutoscaleInput, seed: int) -> tuple[ScalingIndex, tuple[Allocation, ...]]:
    """The index of ``inp`` as a keeper gets it, step by step, with changes undone; and
    the allocations in its order (those released and held again go last)."""
    rng = random.Random(seed)
    index = ScalingIndex(inp.pools)
    index.derived("rooms", lambda: Rooms(index))  # consolidation's, kept from the start
    for alloc in inp.allocations:
        index.hold(alloc)
    for record in inp.units:
        if rng.random() < 0.3:  # recorded first as another phase: it keeps its place
            index.put_unit(replace(record, phase=UnitPhase.PROVISIONING, idle_since=None))
        index.put_unit(record)
    for n in inp.nodes:
        if rng.random() < 0.3:
            index.put_node(replace(n, state=NodeState.LOST))
        index.put_node(n)
    again = rng.sample(inp.allocations, len(inp.allocations) // 3)
    for alloc in again:
        index.release(alloc)
        index.hold(alloc)
    gone = unit(POOL, 99)
    index.put_unit(gone)
    index.put_node(POOL.unit_nodes(gone.name)[0])
    index.hold(small(999, gone.name))
    index.drop_unit(gone.name)
    index.drop_node(gone.name)
    index.release(small(999, gone.name))
    return index, (*[a for a in inp.allocations if a not in again], *again)


def classes(index: ScalingIndex) -> dict[str, dict[object, list[str]]]:
    return {p.name: index.pool(p.name).classes() for p in index.pools}


def plan_of(inp: AutoscaleInput) -> ScalePlan:
    return autoscale(inp, CONFIG, PROFILE)


@pytest.mark.parametrize("seed", range(40))
def test_a_kept_index_is_the_one_built_at_once_and_plans_the_same(seed: int) -> None:
    inp = random_cluster(seed)
    index, order = kept(inp, seed)
    inp = replace(inp, allocations=order)
    at_once = ScalingIndex.of(inp.pools, inp.units, inp.nodes, inp.allocations)
    assert classes(index) == classes(at_once)
    usage, counted = index.usage, at_once.usage
    assert (usage.held, usage.shared, usage.cpus) == (counted.held, counted.shared, counted.cpus)
    assert all(usage.on(n.name) == counted.on(n.name) for n in inp.nodes)
    rooms, fresh = index.derived("rooms", lambda: None), Rooms(at_once)
    assert rooms.room == fresh.room
    assert {m: list(f) for m, f in rooms.fullest.items() if f} == {
        m: list(f) for m, f in fresh.fullest.items()
    }
    assert plan_of(replace(inp, index=index)) == plan_of(inp)


@pytest.mark.parametrize("seed", range(10))
def test_a_pass_leaves_the_index_as_it_was(seed: int) -> None:
    inp = random_cluster(seed)
    index = ScalingIndex.of(inp.pools, inp.units, inp.nodes, inp.allocations)
    before = classes(index)
    first = plan_of(replace(inp, index=index))
    assert classes(index) == before
    assert plan_of(replace(inp, index=index)) == first


def test_an_index_of_other_pools_is_refused() -> None:
    inp = random_cluster(1)
    index = ScalingIndex.of([POOL], inp.units, inp.nodes, inp.allocations)
    with pytest.raises(ValueError, match="other pools"):
        plan_of(replace(inp, index=index))


@pytest.mark.parametrize("seed", range(20))
def test_coming_units_are_made_soonest_first_then_by_name(seed: int) -> None:
    rng = random.Random(seed)
    pool = gpu_pool(provisioning_time=rng.choice([0.0, 180.0]))
    now = NOW + rng.random()
    times = [now, now - 180.0, now - 1e-9, NOW - 10.0, NOW - 400.0, now - 180.0 + 1e-10]
    flying = sorted((rng.choice(times), f"h100-{i}") for i in range(rng.randint(0, 12)))
    planned = [f"h100-{i}" for i in range(20, 20 + rng.randint(0, 3))]
    late = rng.randint(0, len(flying))
    coming = Coming(flying, late, planned, pool, now)
    expected = [
        *(
            (name, (), max(0.0, t + pool.provisioning_time - now), False)
            for t, name in flying[late:]
        ),
        *((name, (), pool.provisioning_time, True) for name in planned),
    ]
    expected.sort(key=lambda e: (e[2], e[0]))
    assert len(coming) == len(expected)
    assert [coming[i] for i in range(len(coming))] == expected
