"""The job manifest (SPEC section 2): YAML file, CLI flags and REST body alike.

``JobManifest`` validates (unknown keys and bad values are errors naming the field) and
converts to the core ``JobSpec`` with :meth:`JobManifest.to_spec`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_serializer, model_validator

from corral.core.array import MAX_SPEC_LENGTH, parse_array
from corral.core.container import MAX_PATH, check_mounts, check_path, parse_image
from corral.core.dependency import parse_dependency
from corral.core.job import (
    DEFAULT_KIND,
    JobSpec,
    PlacementPolicy,
    RoleSpec,
    Topology,
    TopologyLevel,
    TopologyMode,
)
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
MAX_ROLES = 16
RoleName = Annotated[
    str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")
]
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


Command = (
    Annotated[list[Arg], Field(max_length=MAX_ARGS)] | Annotated[str, Field(max_length=131_072)]
)


class RoleModel(Strict):
    """One role of a heterogeneous job (SPEC section 8)."""

    name: RoleName
    nodes: int = Field(default=1, ge=1, le=100_000)
    tasks_per_node: int = Field(default=1, ge=1, le=1024)
    resources: Resources = Field(default_factory=Resources)
    topology: TopologyModel | None = None
    node_selector: dict[Name, Name] = Field(default_factory=dict, max_length=MAX_SELECTOR)
    command: Command | None = None
    env: dict[EnvKey, Arg] = Field(default_factory=dict, max_length=MAX_ENV)

    @model_validator(mode="after")
    def _consistent(self) -> RoleModel:
        if self.resources.tpu:
            raise ValueError(
                f"roles: {self.name}: a TPU slice is a job of its own (kind tpu), not a role"
            )
        _check_shape(self.resources, self.tasks_per_node, self.nodes, self.topology)
        if self.command is not None:
            _check_command(self.command)
        _check_env(self.env)
        return self

    def to_role(self) -> RoleSpec:
        return RoleSpec(
            name=self.name,
            nodes=self.nodes,
            tasks_per_node=self.tasks_per_node,
            **_per_node(self.resources),
            topology=Topology(self.topology.level, self.topology.mode) if self.topology else None,
            node_selector=tuple(sorted(self.node_selector.items())),
            command=_frozen(self.command) if self.command is not None else None,
            env=tuple(sorted(self.env.items())),
        )


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
    command: Command
    env: dict[EnvKey, Arg] = Field(default_factory=dict, max_length=MAX_ENV)
    workdir: Annotated[str, Field(max_length=4096)] | None = None
    # the container the tasks run in (SPEC section 7, ``core.container``): a root
    # filesystem directory, oci:PATH, oci-archive:PATH, docker-archive:PATH or a reference
    # to pull; host paths mounted in it (HOST[:CONTAINER][:ro]); the size of its /dev/shm
    image: Annotated[str, Field(max_length=MAX_PATH + 16)] | None = None
    mounts: list[Annotated[str, Field(max_length=2 * MAX_PATH + 8)]] | None = None
    shm_size: Size | None = None
    kind: Short | None = None  # None: pytorch, or tpu for a TPU slice
    roles: list[RoleModel] | None = Field(default=None, min_length=1, max_length=MAX_ROLES)
    # the kinds' blocks (``mpi: {...}``), by kind name: written as top-level keys
    kind_options: dict[Short, dict[Short, Any]] = Field(default_factory=dict)
    # Slurm's ``--dependency`` (``afterok:12,afterany:14``; ``core.dependency``); in a
    # simulator jobs file the jobs are named by their ``name``
    dependency: str | None = Field(default=None, max_length=4096)
    hold: bool | None = None  # submitted held: not scheduled until released
    # a job array (Slurm's ``--array``: ``0-99``, ``1,3,5-9:2``, ``0-15%4``; ``core.array``):
    # one job per index, each its own job
    array: str | None = Field(default=None, max_length=MAX_SPEC_LENGTH)

    @model_validator(mode="before")
    @classmethod
    def _kind_blocks(cls, data: Any) -> Any:
        """A top-level key naming a job kind is that kind's block (``ray: {...}``)."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        extra = [key for key in data if key not in fields]
        if not extra:
            return data
        from corral.kinds.registry import kinds

        names = kinds()
        blocks = {key: data[key] for key in extra if key in names}
        if not blocks:
            return data
        rest = {key: value for key, value in data.items() if key not in blocks}
        given = rest.get("kind_options")
        rest["kind_options"] = {**(given if isinstance(given, dict) else {}), **blocks}
        return rest

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        out = handler(self)
        if isinstance(out, dict):
            out.pop("kind_options", None)
            out.update(self.kind_options)
        return out

    @field_validator("dependency")
    @classmethod
    def _dependency(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return str(parse_dependency(value))
        except ValueError as exc:
            raise ValueError(f"not a valid dependency: {exc}") from None

    @field_validator("array", mode="before")
    @classmethod
    def _array(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str):  # an int would read as one index: say what is meant
            raise ValueError("expected a string such as '0-99', '1,3,5-9:2' or '0-15%4'")
        try:
            return str(parse_array(value))
        except ValueError as exc:
            raise ValueError(f"not a valid array: {exc}") from None

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | str) -> list[str] | str:
        return _check_command(value)

    @field_validator("time_limit", "runtime_estimate", "grace_period")
    @classmethod
    def _bounded(cls, value: float | None) -> float | None:
        if value is not None and value > MAX_DURATION:
            raise ValueError(f"at most 366 days ({MAX_DURATION:.0f}s), got {value:.6g}s")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None:
            parse_image(value)
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str] | None) -> list[str] | None:
        check_mounts(value or [])
        return value

    @field_validator("shm_size")
    @classmethod
    def _shm_size(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("must be positive")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> JobManifest:
        gpus = parse_gpus(self.resources.gpus)
        if self.roles is not None:
            self._roles_consistent()
        if self.resources.tpu:
            self._tpu_consistent(gpus.kind)
        _check_shape(self.resources, self.tasks_per_node, self.nodes or 1, self.topology)
        if self.time_limit is not None and self.time_limit <= 0:
            raise ValueError("time_limit: must be positive")
        if isinstance(self.priority, str) and not self.priority.strip():
            raise ValueError("priority: must not be empty")
        self._container_consistent()
        self._kind_consistent()
        return self

    def _roles_consistent(self) -> None:
        roles = self.roles or []
        names = [role.name for role in roles]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"roles: role names must differ ({', '.join(twice)} repeated)")
        given = [
            key
            for key, default in (("nodes", None), ("tasks_per_node", 1))
            if getattr(self, key) != default
        ]
        if self.resources != Resources():
            given.append("resources")
        if given:
            raise ValueError(
                f"roles: each role has its own nodes, tasks_per_node and resources; "
                f"remove the top-level {', '.join(given)}"
            )

    def _container_consistent(self) -> None:
        """Mounts and a /dev/shm size need an image; inside one, ``workdir`` is a path of
        the container (absolute)."""
        if self.image is None:
            given = [name for name in ("mounts", "shm_size") if getattr(self, name)]
            if given:
                raise ValueError(
                    f"{' and '.join(given)}: only with an image (without one, tasks run in "
                    "the node's own filesystem, where host paths are already visible and "
                    "/dev/shm is the node's)"
                )
        elif self.workdir is not None:
            check_path(self.workdir, "workdir (a path inside the container)")

    def _kind_consistent(self) -> None:
        """The kind exists, only its own block is given, and it accepts the job."""
        from corral.kinds.registry import get_kind

        kind = get_kind(self.kind_name)
        for name, block in self.kind_options.items():
            if name != kind.name:
                raise ValueError(
                    f"{name}: options of kind {name}, but this job is of kind {kind.name} "
                    f"(set kind: {name}, or remove the {name} block)"
                )
            self.kind_options[name] = kind.options(block)
        self.to_spec()  # the kind checks and expands it (ValueError: why not)

    @property
    def kind_name(self) -> str:
        if self.kind is not None:
            return self.kind
        return "tpu" if self.resources.tpu else DEFAULT_KIND

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
        """The core spec, expanded by its kind (``ValueError`` if the kind refuses it)."""
        from corral.kinds.base import encode_options
        from corral.kinds.registry import get_kind

        res = self.resources
        tpu = parse_tpu(res.tpu) if res.tpu else None
        nodes = self.nodes if self.nodes is not None else (0 if tpu else 1)
        kind = get_kind(self.kind_name)
        spec = JobSpec(
            command=_frozen(self.command),
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            nodes=nodes,
            tasks_per_node=self.tasks_per_node,
            **_per_node(res),
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
            image=self.image,
            mounts=check_mounts(self.mounts or []),
            shm_size=self.shm_size,
            kind=kind.name,
            roles=tuple(role.to_role() for role in self.roles or ()),
            kind_options=encode_options(self.kind_options.get(kind.name, {})),
        )
        return kind.expand(spec)


