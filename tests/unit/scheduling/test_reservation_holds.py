"""EASY backfill reserves only what the waiting job will take (``Reservation.hold``): the
devices, MIG instances, CPUs and memory of its planned placement. A job that would still
run when the reservation starts may use the rest of a reserved node, never what is held;
the waiting job still starts when planned. The forward plan holds the same."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.node import Device
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.plan import estimate_starts
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import GB, job, legacy, node

NOW = 1000.0
BACKFILL = legacy(backfill=True)


def running(job_id: int, node_name: str, gpus: list[int], ends: float, slots=()) -> Allocation:
    task = TaskAllocation(0, node_name, 0, 0, gpus=tuple(gpus), mig_slots=tuple(slots))
    return Allocation(job_id, 0, (task,), expected_end=ends, started_at=NOW - 60)


def decide(nodes, allocs, queue, estimate: bool = True):
    return schedule(ClusterState(tuple(nodes), tuple(allocs)), queue, BACKFILL, NOW, None, estimate)


# one node, GPU 0 in MIG mode (one 3g.40gb instance, busy for 10 minutes), GPU 1 whole, idle
MIXED = (
    node("m0")
    .devices(Device(0, "A100", 80 * GB, mig=("3g.40gb",)), Device(1, "A100", 80 * GB))
    .build()
)
MIG_BUSY = running(90, "m0", [0], NOW + 600, slots=[0])


@pytest.mark.parametrize("estimate", [True, False], ids=["control-plane", "decisions-only"])
def test_a_whole_gpu_job_is_not_held_back_by_a_mig_reservation(estimate: bool) -> None:
    mig = job(1).gpus("3g.40gb").runtime_estimate(600).build()  # waits for the instance
    whole = job(2).gpus(1).build()  # no estimate: runs "forever", past the reservation
    decisions = decide([MIXED], [MIG_BUSY], [mig, whole], estimate)
    (placed,) = decisions.placements
    assert placed.job_id == 2 and placed.tasks[0].gpus == (1,)
    if estimate:
        assert decisions.pending[1].reason.startswith("next to start: m0 reserved for it")
        assert decisions.pending[1].estimated_start == NOW + 600


EIGHT = node("n0").gpus(8).build()
HALF_BUSY = running(90, "n0", [0, 1, 2, 3], NOW + 600)  # 4 GPUs until +10 min


def test_a_long_job_takes_only_what_the_reservation_leaves_and_it_still_starts() -> None:
    six = job(1).gpus(6).runtime_estimate(600).build()  # at +600: 6 of the 8 GPUs
    long = job(2).gpus(2).runtime_estimate(7200).build()  # runs well past +600
    decisions = decide([EIGHT], [HALF_BUSY], [six, long])
    (placed,) = decisions.placements
    assert placed.job_id == 2
    ahead = decisions.pending[1]
    assert ahead.estimated_start == NOW + 600
    # when the first job ends, the six GPUs the reservation held are free for it
    later = schedule(ClusterState((EIGHT,), (placed,)), [six], BACKFILL, NOW + 600, None).placements
    assert [a.job_id for a in later] == [1]
    assert not set(later[0].tasks[0].gpus) & set(placed.tasks[0].gpus)


def test_a_job_kept_off_what_is_held_is_told_so() -> None:
    six = job(1).gpus(6).runtime_estimate(600).build()
    wide = job(2).gpus(3).runtime_estimate(7200).build()  # 4 free now, 2 of them not held
    decisions = decide([EIGHT], [HALF_BUSY], [six, wide])
    assert decisions.placements == ()
    assert "(what it fits on now is held: n0 reserved for job 1)" in decisions.pending[2].reason


def test_cpus_and_memory_the_reservation_needs_are_held_too() -> None:
    roomy = node("n0").gpus(8).cpus(16).build()
    six = job(1).gpus(6).cpus(12).runtime_estimate(600).build()
    hungry = job(2).gpus(1).cpus(8).runtime_estimate(7200).build()  # GPUs free, CPUs held
    frugal = job(3).gpus(1).cpus(4).runtime_estimate(7200).build()
    half = replace(HALF_BUSY, tasks=(replace(HALF_BUSY.tasks[0], cpus=0.0),))
    decisions = decide([roomy], [half], [six, hungry, frugal])
    assert [a.job_id for a in decisions.placements] == [3]


def test_the_forward_plan_holds_the_same() -> None:
    six = job(1).gpus(6).runtime_estimate(600).build()
    long = job(2).gpus(2).runtime_estimate(7200).build()
    config = BACKFILL
    snapshot = Snapshot.build([EIGHT], [HALF_BUSY])
    starts = estimate_starts(snapshot, [HALF_BUSY], [six, long], build_profile(config), config, NOW)
    assert starts == {1: NOW + 600, 2: NOW}  # the long job fits beside the held GPUs
