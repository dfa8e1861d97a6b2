"""The autoscaler's scale-up (``scheduling.autoscaler.autoscale``): pending jobs that only
new units could hold get them, gang-aware and all or nothing, within the limits."""

from __future__ import annotations

import math

import pytest

from corral.core.node import Device
from corral.core.pools import Pool, PoolFailures, UnitPhase
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.scaling import Provision
from tests.builders import GB, allocation, job, node, role
from tests.unit.scheduling.autoscaler_helpers import (
    NOW,
    drained,
    gpu_pool,
    keep,
    provisions,
    scale,
    tpu_job,
    tpu_pool,
    unit,
    with_autoscaling,
)

# --- a gang on an empty pool -------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool_max", "units", "wait"),
    [
        pytest.param(
            4, ("h100-0", "h100-1"), "waiting for pool h100 to provision 2 nodes", id="room"
        ),
        pytest.param(2, ("h100-0", "h100-1"), "provision 2 nodes (expected in 3m)", id="at-max"),
        pytest.param(1, None, "would need 2 nodes, more than its max of 1", id="max-1"),
    ],
)
def test_a_gang_gets_whole_nodes_all_or_nothing(
    pool_max: int, units: tuple[str, ...] | None, wait: str
) -> None:
    plan = scale([gpu_pool(max=pool_max)], pending=[job(1).gpus(8).nodes(2)])
    assert provisions(plan).get("h100") == units
    assert wait in plan.waits[1]


def test_one_provision_per_pool_names_the_jobs_and_the_desired_size() -> None:
    plan = scale([gpu_pool()], pending=[job(1).gpus(8).nodes(2), job(2).gpus(8)])
    (action,) = plan.actions
    assert action == Provision("h100", ("h100-0", "h100-1", "h100-2"), "pending jobs 1, 2", (1, 2))
    assert plan.desired == {"h100": 3}


@pytest.mark.parametrize("jobs", [1, 7, 8, 9, 20])
def test_a_burst_of_one_gpu_jobs_packs_onto_few_nodes(jobs: int) -> None:
    plan = scale([gpu_pool(max=16)], pending=[job(i).gpus(1) for i in range(1, jobs + 1)])
    assert len(provisions(plan)["h100"]) == math.ceil(jobs / 8)
    assert set(plan.waits) == set(range(1, jobs + 1))


def test_new_names_take_the_lowest_free_indices() -> None:
    pool = gpu_pool()
    units = [
        unit(pool, 0, UnitPhase.DELETING),
        unit(pool, 2, UnitPhase.READY),
    ]
    busy = allocation(9).whole_node("h100-2").build()
    plan = scale([pool], units, [job(1).gpus(8).nodes(2)], allocations=[busy])
    assert provisions(plan) == {"h100": ("h100-1", "h100-3")}


# --- what needs no new unit ---------------------------------------------------------------


def test_units_in_flight_absorb_demand_on_the_next_pass() -> None:
    pool = gpu_pool()
    pending = [job(1).gpus(8).nodes(2), job(2).gpus(4), job(3).gpus(4)]
    first = scale([pool], pending=pending)
    assert provisions(first) == {"h100": ("h100-0", "h100-1", "h100-2")}
    units = keep(first, [], NOW)
    second = scale([pool], units, pending, now=NOW + 60)
    assert provisions(second) == {}
    assert second.waits[1] == "waiting for pool h100 to provision 2 nodes (expected in 2m)"
    assert second.waits[3] == "waiting for pool h100 to provision 1 node (expected in 2m)"
    late = scale([pool], units, pending, now=NOW + 200)
    assert provisions(late) == {}
    assert late.waits[2].endswith("(expected any moment now)")


def test_a_job_that_fits_free_ready_nodes_needs_nothing_and_keeps_them() -> None:
    pool = gpu_pool()
    idle = [unit(pool, 0, idle_since=NOW - 7200), unit(pool, 1, idle_since=NOW - 7200)]
    plan = scale([pool], idle, [job(1).gpus(8)])
    assert provisions(plan) == {} and 1 not in plan.waits
    assert drained(plan) == ["h100-1"]  # the other one is kept for the job


def test_jobs_see_the_capacity_earlier_jobs_are_assumed_on() -> None:
    pool = gpu_pool()
    ready = [unit(pool, 0)]
    plan = scale([pool], ready, [job(1).gpus(6), job(2).gpus(4)])
    assert provisions(plan) == {"h100": ("h100-1",)}
    assert 1 not in plan.waits and "provision 1 node" in plan.waits[2]


