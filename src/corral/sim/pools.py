"""Node pools in the simulator (SPEC section 10): the ``sim`` provider and the keeper of
the pools' units.

The simulator is the provider: a unit asked for (``Provision``) is ``PROVISIONING`` for
its pool's ``provisioning_time``, then its nodes register, ``READY``; ``Drain`` makes it
``DRAINING`` (its nodes take no new work); ``Delete`` removes it and its nodes at once.
Provisioning never fails. A pool's ``min`` units are there, ready, from the start of the
workload. The autoscaler (``corral.scheduling.autoscaler.autoscale``) is asked after
every scheduling cycle; the keeper sets timers (events) for what it waits on: a unit
becoming ready, a unit's idle time reaching ``scale_down_idle``, a spot interruption, a
notice's deadline.

**Spot interruptions**: each ready node of a spot pool with ``interruption_rate`` (per
node-hour) is interrupted at exponentially distributed times (a unit of ``h`` hosts at
``h`` times the rate), drawn from ``random.Random(seed)`` in event order, so the same seed
gives the same run. An interruption is a termination notice: the unit drains, its jobs are
signalled at once and let go within ``min(grace period, NOTICE)`` (losing the work since
their last checkpoint, requeued, as preemption does), and the unit leaves at the deadline,
``NOTICE`` after the notice. Interruptions happen while some job runs or is still to
arrive (an idle unit after the workload ended is not interrupted, so runs end).

**The bill**, per pool: a unit is paid from its request to its deletion (units left at the
end, until the run's end); ``node_hours`` sums that over its nodes, ``provisioning_hours``
the part before it was ready, ``cost = node_hours * cost_per_hour``. ``gpu_hours_paid``
counts the GPUs (not TPU chips) of the paid nodes likewise; ``gpu_hours_used`` the GPUs
allocated to jobs on them. A job's **provisioning wait**: the time it waited while a unit
it then started on was being provisioned (per start, from its submission or requeue).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from corral.core.allocation import MIG_SLICES, Allocation
from corral.core.job import Job
from corral.core.node import Node, NodeState
from corral.core.pools import Pool, Unit, UnitPhase
from corral.core.resources import MILLI
from corral.scheduling.autoscaler import autoscale
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import Profile
from corral.scheduling.mix import gpu_supply
from corral.scheduling.scaling import AutoscaleInput, Delete, Drain, Provision, ScalePlan
from corral.scheduling.scaling_registry import check_policies
from corral.sim.result import PoolRecord

NOTICE = 120.0  # seconds from a spot termination notice to the unit's removal


class _Ended(Protocol):
    end: float | None


class PoolEventKind(StrEnum):
    READY = "ready"  # a unit's provisioning is done
    IDLE = "idle"  # a unit has been idle for scale_down_idle
    INTERRUPT = "interrupt"  # a spot interruption: the notice
    GONE = "gone"  # a notice's deadline: the unit leaves


@dataclass(frozen=True)
class PoolEvent:
    """A timer of the keeper. ``token`` tells a stale one apart (the unit's request time,
    idle start or arming time it was set for)."""

    kind: PoolEventKind
    unit: str
    token: float


@dataclass
class PoolChanges:
    """What the simulator carries out after the keeper changed something: nodes that
    registered, left or changed state; timers to set; spot notices (nodes, deadline)."""

    added: list[Node] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    states: list[Node] = field(default_factory=list)
    timers: list[tuple[float, PoolEvent]] = field(default_factory=list)
    notices: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def extend(self, other: PoolChanges) -> None:
        self.added += other.added
        self.removed += other.removed
        self.states += other.states
        self.timers += other.timers
        self.notices += other.notices


@dataclass
class _Bill:
    """One pool's running totals (seconds)."""

    node_seconds: float = 0.0
    provisioning_seconds: float = 0.0
    gpu_seconds_paid: float = 0.0
    gpu_seconds_used: float = 0.0
    provisioned: int = 0
    deleted: int = 0
    interrupted: int = 0
    peak: int = 0


def gpu_count(node: Node) -> int:
    """GPUs of ``node`` for the GPU metrics (TPU chips left out)."""
    return len(node.devices) - node.tpu_chips


def node_gpus(alloc: Allocation) -> dict[str, float]:
    """GPUs ``alloc`` holds on each node, counted as ``Allocation.gpus`` counts them."""
    held: dict[str, float] = {}
    for task in alloc.tasks:
        share = (
            len(task.mig_slots) / MIG_SLICES
            if task.mig_slots
            else len(task.gpus) * task.gpu_milli / MILLI
        )
        held[task.node] = held.get(task.node, 0.0) + share
    return held


