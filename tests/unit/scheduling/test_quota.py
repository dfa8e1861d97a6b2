"""Queue quotas: usage per key, admission within nominal quota or by cohort borrowing."""

from __future__ import annotations

import pytest

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.node import Device
from corral.scheduling.config import QueueConfig, SchedulerConfig
from corral.scheduling.quota import QuotaBook, mig_gpus
from tests.builders import allocation, job, node

# n0..n3: 8 x H100 each; a0, a1: 8 x A100 each (48 GPUs, 32 of them H100)
NODES = (
    *(node(f"n{i}").gpus(8, model="H100-SXM-80GB").build() for i in range(4)),
    *(node(f"a{i}").gpus(8, model="A100-80GB").build() for i in range(2)),
)
CONFIG = SchedulerConfig(
    queues=(
        QueueConfig("team-a", quota=(("gpus", 16.0),), cohort="research",
                    borrowing_limit=(("gpus", 8.0),)),
        QueueConfig("team-b", quota=(("gpus", 16.0),), cohort="research"),
        QueueConfig("solo", quota=(("gpus", 8.0),)),
        QueueConfig("free"),
        QueueConfig("hopper", quota=(("H100", 8.0),)),
    )
)  # fmt: skip


def holding(job_id: int, queue: str, node_name: str, gpus: int, priority: int = 0) -> Allocation:
    """``gpus`` whole GPUs of ``node_name`` (from index 0) for ``queue``."""
    return (
        allocation(job_id).task(node_name, gpus=range(gpus)).queue(queue).priority(priority).build()
    )


def book_of(*allocs: Allocation, config: SchedulerConfig = CONFIG) -> QuotaBook:
    return QuotaBook.build(config, allocs, NODES)


def admit(book: QuotaBook, builder) -> str | None:  # noqa: ANN001
    built = builder.build()
    return book.admit(built, book.demand(built.spec))


@pytest.mark.parametrize(
    ("running", "pending", "refusal"),
    [
        pytest.param((), job(1).gpus(8).queue("team-a"), None, id="within-nominal"),
        pytest.param(
            (holding(10, "team-a", "n0", 8),),
            job(1).gpus(8).queue("team-a"),
            None,
            id="up-to-nominal-exactly",
        ),
        pytest.param(
            (holding(10, "team-a", "n0", 8), holding(11, "team-a", "n1", 8)),
            job(1).gpus(8).queue("team-a"),
            None,
            id="borrows-within-cohort-and-limit",
        ),
        pytest.param(
            (holding(10, "team-a", "n0", 8), holding(11, "team-a", "n1", 8)),
            job(1).gpus(8).nodes(2).queue("team-a"),
            "queue team-a: quota 16 GPUs, 16 in use, needs 16; borrowing limit 8 GPUs",
            id="borrowing-refused-past-limit",
        ),
        pytest.param(
            (
                holding(10, "team-a", "n0", 8),
                holding(11, "team-a", "n1", 6),
                holding(20, "team-b", "n2", 8),
                holding(21, "team-b", "n3", 8),
                holding(22, "team-b", "a0", 2),  # b borrows a's 2 unused GPUs
            ),
            job(1).gpus(4).queue("team-a"),
            "queue team-a: quota 16 GPUs, 14 in use, needs 4; cohort research has 0 GPUs to lend",
            id="cohort-has-nothing-to-lend",
        ),
        pytest.param(
            (
                holding(10, "team-a", "n0", 8),
                holding(11, "team-a", "n1", 8),
                holding(12, "team-a", "a0", 4),
                holding(20, "team-b", "n2", 8),
            ),
            job(1).gpus(8).queue("team-b"),
            None,
            id="lender-within-its-nominal-though-it-lent",
        ),
        pytest.param(
            (
                holding(10, "team-a", "n0", 8),
                holding(11, "team-a", "n1", 8),
                holding(12, "team-a", "a0", 4),
                holding(20, "team-b", "n2", 8),
            ),
            job(1).gpus(5).queue("team-a"),
            "queue team-a: quota 16 GPUs, 20 in use, needs 5; borrowing limit 8 GPUs",
            id="limit-counts-what-it-already-borrows",
        ),
        pytest.param(
            (holding(30, "solo", "n0", 8),),
            job(1).gpus(1).queue("solo"),
            "queue solo: quota 8 GPUs, 8 in use, needs 1; no cohort to borrow from",
            id="no-cohort-no-borrowing",
        ),
        pytest.param(
            tuple(holding(40 + i, "free", f"n{i}", 8) for i in range(4)),
            job(1).gpus(8).nodes(2).queue("free"),
            None,
            id="queue-without-quota-is-unlimited",
        ),
        pytest.param(
            (holding(50, "hopper", "n0", 8),),
            job(1).gpus("H100:1").queue("hopper"),
            "queue hopper: quota 8 H100 GPUs, 8 in use, needs 1; no cohort to borrow from",
            id="per-model-key-refuses-that-model",
        ),
        pytest.param(
            (holding(50, "hopper", "n0", 8),),
            job(1).gpus("A100:8").queue("hopper"),
            None,
            id="per-model-key-leaves-other-models-alone",
        ),
        pytest.param(
            (holding(50, "hopper", "a0", 8),),
            job(1).gpus("H100:8").queue("hopper"),
            None,
            id="other-models-do-not-use-the-model-key",
        ),
        pytest.param(
            (holding(30, "solo", "n0", 7),),
            job(1).gpus(0.5).queue("solo"),
            None,
            id="shares-count-as-fractions",
        ),
    ],
)
def test_admission(running: tuple[Allocation, ...], pending, refusal: str | None) -> None:  # noqa: ANN001
    assert admit(book_of(*running), pending) == refusal