@pytest.mark.parametrize(
    ("wait_for_busy", "units"),
    [
        pytest.param(True, None, id="told-to-wait-for-the-busy-fixed-node"),
        pytest.param(False, ("h100-0",), id="default-scales"),
        pytest.param(None, ("h100-0",), id="default-is-to-scale"),
    ],
)
def test_a_job_busy_fixed_nodes_could_hold_is_demand_unless_told_to_wait(
    wait_for_busy: bool | None, units: tuple[str, ...] | None
) -> None:
    fixed = node("n0").gpus(8).build()
    busy = allocation(9).whole_node("n0").build()
    args = () if wait_for_busy is None else (("wait_for_busy", wait_for_busy),)
    config = with_autoscaling(policies=(("queue-demand", args),))
    plan = scale(
        [gpu_pool()], [], [job(1).gpus(8)], fixed=[fixed], allocations=[busy], config=config
    )
    assert provisions(plan).get("h100") == units
    assert (1 in plan.waits) == (units is not None)


def test_a_job_no_pool_could_hold_gets_nothing_and_no_reason() -> None:
    plan = scale([gpu_pool(gpus=4)], pending=[job(1).gpus(8)])
    assert plan.actions == () and plan.waits == {}


def test_ready_nodes_are_preferred_to_units_in_flight() -> None:
    pool = gpu_pool()
    units = [
        unit(pool, 0, UnitPhase.PROVISIONING, requested_at=NOW - 10),
        unit(pool, 1, idle_since=NOW - 5),
    ]
    plan = scale([pool], units, [job(1).gpus(8), job(2).gpus(8)])
    assert provisions(plan) == {}
    assert 1 not in plan.waits  # on the ready node
    assert plan.waits[2] == "waiting for pool h100 to provision 1 node (expected in 2m50s)"


# --- placement rules count: roles, MIG, topology ---------------------------------------------


def test_a_job_with_roles_gets_the_nodes_its_roles_need_together() -> None:
    het = job(1).roles(role("ps", 1, cpus=4), role("worker", 2, gpus=8))
    plan = scale([gpu_pool()], pending=[het])
    assert provisions(plan) == {"h100": ("h100-0", "h100-1")}  # the ps shares a node


def test_mig_instances_pack_by_what_each_node_declares() -> None:
    template = node("t").devices(Device(0, "A100", 80 * GB, mig=("3g.40gb", "3g.40gb"))).build()
    pool = Pool("mig", (template,), max=8, cost_per_hour=2.0)
    plan = scale([pool], pending=[job(i).gpus("3g.40gb") for i in range(1, 4)])
    assert provisions(plan) == {"mig": ("mig-0", "mig-1")}


@pytest.mark.parametrize(
    ("network", "units"),
    [
        pytest.param(("zone", "spine", "leaf"), ("p-0", "p-1"), id="units-share-a-leaf"),
        pytest.param((), None, id="no-leaf-declared"),
    ],
)
def test_a_required_topology_counts(network: tuple[str, ...], units: tuple | None) -> None:
    template = node("t").gpus(8).network(*network).build()
    pool = Pool("p", (template,), max=4, cost_per_hour=1.0)
    plan = scale([pool], pending=[job(1).gpus(8).nodes(2).topology("leaf")])
    assert provisions(plan).get("p") == units


# --- choosing a pool -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pools", "request_gpus", "chosen"),
    [
        pytest.param(
            [gpu_pool("a", cost=10.0), gpu_pool("b", cost=5.0)], 8, "b", id="cheaper-per-hour"
        ),
        pytest.param(
            [gpu_pool("big", gpus=8, cost=5.0), gpu_pool("small", gpus=4, cost=5.0)],
            4,
            "small",
            id="same-cost-less-waste",
        ),
        pytest.param([gpu_pool("b"), gpu_pool("a")], 8, "a", id="then-by-name"),
        pytest.param(
            [gpu_pool("h100", model="H100", cost=1.0), gpu_pool("a100", model="A100", cost=9.0)],
            "A100:8",
            "a100",
            id="only-the-model-it-asks-for",
        ),
    ],
)
def test_the_cheapest_pool_that_can_hold_it_is_chosen(
    pools: list, request_gpus: int | str, chosen: str
) -> None:
    plan = scale(pools, pending=[job(1).gpus(request_gpus)])
    assert list(provisions(plan)) == [chosen]


