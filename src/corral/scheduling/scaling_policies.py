"""Scaling policies (SPEC section 10): what each pool should grow to, as plugins.

A policy is a small class with a ``name`` and ``demand(view) -> Sequence[Demand | Wait]``.
It reads the cluster through a :class:`ScalingView` and answers, per pool, units to
provision now (``Demand.units``, all or nothing), a floor of units to keep
(``Demand.floor``: provisioned up to, never scaled below), units not to drain
(``Demand.keep``), and why pending jobs wait (``Wait``). The autoscaler
(``scheduling.autoscaler``) runs the configured policies in order, grants each one's
demands within the pools' ``max``, the cost cap and the backoff, and shows the next policy
the result. Policies are pure: no I/O, no clock but ``view.now``.

Built-ins: ``queue-demand`` (``scheduling.scaling_demand``), ``duty-cycle`` and
``schedule`` (here). The registry is ``scheduling.scaling_registry``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

from corral.core.pools import AutoscalingConfig, Pool, PoolFailures, Unit
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import Profile
from corral.scheduling.registry import build_profile
from corral.scheduling.scaling import AutoscaleInput
from corral.scheduling.scaling_index import PoolUnits, ScalingIndex
from corral.scheduling.scaling_usage import NodeUsage


@dataclass(frozen=True)
class Demand:
    """What a policy asks of pool ``pool``: ``units`` more now (all or nothing), a
    ``floor`` of counting units (provisioned up to within the limits; none of them is
    scaled down below it), ``keep``: units not to drain (work is expected on them), and
    the ``jobs`` the units are for (shown on the ``Provision``)."""

    pool: str
    units: int = 0
    floor: int = 0
    keep: tuple[str, ...] = ()
    jobs: tuple[int, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Wait:
    """Why pending job ``job`` waits on the pools (shown instead of the cycle's reason)."""

    job: int
    reason: str


@runtime_checkable
class ScalingPolicy(Protocol):
    name: str

    def demand(self, view: ScalingView) -> Sequence[Demand | Wait]: ...


@dataclass
class PoolState:
    """One pool during a pass, kept up to date by the autoscaler: its units as the index
    sorts them (``sorted``), the ``ready`` ones and those ``provisioning`` (less those
    given up this pass), in their order, the unit names ``planned`` this pass, the ready
    ones drained this pass (``gone``: they no longer count), and its (effective)
    provisioning ``failures``."""

    pool: Pool
    sorted: PoolUnits | None = None
    ready: Sequence[Unit] = ()
    provisioning: Sequence[Unit] = ()
    late: int = 0  # units in flight given up this pass (the first of ``sorted``'s FLYING)
    planned: list[str] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)
    failures: PoolFailures = field(default_factory=PoolFailures)

    @property
    def counting(self) -> int:
        """Units provisioning or ready, less those given up or drained this pass."""
        return len(self.ready) + len(self.provisioning) - len(self.gone)

    @property
    def size(self) -> int:
        return self.counting + len(self.planned)


