"""The job manifest (SPEC section 2): YAML file, CLI flags and REST body alike.

``JobManifest`` validates (unknown keys and bad values are errors naming the field) and
converts to the core ``JobSpec`` with :meth:`JobManifest.to_spec`.
"""

from __future__ import annotations

from typing import Annotated, Any

import yaml
from pydantic import Field, field_validator, model_validator

from corral.core.job import JobSpec, PlacementPolicy, Topology, TopologyLevel, TopologyMode
from corral.core.resources import GpuKind, parse_gpus
from corral.core.tpu import parse_tpu
from corral.errors import ValidationError
from corral.schemas.common import Duration, Size, Strict, validate

# Field lengths (abuse limits): past them a manifest is refused with 422 naming the field.
Name = Annotated[str, Field(max_length=253)]
Short = Annotated[str, Field(max_length=64)]
Arg = Annotated[str, Field(max_length=65_536)]
EnvKey = Annotated[str, Field(max_length=1024)]
MAX_ARGS = 4096
MAX_ENV = 1024
MAX_SELECTOR = 64
MAX_DURATION = 366 * 86400.0  # time_limit, runtime_estimate, grace_period: at most a year


class Resources(Strict):
    gpus: int | float | Short = 0
    gpu_model: Name | None = None
    gpu_memory: Size | None = None
    cpus: float | None = Field(default=None, ge=0)
    memory: Size | None = None
    tpu: Short | None = None  # GENERATION:SHAPE, e.g. v5p:2x2x4 (chips)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: object) -> object:
        # before type coercion, so that parse_gpus sees (and refuses) a YAML boolean
        if isinstance(value, int | float | str):
            parse_gpus(value)
        return value

    @field_validator("tpu")
    @classmethod
    def _tpu(cls, value: str | None) -> str | None:
        return None if value is None else str(parse_tpu(value))


class TopologyModel(Strict):
    level: TopologyLevel = TopologyLevel.ANY
    mode: TopologyMode = TopologyMode.PREFERRED


class JobManifest(Strict):
    name: str | None = Field(default=None, max_length=253)
    queue: str = Field(default="default", min_length=1, max_length=253)
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)] | Short | None = None
    # default 1; for a TPU slice, its host count (derived at submission when left out)
    nodes: int | None = Field(default=None, ge=1, le=100_000)
    tasks_per_node: int = Field(default=1, ge=1, le=1024)
    resources: Resources = Field(default_factory=Resources)
    topology: TopologyModel | None = None
    placement: PlacementPolicy | None = None
    node_selector: dict[Name, Name] = Field(default_factory=dict, max_length=MAX_SELECTOR)
    time_limit: Duration | None = None
    runtime_estimate: Duration | None = None
    preemptible: bool | None = None
    grace_period: Duration = 30.0
    requeue: bool = True
    command: (
        Annotated[list[Arg], Field(max_length=MAX_ARGS)] | Annotated[str, Field(max_length=131_072)]
    )
    env: dict[EnvKey, Arg] = Field(default_factory=dict, max_length=MAX_ENV)
    workdir: Annotated[str, Field(max_length=4096)] | None = None

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | str) -> list[str] | str:
        if (isinstance(value, str) and not value.strip()) or (
            isinstance(value, list) and not value
        ):
            raise ValueError("must not be empty")
        return value

    @field_validator("time_limit", "runtime_estimate", "grace_period")
    @classmethod
    def _bounded(cls, value: float | None) -> float | None:
        if value is not None and value > MAX_DURATION:
            raise ValueError(f"at most 366 days ({MAX_DURATION:.0f}s), got {value:.6g}s")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"invalid variable name {key!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> JobManifest:
        gpus = parse_gpus(self.resources.gpus)
        if self.resources.tpu:
            self._tpu_consistent(gpus.kind)
        if gpus.kind is GpuKind.WHOLE and gpus.count % self.tasks_per_node:
            raise ValueError(
                f"resources.gpus: {gpus.count} GPUs per node cannot be split evenly among "
                f"tasks_per_node={self.tasks_per_node} tasks"
            )
        if gpus.kind is GpuKind.FRACTION and self.tasks_per_node != 1:
            raise ValueError("resources.gpus: a fractional GPU needs tasks_per_node: 1")
        if gpus.kind is GpuKind.MIG and self.tasks_per_node != 1:
            raise ValueError(
                f"resources.gpus: a MIG instance ({gpus.mig_profile}) cannot be shared among "
                f"tasks; it needs tasks_per_node: 1 (got {self.tasks_per_node})"
            )
        if self.resources.gpu_memory and gpus.kind is not GpuKind.FRACTION:
            raise ValueError(
                "resources.gpu_memory: only applies to a fractional GPU (0 < gpus < 1)"
            )
        if (
            self.topology is not None
            and self.topology.level in (TopologyLevel.NODE, TopologyLevel.NVLINK)
            and (self.nodes or 1) != 1
        ):
            raise ValueError(
                f"topology.level: {self.topology.level.value} keeps a job on one node; "
                f"it asks for nodes: {self.nodes} (use leaf, spine or zone for gangs)"
            )
        if self.time_limit is not None and self.time_limit <= 0:
            raise ValueError("time_limit: must be positive")
        if isinstance(self.priority, str) and not self.priority.strip():
            raise ValueError("priority: must not be empty")
        return self

    def _tpu_consistent(self, gpus: GpuKind) -> None:
        """A TPU slice: no GPUs, one task per host, placed as a box (no network topology)."""
        res = self.resources
        if gpus is not GpuKind.NONE or res.gpu_model or res.gpu_memory:
            given = "gpus" if gpus is not GpuKind.NONE else "gpu_model or gpu_memory"
            raise ValueError(f"resources.tpu: a TPU slice cannot be combined with {given}")
        if self.tasks_per_node != 1:
            raise ValueError(
                f"tasks_per_node: a TPU slice runs one task per host (got {self.tasks_per_node})"
            )
        if self.topology is not None:
            raise ValueError(
                "topology: a TPU slice is placed as a box of hosts in its pod; "
                "network topology does not apply"
            )

    def to_spec(self) -> JobSpec:
        res = self.resources
        tpu = parse_tpu(res.tpu) if res.tpu else None
        nodes = self.nodes if self.nodes is not None else (0 if tpu else 1)
        return JobSpec(
            command=tuple(self.command) if isinstance(self.command, list) else self.command,
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            nodes=nodes,
            tasks_per_node=self.tasks_per_node,
            gpus=parse_gpus(res.gpus),
            gpu_model=res.gpu_model,
            gpu_memory=res.gpu_memory,
            cpus=res.cpus,
            memory=res.memory,
            tpu=tpu,
            topology=Topology(self.topology.level, self.topology.mode) if self.topology else None,
            placement=self.placement,
            node_selector=tuple(sorted(self.node_selector.items())),
            time_limit=self.time_limit,
            runtime_estimate=self.runtime_estimate,
            preemptible=self.preemptible,
            grace_period=self.grace_period,
            requeue=self.requeue,
            env=tuple(sorted(self.env.items())),
            workdir=self.workdir,
        )


def parse_manifest(data: Any) -> JobManifest:
    """Validate a manifest mapping; ``ValidationError`` naming each bad field."""
    return validate(JobManifest, data, "manifest")


def load_manifest(text: str, source: str = "manifest") -> JobManifest:
    """Parse manifest YAML (or JSON) text."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: not valid YAML: {exc}") from None
    return validate(JobManifest, data, source)
