"""The extension points of the scheduling cycle, and the values they exchange.

A cycle runs these phases, each a list of plugins from the active :class:`Profile`:

1. ``QueueSort``: the order in which pending jobs are tried.
2. ``Filter``: can this node host one node's share of the job, now (free) and ever
   (capacity)? Answers ``None`` (yes), :class:`Unschedulable` or :class:`Unresolvable`.
3. ``Score``: how good a feasible node is for the job (0..100, weighted).
4. ``NodeSetSelect``: choose the job's nodes from the scored candidates (gang, topology).
5. ``DeviceSelect``: choose device indices on each chosen node for each task.
6. ``PostFilter``: for a job that could not be placed (preemption, backfill): may return
   nominations and reservations; runs only when the profile has such plugins.

Plugins are small classes with a ``name``; they do no I/O and read no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from corral.core.allocation import Allocation
from corral.core.job import Job, JobSpec, PlacementPolicy, Topology
from corral.core.resources import GpuKind, GpuRequest

if TYPE_CHECKING:
    from corral.scheduling.memo import SchedulingMemo
    from corral.scheduling.quota import QuotaBook
    from corral.scheduling.snapshot import NodeView, Snapshot


@dataclass(frozen=True)
class Unschedulable:
    """Does not fit now; freeing resources (completion, preemption) may help."""

    reason: str


@dataclass(frozen=True)
class Unresolvable:
    """Will not fit this node whatever else happens (labels, model, capacity)."""

    reason: str


Status = Unschedulable | Unresolvable | None


@dataclass(frozen=True)
class NodeRequest:
    """What one node of a job must provide, derived once per job per cycle."""

    tasks: int
    gpus: GpuRequest
    gpus_per_task: int
    model: str | None
    gpu_memory: int | None
    cpus: float
    memory: int
    selector: tuple[tuple[str, str], ...]
    placement: PlacementPolicy
    topology: Topology | None = None

    @classmethod
    def of(cls, spec: JobSpec, default_placement: PlacementPolicy) -> NodeRequest:
        return cls(
            tasks=spec.tasks_per_node,
            gpus=spec.gpus,
            gpus_per_task=spec.gpus_per_task,
            model=spec.model_pattern,
            gpu_memory=spec.gpu_memory,
            cpus=spec.cpus or 0.0,
            memory=spec.memory or 0,
            selector=spec.node_selector,
            placement=spec.placement or default_placement,
            topology=spec.topology,
        )

    @property
    def whole_gpus(self) -> int:
        return self.gpus.count if self.gpus.kind is GpuKind.WHOLE else 0

    def describe(self) -> str:
        """``'8 GPUs (H100*), 32 CPUs'`` for reasons."""
        parts = []
        if self.gpus.tpu:
            parts.append(f"a whole {self.gpus.tpu} TPU host")
        if self.gpus.kind is not GpuKind.NONE:
            noun = "GPU" if self.gpus.kind is GpuKind.WHOLE and self.gpus.count == 1 else "GPUs"
            if self.gpus.kind is GpuKind.WHOLE:
                text = f"{self.gpus.count} {noun}"
            elif self.gpus.kind is GpuKind.FRACTION:
                text = f"{self.gpus.milli / 1000:g} GPU"
            else:
                text = f"a {self.gpus.mig_profile} MIG instance"
            if self.model:
                text += f" ({self.model})"
            parts.append(text)
        if self.cpus:
            parts.append(f"{self.cpus:g} CPUs")
        if self.memory:
            parts.append(f"{self.memory / 1e9:g}GB memory")
        return ", ".join(parts) or "no resources"


@dataclass(frozen=True)
class ScoredNode:
    node: NodeView
    score: float


@runtime_checkable
class QueueSort(Protocol):
    name: str

    def sort_key(self, job: Job) -> tuple: ...


@runtime_checkable
class Filter(Protocol):
    name: str

    def filter(self, request: NodeRequest, node: NodeView) -> Status: ...


@runtime_checkable
class Score(Protocol):
    name: str
    weight: float

    def score(self, request: NodeRequest, node: NodeView) -> float: ...


@runtime_checkable
class NodeSetSelect(Protocol):
    name: str

    def select(
        self, job: Job, request: NodeRequest, candidates: Sequence[ScoredNode]
    ) -> list[NodeView] | Unschedulable | Unresolvable: ...


@runtime_checkable
class DeviceSelect(Protocol):
    name: str

    def select(self, request: NodeRequest, node: NodeView) -> list[tuple[int, ...]] | None: ...


@dataclass(frozen=True)
class Reservation:
    """Resources held for a job expected to start at ``start`` (math.inf: unknown): jobs
    placed after it this cycle that are expected to run past then must leave them. With
    ``hold`` (the job's planned placement: its devices, MIG instances, CPUs and memory on
    ``nodes``) they must leave only those, and may use the rest of the nodes; without it,
    the whole nodes."""

    job_id: int
    nodes: frozenset[str]
    start: float
    hold: Allocation | None = None


@dataclass(frozen=True)
class PostFilterResult:
    """What a post-filter proposes for a job that could not be placed."""

    preempt: tuple[int, ...] = ()  # job ids to preempt for this job
    reason: str | None = None  # put before the pending reason when set
    allow_others: bool = False  # lower jobs may still be placed this cycle (backfill)
    reservation: Reservation | None = None
    # (victim job id, why it is preempted) for the victims' events; a victim without one
    # gets "preempted for job N"
    explanations: tuple[tuple[int, str], ...] = ()
    # the result to give, computed only once a decision needs it (``CycleContext.defer``):
    # a reservation no job behind has competed for yet. It may reserve, not preempt.
    deferred: Callable[[], PostFilterResult] | None = None


class Reservations(Sequence[Reservation]):
    """The reservations made so far this cycle (``CycleContext.reservations``). When a
    post-filter deferred one (``PostFilterResult.deferred``), reading the sequence first
    has the cycle resolve it; ``deferred`` says whether one waits, without resolving it."""

    def __init__(
        self,
        made: Sequence[Reservation] = (),
        resolve: Callable[[], Sequence[Reservation]] | None = None,
    ) -> None:
        self._made = tuple(made)
        self._resolve = resolve  # None: nothing deferred

    @property
    def deferred(self) -> bool:
        return self._resolve is not None

    def _all(self) -> tuple[Reservation, ...]:
        if self._resolve is not None:
            resolve, self._resolve = self._resolve, None
            self._made = tuple(resolve())
        return self._made

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index):  # type: ignore[no-untyped-def,override]
        return self._all()[index]

    def __iter__(self) -> Iterator[Reservation]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"Reservations({list(self._made)}{', deferred' if self.deferred else ''})"


@dataclass(frozen=True)
class CycleContext:
    """What a post-filter may look at: the cycle's working state, and a trial placement
    (``place``) that assumes nothing. Changes to ``snapshot`` must be undone. ``memo`` is
    where a plugin keeps what it shares across the cycle (``memo.cycle``) or across cycles
    (None: nothing is kept between calls). ``defer``: the cycle takes deferred results
    (``PostFilterResult.deferred``; its caller wants decisions, not every reason)."""

    snapshot: Snapshot
    allocations: tuple[Allocation, ...]  # running work, with expected ends
    reservations: Reservations  # (a tuple is taken too)
    now: float
    place: Callable[[Job, NodeRequest], Allocation | Unschedulable | Unresolvable]
    preempting: frozenset[int] = frozenset()  # jobs already being preempted (not victims again)
    quota: QuotaBook | None = None  # this cycle's quota accounting (None: no quotas)
    memo: SchedulingMemo | None = None  # the cycle's memo (scheduling.memo)
    defer: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.reservations, Reservations):
            object.__setattr__(self, "reservations", Reservations(self.reservations))


@runtime_checkable
class PostFilter(Protocol):
    name: str

    def post_filter(
        self, job: Job, request: NodeRequest, ctx: CycleContext
    ) -> PostFilterResult: ...


@dataclass(frozen=True)
class Profile:
    """The plugins one cycle runs, phase by phase."""

    queue_sort: QueueSort
    filters: tuple[Filter, ...]
    scores: tuple[Score, ...]
    node_set: NodeSetSelect
    devices: DeviceSelect
    post_filters: tuple[PostFilter, ...] = field(default=())
