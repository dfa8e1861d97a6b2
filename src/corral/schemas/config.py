"""The scheduler configuration file (SPEC section 6), validated into ``SchedulerConfig``."""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from corral.core.idle import IdleAction, IdlePolicy
from corral.core.job import PlacementPolicy
from corral.core.pools import AutoscalingConfig
from corral.errors import ValidationError
from corral.scheduling.config import (
    DEFAULT_MAX_PENDING_PER_USER,
    DEFAULT_PRIORITY_CLASSES,
    DEFAULT_SUBMISSION_BURST,
    DEFAULT_SUBMISSIONS_PER_SECOND,
    JctPolicy,
    Limits,
    PluginRef,
    Policy,
    PriorityClass,
    QueueConfig,
    SchedulerConfig,
)
from corral.schemas.common import Duration, Size, Strict, validate


class IdleModel(Strict):
    """``idle: {threshold: 5, after: 30m, action: flag|preempt|stop}``."""

    threshold: float = Field(default=5.0, ge=0, le=100)  # percent utilization
    after: Duration = 1800.0
    action: IdleAction = IdleAction.FLAG

    @model_validator(mode="after")
    def _positive(self) -> IdleModel:
        if self.after <= 0:
            raise ValueError("after: must be positive")
        return self

    def to_policy(self) -> IdlePolicy:
        return IdlePolicy(self.threshold, self.after, self.action)


class QueueModel(Strict):
    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    quota: dict[str, float] = Field(default_factory=dict)
    cohort: str | None = None
    borrowing_limit: dict[str, float] = Field(default_factory=dict)
    placement: PlacementPolicy | None = None
    idle: IdleModel | None = None
    users: list[str] | None = None  # allow-list of submitters; absent: everyone
    max_pending: int | None = Field(default=None, ge=0)
    max_pending_per_user: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _amounts(self) -> QueueModel:
        for field, amounts in (("quota", self.quota), ("borrowing_limit", self.borrowing_limit)):
            for key, amount in amounts.items():
                if not key.strip():
                    raise ValueError(f"{field}: empty key (use 'gpus' or a GPU model)")
                if amount < 0:
                    raise ValueError(f"{field}.{key}: must be at least 0, got {amount:g}")
        if self.borrowing_limit and self.cohort is None:
            raise ValueError("borrowing_limit: needs a cohort to borrow from")
        return self


class PriorityClassModel(Strict):
    value: int
    preemptible: bool = True


class JctModel(Strict):
    """``policy.jct``: the ``jct`` order's knobs (``scheduling.config.JctPolicy``)."""

    preempt: bool = True
    margin: float = Field(default=4.0, ge=1.0)
    min_run: Duration = 600.0
    starvation: float = Field(default=8.0, gt=0)
    starvation_floor: Duration = 3600.0

    def to_policy(self) -> JctPolicy:
        return JctPolicy(**self.model_dump())


class PolicyModel(Strict):
    placement: PlacementPolicy = PlacementPolicy.BINPACK
    backfill: bool = True
    preemption: bool = True
    fair_share_half_life: Duration = 7 * 86400.0
    interval: Duration = 10.0
    order: Literal["jct", "fair-share", "priority-fifo", "shortest-first"] = "jct"
    jct: JctModel = Field(default_factory=JctModel)
    sharing: Literal["packing", "bestfit", "fgd", "corral"] = "corral"
    idle: IdleModel = Field(default_factory=IdleModel)


class LimitsModel(Strict):
    """``limits:``; a key left out keeps its default (``scheduling.config.Limits``), and
    ``null`` means unlimited."""

    max_pending_per_user: int | None = Field(default=DEFAULT_MAX_PENDING_PER_USER, ge=0)
    max_pending_per_queue: int | None = Field(default=None, ge=0)
    submissions_per_second: float | None = Field(default=DEFAULT_SUBMISSIONS_PER_SECOND, gt=0)
    submission_burst: int | None = Field(default=DEFAULT_SUBMISSION_BURST, ge=1)
    max_request_bytes: Size = Field(default=1 << 20, ge=1024)

    def to_limits(self) -> Limits:
        values = self.model_dump()
        configured = self.model_fields_set
        if "submissions_per_second" in configured and "submission_burst" not in configured:
            values["submission_burst"] = None  # a rate set alone: a burst of that rate
        return Limits(**values, configured=frozenset(configured))


