"""The autoscaler's lifecycle of units: min, idle scale-down, draining, provisioning
timeouts and failures."""

from __future__ import annotations

import pytest

from corral.core.pools import PoolFailures, Unit, UnitPhase
from corral.scheduling.scaling import Delete
from tests.builders import allocation, job
from tests.unit.scheduling.autoscaler_helpers import (
    NOW,
    deleted,
    drained,
    gpu_pool,
    keep,
    provisions,
    scale,
    unit,
    with_autoscaling,
)

POOL = gpu_pool(provisioning_time=180.0)  # timeout: max(300, 3 x 180) = 540s
IDLE = 600.0  # scale_down_idle by default


# --- min ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("units", "failures", "added"),
    [
        pytest.param([], {}, ("h100-0", "h100-1"), id="empty"),
        pytest.param([unit(POOL, 0)], {}, ("h100-1",), id="one-ready"),
        pytest.param(
            [unit(POOL, 0, UnitPhase.PROVISIONING, requested_at=NOW - 10)],
            {},
            ("h100-1",),
            id="one-in-flight",
        ),  # fmt: skip
        pytest.param([unit(POOL, 0, UnitPhase.DELETING)], {}, ("h100-1", "h100-2"), id="deleting"),
        pytest.param([], {"h100": PoolFailures(1, NOW - 5)}, None, id="backing-off"),
    ],
)
def test_min_is_kept(units: list[Unit], failures: dict, added: tuple[str, ...] | None) -> None:
    pool = gpu_pool(min=2, provisioning_time=180.0)
    plan = scale([pool], units, failures=failures)
    assert provisions(plan).get("h100") == added
    if added:
        assert plan.actions[-1].reason == "pool min 2"  # type: ignore[union-attr]


def test_min_is_kept_above_the_cost_cap() -> None:
    config = with_autoscaling(max_cost_per_hour=5.0)
    plan = scale([gpu_pool(min=1)], config=config)
    assert provisions(plan) == {"h100": ("h100-0",)}


def test_units_provisioned_for_min_absorb_demand() -> None:
    plan = scale([gpu_pool(min=1)], pending=[job(1).gpus(4), job(2).gpus(4)])
    assert provisions(plan) == {"h100": ("h100-0",)}
    assert plan.actions[0].jobs == (1, 2)  # type: ignore[union-attr]
    assert "provision 1 node" in plan.waits[2]


# --- scale down -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle_for", "busy", "pool_min", "pending", "drains"),
    [
        pytest.param(IDLE - 1, False, 0, [], [], id="not-idle-long-enough"),
        pytest.param(IDLE, False, 0, [], ["h100-0"], id="idle-long-enough"),
        pytest.param(IDLE * 2, True, 0, [], [], id="busy-never"),
        pytest.param(IDLE * 2, False, 1, [], [], id="never-below-min"),
        pytest.param(IDLE * 2, False, 0, [job(1).gpus(2)], [], id="a-pending-job-fits-it"),
        pytest.param(None, False, 0, [], [], id="idle-since-unknown"),
    ],
)
def test_an_idle_ready_unit_is_drained(
    idle_for: float | None, busy: bool, pool_min: int, pending: list, drains: list[str]
) -> None:
    pool = gpu_pool(min=pool_min)
    idle_since = None if idle_for is None else NOW - idle_for
    units = [unit(pool, 0, idle_since=idle_since)]
    allocs = [allocation(9).task("h100-0", gpus=[0]).build()] if busy else []
    plan = scale([pool], units, pending, allocations=allocs)
    assert drained(plan) == drains
    assert plan.desired == {"h100": 1 - len(drains)}


def test_longest_idle_units_go_first_down_to_the_floor() -> None:
    pool = gpu_pool(min=1)
    units = [
        unit(pool, 0, idle_since=NOW - 2000),
        unit(pool, 1, idle_since=NOW - 5000),
        unit(pool, 2, idle_since=NOW - 3000),
    ]
    assert drained(scale([pool], units)) == ["h100-1", "h100-2"]


