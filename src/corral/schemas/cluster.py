"""The cluster file (SPEC section 3): declared nodes for ``corral up`` and ``corral sim``."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import yaml
from pydantic import Field, model_validator

from corral.core.node import Device, Node
from corral.core.tpu import TPU, TpuHost, format_shape
from corral.errors import ValidationError
from corral.schemas.common import Duration, Size, Strict, validate

_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
DEFAULT_GPU_MEMORY = 80 * 1000**3
CPUS_PER_GPU = 12
MEMORY_PER_GPU = 128 * 1000**3
MIN_MEMORY = 32 * 1000**3  # bytes (an int: Node.memory is an int)
TPU_CHIP_MEMORY = {  # HBM per chip
    "v4": 32 * 1000**3,
    "v5e": 16 * 1000**3,
    "v5p": 95 * 1000**3,
    "v6e": 32 * 1000**3,
}


def default_cpus(gpus: int) -> float:
    """CPUs of a declared or simulated node that does not say (a typical GPU server)."""
    return float(max(8, CPUS_PER_GPU * gpus))


def default_memory(gpus: int) -> int:
    return max(MIN_MEMORY, MEMORY_PER_GPU * gpus)


def expand_names(pattern: str) -> list[str]:
    """``gpu-{00..15}`` -> gpu-00 .. gpu-15 (zero-padded as written); several ranges multiply."""
    match = _RANGE.search(pattern)
    if not match:
        return [pattern]
    lo, hi = match.group(1), match.group(2)
    if int(lo) > int(hi):
        raise ValueError(f"name range {match.group(0)} in {pattern!r} runs backwards")
    width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [
        name
        for i in range(int(lo), int(hi) + 1)
        for name in expand_names(f"{head}{str(i).zfill(width)}{tail}")
    ]


class GpusDecl(Strict):
    count: int = Field(ge=0, le=1024)
    model: str = "GPU"
    memory: Size = DEFAULT_GPU_MEMORY
    nvlink: list[list[int]] | None = None

    @model_validator(mode="after")
    def _domains(self) -> GpusDecl:
        if self.nvlink is not None:
            flat = [i for group in self.nvlink for i in group]
            if sorted(flat) != list(range(self.count)):
                raise ValueError(
                    f"nvlink: the groups must cover GPU indices 0..{self.count - 1} once each"
                )
        return self

    def domain_of(self, index: int) -> int:
        if not self.nvlink:
            return 0
        return next(d for d, group in enumerate(self.nvlink) if index in group)


class NodeDecl(Strict):
    name: str = Field(min_length=1)
    gpus: GpusDecl | None = None
    cpus: float | None = Field(default=None, ge=0)
    memory: Size | None = None
    network: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    mig: dict[int, list[str]] = Field(default_factory=dict)
    attributes: dict[str, float] = Field(default_factory=dict)  # for scoring plugins
    address: str = "127.0.0.1"
    # node hooks of `corral up --cluster`'s agents (--prolog, --epilog, --hook-timeout);
    # a relative path is taken from the cluster file's directory
    prolog: str | None = Field(default=None, min_length=1)
    epilog: str | None = Field(default=None, min_length=1)
    hook_timeout: Duration | None = Field(default=None, gt=0)


class TpuPodDecl(Strict):
    """A TPU pod: a torus of ``shape`` chips cut into hosts of ``chips_per_host`` chips.

    It expands into one node per host, ``<name>-h000`` onwards in worker order (x varying
    fastest), whose devices are its chips (kind ``tpu``, model the generation) and whose
    labels say where it sits (``corral.core.tpu.HOST_LABELS``) beside any ``labels``.
    """

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    generation: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._-]+$")
    shape: list[int] = Field(min_length=2, max_length=3)
    chips_per_host: list[int] = Field(min_length=2, max_length=3)
    chip_memory: Size | None = None  # HBM per chip; default: the generation's, if known
    cpus: float | None = Field(default=None, ge=0)  # per host
    memory: Size | None = None  # per host
    labels: dict[str, str] = Field(default_factory=dict)
    address: str = "127.0.0.1"

    @model_validator(mode="after")
    def _geometry(self) -> TpuPodDecl:
        if any(n < 1 for n in (*self.shape, *self.chips_per_host)):
            raise ValueError("shape and chips_per_host: every axis must be at least 1")
        if len(self.chips_per_host) != len(self.shape):
            raise ValueError(
                f"chips_per_host has {len(self.chips_per_host)} axes but shape has "
                f"{len(self.shape)}"
            )
        uneven = [
            axis
            for axis, n, b in zip("xyz", self.shape, self.chips_per_host, strict=False)
            if n % b
        ]
        if uneven:
            raise ValueError(
                f"shape {format_shape(tuple(self.shape))} is not a whole number of hosts of "
                f"{format_shape(tuple(self.chips_per_host))} chips along {', '.join(uneven)}"
            )
        if math.prod(self.chips_per_host) > 1024:
            raise ValueError("chips_per_host: at most 1024 chips per host")
        return self

    def hosts(self) -> list[Node]:
        block = tuple(self.chips_per_host)
        grid = [n // b for n, b in zip(self.shape, block, strict=True)]
        count = math.prod(grid)
        width = max(3, len(str(count - 1)))
        chips = math.prod(block)
        memory = self.chip_memory
        if memory is None:
            memory = TPU_CHIP_MEMORY.get(self.generation.lower(), 0)
        devices = tuple(
            Device(index=i, model=self.generation, memory=memory, kind=TPU) for i in range(chips)
        )
        nodes = []
        # worker order: x fastest, then y, then z
        for index, reversed_coords in enumerate(itertools.product(*map(range, grid[::-1]))):
            coords = tuple(reversed(reversed_coords))
            host = TpuHost(self.name, self.generation, tuple(self.shape), block, coords)
            labels = {**self.labels, **host.labels()}
            nodes.append(
                Node(
                    name=f"{self.name}-h{index:0{width}d}",
                    devices=devices,
                    cpus=self.cpus if self.cpus is not None else default_cpus(chips),
                    memory=self.memory if self.memory is not None else default_memory(chips),
                    labels=tuple(sorted(labels.items())),
                    address=self.address,
                )
            )
        return nodes


class ClusterFile(Strict):
    nodes: list[NodeDecl] = Field(default_factory=list)
    tpu_pods: list[TpuPodDecl] = Field(default_factory=list)

    def hooked(self) -> dict[str, NodeDecl]:
        """The declaration of each node (names expanded) that has a prolog or an epilog."""
        return {
            name: decl
            for decl in self.nodes
            if decl.prolog or decl.epilog
            for name in expand_names(decl.name)
        }

    def to_nodes(self) -> list[Node]:
        """Every declared node, names expanded; ``ValidationError`` on duplicates."""
        nodes: list[Node] = []
        for i, decl in enumerate(self.nodes):
            try:
                names = expand_names(decl.name)
            except ValueError as exc:
                raise ValidationError(f"cluster: nodes.{i}.name: {exc}") from None
            nodes += [_node(name, decl) for name in names]
        pods = [pod.name for pod in self.tpu_pods]
        repeated = sorted({name for name in pods if pods.count(name) > 1})
        if repeated:
            raise ValidationError(f"cluster: tpu pod {repeated[0]!r} is declared twice")
        for pod in self.tpu_pods:
            nodes += pod.hosts()
        seen: set[str] = set()
        for node in nodes:
            if node.name in seen:
                raise ValidationError(f"cluster: node {node.name!r} is declared twice")
            seen.add(node.name)
        return nodes


def _node(name: str, decl: NodeDecl) -> Node:
    gpus = decl.gpus
    count = gpus.count if gpus else 0
    devices = (
        tuple(
            Device(
                index=i,
                model=gpus.model,
                memory=gpus.memory,
                nvlink_domain=gpus.domain_of(i),
                mig=tuple(decl.mig.get(i, ())),
            )
            for i in range(count)
        )
        if gpus
        else ()
    )
    return Node(
        name=name,
        devices=devices,
        cpus=decl.cpus if decl.cpus is not None else default_cpus(count),
        memory=decl.memory if decl.memory is not None else default_memory(count),
        network=tuple(decl.network),
        labels=tuple(sorted(decl.labels.items())),
        attributes=tuple(sorted(decl.attributes.items())),
        address=decl.address,
    )


def load_cluster(text: str, source: str = "cluster") -> ClusterFile:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: not valid YAML: {exc}") from None
    cluster = validate(ClusterFile, data, source)
    if not cluster.nodes and not cluster.tpu_pods:
        raise ValidationError(f"{source}: declares no nodes")
    return cluster