class PluginModel(Strict):
    name: str
    weight: float = 1.0
    args: dict[str, Any] = Field(default_factory=dict)


class ScalingPolicyModel(Strict):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class AutoscalingModel(Strict):
    """``autoscaling:`` (``core.pools.AutoscalingConfig``); policies by name, or
    ``{name, args}``."""

    enabled: bool = True
    scale_down_idle: Duration = 600.0
    max_cost_per_hour: float | None = Field(default=None, ge=0)
    policies: list[str | ScalingPolicyModel] = Field(
        default_factory=lambda: ["queue-demand"], min_length=1
    )
    provisioning_timeout: float = Field(default=3.0, ge=1.0)
    min_timeout: Duration = 300.0
    backoff: Duration = 60.0
    max_backoff: Duration = 1800.0
    consolidate: bool = True
    consolidate_below: float = Field(default=0.75, ge=0, le=1)
    consolidate_max_loss: Duration = 600.0

    @model_validator(mode="after")
    def _times(self) -> AutoscalingModel:
        for name in (
            "scale_down_idle",
            "min_timeout",
            "backoff",
            "max_backoff",
            "consolidate_max_loss",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be at least 0")
        names = [p if isinstance(p, str) else p.name for p in self.policies]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"policies: {repeated[0]!r} is named twice")
        return self

    def to_config(self) -> AutoscalingConfig:
        policies = tuple(
            (p, ()) if isinstance(p, str) else (p.name, tuple(sorted(p.args.items())))
            for p in self.policies
        )
        return AutoscalingConfig(
            scale_down_idle=self.scale_down_idle,
            max_cost_per_hour=self.max_cost_per_hour,
            policies=policies,
            provisioning_timeout=self.provisioning_timeout,
            min_timeout=self.min_timeout,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            enabled=self.enabled,
            consolidate=self.consolidate,
            consolidate_below=self.consolidate_below,
            consolidate_max_loss=self.consolidate_max_loss,
        )


class SchedulerConfigModel(Strict):
    queues: list[QueueModel] = Field(default_factory=list)
    priority_classes: dict[str, PriorityClassModel] | None = None
    policy: PolicyModel = Field(default_factory=PolicyModel)
    plugins: list[PluginModel] = Field(default_factory=list)
    limits: LimitsModel = Field(default_factory=LimitsModel)
    autoscaling: AutoscalingModel = Field(default_factory=AutoscalingModel)

    @model_validator(mode="after")
    def _unique(self) -> SchedulerConfigModel:
        names = [q.name for q in self.queues]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"queues: duplicate queue names {dupes}")
        if self.policy.interval <= 0:
            raise ValueError("policy.interval: must be positive")
        return self

    def to_config(self) -> SchedulerConfig:
        queues = tuple(
            QueueConfig(
                name=q.name,
                weight=q.weight,
                quota=tuple(sorted(q.quota.items())),
                cohort=q.cohort,
                borrowing_limit=tuple(sorted(q.borrowing_limit.items())),
                placement=q.placement,
                idle=q.idle.to_policy() if q.idle else None,
                users=tuple(q.users) if q.users is not None else None,
                max_pending=q.max_pending,
                max_pending_per_user=q.max_pending_per_user,
            )
            for q in self.queues
        ) or (QueueConfig("default"),)
        classes = (
            tuple(
                PriorityClass(name, c.value, c.preemptible)
                for name, c in self.priority_classes.items()
            )
            if self.priority_classes is not None
            else DEFAULT_PRIORITY_CLASSES
        )
        p = self.policy
        return SchedulerConfig(
            queues=queues,
            priority_classes=classes,
            policy=Policy(
                placement=p.placement,
                backfill=p.backfill,
                preemption=p.preemption,
                fair_share_half_life=p.fair_share_half_life,
                interval=p.interval,
                order=p.order,
                jct=p.jct.to_policy(),
                sharing=p.sharing,
                idle=p.idle.to_policy(),
            ),
            plugins=tuple(PluginRef(x.name, x.weight, tuple(x.args.items())) for x in self.plugins),
            limits=self.limits.to_limits(),
            autoscaling=self.autoscaling.to_config(),
        )


def load_config(text: str | None, source: str = "scheduler config") -> SchedulerConfig:
    """Parse the YAML text of a scheduler configuration (None or empty: the defaults)."""
    if not text or not text.strip():
        return SchedulerConfig()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: not valid YAML: {exc}") from None
    return validate(SchedulerConfigModel, data or {}, source).to_config()
