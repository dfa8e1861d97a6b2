"""The cluster file (SPEC section 3): declared nodes for ``corral up`` and ``corral sim``."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import yaml
from pydantic import Field, model_validator

from corral.core.node import Device, Node
from corral.core.pools import Pool
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


class NodeShapeDecl(Strict):
    """What a node offers: a declared node less its name, or a pool's node template."""

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


class NodeDecl(NodeShapeDecl):
    name: str = Field(min_length=1)


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


class PoolTpuDecl(Strict):
    """A TPU pool's unit: one whole slice of ``shape`` chips in hosts of
    ``chips_per_host``."""

    generation: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._-]+$")
    shape: list[int] = Field(min_length=2, max_length=3)
    chips_per_host: list[int] = Field(min_length=2, max_length=3)
    chip_memory: Size | None = None
    cpus: float | None = Field(default=None, ge=0)
    memory: Size | None = None

    def pod(self, name: str, labels: dict[str, str]) -> TpuPodDecl:
        return TpuPodDecl(
            name=name,
            generation=self.generation,
            shape=self.shape,
            chips_per_host=self.chips_per_host,
            chip_memory=self.chip_memory,
            cpus=self.cpus,
            memory=self.memory,
            labels=labels,
        )


class PoolDecl(Strict):
    """A node pool (SPEC section 10): ``node`` (a node template) or ``tpu`` (whole
    slices); ``min``/``max`` in nodes, or in slices for a TPU pool."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._-]+$")
    node: NodeShapeDecl | None = None
    tpu: PoolTpuDecl | None = None
    labels: dict[str, str] = Field(default_factory=dict)  # a TPU pool's hosts' labels
    min: int = Field(default=0, ge=0)
    max: int = Field(ge=1, le=100_000)
    provider: str = Field(default="local", min_length=1)
    provisioning_time: Duration = 180.0
    cost_per_hour: float = Field(default=0.0, ge=0)  # per node (a TPU pool: per host)
    spot: bool = False
    interruption_rate: float = Field(default=0.0, ge=0)  # per node-hour (simulator)
    args: dict[str, str] = Field(default_factory=dict)  # for the provider

    @model_validator(mode="after")
    def _valid(self) -> PoolDecl:
        if (self.node is None) == (self.tpu is None):
            raise ValueError("give either node: (a node template) or tpu: (a slice), not both")
        if self.min > self.max:
            raise ValueError(f"min: {self.min} is above max: {self.max}")
        if self.provisioning_time < 0:
            raise ValueError("provisioning_time: must be at least 0")
        if self.interruption_rate and not self.spot:
            raise ValueError("interruption_rate: only a spot pool (spot: true) is interrupted")
        node = self.node
        if node is not None:
            if node.gpus is None and node.cpus == 0:
                raise ValueError("node: offers no GPUs and no CPUs, so no job could use it")
            if node.gpus is not None and node.gpus.count == 0 and node.cpus == 0:
                raise ValueError("node: offers no GPUs and no CPUs, so no job could use it")
            if node.memory == 0:
                raise ValueError("node.memory: 0 bytes, so no job could use it")
            if self.labels:
                raise ValueError("labels: give a node pool's labels in node.labels")
        return self

    def to_pool(self) -> Pool:
        if self.tpu is not None:
            template = tuple(self.tpu.pod(self.name, self.labels).hosts())
        else:
            assert self.node is not None
            template = (_node(self.name, self.node),)
        return Pool(
            name=self.name,
            template=template,
            min=self.min,
            max=self.max,
            provider=self.provider,
            provisioning_time=self.provisioning_time,
            cost_per_hour=self.cost_per_hour,
            spot=self.spot,
            interruption_rate=self.interruption_rate,
            provider_args=tuple(sorted(self.args.items())),
        )


class ClusterFile(Strict):
    nodes: list[NodeDecl] = Field(default_factory=list)
    tpu_pods: list[TpuPodDecl] = Field(default_factory=list)
    pools: list[PoolDecl] = Field(default_factory=list)

    def to_pools(self) -> tuple[Pool, ...]:
        """The pools; ``ValidationError`` when two share a name or a pool's node names
        could be a declared node's."""
        names = [p.name for p in self.pools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValidationError(f"cluster: pool {repeated[0]!r} is declared twice")
        fixed = {n.name for n in self.to_nodes()}
        pools = tuple(p.to_pool() for p in self.pools)
        for i, pool in enumerate(pools):
            clash = sorted(name for name in fixed if _unit_like(pool, name))
            if clash:
                raise ValidationError(
                    f"cluster: pools.{i}.name: pool {pool.name!r} names its nodes "
                    f"{pool.name}-0, {pool.name}-1, ...; node {clash[0]!r} is declared "
                    "with such a name (rename the pool or the node)"
                )
        return pools

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


def _unit_like(pool: Pool, name: str) -> bool:
    if not name.startswith(f"{pool.name}-"):
        return False
    rest = name[len(pool.name) + 1 :]
    head = rest.split("-h", 1)[0] if pool.tpu else rest
    return head.isdigit()


def _node(name: str, decl: NodeShapeDecl) -> Node:
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
    if not cluster.nodes and not cluster.tpu_pods and not cluster.pools:
        raise ValidationError(f"{source}: declares no nodes and no pools")
    return cluster
