"""Device choice inside a node: NVLink best fit for whole GPUs, packing for fractions."""

from __future__ import annotations

import pytest

from corral.core.allocation import Allocation
from corral.core.job import PlacementPolicy
from corral.core.node import Device, Node
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.devices import NvlinkDeviceSelect, pick_in_domains
from corral.scheduling.snapshot import Snapshot
from tests.builders import GB, JobBuilder, allocation, job, node


@pytest.mark.parametrize(
    ("free", "k", "taken", "left"),
    [
        pytest.param(
            {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]},
            4,
            [0, 1, 2, 3],
            {0: [], 1: [4, 5, 6, 7]},
            id="whole-domain-ties-to-lowest",
        ),
        pytest.param(
            {0: [0, 1, 2, 3], 1: [6, 7]},
            2,
            [6, 7],
            {0: [0, 1, 2, 3], 1: []},
            id="best-fit-keeps-big-domain-whole",
        ),
        pytest.param(
            {0: [1, 2, 3], 1: [4, 5, 6, 7]},
            3,
            [1, 2, 3],
            {0: [], 1: [4, 5, 6, 7]},
            id="exact-fit",
        ),
        pytest.param(
            {0: [0, 1, 2], 1: [4, 5], 2: [8, 9, 10, 11]},
            2,
            [4, 5],
            {0: [0, 1, 2], 1: [], 2: [8, 9, 10, 11]},
            id="smallest-that-fits",
        ),
        pytest.param(
            {0: [0], 1: [4, 5, 6], 2: [8, 9]},
            4,
            [4, 5, 6, 8],
            {0: [0], 1: [], 2: [9]},
            id="spans-largest-domains-first",
        ),
        pytest.param(
            {0: [0, 1], 1: [2, 3], 2: [4, 5]},
            4,
            [0, 1, 2, 3],
            {0: [], 1: [], 2: [4, 5]},
            id="spans-two-of-three-equal-domains",
        ),
        pytest.param(
            {0: [0], 1: [4]},
            2,
            [0, 4],
            {0: [], 1: []},
            id="spans-all",
        ),
        pytest.param({0: [0], 1: [4]}, 3, None, {0: [0], 1: [4]}, id="not-enough"),
        pytest.param({}, 1, None, {}, id="no-devices"),
        pytest.param({0: [0, 1]}, 0, [], {0: [0, 1]}, id="zero-wanted"),
    ],
)
def test_pick_in_domains(
    free: dict[int, list[int]], k: int, taken: list[int] | None, left: dict[int, list[int]]
) -> None:
    assert pick_in_domains(free, k) == taken
    assert free == left


def _domains_spanned(target: Node, gpus: tuple[int, ...]) -> int:
    by_index = {d.index: d.nvlink_domain for d in target.devices}
    return len({by_index[i] for i in gpus})


NVL2 = node("n0").gpus(8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).build()
NVL4 = node("n0").gpus(8, nvlink=[[0, 1], [2, 3], [4, 5], [6, 7]]).build()
FLAT = node("n0").gpus(8).build()


def select(builder: JobBuilder, target: Node, *held: Allocation) -> list[tuple[int, ...]] | None:
    view = Snapshot.build([target], held).nodes[target.name]
    return NvlinkDeviceSelect().select(
        NodeRequest.of(builder.spec(), PlacementPolicy.BINPACK), view
    )


@pytest.mark.parametrize(
    ("builder", "target", "held", "expected"),
    [
        pytest.param(job(1).gpus(8), NVL2, (), [tuple(range(8))], id="one-task-all-gpus"),
        pytest.param(
            job(1).gpus(8).tasks(2), NVL2, (), [(0, 1, 2, 3), (4, 5, 6, 7)], id="task-per-domain"
        ),
        pytest.param(
            job(1).gpus(8).tasks(4),
            NVL2,
            (),
            [(0, 1), (2, 3), (4, 5), (6, 7)],
            id="pairs-stay-in-domains",
        ),
        pytest.param(
            job(1).gpus(8).tasks(8), NVL2, (), [(i,) for i in range(8)], id="one-gpu-per-task"
        ),
        pytest.param(
            job(1).gpus(2),
            NVL2,
            (allocation(9).task("n0", gpus=[0, 1]).build(),),
            [(2, 3)],
            id="best-fit-into-partly-used-domain",
        ),
        pytest.param(
            job(1).gpus(4),
            NVL2,
            (allocation(9).task("n0", gpus=[0, 4]).build(),),
            [(1, 2, 3, 5)],
            id="spans-when-no-domain-fits",
        ),
        pytest.param(
            job(1).gpus(4).tasks(2),
            NVL4,
            (allocation(9).task("n0", gpus=[2, 4]).build(),),
            [(0, 1), (6, 7)],
            id="whole-pairs-chosen-over-broken-ones",
        ),
        pytest.param(job(1).gpus(3), FLAT, (), [(0, 1, 2)], id="no-nvlink-lowest-indices"),
        pytest.param(
            job(1).gpus(4),
            FLAT,
            (allocation(9).task("n0", gpus=[0, 1, 2, 3, 4]).build(),),
            None,
            id="not-enough-free",
        ),
        pytest.param(job(1).tasks(3), FLAT, (), [(), (), ()], id="cpu-only-tasks"),
    ],
)
def test_whole_gpu_selection(
    builder: JobBuilder,
    target: Node,
    held: tuple[Allocation, ...],
    expected: list[tuple[int, ...]] | None,
) -> None:
    assert select(builder, target, *held) == expected


