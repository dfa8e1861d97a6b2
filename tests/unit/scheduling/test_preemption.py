"""Preemption as a post-filter: minimal, topology-aware victim sets, reclaim of lent quota."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node
from corral.scheduling.config import QueueConfig, SchedulerConfig
from corral.scheduling.framework import CycleContext, NodeRequest, PostFilterResult, Reservation
from corral.scheduling.placement import place_gang
from corral.scheduling.plugins.preemption import Preemption
from corral.scheduling.plugins.victims import (
    Victim,
    cheapest_nodes,
    cost_of,
    node_victims,
    victim_order,
    work_lost,
)
from corral.scheduling.quota import QuotaBook
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import allocation, gpu_nodes, job, node

NOW = 100_000.0
HOUR = 3600.0
NODES = tuple(gpu_nodes(4))  # n0..n3, 8 GPUs each


def running(
    job_id: int,
    node_name: str,
    gpus: Sequence[int],
    priority: int = 0,
    preemptible: bool = True,
    started: float = NOW - HOUR,
    checkpoint: float | None = None,
    queue: str = "default",
) -> Allocation:
    alloc = allocation(job_id).task(node_name, gpus=gpus).priority(priority, preemptible)
    alloc = alloc.started(started).queue(queue)
    return (alloc.checkpoint(checkpoint) if checkpoint is not None else alloc).build()


def gang(job_id: int, node_names: Sequence[str], priority: int = 0) -> Allocation:
    """A multi-node job holding every GPU of ``node_names``, started an hour ago."""
    alloc = allocation(job_id).priority(priority).started(NOW - HOUR)
    for name in node_names:
        alloc = alloc.whole_node(name)
    return alloc.build()


def context(
    allocs: Sequence[Allocation],
    nodes: Sequence[Node] = NODES,
    preempting: frozenset[int] = frozenset(),
    reservations: Sequence[Reservation] = (),
    config: SchedulerConfig | None = None,
) -> CycleContext:
    config = config or SchedulerConfig()
    snapshot = Snapshot.build(nodes, allocs)
    profile = build_profile(config)
    quota = QuotaBook.build(config, allocs, nodes) if config.queues[0].quota else None

    def place(j: Job, request: NodeRequest):  # noqa: ANN202
        return place_gang(j, request, snapshot, profile, now=NOW)

    return CycleContext(snapshot, tuple(allocs), tuple(reservations), NOW, place, preempting, quota)


def preempt(builder, ctx: CycleContext, config: SchedulerConfig | None = None) -> PostFilterResult:  # noqa: ANN001
    built = builder.build()
    placement = (config or SchedulerConfig()).queue_placement(built.queue)
    request = NodeRequest.of(built.spec, placement)
    if ctx.quota is None:  # (with quotas, the quota may be what stops it)
        assert not isinstance(ctx.place(built, request), Allocation), "the job must not fit now"
    return Preemption().post_filter(built, request, ctx)


def free_state(ctx: CycleContext) -> list[tuple]:
    return [(v.name, tuple(v.used_milli), v.free_cpus) for v in ctx.snapshot.views()]


FULL = range(8)


@pytest.mark.parametrize(
    ("allocs", "pending", "victims"),
    [
        pytest.param(
            [running(10, "n0", FULL, priority=0), running(11, "n1", FULL, priority=10)]
            + [running(12 + i, f"n{i + 2}", FULL, priority=100) for i in range(2)],
            job(1).gpus(8).priority(5),
            (10,),
            id="lower-priority-only",
        ),
        pytest.param(
            [running(10 + i, f"n{i}", FULL, priority=5) for i in range(4)],
            job(1).gpus(8).priority(5),
            (),
            id="never-equal-priority",
        ),
        pytest.param(
            [running(10 + i, f"n{i}", FULL, priority=50) for i in range(4)],
            job(1).gpus(8).priority(5),
            (),
            id="never-higher-priority",
        ),
        pytest.param(
            [running(10, "n0", FULL, priority=0, preemptible=False)]
            + [running(11 + i, f"n{i + 1}", FULL, priority=100) for i in range(3)],
            job(1).gpus(8).priority(5),
            (),
            id="never-non-preemptible",
        ),
        pytest.param(
            [
                running(10, "n0", [0], started=NOW - 60),  # cheap, but not enough alone
                running(11, "n0", [1, 2, 3, 4], started=NOW - 600),
                running(12, "n0", [5], priority=100),
            ]
            + [running(13 + i, f"n{i + 1}", FULL, priority=100) for i in range(3)],
            job(1).gpus(6).priority(5),
            (11,),
            id="minimal-unneeded-victim-put-back",
        ),
        pytest.param(
            [running(20 + i, "n0", [i], started=NOW - 60 * (i + 1)) for i in range(8)]
            + [running(30 + i, f"n{i + 1}", FULL, priority=100) for i in range(3)],
            job(1).gpus(3).priority(5),
            (20, 21, 22),
            id="fewest-victims-least-loss-first",
        ),
        pytest.param(
            [running(20 + i, "n0", [i]) for i in range(8)]
            + [running(30, "n1", FULL)]
            + [running(31 + i, f"n{i + 2}", FULL, priority=100) for i in range(2)],
            job(1).gpus(8).priority(5),
            (30,),
            id="one-whole-node-not-eight-jobs",
        ),
        pytest.param(
            [
                running(10, "n0", FULL, started=NOW - 10 * HOUR, checkpoint=NOW - 300),
                running(11, "n1", FULL, started=NOW - HOUR),
            ]
            + [running(12 + i, f"n{i + 2}", FULL, priority=100) for i in range(2)],
            job(1).gpus(8).priority(5),
            (10,),
            id="least-work-lost-since-checkpoint",
        ),
        pytest.param(
            [
                running(10, "n0", FULL, priority=3, started=NOW - 60),
                running(11, "n1", FULL, priority=1, started=NOW - 10 * HOUR),
            ]
            + [running(12 + i, f"n{i + 2}", FULL, priority=100) for i in range(2)],
            job(1).gpus(8).priority(5),
            (11,),
            id="lower-priority-before-less-work-lost",
        ),
        pytest.param(
            [running(10, "n0", FULL, started=NOW)]  # placed in this cycle
            + [running(11 + i, f"n{i + 1}", FULL, priority=100) for i in range(3)],
            job(1).gpus(8).priority(5),
            (),
            id="not-what-this-cycle-placed",
        ),
    ],
)
def test_victims(allocs: list[Allocation], pending, victims: tuple[int, ...]) -> None:  # noqa: ANN001
    ctx = context(allocs)
    before = free_state(ctx)
    result = preempt(pending, ctx)
    assert result.preempt == victims
    assert free_state(ctx) == before  # every trial undone
    if victims:
        assert result.reservation is not None and result.reservation.start == NOW
        assert result.allow_others
    else:
        assert result == PostFilterResult()


def test_result_nominates_the_job_to_the_freed_node() -> None:
    allocs = [running(10, "n2", FULL)] + [
        running(11 + i, name, FULL, priority=100) for i, name in enumerate(("n0", "n1", "n3"))
    ]
    result = preempt(job(1).gpus(8).priority(5), context(allocs))
    assert result.reservation == Reservation(1, frozenset({"n2"}), NOW)
    assert result.reason == "preempting job 10 (lower priority) to start on n2"


def test_gang_frees_whole_nodes_held_by_one_job_rather_than_many() -> None:
    allocs = [gang(10, ["n0", "n1"])] + [
        running(20 + 8 * n + i, f"n{n}", [i]) for n in (2, 3) for i in range(8)
    ]
    result = preempt(job(1).gpus(8).nodes(2).priority(5), context(allocs))
    assert result.preempt == (10,)
    assert result.reservation is not None and result.reservation.nodes == {"n0", "n1"}


LEAVES = tuple(
    node(f"n{i}").gpus(8).network("zone", "spine", "leaf-1" if i < 2 else "leaf-2").build()
    for i in range(4)
)
TOPOLOGY_LOAD = [
    running(10, "n0", FULL, started=NOW - 100),
    running(11, "n1", FULL, started=NOW - 1),
    running(12, "n2", FULL, started=NOW - 1),
    running(13, "n3", FULL, started=NOW - 200),
]


@pytest.mark.parametrize(
    ("pending", "victims"),
    [
        pytest.param(job(1).gpus(8).nodes(2).priority(5), (11, 12), id="no-topology-cheapest"),
        pytest.param(
            job(1).gpus(8).nodes(2).priority(5).topology("leaf", "required"),
            (10, 11),
            id="required-leaf-stays-in-one-leaf",
        ),
        pytest.param(
            job(1).gpus(8).nodes(2).priority(5).topology("leaf", "preferred"),
            (10, 11),
            id="preferred-leaf-at-equal-priority",
        ),
    ],
)
def test_gang_victims_follow_the_topology(pending, victims: tuple[int, ...]) -> None:  # noqa: ANN001
    result = preempt(pending, context(TOPOLOGY_LOAD, nodes=LEAVES))
    assert result.preempt == victims


def test_victims_being_preempted_are_not_chosen_again() -> None:
    allocs = [
        running(10, "n0", FULL, started=NOW - 60),
        running(11, "n1", FULL, started=NOW - HOUR),
    ] + [running(12 + i, f"n{i + 2}", FULL, priority=100) for i in range(2)]
    first = preempt(job(1).gpus(8).priority(5), context(allocs))
    assert first.preempt == (10,)
    second = preempt(job(2).gpus(8).priority(5), context(allocs, preempting=frozenset({10})))
    assert second.preempt == (11,)
    third = preempt(job(3).gpus(8).priority(5), context(allocs, preempting=frozenset({10, 11})))
    assert third.preempt == ()


def test_nodes_reserved_for_another_job_are_left_alone() -> None:
    allocs = [
        running(10, "n0", FULL, started=NOW - 60),
        running(11, "n1", FULL, started=NOW - HOUR),
    ] + [running(12 + i, f"n{i + 2}", FULL, priority=100) for i in range(2)]
    held = (Reservation(99, frozenset({"n0"}), NOW),)
    result = preempt(job(1).gpus(8).priority(5), context(allocs, reservations=held))
    assert result.preempt == (11,)


COHORT = SchedulerConfig(
    queues=(
        QueueConfig("a", quota=(("gpus", 16.0),), cohort="lab"),
        QueueConfig("b", quota=(("gpus", 8.0),), cohort="lab"),
        QueueConfig("solo", quota=(("gpus", 8.0),)),
    )
)


@pytest.mark.parametrize(
    ("allocs", "pending", "victims"),
    [
        pytest.param(
            [
                running(20, "n0", FULL, queue="b", priority=100, started=NOW - HOUR),
                running(21, "n1", FULL, queue="b", priority=100, started=NOW - 60),
                running(22, "n2", FULL, queue="b", priority=100, preemptible=False),
                running(10, "n3", FULL, queue="a", priority=100),
            ],
            job(1).gpus(8).queue("a").priority(0),
            (21,),
            id="reclaim-whatever-the-priority-least-loss",
        ),
        pytest.param(
            [
                running(20, "n0", FULL, queue="b", priority=100, preemptible=False),
                running(21, "n1", FULL, queue="b", priority=100, started=NOW - 2 * HOUR),
                running(10, "n2", FULL, queue="a", priority=100),
                running(30, "n3", FULL, queue="solo", priority=100),
            ],
            job(1).gpus(8).queue("a").priority(0),
            (20,),
            id="reclaim-takes-non-preemptible-borrowers",
        ),
        pytest.param(
            [
                running(20, "n0", FULL, queue="b", priority=100),
                running(21, "n1", FULL, queue="b", priority=100),
                running(10, "n2", FULL, queue="a", priority=100),
                running(11, "n3", FULL, queue="a", priority=100),
            ],
            job(1).gpus(8).queue("a").priority(0),
            (),
            id="no-reclaim-past-the-job-queue-nominal",
        ),
        pytest.param(
            [
                running(20, "n0", FULL, queue="b", priority=100),
                running(21, "n1", [0, 1, 2, 3], queue="b", priority=100, started=NOW - 60),
                running(22, "n1", [4, 5, 6, 7], queue="b", priority=100, started=NOW - 30),
                running(30, "n2", FULL, queue="solo", priority=100),
                running(31, "n3", FULL, queue="solo", priority=100),
            ],
            job(1).gpus(8).nodes(2).queue("a").priority(0),
            (),
            id="reclaim-stops-at-the-lender-nominal",
        ),
        pytest.param(
            [
                running(30, "n0", FULL, queue="solo", priority=0),
                running(20, "n1", FULL, queue="b", priority=100),
                running(21, "n2", FULL, queue="b", priority=0),
            ],
            job(1).gpus(8).queue("solo").priority(5),
            (30,),
            id="own-lower-priority-job-frees-the-quota",
        ),
    ],
)
def test_quota_and_reclaim(allocs: list[Allocation], pending, victims: tuple[int, ...]) -> None:  # noqa: ANN001
    ctx = context(allocs, config=COHORT)
    assert ctx.quota is not None
    before = (free_state(ctx), ctx.quota.usage("a"), ctx.quota.usage("b"))
    result = preempt(pending, ctx, COHORT)
    assert result.preempt == victims
    assert (free_state(ctx), ctx.quota.usage("a"), ctx.quota.usage("b")) == before


def test_reclaim_reason_names_the_lender() -> None:
    allocs = [
        running(20, "n0", FULL, queue="b", priority=100),
        running(21, "n1", FULL, queue="b", priority=100),
        running(10, "n2", FULL, queue="a", priority=100),
        running(30, "n3", [0, 1, 2, 3], queue="solo", priority=100),
    ]
    result = preempt(job(1).gpus(8).queue("a").priority(0), context(allocs, config=COHORT))
    assert result.preempt == (20,)
    assert result.reason == "preempting job 20 (reclaiming quota lent to queue b) to start on n0"


@pytest.mark.parametrize(
    ("alloc", "lost"),
    [
        pytest.param(running(1, "n0", FULL, started=NOW - HOUR), 8 * HOUR, id="since-start"),
        pytest.param(
            running(1, "n0", [0, 1], started=NOW - HOUR, checkpoint=NOW - 60),
            2 * 60,
            id="since-checkpoint",
        ),
        pytest.param(allocation(1).task("n0", gpus=[0]).build(), 0.0, id="unknown-start"),
        pytest.param(
            allocation(1).task("n0", gpus=[0, 1], share=0.5).started(NOW - 100).build(),
            100.0,
            id="shares-count-as-fractions",
        ),
    ],
)
def test_work_lost(alloc: Allocation, lost: float) -> None:
    assert work_lost(alloc, NOW) == pytest.approx(lost)


def test_cost_orders_priority_then_loss_then_count() -> None:
    low = Victim(running(1, "n0", [0], priority=0), loss=1000)
    high = Victim(running(2, "n0", [0], priority=5), loss=1)
    assert cost_of([low, low]) < cost_of([high])
    assert cost_of([Victim(low.alloc, 10)]) < cost_of([Victim(low.alloc, 20)])


def victims_on(name: str, allocs: Sequence[Allocation]) -> list[Victim]:
    found = [Victim(a, work_lost(a, NOW)) for a in allocs if name in a.nodes]
    return sorted(found, key=victim_order)


@pytest.mark.parametrize(
    ("allocs", "gpus", "expected"),
    [
        pytest.param([running(1, "n0", [0, 1])], 4, (), id="fits-without-victims"),
        pytest.param(
            [running(1, "n0", [0, 1, 2, 3], started=NOW - 60), running(2, "n0", [4, 5])],
            6,
            (1,),
            id="cheapest-that-frees-enough",
        ),
        pytest.param(
            [running(1, "n0", [0], started=NOW - 1), running(2, "n0", range(1, 8))],
            8,
            (1, 2),
            id="all-when-all-are-needed",
        ),
        pytest.param([running(1, "n0", FULL)], 9, None, id="never-enough"),
    ],
)
def test_node_victims(allocs: list[Allocation], gpus: int, expected) -> None:  # noqa: ANN001
    snapshot = Snapshot.build(NODES[:1], allocs)
    request = NodeRequest.of(job(9).gpus(gpus).spec(), SchedulerConfig().policy.placement)
    before = tuple(snapshot.nodes["n0"].used_milli)
    found = node_victims(snapshot.nodes["n0"], request, victims_on("n0", allocs))
    assert (None if found is None else tuple(v.job_id for v in found)) == expected
    assert tuple(snapshot.nodes["n0"].used_milli) == before


def test_cheapest_nodes_count_a_shared_victim_once() -> None:
    shared = Victim(gang(1, ["n0", "n1"]), loss=10)
    small = [Victim(running(2 + i, f"n{i + 2}", [0]), loss=6) for i in range(2)]
    plans = {"n0": (shared,), "n1": (shared,), "n2": (small[0],), "n3": (small[1],)}
    nodes, victims = cheapest_nodes(list(plans), plans, 2, {}, []) or ((), ())
    assert set(nodes) == {"n2", "n3"}  # greedy alone: 6 + 6 lost, more than the shared 10
    seeded = cheapest_nodes(list(plans), plans, 2, {1: shared}, ["n0", "n1"])
    assert seeded == (("n0", "n1"), (shared,))
