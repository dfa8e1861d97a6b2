"""TPU slices in the scheduler: boxes of free hosts, the least fragmenting choice, worker
order, every chip of each host, and GPU work kept off TPU hosts (and the reverse)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job
from corral.core.node import Node, NodeState
from corral.core.tpu import parse_tpu
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.feasibility import never_fits, node_shapes, with_tpu_hosts
from corral.scheduling.framework import NodeRequest, ScoredNode, Unschedulable
from corral.scheduling.plugins.tpu import (
    PodGrid,
    TpuDeviceSelect,
    TpuSliceNodeSet,
    choose_box,
    free_boxes,
    pods_of,
)
from corral.scheduling.snapshot import NodeView
from corral.schemas.cluster import TpuPodDecl
from tests.builders import job, node

CONFIG = SchedulerConfig()


def pod(
    name: str = "pod-a",
    shape: tuple[int, ...] = (4, 4, 8),
    block: tuple[int, ...] = (2, 2, 1),
    generation: str = "v5p",
) -> list[Node]:
    decl = TpuPodDecl(
        name=name, generation=generation, shape=list(shape), chips_per_host=list(block)
    )
    return decl.hosts()


def at(nodes: list[Node], *coords: tuple[int, ...]) -> list[Node]:
    by_coords = {n.tpu_host.coords: n for n in nodes if n.tpu_host}
    return [by_coords[c] for c in coords]


def holding(job_id: int, hosts: list[Node]) -> Allocation:
    """An allocation holding every chip of ``hosts`` (a running slice)."""
    tasks = tuple(
        TaskAllocation(rank, h.name, rank, 0, gpus=tuple(range(h.tpu_chips)))
        for rank, h in enumerate(hosts)
    )
    return Allocation(job_id, 0, tasks)


def tpu_job(job_id: int, tpu: str, cluster: list[Node], **changes: object) -> Job:
    """A TPU job sized for ``nodes`` as submission sizes it (unless ``changes`` say)."""
    spec = replace(job(job_id).spec(), tpu=parse_tpu(tpu), nodes=0)
    spec = replace(spec, **changes)
    spec = with_tpu_hosts(spec, node_shapes(cluster))
    return replace(job(job_id).build(), spec=spec)


def coords_of(alloc: Allocation, nodes: list[Node]) -> list[tuple[int, ...]]:
    by_name = {n.name: n for n in nodes}
    return [by_name[t.node].tpu_host.coords for t in alloc.tasks]  # type: ignore[union-attr]


def grid_of(nodes: list[Node], busy: set[tuple[int, ...]] = frozenset()) -> PodGrid:  # type: ignore[assignment]
    candidates = [
        ScoredNode(NodeView(n), 0.0) for n in nodes if n.tpu_host and n.tpu_host.coords not in busy
    ]
    (grid,) = pods_of(candidates, "v5p").values()
    return grid


# --- boxes ----------------------------------------------------------------------------------

# (pod shape, host block, request, busy host coords) -> number of free boxes
BOX_COUNTS = [
    pytest.param((4, 4, 8), (2, 2, 1), "v5p:2x2x2", set(), 2 * 2 * 7, id="one-order-slides-z"),
    pytest.param((4, 4, 8), (2, 2, 1), "v5p:2x2x4", set(), 20 + 14 + 14, id="three-orders"),
    pytest.param((4, 4, 8), (2, 2, 1), "v5p:4x4x8", set(), 1, id="whole-pod"),
    pytest.param((4, 4, 8), (2, 2, 1), "v5p:4x4x8", {(1, 1, 7)}, 0, id="whole-pod-one-busy"),
    pytest.param((4, 4, 8), (2, 2, 1), "v5p:2x2x1", {(0, 0, 0)}, 31, id="single-hosts"),
    pytest.param((4, 4, 4), (2, 2, 1), "v5p:4x4x1", set(), 4, id="flat-layers"),
    pytest.param((4, 4, 4), (2, 2, 1), "v5p:3x3x1", set(), 0, id="not-host-aligned"),
    pytest.param((4, 4, 4), (2, 2, 1), "v5p:2x2x3", set(), 8, id="three-hosts-along-z"),
    pytest.param((4, 4, 4), (2, 2, 1), "v5p:2x2x8", set(), 0, id="longer-than-the-pod"),
    pytest.param((8, 8), (2, 2), "v5p:4x2", set(), 3 * 4 + 4 * 3, id="2d-pod-two-orders"),
    pytest.param((4, 4, 2), (2, 2, 1), "v5p:4x2x2", {(0, 0, 0)}, 2, id="blocked-corner"),
]


@pytest.mark.parametrize(("shape", "block", "request_", "busy", "expected"), BOX_COUNTS)
def test_free_boxes_slide_every_aligned_order_over_free_hosts(
    shape: tuple, block: tuple, request_: str, busy: set, expected: int
) -> None:
    grid = grid_of(pod(shape=shape, block=block), busy)
    boxes = free_boxes(grid, parse_tpu(request_))
    assert len(boxes) == expected
    assert len(set(boxes)) == len(boxes)
    for box in boxes:  # inside the grid, never wrapping, every host free
        inside = zip(box.origin, box.extent, grid.grid, strict=True)
        assert all(o >= 0 and o + e <= g for o, e, g in inside)
        assert not set(box.coords()) & busy


# (pod shape, busy host coords, request) -> the chosen box's hosts in worker order
CHOICES = [
    pytest.param(
        (4, 4, 8),
        set(),
        "v5p:2x2x4",
        [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1)],
        id="empty-pod-spans-a-full-axis-in-a-corner",
    ),
    pytest.param(
        (4, 4, 4),
        {(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)},
        "v5p:4x4x1",
        [(0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)],
        id="layer-against-the-busy-layer",
    ),
    pytest.param(
        (4, 4, 4),
        {(0, 0, 1), (0, 0, 2)},  # a busy pair in the middle of a column
        "v5p:2x2x1",
        [(0, 0, 0)],
        id="single-host-fills-the-hole-below-busy-hosts",
    ),
    pytest.param(
        (4, 2, 8),
        {(0, 0, z) for z in range(8)},  # the x=0 column is taken
        "v5p:2x2x4",
        [(1, 0, 0), (1, 0, 1), (1, 0, 2), (1, 0, 3)],
        id="next-to-a-running-slice",
    ),
]


@pytest.mark.parametrize(("shape", "busy", "request_", "expected"), CHOICES)
def test_the_box_with_most_contact_wins(
    shape: tuple, busy: set, request_: str, expected: list
) -> None:
    grid = grid_of(pod(shape=shape), busy)
    box = choose_box({grid.name: grid}, parse_tpu(request_))
    assert box is not None and box.coords() == expected


def test_on_equal_contact_the_busier_pod_is_filled_first() -> None:
    a, b = pod("pod-a", (4, 4, 4)), pod("pod-b", (4, 4, 4))
    busy = [holding(90, at(b, (0, 0, 3)))]
    jobs = [tpu_job(1, "v5p:4x4x1", a)]
    placed = schedule(ClusterState(tuple(a + b), tuple(busy)), jobs, CONFIG, 0)
    # the bottom layer touches the pod's edges on five sides in either pod (contact 12);
    # pod-b already runs a slice, so it is filled first and pod-a stays whole
    (alloc,) = placed.placements
    assert {t.node[:5] for t in alloc.tasks} == {"pod-b"}
    assert {c[2] for c in coords_of(alloc, b)} == {0}


# --- the cycle ------------------------------------------------------------------------------


def test_a_slice_gets_one_task_per_host_in_worker_order_with_every_chip() -> None:
    nodes = pod(shape=(4, 4, 8))
    job1 = tpu_job(1, "v5p:4x2x2", nodes)
    assert job1.spec.nodes == 4
    decisions = schedule(ClusterState(tuple(nodes)), [job1], CONFIG, 0.0)
    (alloc,) = decisions.placements
    assert [t.rank for t in alloc.tasks] == [0, 1, 2, 3]
    assert [t.node_rank for t in alloc.tasks] == [0, 1, 2, 3]
    assert {t.local_rank for t in alloc.tasks} == {0}
    assert all(t.gpus == (0, 1, 2, 3) and t.gpu_milli == 1000 for t in alloc.tasks)
    coords = coords_of(alloc, nodes)
    assert coords == sorted(coords, key=lambda c: (c[2], c[1], c[0]))  # x fastest
    xs, ys, zs = zip(*coords, strict=True)
    extent = (max(xs) - min(xs) + 1, max(ys) - min(ys) + 1, max(zs) - min(zs) + 1)
    assert sorted(e * b for e, b in zip(extent, (2, 2, 1), strict=True)) == [2, 2, 4]  # a 4x2x2 box


def test_slices_pack_the_pod_until_it_is_full_and_the_next_one_waits() -> None:
    nodes = pod(shape=(4, 4, 4))  # 2x2x4 hosts
    jobs = [tpu_job(i, "v5p:2x2x2", nodes) for i in range(1, 10)]
    decisions = schedule(ClusterState(tuple(nodes)), jobs, CONFIG, 0.0)
    assert len(decisions.placements) == 8
    used = [t.node for a in decisions.placements for t in a.tasks]
    assert len(used) == len(set(used)) == 16
    reason = decisions.pending[9].reason
    assert "no host of a v5p pod can take it now (16 nodes: 0 of 4 TPU chips free)" in reason


def test_a_slice_waits_when_free_hosts_are_scattered() -> None:
    nodes = pod(shape=(4, 4, 4))
    busy = [holding(90, at(nodes, (0, 0, 1), (1, 1, 1), (0, 1, 2), (1, 0, 2)))]
    decisions = schedule(
        ClusterState(tuple(nodes), tuple(busy)), [tpu_job(1, "v5p:4x4x2", nodes)], CONFIG, 0.0
    )
    assert decisions.placements == ()
    pending = decisions.pending[1]
    assert not pending.unresolvable
    assert "no free box of 4x4x2 chips in any axis order (pod-a: 12 of 16 hosts free)" in (
        pending.reason
    )
    assert "4 of 4 TPU chips" not in pending.reason and "0 of 4 TPU chips free" in pending.reason


def test_draining_hosts_are_not_part_of_any_box() -> None:
    nodes = pod(shape=(4, 4, 2))  # 2x2x2 hosts
    nodes[0] = replace(nodes[0], state=NodeState.DRAINING)
    decisions = schedule(ClusterState(tuple(nodes)), [tpu_job(1, "v5p:4x4x1", nodes)], CONFIG, 0.0)
    (alloc,) = decisions.placements
    assert {c[2] for c in coords_of(alloc, nodes)} == {1}  # the layer without the drained host


def test_gpu_work_never_lands_on_tpu_hosts_and_tpu_slices_never_on_gpu_nodes() -> None:
    nodes = [node("gpu-0").gpus(8).build(), *pod(shape=(2, 2, 2))]
    gpu = job(1).gpus(4).build()
    cpu = job(2).cpus(4).build()
    two_gpu_nodes = job(3).gpus(1).nodes(2).build()
    tpu = tpu_job(4, "v5p:2x2x2", nodes)
    decisions = schedule(ClusterState(tuple(nodes)), [gpu, cpu, two_gpu_nodes, tpu], CONFIG, 0.0)
    placed = {a.job_id: {t.node for t in a.tasks} for a in decisions.placements}
    assert placed[1] == {"gpu-0"} and placed[2] == {"gpu-0"}
    assert placed[4] == {"pod-a-h000", "pod-a-h001"}
    assert 3 not in placed
    assert "is a TPU host (takes TPU slices only)" in decisions.pending[3].reason
    assert decisions.pending[3].unresolvable


def test_a_slice_of_another_generation_finds_no_host() -> None:
    nodes = [node("gpu-0").gpus(8).build(), *pod(shape=(2, 2, 2))]
    spec = replace(job(1).spec(), tpu=parse_tpu("v4:2x2x2"), nodes=2)
    decisions = schedule(
        ClusterState(tuple(nodes)), [replace(job(1).build(), spec=spec)], CONFIG, 0
    )
    pending = decisions.pending[1]
    assert pending.unresolvable
    assert "has v5p TPU chips, needs v4" in pending.reason
    assert "is not a TPU host (needs v4 chips)" in pending.reason


def test_pods_with_other_host_blocks_are_used_only_for_their_host_count() -> None:
    small = pod("pod-s", shape=(4, 4, 4), block=(2, 2, 1))  # a 4x4x1 slice is 4 hosts
    big = pod("pod-b", shape=(4, 4, 4), block=(4, 4, 1))  # ... and 1 host here
    nodes = small + big
    sized = tpu_job(1, "v5p:4x4x1", nodes)
    assert sized.spec.nodes == 1  # the fewest hosts
    four = tpu_job(2, "v5p:4x4x1", nodes, nodes=4)
    decisions = schedule(ClusterState(tuple(nodes)), [sized, four], CONFIG, 0.0)
    placed = {a.job_id: [t.node for t in a.tasks] for a in decisions.placements}
    assert len(placed[1]) == 1 and placed[1][0].startswith("pod-b-")
    assert len(placed[2]) == 4 and all(n.startswith("pod-s-") for n in placed[2])


# --- the plugins on their own ---------------------------------------------------------------


class Inner:
    name = "inner"

    def __init__(self) -> None:
        self.calls = 0

    def select(self, job, request, candidates):  # noqa: ANN001, ANN201
        self.calls += 1
        return Unschedulable("inner")


def test_jobs_without_a_slice_go_to_the_inner_plugins() -> None:
    inner = Inner()
    gpu = job(1).gpus(1).build()
    request = NodeRequest.of(gpu.spec, CONFIG.policy.placement)
    assert TpuSliceNodeSet(inner).select(gpu, request, []) == Unschedulable("inner")
    assert inner.calls == 1
    view = NodeView(node("n0").gpus(2).build())
    assert TpuDeviceSelect().select(request, view) == [(0,)]


def test_device_selection_gives_a_slice_task_every_chip_or_nothing() -> None:
    host = pod(shape=(2, 2, 1))[0]
    request = NodeRequest.of(
        replace(job(1).spec(), tpu=parse_tpu("v5p:2x2x1"), nodes=1), CONFIG.policy.placement
    )
    view = NodeView(host)
    assert TpuDeviceSelect().select(request, view) == [(0, 1, 2, 3)]
    view.used_milli[2] = 1000
    assert TpuDeviceSelect().select(request, view) is None


# --- refused at submission ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tpu", "nodes", "words"),
    [
        pytest.param(
            "v5p:3x3x1", None, "not a whole number of hosts in any axis order", id="3x3x1"
        ),
        pytest.param("v5p:2x2x16", None, "larger than the pod in every axis order", id="too-big"),
        pytest.param("v5p:4x4x8", None, "larger than the pod", id="bigger-than-the-pod"),
        pytest.param("v5p:2x2x4", 3, "4 hosts (the job asks for nodes: 3)", id="nodes-conflict"),
        pytest.param("v4:2x2x2", 2, "no v4 TPU pod is declared", id="unknown-generation"),
        pytest.param("v4:2x2x2", None, "cannot size the TPU slice v4:2x2x2", id="cannot-size"),
    ],
)
def test_slices_no_pod_can_hold_are_refused_with_the_reason(
    tpu: str, nodes: int | None, words: str
) -> None:
    cluster = [node("gpu-0").gpus(8).build(), *pod(shape=(4, 4, 4))]
    shapes = node_shapes(cluster)
    spec = replace(job(1).spec(), tpu=parse_tpu(tpu), nodes=nodes or 0)
    reason = never_fits(with_tpu_hosts(spec, shapes), shapes, CONFIG)
    assert reason is not None and words in reason, reason


def test_a_slice_some_pod_holds_is_accepted_and_sized() -> None:
    cluster = [node("gpu-0").gpus(8).build(), *pod(shape=(4, 4, 4))]
    shapes = node_shapes(cluster)
    spec = with_tpu_hosts(replace(job(1).spec(), tpu=parse_tpu("v5p:2x4x4"), nodes=0), shapes)
    assert spec.nodes == 8
    assert never_fits(spec, shapes, CONFIG) is None
    assert never_fits(replace(spec, nodes=8), shapes, CONFIG) is None
    # a GPU job that needs more GPU nodes than there are is refused, TPU hosts not counted
    gpus = job(2).gpus(8).nodes(2).spec()
    assert "1 of 17 nodes could ever host it" in (never_fits(gpus, shapes, CONFIG) or "")
