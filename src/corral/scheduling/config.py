"""Scheduler configuration as the pure core sees it (SPEC section 6).

Parsed and validated from YAML by ``corral.schemas.config``; here only frozen values and
the lookups the cycle and the control plane need.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from corral.core.idle import IdlePolicy
from corral.core.job import PlacementPolicy
from corral.core.pools import AutoscalingConfig
from corral.errors import ValidationError


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    preemptible: bool


@dataclass(frozen=True)
class QueueConfig:
    name: str
    weight: float = 1.0
    quota: tuple[tuple[str, float], ...] = ()  # resource ("gpus" or a GPU model) -> amount
    cohort: str | None = None
    borrowing_limit: tuple[tuple[str, float], ...] = ()
    placement: PlacementPolicy | None = None
    idle: IdlePolicy | None = None  # None: the cluster's ``policy.idle``
    users: tuple[str, ...] | None = None  # who may submit here (None: everyone)
    max_pending: int | None = None  # pending jobs in this queue (None: limits.*)
    max_pending_per_user: int | None = None  # one user's pending jobs here (None: limits.*)

    def allows(self, user: str) -> bool:
        return self.users is None or user in self.users


@dataclass(frozen=True)
class PluginRef:
    """A plugin named in the configuration: registry name or dotted path, with a weight."""

    name: str
    weight: float = 1.0
    args: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class JctPolicy:
    """``policy.jct``: the knobs of the ``jct`` order (``plugins/jct.py``)."""

    preempt: bool = True  # preempt much longer checkpointed jobs of equal priority and queue
    margin: float = 4.0  # a victim's expected remaining GPU-time over the job's, at least
    min_run: float = 600.0  # seconds a victim has run since it last started, at least
    starvation: float = 8.0  # waited this many times its expected run time: goes first
    starvation_floor: float = 3600.0  # ... and at least this many seconds


@dataclass(frozen=True)
class Policy:
    placement: PlacementPolicy = PlacementPolicy.BINPACK
    backfill: bool = True
    preemption: bool = True
    fair_share_half_life: float = 7 * 86400.0
    interval: float = 10.0
    # the QueueSort: jct | fair-share | priority-fifo | shortest-first
    order: str = "jct"
    jct: JctPolicy = field(default_factory=JctPolicy)
    sharing: str = "corral"  # placement of shared GPUs: corral | packing | bestfit | fgd
    idle: IdlePolicy = field(default_factory=IdlePolicy)  # for queues without their own


DEFAULT_MAX_PENDING_PER_USER = 10_000
DEFAULT_SUBMISSIONS_PER_SECOND = 50.0
DEFAULT_SUBMISSION_BURST = 500
PER_USER_LIMITS = ("max_pending_per_user", "submissions_per_second", "submission_burst")


@dataclass(frozen=True)
class Limits:
    """Abuse limits the control plane enforces on submissions (``limits:`` in the file).

    ``None`` means unlimited. The submission rate is a per-user token bucket kept by each
    server replica (``submission_burst`` tokens, refilled at ``submissions_per_second``).
    Users are held to the per-user limits by default; admins only to those the file sets
    (``configured`` names them)."""

    max_pending_per_user: int | None = DEFAULT_MAX_PENDING_PER_USER
    max_pending_per_queue: int | None = None
    submissions_per_second: float | None = DEFAULT_SUBMISSIONS_PER_SECOND
    submission_burst: int | None = DEFAULT_SUBMISSION_BURST  # None: max(1, the rate)
    max_request_bytes: int = 1 << 20  # user API request bodies; larger: 413
    configured: frozenset[str] = frozenset()  # the keys the configuration file set

    def for_caller(self, admin: bool) -> Limits:
        """The limits a submission is held to: a user's, all; an admin's, only the
        per-user limits the configuration set (the defaults do not bind admins)."""
        if not admin:
            return self
        unset = {name: None for name in PER_USER_LIMITS if name not in self.configured}
        return replace(self, **unset) if unset else self


DEFAULT_PRIORITY_CLASSES = (
    PriorityClass("low", 0, True),
    PriorityClass("normal", 100, True),
    PriorityClass("high", 1000, False),
)
DEFAULT_PRIORITY = "normal"


@dataclass(frozen=True)
class SchedulerConfig:
    queues: tuple[QueueConfig, ...] = (QueueConfig("default"),)
    priority_classes: tuple[PriorityClass, ...] = DEFAULT_PRIORITY_CLASSES
    policy: Policy = field(default_factory=Policy)
    plugins: tuple[PluginRef, ...] = ()
    limits: Limits = field(default_factory=Limits)
    autoscaling: AutoscalingConfig = field(default_factory=AutoscalingConfig)

    def queue(self, name: str) -> QueueConfig:
        """The queue called ``name``; ``ValidationError`` listing the known ones otherwise."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        known = ", ".join(q.name for q in self.queues)
        raise ValidationError(f"queue: unknown queue {name!r} (known queues: {known})")

    def resolve_priority(
        self, priority: str | int | None, preemptible: bool | None = None
    ) -> tuple[int, bool]:
        """``(value, preemptible)`` for a manifest's ``priority`` and ``preemptible``.

        A class name takes the class's value and default; an integer is preemptible when
        below the lowest non-preemptible class. An explicit ``preemptible`` wins.
        """
        if priority is None:
            priority = DEFAULT_PRIORITY if self._class(DEFAULT_PRIORITY) else 0
        if isinstance(priority, str) and priority.strip().lstrip("+-").isdigit():
            priority = int(priority)
        if isinstance(priority, str):
            cls = self._class(priority)
            if cls is None:
                known = ", ".join(c.name for c in self.priority_classes)
                raise ValidationError(
                    f"priority: unknown priority class {priority!r} (known: {known}, or an integer)"
                )
            value, default = cls.value, cls.preemptible
        else:
            value = int(priority)
            fences = [c.value for c in self.priority_classes if not c.preemptible]
            default = not fences or value < min(fences)
        return value, default if preemptible is None else preemptible

    def priority_class_name(self, priority: str | int | None) -> str | None:
        """The class a manifest's ``priority`` names (the default class when it is unset)."""
        if priority is None:
            return DEFAULT_PRIORITY if self._class(DEFAULT_PRIORITY) else None
        if isinstance(priority, str) and self._class(priority):
            return priority
        return None

    def idle_policy(self, queue: str) -> IdlePolicy:
        """The idle-GPU policy of ``queue``: its own, else the cluster's."""
        own = next((q.idle for q in self.queues if q.name == queue), None)
        return own or self.policy.idle

    def queue_placement(self, name: str) -> PlacementPolicy:
        """The queue's default placement, else the cluster's."""
        return self._placements.get(name) or self.policy.placement

    @cached_property
    def _placements(self) -> dict[str, PlacementPolicy]:
        return {q.name: q.placement for q in self.queues if q.placement is not None}

    def _class(self, name: str) -> PriorityClass | None:
        return next((c for c in self.priority_classes if c.name == name), None)
