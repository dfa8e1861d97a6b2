"""Estimates and advice consistent with the reservations ahead of a job.

The reported case: with backfill, a 10-minute 1-GPU job behind a 2-minute gang that takes
every GPU showed "~now", and the advice said "it fits now as asked".
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node
from corral.scheduling.advice import start_sooner
from corral.scheduling.config import Policy, SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.framework import Reservation
from corral.scheduling.plan import AfterCycle, Wait, estimate_starts, wait_of
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import allocation, gpu_nodes, job
from tests.unit.scheduling.test_plan import _simulate, _workload

NOW = 1000.0
BACKFILL = SchedulerConfig(policy=Policy(order="priority-fifo", backfill=True, preemption=False))
STRICT = SchedulerConfig(policy=Policy(order="priority-fifo", backfill=False, preemption=False))
NODES = gpu_nodes(2, gpus=4)  # 8 GPUs in all
GANG = job(1).gpus(4).nodes(2).runtime_estimate(120).build()  # 2 minutes on every GPU
SMALL = job(2).gpus(1).runtime_estimate(600).build()  # 10 minutes on one GPU


def busy(job_id: int, node: str, ends: float, gpus: int = 4) -> Allocation:
    return allocation(job_id).task(node, gpus=range(gpus)).ends(ends).started(0).build()


ALL_BUSY = [busy(90, "n0", NOW + 300), busy(91, "n1", NOW + 60)]
# two GPUs of n1 free now, but n0 and n1 are the gang's from +300 (the small job ends later)
SOME_FREE = [busy(90, "n0", NOW + 300), busy(91, "n1", NOW + 60, gpus=2)]
SAME_END = [busy(90, "n0", NOW + 300), busy(91, "n1", NOW + 300)]
GANG_RESERVED = Reservation(1, frozenset({"n0", "n1"}), NOW + 300)


def relative(starts: dict[int, float]) -> dict[int, float]:
    return {job_id: at - NOW for job_id, at in starts.items()}


@pytest.mark.parametrize(
    ("running", "blocked", "after", "expected"),
    [
        pytest.param(
            ALL_BUSY, [GANG, SMALL], AfterCycle({1: NOW + 300}), {1: 300, 2: 420}, id="all-busy"
        ),
        pytest.param(
            SOME_FREE,
            [GANG, SMALL],
            AfterCycle({1: NOW + 300}),
            {1: 300, 2: 420},
            id="free-gpus-reserved-for-the-gang-are-not-now",
        ),
        pytest.param(
            SAME_END, [GANG, SMALL], AfterCycle({1: NOW + 300}), {1: 300, 2: 420}, id="same-end"
        ),
        pytest.param(
            ALL_BUSY,
            [GANG, SMALL],
            AfterCycle({1: NOW + 400}),
            {1: 400, 2: 420},
            id="the-cycle's-start-is-a-lower-bound",
        ),
        pytest.param(
            SOME_FREE, [SMALL], AfterCycle(), {2: 60}, id="tried-now-so-not-before-a-release"
        ),
        pytest.param(SOME_FREE, [SMALL], None, {2: 0}, id="outside-a-cycle-it-may-fit-now"),
        pytest.param(
            [busy(80, "n0", math.inf), busy(91, "n1", NOW + 300)],
            [
                job(5).gpus(4).runtime_estimate(100).build(),
                job(6).gpus(4).runtime_estimate(50).build(),
            ],
            AfterCycle({5: NOW}, freeing={80}),
            {5: 0, 6: 100},
            id="preempted-jobs-end-now-and-the-preemptor-takes-their-gpus",
        ),
    ],
)
def test_estimates_after_a_cycle_keep_to_its_reservations(
    running: list[Allocation], blocked: list[Job], after: AfterCycle | None, expected: dict
) -> None:
    snapshot = Snapshot.build(NODES, running)
    profile = build_profile(BACKFILL)
    starts = estimate_starts(snapshot, running, blocked, profile, BACKFILL, NOW, after=after)
    assert relative(starts) == expected
    assert Snapshot.build(NODES, running).views()[0].used_milli == snapshot.views()[0].used_milli


@pytest.mark.parametrize("running", [ALL_BUSY, SOME_FREE, SAME_END], ids=["all", "some", "same"])
def test_the_cycle_never_estimates_now_behind_a_reservation(running: list[Allocation]) -> None:
    pending = [GANG, SMALL]
    decisions = schedule(ClusterState(tuple(NODES), tuple(running)), pending, BACKFILL, NOW)
    estimates = {i: p.estimated_start for i, p in decisions.pending.items()}
    assert relative(estimates) == {1: 300, 2: 420}  # type: ignore[arg-type]
    real = _simulate(NODES, running, pending, BACKFILL)
    assert all(estimates[i] == real[i] > NOW for i in (1, 2)), (estimates, real)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(STRICT, id="strict"),
        pytest.param(BACKFILL, id="backfill"),
    ],
)
def test_the_cycle_estimates_the_starts_when_jobs_run_as_estimated(
    config: SchedulerConfig,
) -> None:
    """Every estimate the cycle gives is later than now and, with no arrivals and exact
    estimates, the start the cycles give the job (random workloads of ``test_plan``)."""
    wrong = []
    for seed in range(12):
        nodes, running, pending = _workload(seed)
        real = _simulate(nodes, running, pending, config)
        decisions = schedule(ClusterState(tuple(nodes), tuple(running)), pending, config, NOW)
        wrong += [
            (seed, job_id, waits.estimated_start, real.get(job_id))
            for job_id, waits in decisions.pending.items()
            if waits.estimated_start is not None
            and not (waits.estimated_start == real.get(job_id) and waits.estimated_start > NOW)
        ]
    assert wrong == []


@pytest.mark.parametrize(
    ("running", "pending", "ahead", "config", "expected"),
    [
        pytest.param(
            SOME_FREE, SMALL, [GANG], BACKFILL, Wait(NOW + 420, GANG_RESERVED), id="held-back"
        ),
        pytest.param(
            ALL_BUSY, SMALL, [GANG], BACKFILL, Wait(NOW + 420, GANG_RESERVED), id="all-busy"
        ),
        pytest.param(
            SOME_FREE,
            job(2).gpus(1).runtime_estimate(200).build(),
            [GANG],
            BACKFILL,
            Wait(NOW, None),
            id="ends-before-the-reservation-fits-now",
        ),
        pytest.param(SOME_FREE, SMALL, [GANG], STRICT, Wait(NOW + 420, None), id="strict-order"),
        pytest.param(SOME_FREE, GANG, [], BACKFILL, Wait(NOW + 300, None), id="its-own"),
    ],
)
def test_wait_of_names_the_reservation_ahead(
    running: list[Allocation],
    pending: Job,
    ahead: list[Job],
    config: SchedulerConfig,
    expected: Wait,
) -> None:
    snapshot = Snapshot.build(NODES, running)
    profile = build_profile(config)
    found = wait_of(pending, ahead, snapshot, running, profile, config, NOW)
    if found.reservation is not None:  # (its planned placement: the gang's four GPUs each)
        assert found.reservation.hold is not None
        assert set(found.reservation.hold.nodes) == found.reservation.nodes
        found = replace(found, reservation=replace(found.reservation, hold=None))
    assert found == expected


HELD_BACK = (
    "held back by job 1's reservation of n0, n1 (it starts in about 5m00s; with its runtime "
    "estimate of 10m00s it would still run then); expected to start in about 7m00s"
)
SHORTER = (
    "fits now with runtime_estimate: 4m00s or less, if it can finish by then (it would end "
    "before job 1's reservation starts)"
)
# n2 has one free GPU and is not reserved: one GPU fits there, two on one node do not
THREE = gpu_nodes(3, gpus=4)
THREE_BUSY = [*SOME_FREE, busy(92, "n2", NOW + 900, gpus=3)]


@pytest.mark.parametrize(
    ("nodes", "running", "pending", "estimate", "reservation", "expected"),
    [
        pytest.param(
            NODES,
            SOME_FREE,
            SMALL,
            NOW + 420,
            GANG_RESERVED,
            [HELD_BACK, SHORTER],
            id="held-back-by-the-reservation-never-fits-now-as-asked",
        ),
        pytest.param(
            NODES,
            SOME_FREE,
            job(2).gpus(1).build(),
            None,
            GANG_RESERVED,
            [
                "held back by job 1's reservation of n0, n1 (it starts in about 5m00s; with no "
                "runtime_estimate or time_limit it could still run then)",
                SHORTER,
            ],
            id="no-runtime-estimate",
        ),
        pytest.param(
            THREE,
            THREE_BUSY,
            job(2).gpus(2).runtime_estimate(600).build(),
            NOW + 420,
            GANG_RESERVED,
            [HELD_BACK, SHORTER],
            id="variants-keep-off-the-reserved-nodes",
        ),
        pytest.param(
            NODES,
            ALL_BUSY,
            SMALL,
            NOW + 420,
            GANG_RESERVED,
            [
                "no single change to its request lets it start now; expected to start in "
                "about 7m00s, as running jobs end and after job 1, which has n0, n1 reserved "
                "(an estimate: it assumes they run for their estimates)"
            ],
            id="nothing-free-says-whose-reservation-it-waits-after",
        ),
        pytest.param(
            NODES,
            SOME_FREE,
            SMALL,
            NOW + 420,
            None,
            [
                "as asked it fits the resources free now, but jobs ahead of it come first: "
                "expected to start in about 7m00s"
            ],
            id="fits-the-free-resources-but-starts-later",
        ),
        pytest.param(
            NODES,
            SOME_FREE,
            SMALL,
            NOW,
            None,
            ["it fits now as asked: it should start at the next scheduling cycle"],
            id="fits-now-as-asked-only-when-the-plan-says-now",
        ),
    ],
)
def test_advice_is_consistent_with_the_reservation_and_the_estimate(
    nodes: list[Node],
    running: list[Allocation],
    pending: Job,
    estimate: float | None,
    reservation: Reservation | None,
    expected: list[str],
) -> None:
    snapshot = Snapshot.build(nodes, running)
    profile = build_profile(BACKFILL)
    hints = start_sooner(pending, snapshot, profile, BACKFILL, NOW, estimate, reservation)
    assert hints == expected