class ScalingView:
    """What a policy sees: the input, the configuration, and each pool's state with what
    earlier policies of this pass were granted. Read only for policies."""

    def __init__(
        self,
        inp: AutoscaleInput,
        config: SchedulerConfig,
        states: Mapping[str, PoolState],
        profile: Profile | None = None,
        index: ScalingIndex | None = None,
    ) -> None:
        self.inp, self.config = inp, config
        self._states = states
        self._profile = profile
        self._index = index

    @cached_property
    def index(self) -> ScalingIndex:
        """The cluster sorted for the pass (``inp.index``, or built from the input)."""
        found = self._index or self.inp.index
        if found is None:
            inp = self.inp
            found = ScalingIndex.of(inp.pools, inp.units, inp.nodes, inp.allocations)
        return found

    @property
    def usage(self) -> NodeUsage:
        """What the allocations hold, per node."""
        return self.index.usage

    @property
    def busy_nodes(self) -> Mapping[str, int]:
        """The nodes holding any allocation (whole devices held, by name)."""
        return self.usage.held

    @property
    def now(self) -> float:
        return self.inp.now

    @property
    def autoscaling(self) -> AutoscalingConfig:
        return self.config.autoscaling

    @property
    def profile(self) -> Profile:
        """The scheduler's profile (built from the configuration when none was given)."""
        if self._profile is None:
            self._profile = build_profile(self.config)
        return self._profile

    @cached_property
    def pools(self) -> tuple[Pool, ...]:
        """The declared pools, by name."""
        return tuple(sorted((s.pool for s in self._states.values()), key=lambda p: p.name))

    def state(self, pool: str) -> PoolState:
        """The autoscaler's state of ``pool`` (read only)."""
        return self._states[pool]

    def pool(self, name: str) -> Pool | None:
        state = self._states.get(name)
        return state.pool if state else None

    def units(self, pool: str) -> tuple[Unit, ...]:
        """Every unit of ``pool`` the keeper tracks, whatever its phase."""
        found = self._states[pool].sorted
        return tuple(found.all()) if found is not None else ()

    def ready_units(self, pool: str) -> tuple[Unit, ...]:
        return tuple(self._states[pool].ready)

    def provisioning_units(self, pool: str) -> tuple[Unit, ...]:
        """Units in flight (not given up this pass)."""
        return tuple(self._states[pool].provisioning)

    def planned(self, pool: str) -> tuple[str, ...]:
        """Unit names granted this pass so far (to be provisioned)."""
        return tuple(self._states[pool].planned)

    def size(self, pool: str) -> int:
        """Counting units plus those planned this pass."""
        return self._states[pool].size

    def unit_nodes(self, unit: Unit) -> tuple[str, ...]:
        """The node names of ``unit`` (its pool's naming when the record lists none)."""
        return self.index.unit_nodes(unit)

    def busy(self, unit: Unit) -> bool:
        """Whether any node of ``unit`` holds an allocation."""
        index = self.index
        return index.busy(index.unit_nodes(unit))

    def has_unit(self, name: str) -> bool:
        """Whether the keeper tracks a unit of this name (whatever its pool and phase)."""
        return name in self.index.units

    @cached_property
    def unit_names(self) -> frozenset[str]:
        """The name of every unit the keeper tracks (whatever its pool and phase)."""
        return frozenset(self.index.units)

    def eta(self, unit: Unit) -> float:
        """Seconds until a provisioning unit is expected ready (at least 0)."""
        pool = self._states[unit.pool].pool
        return max(0.0, unit.requested_at + pool.provisioning_time - self.now)

    def duty(self, pool: str) -> float | None:
        """Mean GPU duty cycle (0..1) of the pool's ready nodes with telemetry (None: none)."""
        values = [
            self.inp.duty[name]
            for unit in self.ready_units(pool)
            for name in self.unit_nodes(unit)
            if name in self.inp.duty
        ]
        return sum(values) / len(values) if values else None

    def cost_per_hour(self, extra: Mapping[str, int] | None = None) -> float:
        """Cost of every counting and planned unit, plus ``extra`` units per pool."""
        extra = extra or {}
        return sum(
            (s.size + extra.get(name, 0)) * s.pool.unit_cost_per_hour
            for name, s in self._states.items()
        )

    def backoff(self, pool: str) -> str | None:
        """Why ``pool`` may not be provisioned now (failures), or None."""
        state = self._states[pool]
        retry = self.autoscaling.retry_after(state.failures)
        if retry <= self.now:
            return None
        count = state.failures.count
        return (
            f"pool {pool} is backing off after {count} failed provisioning"
            f"{'s' if count != 1 else ''} (retry {eta_text(retry - self.now)})"
        )

    def room(self, pool: str, units: int, extra: Mapping[str, int] | None = None) -> str | None:
        """Why ``units`` more units of ``pool`` cannot be provisioned now (backoff, its
        ``max``, ``max_cost_per_hour``), with ``extra`` units per pool already meant to
        be added; None when they can."""
        why = self.backoff(pool)
        if why:
            return why
        state = self._states[pool]
        p = state.pool
        size = state.size + (extra or {}).get(pool, 0)
        if size + units > p.max:
            if units > p.max:
                need = count_units(p, units)
                return f"pool {pool} would need {need}, more than its max of {p.max}"
            if size >= p.max:
                return f"pool {pool} is at its max ({count_units(p, p.max)})"
            return f"pool {pool} has room for {count_units(p, p.max - size)} more, not {units}"
        cap = self.autoscaling.max_cost_per_hour
        if cap is not None and units:
            cost = self.cost_per_hour(extra)
            added = units * p.unit_cost_per_hour
            if cost + added > cap + 1e-9:
                return (
                    f"adding {count_units(p, units)} to pool {pool} (${added:,.2f}/h) would pass "
                    f"max_cost_per_hour ${cap:,.2f} (${cost:,.2f}/h now)"
                )
        return None


def count_units(pool: Pool, units: int) -> str:
    """``'2 nodes'`` / ``'1 slice'`` (units of ``pool``)."""
    noun = "slice" if pool.tpu else "node"
    return f"{units} {noun}{'s' if units != 1 else ''}"


def count_hosts(pool: Pool, units: int) -> str:
    """What ``units`` units bring, as a job waits for them: ``'2 nodes'``, ``'4 hosts'``
    (one slice), ``'8 hosts (2 slices)'``."""
    if not pool.tpu:
        return count_units(pool, units)
    hosts = units * pool.hosts_per_unit
    text = f"{hosts} host{'s' if hosts != 1 else ''}"
    return text + (f" ({units} slices)" if units > 1 else "")


def eta_text(seconds: float) -> str:
    """``'in 45s'``, ``'in 2m30s'``, ``'in 3m'``, ``'in 1h30m'``, ``'any moment now'``."""
    if seconds <= 0:
        return "any moment now"
    whole = math.ceil(seconds)
    if whole < 60:
        return f"in {whole}s"
    if whole < 600 and whole % 60:
        return f"in {whole // 60}m{whole % 60:02d}s"
    minutes = math.ceil(whole / 60)
    if minutes < 60:
        return f"in {minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"in {hours}h{minutes:02d}m" if minutes else f"in {hours}h"