def test_a_full_pool_overflows_to_the_next_cheapest() -> None:
    pools = [gpu_pool("cheap", cost=1.0, max=1), gpu_pool("dear", cost=2.0)]
    plan = scale(pools, pending=[job(1).gpus(8), job(2).gpus(8)])
    assert provisions(plan) == {"cheap": ("cheap-0",), "dear": ("dear-0",)}


def test_a_node_selector_picks_the_pool() -> None:
    pools = [gpu_pool("a", cost=1.0), gpu_pool("b", cost=2.0)]
    plan = scale(pools, pending=[job(1).gpus(8).selector(**{"corral.pool": "b"})])
    assert provisions(plan) == {"b": ("b-0",)}


# --- limits -----------------------------------------------------------------------------


def test_max_cost_per_hour_caps_what_is_added() -> None:
    config = with_autoscaling(max_cost_per_hour=25.0)  # 2 nodes at 10/h, not 3
    plan = scale(
        [gpu_pool()],
        pending=[job(1).gpus(8), job(2).gpus(8).nodes(2), job(3).gpus(8)],
        config=config,
    )
    assert provisions(plan) == {"h100": ("h100-0", "h100-1")}
    assert "max_cost_per_hour $25.00" in plan.waits[2]
    assert "provision 1 node" in plan.waits[3]


def test_the_cost_cap_counts_units_already_there() -> None:
    pool = gpu_pool()
    busy = [unit(pool, i) for i in range(2)]
    allocs = [allocation(90 + i).whole_node(u.name).build() for i, u in enumerate(busy)]
    config = with_autoscaling(max_cost_per_hour=25.0)
    plan = scale([pool], busy, [job(1).gpus(8).nodes(2)], allocations=allocs, config=config)
    assert provisions(plan) == {}
    assert "would pass max_cost_per_hour $25.00 ($20.00/h now)" in plan.waits[1]


def test_a_pool_backing_off_is_not_provisioned_until_retry_after() -> None:
    failures = {"h100": PoolFailures(count=2, last=NOW - 30)}  # 60s, doubled: retry at +90s
    blocked = scale([gpu_pool()], pending=[job(1).gpus(8)], failures=failures)
    assert provisions(blocked) == {}
    assert "backing off after 2 failed provisionings (retry in 1m30s)" in blocked.waits[1]
    later = scale([gpu_pool()], pending=[job(1).gpus(8)], failures=failures, now=NOW + 91)
    assert provisions(later) == {"h100": ("h100-0",)}


def test_disabled_autoscaling_only_keeps_min() -> None:
    config = with_autoscaling(enabled=False)
    plan = scale([gpu_pool(min=1)], pending=[job(1).gpus(8).nodes(3)], config=config)
    assert provisions(plan) == {"h100": ("h100-0",)}
    assert plan.waits == {}


# --- TPU slices ------------------------------------------------------------------------


def test_a_tpu_job_gets_a_whole_slice() -> None:
    plan = scale([tpu_pool(), gpu_pool()], pending=[tpu_job(1, "v5p:2x2x4")])
    assert provisions(plan) == {"v5p": ("v5p-0",)}
    assert plan.waits[1] == "waiting for pool v5p to provision 4 hosts (expected in 3m)"


def test_two_small_slices_share_one_new_slice() -> None:
    plan = scale([tpu_pool()], pending=[tpu_job(1, "v5p:2x2x2"), tpu_job(2, "v5p:2x2x2")])
    assert provisions(plan) == {"v5p": ("v5p-0",)}
    assert set(plan.waits) == {1, 2}


def test_a_slice_larger_than_the_pools_gets_nothing() -> None:
    plan = scale([tpu_pool()], pending=[tpu_job(1, "v5p:4x4x4")])
    assert plan.actions == () and plan.waits == {}


def test_a_slice_of_a_generation_no_pool_has_gets_nothing() -> None:
    plan = scale([gpu_pool()], pending=[tpu_job(1, "v4:2x2x2")])
    assert plan.actions == () and plan.waits == {}


def test_a_default_config_runs_queue_demand() -> None:
    assert SchedulerConfig().autoscaling.policies == (("queue-demand", ()),)
