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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter

from corral.core.pools import PoolFailures, Unit, UnitPhase
from corral.core.units import format_duration
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import Profile
from corral.scheduling.scaling import AutoscaleInput, Delete, Drain, Provision, ScalePlan
from corral.scheduling.scaling_consolidate import consolidate
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
_LEAVING = frozenset({UnitPhase.DRAINING, UnitPhase.DELETING, UnitPhase.FAILED})


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
        self.states = {
            p.name: PoolState(p, failures=inp.failures.get(p.name, PoolFailures()))
            for p in inp.pools
        }
        self.view = ScalingView(inp, config, self.states, profile)
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
        states, ready = self.states, UnitPhase.READY
        for unit in self.inp.units:
            state = states.get(unit.pool)
            if state is not None:
                state.units.append(unit)
                if unit.phase is ready:  # most units: nothing to do but count them
                    state.counting.append(unit)
                    state.ready.append(unit)
                    if unit.idle_since is not None:
                        state.idle.append(unit)
                    continue
            self._settle(unit, state)

    def _settle(self, unit: Unit, state: PoolState | None) -> None:
        """A unit not ready (or of a pool no longer declared): delete, drain or count it."""
        phase = unit.phase
        if phase is UnitPhase.DELETING:
            return
        if phase is UnitPhase.FAILED:
            why = f" ({unit.reason})" if unit.reason else ""
            self._delete(unit, f"provisioning failed{why}: cleaning up")
        elif phase is UnitPhase.DRAINING:
            if unit.deadline is not None and self.now >= unit.deadline:
                self._delete(unit, "past its spot notice's deadline")
            elif not self.view.busy(unit):
                self._delete(unit, "drained: its nodes hold nothing")
        elif state is None:
            if phase is UnitPhase.PROVISIONING:
                self._delete(unit, f"pool {unit.pool} is no longer declared")
            elif not self.view.busy(unit):
                self.drains.append(
                    Drain(unit.pool, unit.name, f"pool {unit.pool} is no longer declared")
                )
        else:  # provisioning (ready units of declared pools do not come here)
            waited, limit = self.now - unit.requested_at, self.auto.timeout(state.pool)
            if waited > limit:
                reason = (
                    f"provisioning timed out: not ready {format_duration(waited)} after it "
                    f"was asked for (timeout {format_duration(limit)})"
                )
                self._delete(unit, reason, failed=True)
                state.failures = PoolFailures(state.failures.count + 1, self.now)
            else:
                state.counting.append(unit)
                state.provisioning.append(unit)

    def _delete(self, unit: Unit, reason: str, failed: bool = False) -> None:
        self.deletes.append(Delete(unit.pool, unit.name, reason, failed))

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
        pool, names, taken = state.pool, self.view.unit_names, self.taken
        for _ in range(units):
            i = self.cursor[pool.name]
            while pool.unit_name(i) in names or pool.unit_name(i) in taken:
                i += 1
            self.cursor[pool.name] = i + 1
            self.taken.add(pool.unit_name(i))
            state.planned.append(pool.unit_name(i))
        self.reasons[pool.name].append(reason)
        self.jobs[pool.name] += jobs

    def scale_down(self) -> None:
        idle_for, now, keep = self.auto.scale_down_idle, self.now, self.keep
        held = self.view.usage.held.keys()
        limit = format_duration(idle_for)
        for name, state in self.states.items():
            pool = state.pool
            if state.planned:
                continue  # growing: idle units would have taken the work
            floor = max(pool.min, self.floors.get(name, 0))
            over = len(state.counting) - pool.max
            if over > 0:  # above a lowered max: any idle unit, the longest idle first
                idle = [u for u in state.ready if u.name not in keep]
                idle.sort(key=_NAME, reverse=True)  # the highest names first ...
                idle.sort(key=lambda u: u.idle_since if u.idle_since is not None else now)
            elif len(state.counting) > floor:
                idle = [
                    u for u in state.idle if now - u.idle_since >= idle_for and u.name not in keep
                ]
                idle.sort(key=_NAME, reverse=True)  # the highest names first ...
                idle.sort(key=_IDLE_SINCE)  # ... of those idle as long
            else:
                continue
            drained: set[str] = set()
            for unit in idle:
                since = unit.idle_since
                if not held.isdisjoint(unit.nodes or self.view.unit_nodes(unit)):
                    continue  # never a unit holding work (whatever its record says)
                if over > 0:
                    reason = f"above the pool's max of {pool.max}"
                elif since is None or now - since < idle_for:
                    continue
                elif len(state.counting) - len(drained) <= floor:
                    break
                else:
                    reason = f"idle for {format_duration(now - since)} (scale_down_idle {limit})"
                self.drains.append(Drain(name, unit.name, reason))
                drained.add(unit.name)
                over -= 1
            if drained:  # (the last step: what ``desired`` counts; ready and idle stay)
                state.counting = [u for u in state.counting if u.name not in drained]

    def consolidate(self) -> None:
        """Drain units whose few jobs fit elsewhere, moving the jobs
        (``scaling_consolidate``); only when nothing is pending, never below a floor."""
        if not self.auto.consolidate or self.inp.pending:
            return
        gone = {d.unit for d in (*self.drains, *self.deletes)}
        candidates = []
        for name, state in self.states.items():
            floor = max(state.pool.min, self.floors.get(name, 0))
            if state.planned or len(state.counting) <= floor:
                continue
            for unit in state.ready:
                if unit.name not in self.keep and unit.name not in gone:
                    nodes = unit.nodes or self.view.unit_nodes(unit)
                    candidates.append((state.pool, replace(unit, nodes=tuple(nodes))))
        if not candidates:
            return
        leaving = {
            n
            for unit in self.inp.units
            if unit.name in gone or unit.phase in _LEAVING
            for n in (unit.nodes or self.view.unit_nodes(unit))
        }
        nodes = {node.name: node for node in self.inp.nodes}
        drains, self.preemptions = consolidate(
            candidates, nodes, self.inp.allocations, leaving, self.auto, self.now
        )
        self.drains += drains
        moved = {d.unit for d in drains}
        for state in self.states.values():
            if moved.intersection(u.name for u in state.counting):
                state.counting = [u for u in state.counting if u.name not in moved]

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