def test_nothing_is_drained_from_a_pool_growing_this_pass() -> None:
    pool = gpu_pool()
    units = [unit(pool, 0, idle_since=NOW - 5000)]
    plan = scale([pool], units, [job(1).gpus(8).nodes(2)])
    assert provisions(plan) == {"h100": ("h100-1",)} and drained(plan) == []


def test_idle_units_above_a_lowered_max_leave_at_once() -> None:
    pool = gpu_pool(max=1)
    units = [unit(pool, 0, idle_since=NOW - 5), unit(pool, 1, idle_since=NOW - 5)]
    assert drained(scale([pool], units)) == ["h100-1"]


# --- draining and deleting ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("busy", "deadline", "deletes"),
    [
        pytest.param(False, None, [("h100-0", False)], id="empty"),
        pytest.param(True, None, [], id="still-running-work"),
        pytest.param(True, NOW + 60, [], id="before-its-deadline"),
        pytest.param(True, NOW, [("h100-0", False)], id="at-its-deadline"),
    ],
)
def test_a_draining_unit_is_deleted_once_empty_or_at_its_deadline(
    busy: bool, deadline: float | None, deletes: list
) -> None:
    units = [unit(POOL, 0, UnitPhase.DRAINING, deadline=deadline)]
    allocs = [allocation(9).whole_node("h100-0").build()] if busy else []
    plan = scale([POOL], units, allocations=allocs)
    assert deleted(plan) == deletes
    assert plan.desired == {"h100": 0}


def test_failed_units_are_cleaned_up_and_deleting_ones_left_alone() -> None:
    units = [unit(POOL, 0, UnitPhase.FAILED), unit(POOL, 1, UnitPhase.DELETING)]
    plan = scale([POOL], units)
    assert deleted(plan) == [("h100-0", False)]


def test_units_of_a_pool_no_longer_declared_leave() -> None:
    gone = gpu_pool("old")
    units = [unit(gone, 0, UnitPhase.PROVISIONING), unit(gone, 1), unit(gone, 2)]
    busy = allocation(9).whole_node("old-2").build()
    plan = scale(
        [POOL], units, allocations=[busy], fixed=gone.unit_nodes("old-1") + gone.unit_nodes("old-2")
    )
    assert deleted(plan) == [("old-0", False)]
    assert drained(plan) == ["old-1"]


# --- provisioning timeouts and backoff ------------------------------------------------------


def test_a_unit_provisioning_too_long_is_deleted_as_failed_and_the_pool_backs_off() -> None:
    stuck = unit(POOL, 0, UnitPhase.PROVISIONING, requested_at=NOW - 541)
    pending = [job(1).gpus(8)]
    plan = scale([POOL], [stuck], pending)
    (action,) = plan.actions
    assert isinstance(action, Delete) and action.failed
    assert "timed out" in action.reason and "timeout 9m00s" in action.reason
    assert "backing off after 1 failed provisioning (retry in 1m)" in plan.waits[1]
    assert plan.desired == {"h100": 0}

    # the keeper counts the failure; the pool is tried again after retry_after only
    failures = {"h100": PoolFailures(1, NOW)}
    units = keep(plan, [stuck], NOW)
    assert units == []
    assert provisions(scale([POOL], units, pending, failures=failures, now=NOW + 59)) == {}
    again = scale([POOL], units, pending, failures=failures, now=NOW + 60)
    assert provisions(again) == {"h100": ("h100-0",)}


def test_a_unit_in_flight_within_its_timeout_stays() -> None:
    waiting = unit(POOL, 0, UnitPhase.PROVISIONING, requested_at=NOW - 539)
    plan = scale([POOL], [waiting], [job(1).gpus(8)])
    assert plan.actions == ()
    assert plan.waits[1] == "waiting for pool h100 to provision 1 node (expected any moment now)"
