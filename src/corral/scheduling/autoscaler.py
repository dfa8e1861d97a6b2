"""The autoscaler (SPEC section 10): ``pools + units + nodes + pending + now -> ScalePlan``.

Pure, like the scheduler: no I/O, no clock but ``inp.now``. The control plane's leader and
the simulator call :func:`autoscale` once per pass and carry out its actions (see
``scheduling.scaling`` for what the keeper does with each). A pass:

1. **lifecycle**: failed units are deleted (cleanup; the keeper counted the failure);
   units provisioning for longer than their pool's timeout are deleted as failed (and the
   pool backs off from now on); draining units are deleted once their nodes hold nothing,
   or past a spot notice's deadline; units of pools no longer declared leave. Units
   being deleted are left alone and count for nothing;
2. **min**: each pool is kept at its ``min`` counting units (provisioning or ready),
   within its backoff (the cost cap does not apply to ``min``);
3. **policies** (``autoscaling.policies``, in order; ``scheduling.scaling_policies``):
   each one's demands are granted, all or nothing per demand, within the pools' ``max``,
   ``max_cost_per_hour`` and backoff, and the next policy sees what was granted;
4. **scale down**: ready units idle for ``scale_down_idle`` (``Unit.idle_since``) whose
   nodes hold no allocation and that no policy keeps are drained, down to the pool's
   floor (its ``min`` and any floor a policy asked for); none of a pool growing this
   pass. Idle units above a lowered ``max`` are drained at once;
5. **consolidate** (``autoscaling.consolidate``, when nothing is pending): a unit less
   than ``consolidate_below`` used whose jobs can move without losing work and fit
   elsewhere is drained
   and its jobs preempted (``scheduling.scaling_consolidate``).

With ``enabled: false`` only steps 1 and 2 run. Each pool gets one ``Provision`` per pass,
naming the lowest unit indices no unit record uses.

A pass reads the cluster through a ``ScalingIndex`` (``scheduling.scaling_index``): the
keeper's (``inp.index``), kept between passes, or one sorted from the input. With the
keeper's, a pass reads only what has something to do or to offer: units failed, draining
or in flight, units idle past ``scale_down_idle``, the capacity placements try, the units
a consolidation might empty; not every unit, node and allocation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from operator import attrgetter, itemgetter

from corral.core.pools import PoolFailures, Unit, UnitPhase
from corral.core.units import format_duration
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import Profile
from corral.scheduling.scaling import AutoscaleInput, Delete, Drain, Provision, ScalePlan
from corral.scheduling.scaling_consolidate import Rooms, consolidate
from corral.scheduling.scaling_index import (
    DELETING,
    DRAINING,
    FAILED,
    FLYING,
    MOVABLE,
    PROVISIONING,
    READY,
    SETTLE,
    ScalingIndex,
    prefix,
)
from corral.scheduling.scaling_policies import (
    Demand,
    PoolState,
    ScalingPolicy,
    ScalingView,
    Wait,
)
from corral.scheduling.scaling_registry import build_policies

_NAME = attrgetter("name")
_IDLE_SINCE = attrgetter("idle_since")


def autoscale(
    inp: AutoscaleInput,
    config: SchedulerConfig,
    profile: Profile | None = None,
    *,
    policies: Sequence[ScalingPolicy] | None = None,
) -> ScalePlan:
    """This pass's actions, the reasons of jobs waiting on pools, and each pool's desired
    size (see the module docstring). Pure: no I/O, no clock but ``inp.now``.

    ``config.autoscaling`` holds the settings; ``profile``: the scheduler's (built from
    ``config`` when needed and not given); ``policies``: built once by
    ``scaling_registry.check_policies`` at startup (default: built from
    ``config.autoscaling.policies`` on every call, entry points included; an unknown
    policy is a ``ValidationError``). The caller gives ``inp.pending`` in the last
    cycle's order (held jobs and jobs waiting on dependencies left out), and keeps each
    ready unit's ``idle_since``: when the last allocation on its nodes ended (or when it
    became ready holding none), None while any is held. Scale-down trusts it for how long
    a unit has been idle, and checks the allocations for whether it is."""
    run = _Pass(inp, config, profile)
    run.lifecycle()
    run.keep_min()
    if config.autoscaling.enabled:
        chosen = build_policies(config.autoscaling) if policies is None else policies
        for policy in chosen:
            run.grant(policy.name, policy.demand(run.view))
        run.scale_down()
        run.consolidate()
    return run.plan()


class _Pass:
    """The working state of one pass: each pool's units and plan, and the actions."""

    def __init__(self, inp: AutoscaleInput, config: SchedulerConfig, profile: Profile | None):
        self.inp, self.now, self.auto = inp, inp.now, config.autoscaling
        index = inp.index
        if index is None:
            index = ScalingIndex.of(inp.pools, inp.units, inp.nodes, inp.allocations)
        elif index.pools != tuple(inp.pools):
            raise ValueError("inp.index was built for other pools than inp.pools")
        self.index = index
        self.states = {
            p.name: PoolState(p, failures=inp.failures.get(p.name, PoolFailures()))
            for p in inp.pools
        }
        self.view = ScalingView(inp, config, self.states, profile, index)
        self.deletes: list[Delete] = []
        self.preemptions: list[tuple[int, str]] = []
        self.drains: list[Drain] = []
        self.reasons: dict[str, list[str]] = defaultdict(list)
        self.jobs: dict[str, list[int]] = defaultdict(list)
        self.floors: dict[str, int] = {}
        self.keep: set[str] = set()
        self.waits: dict[int, str] = {}
        self.refusals: dict[int, str] = {}
        self.taken: set[str] = set()  # unit names planned this pass
        self.cursor: dict[str, int] = defaultdict(int)

    def lifecycle(self) -> None:
        """Only units with something to do are read: failed ones, draining ones that are
        empty or were given a notice, those in flight, and those of pools not declared."""
        index, units = self.index, self.index.units
        found: list[tuple[int, Delete | Drain]] = []  # by the units' order
        for name, state in self.states.items():
            sorted_ = state.sorted = index.pool(name)
            state.ready = sorted_.of(READY)
            for seq, unit in (*sorted_.keys(FAILED), *sorted_.keys(SETTLE)):
                action = self._settle(units[unit], state)
                if action is not None:
                    found.append((seq, action))
            self._in_flight(state, found)
        for name in index.unit_pools():
            if name not in self.states:
                for seq, unit in index.pool(name).all_keys():
                    action = self._settle(units[unit], None)
                    if action is not None:
                        found.append((seq, action))
        found.sort(key=itemgetter(0))
        for _, action in found:
            (self.deletes if isinstance(action, Delete) else self.drains).append(action)

    def _settle(self, unit: Unit, state: PoolState | None) -> Delete | Drain | None:
        """What to do with a unit failed, draining, or of a pool no longer declared."""
        phase = unit.phase
        if phase is UnitPhase.DELETING:
            return None
        if phase is UnitPhase.FAILED:
            why = f" ({unit.reason})" if unit.reason else ""
            return Delete(unit.pool, unit.name, f"provisioning failed{why}: cleaning up")
        if phase is UnitPhase.DRAINING:
            if unit.deadline is not None and self.now >= unit.deadline:
                return Delete(unit.pool, unit.name, "past its spot notice's deadline")
            if not self.view.busy(unit):
                return Delete(unit.pool, unit.name, "drained: its nodes hold nothing")
            return None
        if state is None:
            reason = f"pool {unit.pool} is no longer declared"
            if phase is UnitPhase.PROVISIONING:
                return Delete(unit.pool, unit.name, reason)
            if not self.view.busy(unit):
                return Drain(unit.pool, unit.name, reason)
        return None

    def _in_flight(self, state: PoolState, found: list[tuple[int, Delete | Drain]]) -> None:
        """The pool's units provisioning, less those past the timeout (the first ones
        asked for): deleted as failed (and the pool backs off from now on)."""
        sorted_, now, limit = state.sorted, self.now, self.auto.timeout(state.pool)
        assert sorted_ is not None
        flying = sorted_.keys(FLYING)
        late = state.late = prefix(flying, lambda requested_at: now - requested_at > limit)
        state.provisioning = sorted_.of(PROVISIONING)
        if not late:
            return
        gone = {name for _, name in flying[:late]}
        for seq, name in sorted_.keys(PROVISIONING):
            if name in gone:
                unit = self.index.units[name]
                waited = now - unit.requested_at
                reason = (
                    f"provisioning timed out: not ready {format_duration(waited)} after it "
                    f"was asked for (timeout {format_duration(limit)})"
                )
                found.append((seq, Delete(unit.pool, unit.name, reason, failed=True)))
                state.failures = PoolFailures(state.failures.count + 1, now)
        state.provisioning = [u for u in state.provisioning if u.name not in gone]

    def keep_min(self) -> None:
        for name, state in self.states.items():
            pool = state.pool
            self.floors[name] = pool.min
            missing = min(pool.min, pool.max) - state.size
            if missing > 0 and self.view.backoff(name) is None:
                self._plan(state, missing, f"pool min {pool.min}")

    def grant(self, policy: str, answers: Sequence[Demand | Wait]) -> None:
        """Grant one policy's demands in order (all or nothing each), within the limits."""
        for item in answers:
            if isinstance(item, Wait):
                self.waits.setdefault(item.job, item.reason)
                continue
            state = self.states.get(item.pool)
            if state is None:
                continue
            self.keep.update(item.keep)
            reason = item.reason or policy
            if item.units > 0:
                why = self.view.room(item.pool, item.units)
                if why is None:
                    self._plan(state, item.units, reason, item.jobs)
                else:
                    for job in item.jobs:
                        self.refusals[job] = f"no pool can add capacity for it now: {why}"
            elif item.jobs and state.planned:
                self.jobs[item.pool] += item.jobs
            if item.floor > 0:
                floor = min(item.floor, state.pool.max)
                self.floors[item.pool] = max(self.floors.get(item.pool, 0), floor)
                allowed = self._allowed(state, floor - state.size)
                if allowed > 0:
                    self._plan(state, allowed, reason)

    def _allowed(self, state: PoolState, wanted: int) -> int:
        """How many of ``wanted`` more units of the pool the limits allow now."""
        pool = state.pool
        if wanted <= 0 or self.view.backoff(pool.name):
            return 0
        allowed = min(wanted, pool.max - state.size)
        cap = self.auto.max_cost_per_hour
        if cap is not None and pool.unit_cost_per_hour > 0:
            spare = cap - self.view.cost_per_hour() + 1e-9
            allowed = min(allowed, int(spare // pool.unit_cost_per_hour))
        return max(0, allowed)

    def _plan(self, state: PoolState, units: int, reason: str, jobs: Sequence[int] = ()) -> None:
        pool, has, taken = state.pool, self.view.has_unit, self.taken
        for _ in range(units):
            i = self.cursor[pool.name]
            while has(pool.unit_name(i)) or pool.unit_name(i) in taken:
                i += 1
            self.cursor[pool.name] = i + 1
            self.taken.add(pool.unit_name(i))
            state.planned.append(pool.unit_name(i))
        self.reasons[pool.name].append(reason)
        self.jobs[pool.name] += jobs

    def scale_down(self) -> None:
        idle_for, now, keep = self.auto.scale_down_idle, self.now, self.keep
        busy = self.index.usage.held.keys()  # (never a unit holding work, whatever its record)
        unit_nodes = self.index.unit_nodes
        limit = f"scale_down_idle {format_duration(idle_for)}"

        def due(since: float) -> bool:
            return now - since >= idle_for

        for name, state in self.states.items():
            pool = state.pool
            if state.planned:
                continue  # growing: idle units would have taken the work
            floor = max(pool.min, self.floors.get(name, 0))
            counting = state.counting
            over = counting - pool.max
            drained: set[str] = set()
            if over > 0:  # above a lowered max: any idle unit, the longest idle first
                idle = [u for u in state.ready if u.name not in keep]
                idle.sort(key=_NAME, reverse=True)  # the highest names first ...
                idle.sort(key=lambda u: u.idle_since if u.idle_since is not None else now)
                for unit in idle:  # (above the max, then idle past scale_down_idle)
                    since = unit.idle_since
                    if not busy.isdisjoint(unit_nodes(unit)):
                        continue
                    if over > 0:
                        reason = f"above the pool's max of {pool.max}"
                    elif since is None or now - since < idle_for:
                        continue
                    elif counting - len(drained) <= floor:
                        break
                    else:
                        reason = f"idle for {format_duration(now - since)} ({limit})"
                    self.drains.append(Drain(name, unit.name, reason))
                    drained.add(unit.name)
                    over -= 1
            elif counting > floor:  # idle past scale_down_idle, down to the floor
                assert state.sorted is not None
                idle = [u for u in state.sorted.idle_until(due) if u.name not in keep]
                if len({u.idle_since for u in idle}) < len(idle):
                    idle.sort(key=_NAME, reverse=True)  # the highest names first ...
                    idle.sort(key=_IDLE_SINCE)  # ... of those idle as long
                room = counting - floor
                for unit in idle:
                    if len(drained) >= room:
                        break
                    if busy.isdisjoint(unit.nodes or unit_nodes(unit)):
                        reason = f"idle for {format_duration(now - unit.idle_since)} ({limit})"
                        self.drains.append(Drain(name, unit.name, reason))
                        drained.add(unit.name)
            state.gone |= drained  # (the last step: what ``desired`` counts; ready stay)

    def consolidate(self) -> None:
        """Drain units whose few jobs fit elsewhere, moving the jobs
        (``scaling_consolidate``); only when nothing is pending, never below a floor."""
        if not self.auto.consolidate or self.inp.pending:
            return
        index, keep = self.index, self.keep
        gone = {d.unit for d in (*self.drains, *self.deletes)}
        # only a unit with a device not wholly held can be less than wholly used; of
        # those, only one whose jobs might all move can be emptied
        light = self.auto.consolidate_below <= 1
        candidates = []
        for name, state in self.states.items():
            floor = max(state.pool.min, self.floors.get(name, 0))
            if state.planned or state.counting <= floor:
                continue
            assert state.sorted is not None
            for unit in state.sorted.of(MOVABLE) if light else state.ready:
                if unit.name not in keep and unit.name not in gone:
                    candidates.append((state.pool, unit, tuple(index.unit_nodes(unit))))
        if not candidates:
            return
        leaving = {n for name in gone for n in index.unit_nodes(index.units[name])}
        for name in index.unit_pools():
            sorted_ = index.pool(name)
            for phase in (DRAINING, DELETING, FAILED):
                for unit in sorted_.of(phase):
                    leaving.update(index.unit_nodes(unit))
        drains, self.preemptions = consolidate(
            candidates,
            index.nodes,
            index.usage,
            lambda: index.derived("rooms", lambda: Rooms(index)),
            leaving,
            self.auto,
            self.now,
        )
        self.drains += drains
        for drain in drains:
            self.states[drain.pool].gone.add(drain.unit)

    def plan(self) -> ScalePlan:
        provisions = [
            Provision(
                name,
                tuple(state.planned),
                "; ".join(dict.fromkeys(self.reasons[name])),
                tuple(dict.fromkeys(self.jobs[name])),
            )
            for name, state in self.states.items()
            if state.planned
        ]
        return ScalePlan(
            actions=(*self.deletes, *self.drains, *provisions),
            waits={**self.waits, **self.refusals},
            desired={name: state.size for name, state in self.states.items()},
            preemptions=tuple(self.preemptions),
        )