def job_list(jobs: Sequence[int], most: int = 5) -> str:
    """``'job 7'``, ``'jobs 1, 2, 3'``, ``'jobs 1, 2, 3, 4, 5 and 9 more'``."""
    shown = ", ".join(str(j) for j in jobs[:most])
    more = f" and {len(jobs) - most} more" if len(jobs) > most else ""
    return f"job{'s' if len(jobs) > 1 else ''} {shown}{more}"


class DutyCycle:
    """``duty-cycle``: a pool whose ready nodes run hot (mean GPU duty cycle above
    ``target``, from telemetry) keeps ``spare`` units beyond its busy ones: its floor is
    its busy ready units plus ``spare`` (provisioned up to, and not scaled below)."""

    name = "duty-cycle"

    def __init__(self, target: float = 0.8, spare: int = 1) -> None:
        if isinstance(target, bool) or not isinstance(target, int | float):
            raise ValueError(f"target: expected a number in (0, 1], got {target!r}")
        if not 0 < target <= 1:
            raise ValueError(f"target: expected a number in (0, 1], got {target!r}")
        if isinstance(spare, bool) or not isinstance(spare, int) or spare < 0:
            raise ValueError(f"spare: expected a whole number >= 0, got {spare!r}")
        self.target, self.spare = float(target), spare

    def demand(self, view: ScalingView) -> list[Demand | Wait]:
        found: list[Demand | Wait] = []
        for pool in view.pools:
            duty = view.duty(pool.name)
            if duty is None or duty <= self.target:
                continue
            busy = sum(1 for unit in view.ready_units(pool.name) if view.busy(unit))
            found.append(
                Demand(
                    pool.name,
                    floor=busy + self.spare,
                    reason=f"duty cycle {duty:.2f} above {self.target:g}: "
                    f"{busy} busy + {self.spare} spare",
                )
            )
        return found


@dataclass(frozen=True)
class Window:
    """Pool ``pool`` keeps at least ``min`` units from ``start`` to ``end`` (minutes of
    the UTC day; a window past midnight wraps)."""

    pool: str
    min: int
    start: int
    end: int

    def active(self, minute: int) -> bool:
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def describe(self) -> str:
        return f"schedule {_clock(self.start)}-{_clock(self.end)} UTC: at least {self.min}"


class Schedule:
    """``schedule``: raise pools' floors in daily windows, ``windows: [{pool: NAME, min:
    N, from: "08:00", to: "20:00"}]`` in UTC (``to`` before ``from``: past midnight)."""

    name = "schedule"

    def __init__(self, windows: Sequence[Mapping[str, object]] = ()) -> None:
        if isinstance(windows, str | bytes | Mapping) or not isinstance(windows, Sequence):
            raise ValueError("windows: expected a list of {pool, min, from, to}")
        self.windows = tuple(_window(i, w) for i, w in enumerate(windows))

    def check_pools(self, names: Sequence[str]) -> None:
        """``ValueError`` when a window names a pool not declared."""
        for i, window in enumerate(self.windows):
            if window.pool not in names:
                known = ", ".join(sorted(names)) or "none"
                raise ValueError(f"windows.{i}.pool: no pool {window.pool!r} (pools: {known})")

    def demand(self, view: ScalingView) -> list[Demand | Wait]:
        minute = int(view.now // 60) % 1440
        return [
            Demand(w.pool, floor=w.min, reason=w.describe())
            for w in self.windows
            if w.active(minute) and view.pool(w.pool) is not None
        ]


def _window(index: int, raw: object) -> Window:
    where = f"windows.{index}"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected {{pool, min, from, to}}, got {raw!r}")
    unknown = sorted(set(map(str, raw)) - {"pool", "min", "from", "to"})
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (fields: pool, min, from, to)")
    missing = [k for k in ("pool", "min", "from", "to") if k not in raw]
    if missing:
        raise ValueError(f"{where}: {missing[0]} is missing")
    pool, floor = raw["pool"], raw["min"]
    if not isinstance(pool, str) or not pool:
        raise ValueError(f"{where}.pool: expected a pool name, got {pool!r}")
    if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
        raise ValueError(f"{where}.min: expected a whole number >= 0, got {floor!r}")
    start, end = _minute(f"{where}.from", raw["from"]), _minute(f"{where}.to", raw["to"])
    if start == end:
        raise ValueError(f"{where}: from and to are both {_clock(start)} (an empty window)")
    return Window(pool, floor, start, end)


def _minute(where: str, value: object) -> int:
    """``'08:30'`` -> 510 (``'24:00'`` is 1440, for a window to the end of the day)."""
    text = str(value).strip()
    hours, sep, minutes = text.partition(":")
    if sep and hours.isdigit() and minutes.isdigit() and len(minutes) == 2:
        total = int(hours) * 60 + int(minutes)
        if int(minutes) < 60 and total <= 1440:
            return total
    raise ValueError(f"{where}: expected a UTC time such as 08:00, got {value!r}")


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"
