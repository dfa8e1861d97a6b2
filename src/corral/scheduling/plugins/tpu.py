"""TPU slices: a contiguous, host-aligned box of hosts in one pod, one task per host.

A pod's hosts form a grid (the pod's chips divided by the host block, see
``corral.core.tpu``). A job asking ``tpu: v5p:2x2x4`` needs a box of 2x2x4 chips in some
axis order (4x2x2 and 2x4x2 too) whose extents are whole hosts, every host of it free.

Placement (``TpuSliceNodeSet``):

1. the candidates (the hosts passing every filter now: ready, of the generation, all
   chips free, CPUs and memory) are grouped by pod into grids of free hosts;
2. on each pod where the slice takes ``nodes`` hosts, every host-aligned axis order of
   the shape is slid over the grid and every box whose hosts are all free is kept.
   Boxes do not wrap around the torus's edges: a box is always a contiguous block of
   hosts (a wrapped box is contiguous only through the pod's wrap-around links, which a
   partial slice may not own), so some boxes a torus would allow are not offered;
3. the box with the most **contact** wins: the number of host faces around it that touch
   the pod's edge or a host that is not free (busy, draining, lost). Boxes pressed into
   corners and against running slices leave the free hosts in one piece, so large
   slices still find room later (the contact heuristic of mesh and torus processor
   allocation). Ties: the pod with fewer free hosts (pack busy pods first, keep empty
   pods whole), then pod name, origin and orientation, so the choice is deterministic.

The chosen hosts come back in worker order: by their coordinates in the box, x varying
fastest, so task ranks (``TPU_WORKER_ID``) follow the box. ``TpuDeviceSelect`` gives
each task every chip of its host. Jobs without a TPU request go to the wrapped plugins.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.core.job import Job
from corral.core.tpu import (
    TPU,
    Shape,
    TpuHost,
    TpuRequest,
    aligned_orientations,
    format_shape,
    worker_order,
)
from corral.scheduling.framework import NodeRequest, ScoredNode, Unresolvable, Unschedulable
from corral.scheduling.snapshot import NodeView

Coords = tuple[int, ...]


@dataclass
class PodGrid:
    """One pod's grid of hosts and which of them are free (candidates), by coordinates."""

    name: str
    host: TpuHost  # any host of the pod: its generation, shape and block
    free: dict[Coords, NodeView] = field(default_factory=dict)

    @property
    def grid(self) -> Shape:
        return self.host.grid


@dataclass(frozen=True)
class Box:
    """A box of hosts: ``origin`` and ``extent`` in host coordinates of ``pod``."""

    pod: str
    origin: Coords
    extent: Shape
    contact: int = 0

    def coords(self) -> list[Coords]:
        """The box's hosts in worker order (x fastest)."""
        cells = itertools.product(
            *(range(o, o + e) for o, e in zip(self.origin, self.extent, strict=True))
        )
        return sorted(cells, key=worker_order)


def pods_of(candidates: Sequence[ScoredNode], generation: str) -> dict[str, PodGrid]:
    """The candidates that are hosts of ``generation`` pods, grouped by pod."""
    pods: dict[str, PodGrid] = {}
    for candidate in candidates:
        host = candidate.node.node.tpu_host
        if host is None or host.generation.lower() != generation.lower():
            continue
        pod = pods.setdefault(host.pod, PodGrid(host.pod, host))
        if host.pod_shape == pod.host.pod_shape and host.block == pod.host.block:
            pod.free[host.coords] = candidate.node
    return pods


class _Counts:
    """Prefix sums of free hosts over a grid: free hosts in any box in O(1)."""

    def __init__(self, grid: Shape, free: set[Coords]) -> None:
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        gx, gy, gz = self.grid
        p = [[[0] * (gz + 1) for _ in range(gy + 1)] for _ in range(gx + 1)]
        for x, y, z in itertools.product(range(gx), range(gy), range(gz)):
            cell = 1 if (x, y, z)[: len(grid)] in free else 0
            p[x + 1][y + 1][z + 1] = (
                cell
                + p[x][y + 1][z + 1]
                + p[x + 1][y][z + 1]
                + p[x + 1][y + 1][z]
                - p[x][y][z + 1]
                - p[x][y + 1][z]
                - p[x + 1][y][z]
                + p[x][y][z]
            )
        self.p = p

    def free(self, origin: Coords, extent: Shape) -> int:
        """Free hosts in the box (which must lie inside the grid)."""
        o = tuple(origin) + (0,) * (3 - len(origin))
        e = tuple(extent) + (1,) * (3 - len(extent))
        (x0, y0, z0), (x1, y1, z1) = o, (o[0] + e[0], o[1] + e[1], o[2] + e[2])
        p = self.p
        return (
            p[x1][y1][z1]
            - p[x0][y1][z1]
            - p[x1][y0][z1]
            - p[x1][y1][z0]
            + p[x0][y0][z1]
            + p[x0][y1][z0]
            + p[x1][y0][z0]
            - p[x0][y0][z0]
        )


