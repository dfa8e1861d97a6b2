"""The cluster file (SPEC section 3): declared nodes for ``corral up`` and ``corral sim``."""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import Field, model_validator

from corral.core.node import Device, Node
from corral.errors import ValidationError
from corral.schemas.common import Size, Strict, validate

_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
DEFAULT_GPU_MEMORY = 80 * 1000**3
CPUS_PER_GPU = 12
MEMORY_PER_GPU = 128 * 1000**3
MIN_MEMORY = 32 * 1000**3  # bytes (an int: Node.memory is an int)


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


class TpuPodDecl(Strict):
    name: str
    generation: str
    shape: list[int] = Field(min_length=1, max_length=3)
    chips_per_host: list[int] = Field(min_length=1, max_length=3)


class ClusterFile(Strict):
    nodes: list[NodeDecl] = Field(default_factory=list)
    tpu_pods: list[TpuPodDecl] = Field(default_factory=list)

    def to_nodes(self) -> list[Node]:
        """Every declared node, names expanded; ``ValidationError`` on duplicates."""
        nodes: list[Node] = []
        for i, decl in enumerate(self.nodes):
            try:
                names = expand_names(decl.name)
            except ValueError as exc:
                raise ValidationError(f"cluster: nodes.{i}.name: {exc}") from None
            nodes += [_node(name, decl) for name in names]
        seen: set[str] = set()
        for node in nodes:
            if node.name in seen:
                raise ValidationError(f"cluster: node {node.name!r} is declared twice")
            seen.add(node.name)
        if self.tpu_pods:
            raise ValidationError("cluster: tpu_pods are not supported yet by this Corral release")
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