class PoolKeeper:
    """The pools' units in a simulation, and their bill (module docstring)."""

    def __init__(
        self,
        pools: Sequence[Pool],
        config: SchedulerConfig,
        seed: int = 0,
    ) -> None:
        """``ValidationError`` when the autoscaling policies are unknown or wrong."""
        self.pools = {p.name: p for p in pools}
        self.config = config
        self._policies = check_policies(config.autoscaling, pools=list(self.pools))
        self.units: dict[str, Unit] = {}  # every unit not deleted, by name
        self.unit_of: dict[str, str] = {}  # registered node -> its unit
        self._ready_at: dict[str, float] = {}
        self._busy: dict[str, int] = {}  # unit -> allocations on its nodes
        # each running attempt on pool nodes: its start, and (node, pool, GPUs) held there
        self._holds: dict[tuple[int, int], tuple[float, list[tuple[str, str, float]]]] = {}
        self._held: dict[str, float] = {}  # GPUs allocated on each pool node
        self._duty: dict[str, float] | None = None  # each pool node's duty cycle (None: to do)
        self._bills = {name: _Bill() for name in self.pools}
        # GPUs of a pool's node (its template's first: a TPU pool's hosts have none)
        self._gpus = {p.name: gpu_count(p.template[0]) for p in pools}
        self._rng = random.Random(seed)
        self._unarmed: set[str] = set()  # spot units whose interruption is to draw again
        self.last_change: float | None = None  # the last request, registration or deletion

    # -- what the simulator asks ----------------------------------------------------

    def shapes(self) -> list[tuple[Node, int]]:
        """Each pool at its ``max``, for submission-time feasibility (``never_fits``): a
        node pool's node ``max`` times, a TPU pool's one slice (a slice spans one unit)."""
        shapes: list[tuple[Node, int]] = []
        for pool in self.pools.values():
            nodes = pool.unit_nodes(pool.unit_name(0))
            shapes += [(n, 1) for n in nodes] if pool.tpu else [(nodes[0], pool.max)]
        return shapes

    def most_gpus(self) -> float:
        """GPUs of every pool at its ``max``."""
        pools = self.pools.values()
        return float(sum(p.max * sum(gpu_count(n) for n in p.template) for p in pools))

    def paid_gpus(self) -> float:
        """GPUs of the units paid for now."""
        return float(
            sum(gpu_count(n) for u in self.units.values() for n in self.pools[u.pool].template)
        )

    def start(self, now: float) -> PoolChanges:
        """Every pool's ``min`` units, ready at ``now`` (the start of the workload)."""
        changes = PoolChanges()
        for pool in self.pools.values():
            for index in range(pool.min):
                name = pool.unit_name(index)
                self._request(pool, name, now)  # (its timer is not needed: ready now)
                changes.extend(self._ready(name, now))
        return changes

    def autoscale(
        self,
        nodes: Sequence[Node],
        allocations: Sequence[Allocation],
        pending: Sequence[Job],
        now: float,
        profile: Profile | None,
    ) -> ScalePlan:
        """The autoscaler's plan for the cluster as it is now. A pool node's duty cycle is
        the share of its GPUs allocated (simulated jobs keep their GPUs busy)."""
        if self._duty is None:  # (kept until an allocation or a node changes)
            self._duty = {}
            for name, unit in self.unit_of.items():
                count = self._gpus[self.units[unit].pool]
                if count:
                    self._duty[name] = min(1.0, max(0.0, self._held.get(name, 0.0) / count))
        inp = AutoscaleInput(
            pools=tuple(self.pools.values()),
            units=tuple(self.units.values()),
            nodes=tuple(nodes),
            allocations=tuple(allocations),
            pending=tuple(pending),
            now=now,
            duty=self._duty,
        )
        return autoscale(inp, self.config, profile, policies=self._policies)

    def apply(self, plan: ScalePlan, now: float) -> PoolChanges:
        """Carry out ``plan``'s actions (``corral.scheduling.scaling``)."""
        changes = PoolChanges()
        for action in plan.actions:
            if isinstance(action, Provision):
                pool = self.pools[action.pool]
                for name in action.units:
                    if name not in self.units:
                        changes.extend(self._request(pool, name, now))
            elif isinstance(action, Drain):
                changes.extend(self._drain(action.unit, now, action.reason))
            elif isinstance(action, Delete):
                changes.extend(self._delete(action.unit, now))
        return changes

    def event(self, event: PoolEvent, now: float, active: bool) -> PoolChanges | None:
        """A timer went off; None when it is stale (nothing to do). ``active``: some job
        runs or is still to arrive (spot interruptions happen only then)."""
        unit = self.units.get(event.unit)
        if unit is None:
            return None
        if event.kind is PoolEventKind.READY:
            if unit.phase is not UnitPhase.PROVISIONING or unit.requested_at != event.token:
                return None
            return self._ready(unit.name, now)
        if event.kind is PoolEventKind.IDLE:
            stale = unit.phase is not UnitPhase.READY or unit.idle_since != event.token
            return None if stale else PoolChanges()  # a wake-up: the autoscaler decides
        if event.kind is PoolEventKind.INTERRUPT:
            if unit.phase is not UnitPhase.READY or self._ready_at[unit.name] > event.token:
                return None
            if not active:
                self._unarmed.add(unit.name)
                return None
            return self._interrupt(unit, now)
        if unit.deadline != event.token:  # (deleted already: the name is another unit's)
            return None
        return self._delete(unit.name, now)  # GONE: the notice's deadline

    def hold(self, alloc: Allocation, now: float, sign: int) -> PoolChanges:
        """``alloc`` started (``sign`` 1) or let go (-1) at ``now``: the units' idle times
        and the pools' GPU use. A start re-arms the spot units left unarmed."""
        changes = PoolChanges()
        key = (alloc.job_id, alloc.attempt)
        units = {self.unit_of[n] for n in alloc.nodes if n in self.unit_of}
        if units:
            self._duty = None
        if sign > 0:
            on = [
                (node, self.units[self.unit_of[node]].pool, gpus)
                for node, gpus in node_gpus(alloc).items()
                if node in self.unit_of
            ]
            if on:
                self._holds[key] = (now, on)
            for node, _, gpus in on:
                self._held[node] = self._held.get(node, 0.0) + gpus
            for name in sorted(self._unarmed):
                if name in self.units and self.units[name].phase is UnitPhase.READY:
                    changes.timers += self._arm(self.units[name], now)
            self._unarmed.clear()
        else:
            started, on = self._holds.pop(key, (now, []))
            for node, pool, gpus in on:
                self._bills[pool].gpu_seconds_used += gpus * (now - started)
                if node in self._held:
                    self._held[node] -= gpus
        for name in sorted(units):
            busy = self._busy[name] = self._busy.get(name, 0) + sign
            unit = self.units.get(name)
            if unit is None:
                continue
            if busy > 0 and unit.idle_since is not None:
                self.units[name] = replace(unit, idle_since=None)
            elif busy == 0 and unit.phase is UnitPhase.READY:
                self.units[name] = replace(unit, idle_since=now)
                changes.timers.append(self._idle_timer(name, now))
        return changes

    def provisioning_wait(self, alloc: Allocation, since: float, now: float) -> float:
        """How long of ``[since, now]`` a unit ``alloc`` starts on was being provisioned."""
        wait = 0.0
        for node in alloc.nodes:
            name = self.unit_of.get(node)
            if name is not None:
                begin = max(self.units[name].requested_at, since)
                wait = max(wait, min(self._ready_at[name], now) - begin)
        return wait

    def result(self, runs: Iterable[_Ended], fixed_gpus: float) -> dict[str, Any]:
        """The pools' part of a ``SimResult``: the bills until the run's end (the last
        job's end or the last change to a unit, whichever is later)."""
        ends = [r.end for r in runs if r.end is not None]
        if self.last_change is not None:
            ends.append(self.last_change)
        end = max(ends, default=0.0)
        return {"pools": self.records(end), "fixed_gpus": fixed_gpus, "end_time": end}

    def records(self, end: float) -> tuple[PoolRecord, ...]:
        """The pools' bills, units still there paid until ``end``."""
        records = []
        for name, pool in self.pools.items():
            bill = _Bill(**vars(self._bills[name]))
            for unit in self.units.values():
                if unit.pool == name:
                    self._pay(bill, pool, unit, end)
            for started, on in self._holds.values():
                bill.gpu_seconds_used += sum(g for _, p, g in on if p == name) * (end - started)
            node_hours = bill.node_seconds / 3600
            records.append(
                PoolRecord(
                    name=name,
                    min=pool.min,
                    max=pool.max,
                    cost_per_hour=pool.cost_per_hour,
                    spot=pool.spot,
                    node_hours=node_hours,
                    provisioning_hours=bill.provisioning_seconds / 3600,
                    cost=node_hours * pool.cost_per_hour,
                    gpu_hours_paid=bill.gpu_seconds_paid / 3600,
                    gpu_hours_used=bill.gpu_seconds_used / 3600,
                    units_provisioned=bill.provisioned,
                    units_deleted=bill.deleted,
                    units_interrupted=bill.interrupted,
                    peak_units=bill.peak,
                )
            )
        return tuple(records)

    # -- the units' lives -------------------------------------------------------------

    def _request(self, pool: Pool, name: str, now: float) -> PoolChanges:
        nodes = tuple(n.name for n in pool.unit_nodes(name))
        self.units[name] = Unit(name, pool.name, UnitPhase.PROVISIONING, now, now, nodes)
        bill = self._bills[pool.name]
        bill.provisioned += 1
        bill.peak = max(bill.peak, sum(1 for u in self.units.values() if u.pool == pool.name))
        self.last_change = now
        event = PoolEvent(PoolEventKind.READY, name, now)
        return PoolChanges(timers=[(now + pool.provisioning_time, event)])

    def _ready(self, name: str, now: float) -> PoolChanges:
        unit = self.units[name]
        pool = self.pools[unit.pool]
        self.units[name] = replace(unit, phase=UnitPhase.READY, since=now, idle_since=now)
        self._ready_at[name] = now
        self.last_change = now
        nodes = [replace(n, state=NodeState.READY) for n in pool.unit_nodes(name)]
        for node in nodes:
            self.unit_of[node.name] = name
        self._duty = None
        self._busy[name] = 0
        timers = [self._idle_timer(name, now), *self._arm(self.units[name], now)]
        return PoolChanges(added=nodes, timers=timers)

    def _idle_timer(self, name: str, since: float) -> tuple[float, PoolEvent]:
        idle = self.config.autoscaling.scale_down_idle
        return since + idle, PoolEvent(PoolEventKind.IDLE, name, since)

    def _arm(self, unit: Unit, now: float) -> list[tuple[float, PoolEvent]]:
        """The unit's next spot interruption (none for other pools)."""
        pool = self.pools[unit.pool]
        if not pool.spot or pool.interruption_rate <= 0:
            return []
        rate = pool.interruption_rate * pool.hosts_per_unit / 3600  # per second
        event = PoolEvent(PoolEventKind.INTERRUPT, unit.name, now)
        return [(now + self._rng.expovariate(rate), event)]

    def _drain(self, name: str, now: float, why: str) -> PoolChanges:
        unit = self.units.get(name)
        if unit is None or unit.phase is UnitPhase.DRAINING:
            return PoolChanges()
        if unit.phase is not UnitPhase.READY:  # not there yet: nothing to drain
            return self._delete(name, now)
        self.units[name] = replace(unit, phase=UnitPhase.DRAINING, since=now, reason=why)
        return PoolChanges(states=self._node_states(unit, NodeState.DRAINING))

    def _interrupt(self, unit: Unit, now: float) -> PoolChanges:
        deadline = now + NOTICE
        self.units[unit.name] = replace(
            unit, phase=UnitPhase.DRAINING, since=now, deadline=deadline, reason="spot interruption"
        )
        self._bills[unit.pool].interrupted += 1
        event = PoolEvent(PoolEventKind.GONE, unit.name, deadline)
        return PoolChanges(
            states=self._node_states(unit, NodeState.DRAINING),
            timers=[(deadline, event)],
            notices=[(unit.nodes, deadline)],
        )

    def _node_states(self, unit: Unit, state: NodeState) -> list[Node]:
        return [replace(n, state=state) for n in self.pools[unit.pool].unit_nodes(unit.name)]

    def _delete(self, name: str, now: float) -> PoolChanges:
        unit = self.units.pop(name, None)
        if unit is None:
            return PoolChanges()
        pool = self.pools[unit.pool]
        bill = self._bills[unit.pool]
        self._pay(bill, pool, unit, now)
        bill.deleted += 1
        self.last_change = now
        self._busy.pop(name, None)
        self._unarmed.discard(name)
        removed = [n for n in unit.nodes if self.unit_of.pop(n, None) is not None]
        for node in removed:
            self._held.pop(node, None)
        self._duty = None
        return PoolChanges(removed=removed)

    def _pay(self, bill: _Bill, pool: Pool, unit: Unit, until: float) -> None:
        """Add ``unit``'s paid time, from its request to ``until``, to ``bill``."""
        hosts = pool.hosts_per_unit
        paid = max(0.0, until - unit.requested_at)
        ready = self._ready_at.get(unit.name) if unit.phase is not UnitPhase.PROVISIONING else None
        provisioning = paid if ready is None else ready - unit.requested_at
        bill.node_seconds += hosts * paid
        bill.provisioning_seconds += hosts * provisioning
        bill.gpu_seconds_paid += sum(gpu_count(n) for n in pool.template) * paid


def pool_supply(nodes: Sequence[Node], pools: Sequence[Pool]) -> dict[str, int]:
    """GPUs per model of ``nodes`` and every pool at its ``max`` (``mix.gpu_supply``)."""
    supply = dict(gpu_supply(nodes))
    for pool in pools:
        for model, count in gpu_supply(pool.template).items():
            supply[model] = supply.get(model, 0) + count * pool.max
    return dict(sorted(supply.items()))
