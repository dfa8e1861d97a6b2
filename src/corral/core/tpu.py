"""TPU slices: the request (``v5p:2x2x4``), pod hosts, and the names a task sees.

A TPU pod is a torus of chips (``shape``, chips along x, y and z; 2 or 3 axes) cut into
hosts, each owning a block of ``chips_per_host`` chips. Hosts are nodes whose devices are
their chips (``Device.kind == "tpu"``) and whose labels say where they sit: the pod, its
generation, the pod's shape, the host block and the host's coordinates in the grid of
hosts (``HOST_LABELS``). A job asking ``tpu: v5p:2x2x4`` gets a box of hosts of that
shape in chips (any axis order), one task per host.

Pure helpers, no I/O: parsing and formatting shapes, reading a host from its labels,
the host block of a request on a pod, and ``accelerator_type``.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

TPU = "tpu"
GPU = "gpu"

POD_LABEL = "tpu.corral/pod"
GENERATION_LABEL = "tpu.corral/generation"
POD_SHAPE_LABEL = "tpu.corral/pod-shape"  # chips, e.g. 4x4x8
HOST_BLOCK_LABEL = "tpu.corral/chips-per-host"  # chips, e.g. 2x2x1
HOST_LABEL = "tpu.corral/host"  # coordinates in the grid of hosts, e.g. 0,1,3
HOST_LABELS = (POD_LABEL, GENERATION_LABEL, POD_SHAPE_LABEL, HOST_BLOCK_LABEL, HOST_LABEL)

# Generations whose accelerator type counts TensorCores (two per chip), as Cloud TPU
# names them (v4-32 is 16 chips); the others count chips (v6e-16 is 16 chips).
TENSORCORE_COUNTED = frozenset({"v2", "v3", "v4", "v5p"})
TYPE_PREFIX = {"v5e": "v5litepod"}  # Cloud TPU's name for v5e slices

_SHAPE = re.compile(r"^\d+(x\d+){0,2}$")

Shape = tuple[int, ...]


def parse_shape(text: str) -> Shape:
    """``"2x2x4"`` -> (2, 2, 4): 1 to 3 positive integers joined by ``x``."""
    text = text.strip().lower()
    if not _SHAPE.match(text):
        raise ValueError(f"expected a shape such as 2x2x4 (1 to 3 axes), got {text!r}")
    shape = tuple(int(part) for part in text.split("x"))
    if any(n < 1 for n in shape):
        raise ValueError(f"shape {text!r}: every axis must be at least 1")
    return shape


def format_shape(shape: Shape) -> str:
    return "x".join(str(n) for n in shape)


@dataclass(frozen=True)
class TpuRequest:
    """A TPU slice: ``generation`` (``v5p``) and ``shape`` in chips (any axis order)."""

    generation: str
    shape: Shape

    def __str__(self) -> str:
        return f"{self.generation}:{format_shape(self.shape)}"

    @property
    def chips(self) -> int:
        return math.prod(self.shape)


def parse_tpu(text: str) -> TpuRequest:
    """``"v5p:2x2x4"`` -> ``TpuRequest("v5p", (2, 2, 4))``; ``ValueError`` says the form."""
    generation, sep, shape = text.partition(":")
    generation = generation.strip()
    if not sep or not generation or any(c.isspace() for c in generation):
        raise ValueError(f"expected GENERATION:SHAPE such as v5p:2x2x4, got {text!r}")
    return TpuRequest(generation, parse_shape(shape))


def accelerator_type(generation: str, chips: int) -> str:
    """``TPU_ACCELERATOR_TYPE`` as Cloud TPU writes it: ``v5p-32`` for 16 v5p chips (v2, v3,
    v4 and v5p count TensorCores, two per chip), ``v6e-16`` for 16 v6e chips, and
    ``v5litepod-16`` for 16 v5e chips; other generations count chips."""
    count = chips * 2 if generation.lower() in TENSORCORE_COUNTED else chips
    return f"{TYPE_PREFIX.get(generation.lower(), generation)}-{count}"


def fit_dims(shape: Shape, ndim: int) -> Shape | None:
    """``shape`` with as many axes as a pod of ``ndim`` axes: padded with 1s (a 2x2 slice
    on a 3-axis pod is 2x2x1), or with axes of 1 dropped; None if it has more real axes."""
    if len(shape) <= ndim:
        return shape + (1,) * (ndim - len(shape))
    real = [n for n in shape if n != 1]
    if len(real) > ndim:
        return None
    return tuple(real) + (1,) * (ndim - len(real))


def aligned_orientations(shape: Shape, pod_shape: Shape, block: Shape) -> list[Shape]:
    """The axis orders of ``shape`` (chips) that fit in the pod and are whole hosts along
    every axis, as extents in hosts, sorted; empty if none."""
    dims = fit_dims(shape, len(pod_shape))
    if dims is None:
        return []
    found = set()
    for perm in itertools.permutations(dims):
        if all(n <= p and n % b == 0 for n, p, b in zip(perm, pod_shape, block, strict=True)):
            found.add(tuple(n // b for n, b in zip(perm, block, strict=True)))
    return sorted(found)


def misfit(shape: Shape, pod_shape: Shape, block: Shape) -> str:
    """Why no axis order of ``shape`` is a box of whole hosts in the pod (for reasons)."""
    dims = fit_dims(shape, len(pod_shape))
    if dims is None:
        return f"a {format_shape(shape)} slice has more axes than the pod"
    inside = [
        perm
        for perm in itertools.permutations(dims)
        if all(n <= p for n, p in zip(perm, pod_shape, strict=True))
    ]
    if not inside:
        return f"a {format_shape(shape)} slice is larger than the pod in every axis order"
    if aligned_orientations(shape, pod_shape, block):
        return "it fits"
    return f"a {format_shape(shape)} slice is not a whole number of hosts in any axis order"


@dataclass(frozen=True)
class TpuHost:
    """Where a host sits: its pod and generation, the pod's shape and host block (chips),
    and its coordinates in the grid of hosts."""

    pod: str
    generation: str
    pod_shape: Shape
    block: Shape
    coords: tuple[int, ...]

    @property
    def grid(self) -> Shape:
        """The pod's extent in hosts along each axis."""
        return tuple(p // b for p, b in zip(self.pod_shape, self.block, strict=True))

    @property
    def hosts(self) -> int:
        return math.prod(self.grid)

    def host_count(self, request: TpuRequest) -> int | None:
        """Hosts a slice of ``request`` takes on this host's pod, None if none fits."""
        if request.generation.lower() != self.generation.lower():
            return None
        if not aligned_orientations(request.shape, self.pod_shape, self.block):
            return None
        return request.chips // math.prod(self.block)

    def labels(self) -> dict[str, str]:
        return {
            POD_LABEL: self.pod,
            GENERATION_LABEL: self.generation,
            POD_SHAPE_LABEL: format_shape(self.pod_shape),
            HOST_BLOCK_LABEL: format_shape(self.block),
            HOST_LABEL: ",".join(str(c) for c in self.coords),
        }


def host_of(labels: dict[str, str]) -> TpuHost | None:
    """The host described by ``labels`` (see ``HOST_LABELS``), None if they do not
    describe one consistently."""
    if not all(key in labels for key in HOST_LABELS):
        return None
    try:
        pod_shape = parse_shape(labels[POD_SHAPE_LABEL])
        block = parse_shape(labels[HOST_BLOCK_LABEL])
        coords = tuple(int(c) for c in labels[HOST_LABEL].split(","))
    except ValueError:
        return None
    host = TpuHost(labels[POD_LABEL], labels[GENERATION_LABEL], pod_shape, block, coords)
    if len(block) != len(pod_shape) or len(coords) != len(pod_shape):
        return None
    if any(p % b for p, b in zip(pod_shape, block, strict=True)):
        return None
    if not all(0 <= c < g for c, g in zip(coords, host.grid, strict=True)):
        return None
    return host


def worker_order(coords: tuple[int, ...]) -> tuple[int, ...]:
    """Sort key of hosts in a slice, x varying fastest (then y, then z): worker 0 is the
    host at the box's origin."""
    return tuple(reversed(coords))


def slice_topology(hosts: list[TpuHost]) -> Shape:
    """The chips of the box that ``hosts`` (one slice) cover, along the pod's axes."""
    first = hosts[0]
    return tuple(
        (max(h.coords[i] for h in hosts) - min(h.coords[i] for h in hosts) + 1) * first.block[i]
        for i in range(len(first.block))
    )


def slice_env(request: TpuRequest, hosts: list[tuple[str, TpuHost | None]]) -> dict[str, str]:
    """The TPU variables a slice's tasks share (SPEC section 4), from its hosts in worker
    order (name, where it sits): ``TPU_WORKER_HOSTNAMES`` (the hosts' node names),
    ``TPU_TOPOLOGY`` (the box as placed, along the pod's axes: ``4x2x2`` for a 2x2x4
    request turned), ``TPU_ACCELERATOR_TYPE``. Each task adds ``TPU_WORKER_ID`` (its rank)."""
    placed = [host for _, host in hosts if host is not None]
    shape = slice_topology(placed) if len(placed) == len(hosts) and placed else request.shape
    return {
        "TPU_WORKER_HOSTNAMES": ",".join(name for name, _ in hosts),
        "TPU_TOPOLOGY": format_shape(shape),
        "TPU_ACCELERATOR_TYPE": accelerator_type(request.generation, request.chips),
    }
