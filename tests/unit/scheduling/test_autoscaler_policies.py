"""Scaling policies as plugins: ``duty-cycle``, ``schedule``, third-party ones, and the
registry's refusals."""

from __future__ import annotations

import pytest

from corral.core.pools import AutoscalingConfig, UnitPhase
from corral.errors import ValidationError
from corral.scheduling.autoscaler import autoscale
from corral.scheduling.scaling import AutoscaleInput
from corral.scheduling.scaling_policies import Demand, ScalingView, Wait
from corral.scheduling.scaling_registry import (
    ScalingPolicyRegistry,
    build_policies,
    check_policies,
    default_policy_registry,
)
from tests.builders import allocation, job
from tests.unit.scheduling.autoscaler_helpers import (
    NOW,
    drained,
    gpu_pool,
    provisions,
    scale,
    unit,
    with_autoscaling,
)

DAY = 86_400.0
MIDNIGHT = (NOW // DAY) * DAY  # a UTC midnight


def at(hours: float) -> float:
    return MIDNIGHT + hours * 3600


# --- duty-cycle -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("duty", "spare_unit", "added", "drains"),
    [
        pytest.param(0.95, False, ("h100-2",), [], id="hot-one-spare-more"),
        pytest.param(0.95, True, None, [], id="hot-the-idle-one-is-the-spare"),
        pytest.param(0.5, True, None, ["h100-2"], id="cool-the-idle-one-goes"),
        pytest.param(None, True, None, ["h100-2"], id="no-telemetry"),
    ],
)
def test_duty_cycle_keeps_a_spare_unit_of_a_hot_pool(
    duty: float | None, spare_unit: bool, added: tuple[str, ...] | None, drains: list[str]
) -> None:
    pool = gpu_pool()
    units = [unit(pool, 0), unit(pool, 1)]
    if spare_unit:
        units.append(unit(pool, 2, idle_since=NOW - 3600))
    allocs = [allocation(10 + i).whole_node(f"h100-{i}").build() for i in range(2)]
    config = with_autoscaling(policies=(("queue-demand", ()), ("duty-cycle", (("target", 0.8),))))
    telemetry = {} if duty is None else {"h100-0": duty, "h100-1": duty}
    plan = scale([pool], units, allocations=allocs, duty=telemetry, config=config)
    assert provisions(plan).get("h100") == added
    assert drained(plan) == drains


def test_duty_cycle_does_not_scale_below_busy_plus_spare() -> None:
    pool = gpu_pool()
    units = [unit(pool, 0), unit(pool, 1, idle_since=NOW - 3600)]
    allocs = [allocation(10).whole_node("h100-0").build()]
    config = with_autoscaling(policies=(("duty-cycle", (("target", 0.3),)),))
    plan = scale([pool], units, allocations=allocs, duty={"h100-0": 1.0}, config=config)
    assert plan.actions == ()  # one busy + one spare: the idle one stays


# --- schedule ---------------------------------------------------------------------------

WINDOWS = (
    ("windows", [{"pool": "h100", "min": 3, "from": "08:00", "to": "20:00"}]),
)  # fmt: skip
NIGHT = (("windows", [{"pool": "h100", "min": 1, "from": "22:00", "to": "06:00"}]),)


@pytest.mark.parametrize(
    ("args", "hours", "added"),
    [
        pytest.param(WINDOWS, 9.0, ("h100-0", "h100-1", "h100-2"), id="in-the-window"),
        pytest.param(WINDOWS, 8.0, ("h100-0", "h100-1", "h100-2"), id="at-its-start"),
        pytest.param(WINDOWS, 20.0, None, id="at-its-end"),
        pytest.param(WINDOWS, 7.99, None, id="before"),
        pytest.param(NIGHT, 23.0, ("h100-0",), id="past-midnight-before"),
        pytest.param(NIGHT, 3.0, ("h100-0",), id="past-midnight-after"),
        pytest.param(NIGHT, 12.0, None, id="past-midnight-outside"),
    ],
)
def test_schedule_raises_a_pools_floor_in_its_window(
    args: tuple, hours: float, added: tuple[str, ...] | None
) -> None:
    config = with_autoscaling(policies=(("queue-demand", ()), ("schedule", args)))
    plan = scale([gpu_pool()], now=at(hours), config=config)
    assert provisions(plan).get("h100") == added


def test_schedule_keeps_idle_units_in_its_window_only() -> None:
    pool = gpu_pool()
    units = [unit(pool, i, idle_since=at(0)) for i in range(3)]
    config = with_autoscaling(policies=(("schedule", WINDOWS),))
    assert drained(scale([pool], units, now=at(12), config=config)) == []
    assert len(drained(scale([pool], units, now=at(21), config=config))) == 3