def test_configs_without_quotas_admit_everything() -> None:
    busy = tuple(holding(i, "default", f"n{i}", 8) for i in range(4))
    book = book_of(*busy, config=SchedulerConfig())
    assert admit(book, job(1).gpus(8).nodes(6)) is None
    assert book.rows()[0].nominal is None and book.rows()[0].usage == 32


@pytest.mark.parametrize(
    ("builder", "nodes", "expected"),
    [
        pytest.param(job(1).gpus(8).nodes(2), NODES, {"gpus": 16}, id="nodes-times-gpus"),
        pytest.param(job(1).gpus("H100:4"), NODES, {"gpus": 4, "H100": 4}, id="model-prefix"),
        pytest.param(
            job(1).gpus(2).model("H100*"), NODES, {"gpus": 2, "H100": 2}, id="gpu-model-glob"
        ),
        pytest.param(job(1).gpus(4), NODES, {"gpus": 4}, id="any-model-pins-no-key"),
        pytest.param(
            job(1).gpus(4), NODES[:4], {"gpus": 4, "H100": 4}, id="one-model-cluster-pins-it"
        ),
        pytest.param(job(1).gpus(0.25).nodes(2), NODES[4:], {"gpus": 0.5}, id="fractions"),
        pytest.param(job(1).gpus("3g.40gb"), NODES[4:], {"gpus": 3 / 7}, id="mig-by-profile"),
        pytest.param(job(1).cpus(4), NODES, {}, id="no-gpus"),
    ],
)
def test_demand_by_key(builder, nodes, expected: dict[str, float]) -> None:  # noqa: ANN001
    book = QuotaBook.build(CONFIG, (), nodes)
    assert book.demand(builder.spec()) == pytest.approx(expected)


def test_usage_and_borrowing_by_key() -> None:
    share = allocation(60).task("n0", gpus=[0], share=0.25).queue("hopper").build()
    book = book_of(
        holding(10, "team-a", "n0", 8),
        holding(11, "team-a", "a0", 8),
        holding(12, "team-a", "n1", 4),
        share,
    )
    assert book.usage("team-a") == {"gpus": 20, "H100": 12}
    assert book.borrowing("team-a") == {"gpus": 4}
    assert book.borrowing("team-b") == {}
    assert book.lendable("research", "gpus") == 12  # b's 16 unused, 4 already lent to a
    assert book.usage("hopper")["H100"] == 0.25


def test_mig_instances_count_by_profile() -> None:
    mig = node("m0").devices(Device(0, "A100-80GB", 80, mig=("3g.40gb", "1g.10gb"))).build()
    task = TaskAllocation(rank=0, node="m0", node_rank=0, local_rank=0, gpus=(0,), mig_slots=(0,))
    alloc = Allocation(70, 0, (task,), queue="solo")
    book = QuotaBook.build(CONFIG, (alloc,), (mig,))
    assert book.usage("solo")["gpus"] == pytest.approx(3 / 7)
    assert alloc.gpus == pytest.approx(1 / 7)  # without the node: one slice
    assert mig_gpus("7g.80gb") == 1 and mig_gpus("1g.10gb") == pytest.approx(1 / 7)


def test_reclaimable_lists_borrowers_of_the_cohort_only() -> None:
    book = book_of(
        holding(10, "team-a", "n0", 8, priority=5),
        holding(11, "team-a", "n1", 8, priority=0),
        holding(12, "team-a", "n2", 4, priority=9),
        holding(20, "team-b", "n3", 2),
        holding(30, "solo", "a0", 8),
    )
    assert book.reclaimable("team-b") == [11, 10, 12]  # lowest priority first
    assert book.reclaimable("team-a") == []  # b does not borrow
    assert book.reclaimable("solo") == []  # no cohort


@pytest.mark.parametrize(
    ("queue", "demand", "within"),
    [
        pytest.param("team-b", {"gpus": 14}, True, id="fits-nominal"),
        pytest.param("team-b", {"gpus": 15}, False, id="past-nominal"),
        pytest.param("free", {"gpus": 1}, False, id="unlimited-queue-has-nothing-to-reclaim"),
        pytest.param("solo", {"gpus": 1}, False, id="no-cohort-nothing-lent"),
    ],
)
def test_within_nominal(queue: str, demand: dict[str, float], within: bool) -> None:
    book = book_of(holding(20, "team-b", "n3", 2))
    assert book.within_nominal(queue, demand) is within


def test_assume_and_release_undo() -> None:
    busy = holding(10, "team-a", "n0", 8)
    book = book_of(busy)
    undo = book.assume("team-a", {"gpus": 12})
    assert book.usage("team-a")["gpus"] == 20 and book.borrowing("team-a") == {"gpus": 4}
    undo()
    back = book.release(busy)
    assert book.usage("team-a")["gpus"] == 0
    back()
    assert book.usage("team-a")["gpus"] == 8
    placed = holding(11, "team-a", "n1", 8)
    undo = book.assume_allocation(placed)
    assert book.usage("team-a")["gpus"] == 16
    undo()
    assert book.usage("team-a")["gpus"] == 8


def test_tpu_chips_are_not_gpus() -> None:
    if "kind" not in Device.__dataclass_fields__:
        pytest.skip("devices have no kind (GPU or TPU) in this tree")
    tpu = Device(0, "v5p", 95, kind="tpu")  # type: ignore[call-arg]
    host = node("t0").devices(tpu).build()
    alloc = allocation(80).task("t0", gpus=[0]).queue("solo").build()
    assert QuotaBook.build(CONFIG, (alloc,), (host,)).usage("solo")["gpus"] == 0