@pytest.mark.parametrize("tasks", [1, 2, 4, 8])
def test_tasks_get_disjoint_gpus_within_one_domain_when_they_fit(tasks: int) -> None:
    chosen = select(job(1).gpus(8).tasks(tasks), NVL2)
    assert chosen is not None
    flat = [i for gpus in chosen for i in gpus]
    assert sorted(flat) == list(range(8))  # disjoint and complete
    assert all(len(g) == 8 // tasks for g in chosen)
    if 8 // tasks <= 4:
        assert all(_domains_spanned(NVL2, g) == 1 for g in chosen)


def test_model_pattern_limits_whole_gpus() -> None:
    mixed = node("mx").devices(
        Device(0, "A100", 40 * GB), Device(1, "H100", 80 * GB), Device(2, "H100", 80 * GB)
    )
    assert select(job(1).gpus("H100:2"), mixed.build()) == [(1, 2)]
    assert select(job(1).gpus("A100:2"), mixed.build()) is None


def test_mig_requests_take_an_instance_with_its_slot() -> None:
    target = node("m").devices(Device(0, "A100", 40 * GB, mig=("1g.10gb",))).build()
    (pick,) = select(job(1).gpus("1g.10gb"), target) or []
    assert pick == (0,) and pick.mig_slots == (0,)  # type: ignore[attr-defined]


TWO = node("n0").gpus(2).build()


@pytest.mark.parametrize(
    ("builder", "target", "held", "expected"),
    [
        pytest.param(job(1).gpus(0.5), TWO, (), [(0,)], id="idle-device"),
        pytest.param(
            job(1).gpus(0.25),
            TWO,
            (allocation(9).task("n0", gpus=[1], share=0.5).build(),),
            [(1,)],
            id="joins-busiest-share",
        ),
        pytest.param(
            job(1).gpus(0.5),
            TWO,
            (allocation(9).task("n0", gpus=[1], share=0.5).build(),),
            [(1,)],
            id="fills-share-to-exactly-one",
        ),
        pytest.param(
            job(1).gpus(0.5),
            TWO,
            (allocation(9).task("n0", gpus=[1], share=0.75).build(),),
            [(0,)],
            id="share-full-takes-idle",
        ),
        pytest.param(
            job(1).gpus(0.25),
            TWO,
            (
                allocation(8).task("n0", gpus=[0], share=0.25).build(),
                allocation(9).task("n0", gpus=[1], share=0.5).build(),
            ),
            [(1,)],
            id="busiest-of-two-shares",
        ),
        pytest.param(
            job(1).gpus(0.25),
            TWO,
            (allocation(9).task("n0", gpus=[0]).build(),),
            [(1,)],
            id="never-beside-whole-task",
        ),
        pytest.param(
            job(1).gpus(0.25),
            TWO,
            (allocation(9).task("n0", gpus=[0, 1]).build(),),
            None,
            id="all-devices-whole",
        ),
        pytest.param(
            job(1).gpus(0.5),
            TWO,
            (
                allocation(8).task("n0", gpus=[0], share=0.75).build(),
                allocation(9).task("n0", gpus=[1], share=0.6).build(),
            ),
            None,
            id="no-share-has-room",
        ),
    ],
)
def test_fractional_selection(
    builder: JobBuilder,
    target: Node,
    held: tuple[Allocation, ...],
    expected: list[tuple[int, ...]] | None,
) -> None:
    assert select(builder, target, *held) == expected


MIXED = node("mx").devices(
    Device(0, "H100", 80 * GB), Device(1, "A100", 40 * GB), Device(2, "A100", 80 * GB)
)


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        pytest.param(job(1).gpus("A100:0.5"), [(1,)], id="model-prefix"),
        pytest.param(job(1).gpus(0.5).model("H1*"), [(0,)], id="model-glob"),
        pytest.param(job(1).gpus(0.5).gpu_memory("60GB"), [(0,)], id="memory"),
        pytest.param(job(1).gpus("A100:0.5").gpu_memory("60GB"), [(2,)], id="model-and-memory"),
        pytest.param(job(1).gpus("V100:0.5"), None, id="no-such-model"),
    ],
)
def test_fractional_selection_respects_model_and_memory(
    builder: JobBuilder, expected: list[tuple[int, ...]] | None
) -> None:
    assert select(builder, MIXED.build()) == expected
