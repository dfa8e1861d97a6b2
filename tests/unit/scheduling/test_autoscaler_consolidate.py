"""Consolidating scale-down: a unit less than half used whose jobs can move without
losing work, and fit elsewhere, is drained and its jobs preempted; in every other case
nothing moves."""

from __future__ import annotations

import math

import pytest

from corral.core.allocation import Allocation
from tests.builders import allocation, job, node
from tests.unit.scheduling.autoscaler_helpers import NOW, drained, gpu_pool, scale, unit

POOL = gpu_pool()
SAVES = math.inf  # Allocation.last_checkpoint of a job that saves when signalled
UNITS = [unit(POOL, 0), unit(POOL, 1)]


def on(node_name: str, job_id: int, gpus: range, saved: float | None = SAVES) -> Allocation:
    built = allocation(job_id).task(node_name, gpus=gpus).started(NOW - 7200)
    if saved is not None:
        built = built.checkpoint(saved)
    return built.build()


def test_a_mostly_free_unit_is_emptied_onto_the_fuller_one() -> None:
    held = [on("h100-0", 1, range(2)), on("h100-1", 2, range(6))]
    plan = scale([POOL], UNITS, allocations=held)
    assert drained(plan) == ["h100-0"]
    ((job_id, why),) = plan.preemptions
    assert job_id == 1 and "moved off h100-0 (pool h100)" in why and "h100-1" in why
    assert plan.desired == {"h100": 1}
    reason = next(a.reason for a in plan.actions if getattr(a, "unit", None) == "h100-0")
    assert reason.startswith("consolidating: 25% of its GPUs used")


def test_jobs_also_move_onto_fixed_nodes() -> None:
    fixed = node("fixed-0").gpus(8, model="H100").build()
    plan = scale([POOL], UNITS[:1], allocations=[on("h100-0", 1, range(3))], fixed=[fixed])
    assert drained(plan) == ["h100-0"] and [j for j, _ in plan.preemptions] == [1]


@pytest.mark.parametrize(
    ("held", "why"),
    [
        pytest.param(
            [on("h100-0", 1, range(2), saved=None), on("h100-1", 2, range(6))],
            "never checkpointed: it would lose its work",
            id="never-checkpointed",
        ),
        pytest.param(
            [on("h100-0", 1, range(2), saved=NOW - 1200), on("h100-1", 2, range(6))],
            "would lose 20 minutes (consolidate_max_loss 10m)",
            id="checkpoint-too-old",
        ),
        pytest.param(
            [on("h100-0", 1, range(6)), on("h100-1", 2, range(6))],
            "three quarters used each: not below consolidate_below",
            id="three-quarters-used",
        ),
        pytest.param(
            [on("h100-0", 1, range(3)), on("h100-1", 2, range(6))],
            "3 GPUs do not fit the 2 free on h100-1 (h100-1, 3/4 used, is no candidate)",
            id="does-not-fit",
        ),
        pytest.param(
            [
                allocation(1)
                .task("h100-0", gpus=range(2))
                .priority(0, preemptible=False)
                .checkpoint(SAVES)
                .build(),
                on("h100-1", 2, range(6)),
            ],
            "not preemptible",
            id="not-preemptible",
        ),  # fmt: skip
        pytest.param(
            [
                allocation(1)
                .task("h100-0", gpus=[0])
                .task("h100-1", gpus=[0])
                .checkpoint(SAVES)
                .build()
            ],
            "a gang over both units: moving it frees nothing",
            id="gang-over-two-units",
        ),  # fmt: skip
    ],
)
def test_nothing_moves_when_a_job_would_lose_work_or_has_nowhere_to_go(
    held: list[Allocation], why: str
) -> None:
    plan = scale([POOL], UNITS, allocations=held)
    assert drained(plan) == [] and plan.preemptions == (), why


def test_the_recently_checkpointed_move_and_nothing_moves_while_jobs_wait() -> None:
    held = [on("h100-0", 1, range(2), saved=NOW - 300), on("h100-1", 2, range(6))]
    assert [j for j, _ in scale([POOL], UNITS, allocations=held).preemptions] == [1]
    waiting = scale([POOL], UNITS, [job(3).gpus(1)], allocations=held)
    assert waiting.preemptions == ()  # a pending job would take the room first


def test_never_below_the_floor_nor_a_young_unit_nor_when_turned_off() -> None:
    held = [on("h100-0", 1, range(2)), on("h100-1", 2, range(6))]
    at_min = gpu_pool(min=2)
    assert scale([at_min], [unit(at_min, 0), unit(at_min, 1)], allocations=held).preemptions == ()
    young = [unit(POOL, 0, requested_at=NOW - 60), unit(POOL, 1, requested_at=NOW - 60)]
    assert scale([POOL], young, allocations=held).preemptions == ()
    from tests.unit.scheduling.autoscaler_helpers import with_autoscaling

    off = with_autoscaling(consolidate=False)
    assert scale([POOL], UNITS, allocations=held, config=off).preemptions == ()