def test_policy_floors_respect_the_pools_max_and_the_cost_cap() -> None:
    windows = (("windows", [{"pool": "h100", "min": 10, "from": "00:00", "to": "24:00"}]),)
    config = with_autoscaling(policies=(("schedule", windows),), max_cost_per_hour=35.0)
    plan = scale([gpu_pool(max=4)], now=at(1), config=config)
    assert provisions(plan) == {"h100": ("h100-0", "h100-1", "h100-2")}  # 3 x 10/h <= 35


# --- third-party policies ------------------------------------------------------------------


class Reserve:
    """A policy a plugin might ship: two units of every pool, and a reason for job 7."""

    name = "reserve"

    def __init__(self, units: int = 2) -> None:
        self.units = units

    def demand(self, view: ScalingView) -> list[Demand | Wait]:
        found: list[Demand | Wait] = [Demand(p.name, floor=self.units) for p in view.pools]
        return [*found, Wait(7, "reserved by policy")]


def test_a_registered_policy_runs_in_order_with_its_arguments() -> None:
    registry = default_policy_registry(load_entry_points=False)
    registry.register("reserve", Reserve)
    config = AutoscalingConfig(policies=(("queue-demand", ()), ("reserve", (("units", 3),))))
    policies = check_policies(config, registry, pools=["h100"])
    pool = gpu_pool()
    inp_config = with_autoscaling(policies=config.policies)
    plan = autoscale(
        AutoscaleInput((pool,), (), (), (), (job(1).gpus(8).build(),), NOW),
        inp_config,
        policies=policies,
    )
    (action,) = plan.actions
    assert action.units == ("h100-0", "h100-1", "h100-2")  # type: ignore[union-attr]
    assert action.reason == "pending job 1; reserve"  # type: ignore[union-attr]
    assert plan.waits[7] == "reserved by policy"


# --- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        pytest.param(
            (("queue-demnd", ()),),
            "unknown policy 'queue-demnd' (known: duty-cycle, queue-demand, schedule)",
            id="unknown",
        ),
        pytest.param((("duty-cycle", (("target", 2),)),), "duty-cycle: target", id="bad-target"),
        pytest.param((("duty-cycle", (("spares", 1),)),), "duty-cycle:", id="unknown-arg"),
        pytest.param((("queue-demand", (("wait_for_busy", "no"),)),), "queue-demand:", id="bool"),
        pytest.param((("schedule", (("windows", "08-20"),)),), "schedule: windows", id="not-list"),
        pytest.param(
            (("schedule", (("windows", [{"pool": "h100", "min": 1, "from": "8am", "to": "9"}]),)),),
            "schedule: windows.0.from: expected a UTC time such as 08:00",
            id="bad-time",
        ),
        pytest.param(
            (("schedule", (("windows", [{"pool": "h100", "min": 1, "from": "08:00"}]),)),),
            "windows.0: to is missing",
            id="missing-field",
        ),
    ],
)
def test_bad_policies_are_refused_naming_them(policies: tuple, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        check_policies(AutoscalingConfig(policies=policies))
    assert message in str(caught.value)
    assert str(caught.value).startswith("autoscaling.policies: ")


def test_a_schedule_naming_an_undeclared_pool_is_refused_given_the_pools() -> None:
    config = AutoscalingConfig(policies=(("schedule", WINDOWS),))
    assert len(check_policies(config)) == 1
    with pytest.raises(ValidationError, match=r"schedule: windows.0.pool: no pool 'h100'"):
        check_policies(config, pools=["a100"])


def test_an_unknown_policy_fails_the_pass_too() -> None:
    config = with_autoscaling(policies=(("nope", ()),))
    with pytest.raises(ValidationError, match="unknown policy 'nope'"):
        scale([gpu_pool()], config=config)


def test_a_registry_refuses_duplicates_and_non_policies() -> None:
    registry = ScalingPolicyRegistry()
    registry.register("x", object)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("x", object)
    with pytest.raises(ValidationError, match="x is not a scaling policy"):
        build_policies(AutoscalingConfig(policies=(("x", ()),)), registry)


def test_units_in_other_phases_are_not_ready_for_policies() -> None:
    pool = gpu_pool()
    units = [unit(pool, 0), unit(pool, 1, UnitPhase.DRAINING)]
    allocs = [allocation(10).whole_node("h100-0").build()]
    config = with_autoscaling(policies=(("duty-cycle", ()),))
    plan = scale(
        [pool], units, allocations=allocs, duty={"h100-0": 0.9, "h100-1": 0.0}, config=config
    )
    assert provisions(plan) == {"h100": ("h100-2",)}  # mean over ready nodes only: 0.9