def _per_node(res: Resources) -> dict[str, Any]:
    """The core fields of what one node provides (``JobSpec``, ``RoleSpec``)."""
    return {
        "gpus": parse_gpus(res.gpus),
        "gpu_model": res.gpu_model,
        "gpu_memory": res.gpu_memory,
        "cpus": res.cpus,
        "memory": res.memory,
    }


def _frozen(command: list[str] | str) -> tuple[str, ...] | str:
    return tuple(command) if isinstance(command, list) else command


def _check_command(value: list[str] | str) -> list[str] | str:
    if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
        raise ValueError("command: must not be empty")
    return value


def _check_env(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid variable name {key!r}")
    return value


def _check_shape(
    resources: Resources, tasks_per_node: int, nodes: int, topology: TopologyModel | None
) -> None:
    """One node's resources split among its tasks; a node-level topology on one node."""
    gpus = parse_gpus(resources.gpus)
    if gpus.kind is GpuKind.WHOLE and gpus.count % tasks_per_node:
        raise ValueError(
            f"resources.gpus: {gpus.count} GPUs per node cannot be split evenly among "
            f"tasks_per_node={tasks_per_node} tasks"
        )
    if gpus.kind is GpuKind.FRACTION and tasks_per_node != 1:
        raise ValueError("resources.gpus: a fractional GPU needs tasks_per_node: 1")
    if gpus.kind is GpuKind.MIG and tasks_per_node != 1:
        raise ValueError(
            f"resources.gpus: a MIG instance ({gpus.mig_profile}) cannot be shared among "
            f"tasks; it needs tasks_per_node: 1 (got {tasks_per_node})"
        )
    if resources.gpu_memory and gpus.kind is not GpuKind.FRACTION:
        raise ValueError("resources.gpu_memory: only applies to a fractional GPU (0 < gpus < 1)")
    if (
        topology is not None
        and topology.level in (TopologyLevel.NODE, TopologyLevel.NVLINK)
        and nodes != 1
    ):
        raise ValueError(
            f"topology.level: {topology.level.value} keeps a job on one node; "
            f"it asks for nodes: {nodes} (use leaf, spine or zone for gangs)"
        )


def parse_manifest(data: Any) -> JobManifest:
    """Validate a manifest mapping; ``ValidationError`` naming each bad field."""
    return validate(JobManifest, data, "manifest")


def load_manifest(text: str, source: str = "manifest") -> JobManifest:
    """Parse manifest YAML (or JSON) text."""
    import yaml  # here: a manifest given as a mapping needs none (issue 21)

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: not valid YAML: {exc}") from None
    return validate(JobManifest, data, source)