def contact(counts: _Counts, grid: Shape, origin: Coords, extent: Shape) -> int:
    """Host faces around the box that touch the pod's edge or a host that is not free."""
    total = 0
    for axis in range(len(grid)):
        area = math.prod(e for i, e in enumerate(extent) if i != axis)
        for side in (origin[axis] - 1, origin[axis] + extent[axis]):
            if not 0 <= side < grid[axis]:
                total += area  # the pod's edge (no wrap-around)
                continue
            slab_origin = tuple(side if i == axis else o for i, o in enumerate(origin))
            slab_extent = tuple(1 if i == axis else e for i, e in enumerate(extent))
            total += area - counts.free(slab_origin, slab_extent)
    return total


def free_boxes(pod: PodGrid, request: TpuRequest) -> list[Box]:
    """Every box of ``request``'s shape (any host-aligned axis order) on ``pod`` whose
    hosts are all free, with its contact."""
    grid = pod.grid
    counts = _Counts(grid, set(pod.free))
    found = []
    for extent in aligned_orientations(request.shape, pod.host.pod_shape, pod.host.block):
        volume = math.prod(extent)
        if volume > len(pod.free):
            continue
        ranges = [range(g - e + 1) for g, e in zip(grid, extent, strict=True)]
        for origin in itertools.product(*ranges):
            if counts.free(origin, extent) == volume:
                found.append(Box(pod.name, origin, extent, contact(counts, grid, origin, extent)))
    return found


def choose_box(pods: dict[str, PodGrid], request: TpuRequest, hosts: int = 0) -> Box | None:
    """The free box with the most contact (ties: the pod with fewer free hosts, then
    pod name, origin, orientation) among the pods where the slice takes ``hosts`` hosts
    (0: any count); None if no box is free."""
    best: tuple | None = None
    for pod in pods.values():
        count = pod.host.host_count(request)
        if count is None or (hosts and count != hosts):
            continue
        for box in free_boxes(pod, request):
            key = (-box.contact, len(pod.free), pod.name, box.origin, box.extent)
            if best is None or key < best[0]:
                best = (key, box)
    return None if best is None else best[1]


def slice_nodes(pods: dict[str, PodGrid], box: Box) -> list[NodeView]:
    """The box's hosts in worker order."""
    free = pods[box.pod].free
    return [free[c] for c in box.coords()]


def _why_not(pods: dict[str, PodGrid], request: TpuRequest, hosts: int) -> str:
    if not pods:
        return f"no host of a {request.generation} pod can take it now"
    sized = {
        name: pod
        for name, pod in pods.items()
        if (count := pod.host.host_count(request)) is not None and (not hosts or count == hosts)
    }
    if not sized:
        return f"no {request.generation} pod with free hosts holds a {request} slice"
    free = ", ".join(
        f"{name}: {len(pod.free)} of {pod.host.hosts} hosts free"
        for name, pod in sorted(sized.items())
    )
    return f"no free box of {format_shape(request.shape)} chips in any axis order ({free})"


class TpuSliceNodeSet:
    """NodeSetSelect: a TPU job's hosts as one free box of its pod (module docstring);
    other jobs go to ``inner`` (the topology-aware gang selection by default)."""

    name = "tpu-slice"

    def __init__(self, inner: object | None = None) -> None:
        if inner is None:
            from corral.scheduling.plugins.topology import TopologyNodeSet

            inner = TopologyNodeSet()
        self.inner = inner

    def select(
        self, job: Job, request: NodeRequest, candidates: Sequence[ScoredNode]
    ) -> list[NodeView] | Unschedulable | Unresolvable:
        tpu = job.spec.tpu
        if tpu is None:
            return self.inner.select(job, request, candidates)  # type: ignore[attr-defined]
        pods = pods_of(candidates, tpu.generation)
        box = choose_box(pods, tpu, job.spec.nodes)
        if box is None:
            return Unschedulable(_why_not(pods, tpu, job.spec.nodes))
        return slice_nodes(pods, box)


class TpuDeviceSelect:
    """DeviceSelect: a task of a TPU slice gets every chip of its host (all free, or
    None); other requests go to ``inner`` (topology-devices by default)."""

    name = "tpu-devices"

    def __init__(self, inner: object | None = None) -> None:
        if inner is None:
            from corral.scheduling.plugins.topology import TopologyDeviceSelect

            inner = TopologyDeviceSelect()
        self.inner = inner

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None:
        if not request.gpus.tpu:
            return self.inner.select(request, node)  # type: ignore[attr-defined]
        devices = node.node.devices
        chips = tuple(d.index for d in devices if d.kind == TPU)
        if not chips or request.tasks != 1:
            return None
        if any(used for d, used in zip(devices, node.used_milli, strict=True) if d.kind == TPU):
            return None
        return [chips]
