"""The leader's autoscaling pass: observe the providers, keep the pool units' records,
call the pure autoscaler (``scheduling.autoscaler.autoscale``) and carry its plan out.

One pass (:meth:`Autoscaling.run`, after a scheduling cycle, at most every
``MIN_GAP`` seconds and at least every ``MAX_GAP``):

1. ask each pool's provider which units exist (outside any transaction);
2. in one transaction fenced by the leader's term: a provisioning unit whose nodes all
   registered becomes ready (and the scheduler is woken), one its provider lost or failed
   becomes failed (a failure of the pool, for its backoff); a deleting unit the provider
   no longer lists is gone, with its nodes; each ready unit's ``idle_since`` follows what
   its nodes hold; a provider's spot notice is given (``notices.give_notice``); then
   ``autoscale`` decides, and its actions are recorded (units, node states, events
   ``pool``), with the pending jobs' reasons;
3. the providers are asked to create and delete (outside the transaction); a unit whose
   creation cannot even start fails at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from corral.core.job import Job, JobState
from corral.core.lifecycle import Transition
from corral.core.node import NodeState
from corral.core.pools import Pool, PoolFailures, Unit, UnitPhase
from corral.providers.base import Provider, ProviderContext, ProviderUnit, UnitState
from corral.providers.registry import create_providers
from corral.scheduling.autoscaler import autoscale
from corral.scheduling.scaling import AutoscaleInput, Delete, Drain, Provision, ScalePlan
from corral.scheduling.scaling_registry import check_policies
from corral.server.db.models import JobRow, NodeRow, PoolFailureRow, PoolUnitRow
from corral.server.leader import Term
from corral.server.services.converters import node_of
from corral.server.services.notices import give_notice_in
from corral.server.services.scheduler import load_cluster
from corral.server.services.transitions import lock_job, move_job, move_node, record

log = logging.getLogger(__name__)

MIN_GAP = 1.0  # seconds between passes at least
MAX_GAP = 5.0  # and at most (idle expiry, timeouts)
DUTY_WINDOW = 300.0  # seconds of telemetry a node's GPU duty cycle is averaged over
_WAIT_REASON = (  # a job that started since the cycle keeps its own
    update(JobRow)
    .where(JobRow.id == bindparam("jid"), JobRow.state == JobState.PENDING.value)
    .values(reason=bindparam("r"))
)


def unit_of(row: PoolUnitRow) -> Unit:
    return Unit(
        name=row.name,
        pool=row.pool,
        phase=UnitPhase(row.phase),
        since=row.since,
        requested_at=row.requested_at,
        nodes=tuple(row.nodes),
        idle_since=row.idle_since,
        deadline=row.deadline,
        reason=row.reason,
    )


def pool_event(session: Session, pool: str, what: str, reason: str, now: float) -> None:
    """An event of ``pool`` (``corral events``): ``what`` is the action."""
    record(session, "pool", pool, 0, Transition("", what, now, reason))


@dataclass
class _Work:
    """What a pass asks of the providers once its transaction has committed."""

    create: list[tuple[Pool, str]] = field(default_factory=list)
    delete: list[tuple[Pool, str]] = field(default_factory=list)
    ready: bool = False  # a unit became ready: schedule now
    jobs: set[int] = field(default_factory=set)  # preempted by a provider's notice
    nodes: set[str] = field(default_factory=set)  # whose desired tasks changed


class Autoscaling:
    """The control plane's side of autoscaling; the leader's loop calls :meth:`run`."""

    def __init__(self, ctx) -> None:  # noqa: ANN001 -- Context (an import cycle)
        self.ctx = ctx
        self.pools: tuple[Pool, ...] = ctx.settings.pools
        self.by_name = {p.name: p for p in self.pools}
        self._providers: dict[str, Provider] | None = None
        names = [p.name for p in self.pools]
        self.policies = check_policies(ctx.config.autoscaling, pools=names) if names else ()
        self._last = -float("inf")

    def due(self, woke: bool) -> bool:
        since = time.monotonic() - self._last
        return bool(self.pools) and (since >= MAX_GAP or (woke and since >= MIN_GAP))

    def close(self) -> None:
        for provider in (self._providers or {}).values():
            provider.close()

    def providers(self) -> dict[str, Provider]:
        if self._providers is None:
            settings = self.ctx.settings
            context = ProviderContext(
                server_url=settings.url,
                join_token=settings.join_token,
                state_dir=settings.home / "pools",
                checkpoint_root=settings.home / "checkpoints",
                extra={"home": str(settings.home)},
            )
            self._providers = create_providers(self.pools, context)
        return self._providers

    def run(self, term: Term | None, pending: Sequence[Job]) -> ScalePlan:
        """One pass (see the module docstring); returns the plan carried out."""
        self._last = time.monotonic()
        providers = self.providers()
        seen: dict[str, dict[str, ProviderUnit] | None] = {}
        for pool in self.pools:
            try:
                seen[pool.name] = providers[pool.provider].units(pool)
            except Exception as exc:  # noqa: BLE001 -- a provider's trouble is logged, not fatal
                log.warning(
                    "pool %s: provider %s failed to list units: %s", pool.name, pool.provider, exc
                )
                seen[pool.name] = None
        now = self.ctx.clock()
        work = _Work()
        with self.ctx.sessions.begin() as session:
            if term is not None:
                term.fence(session)
            plan = self._pass(session, seen, pending, now, work)
            if term is not None and work.nodes:
                term.announce(session, work.nodes)
        self._call_providers(work, term)
        if work.nodes:
            self.ctx.watch.bump(work.nodes)
        if work.jobs:
            from corral.server.services.notify import notify_jobs

            notify_jobs(self.ctx, work.jobs)
        if work.ready or work.jobs:
            self.ctx.wake()
        return plan

    # -- the transaction -----------------------------------------------------------------

    def _pass(
        self,
        session: Session,
        seen: dict[str, dict[str, ProviderUnit] | None],
        pending: Sequence[Job],
        now: float,
        work: _Work,
    ) -> ScalePlan:
        rows = {r.name: r for r in session.scalars(select(PoolUnitRow))}
        failures = {r.pool: r for r in session.scalars(select(PoolFailureRow))}
        cluster = load_cluster(session, self.ctx.runtimes)  # allocations with their jobs'
        nodes = {r.name: r for r in cluster.node_rows}
        held = cluster.held
        busy = {t.node for t in held}
        for row in list(rows.values()):
            if self._observe(session, row, seen.get(row.pool), nodes, busy, failures, now, work):
                del rows[row.name]
        plan = autoscale(
            AutoscaleInput(
                pools=self.pools,
                units=tuple(unit_of(r) for r in rows.values()),
                nodes=tuple(node_of(r) for r in nodes.values()),
                allocations=cluster.state.allocations,
                pending=tuple(pending),
                now=now,
                duty=self._duty(nodes, now),
                failures={p: PoolFailures(r.count, r.last) for p, r in failures.items()},
            ),
            self.ctx.config,
            self.ctx.profile,
            policies=self.policies,
        )
        for action in plan.actions:
            self._record(session, action, rows, nodes, failures, now, work)
        for job_id, why in sorted(plan.preemptions):  # the lock order of agent syncs
            job = lock_job(session, job_id)
            if job is not None and job.state == JobState.RUNNING.value:
                move_job(session, job, JobState.PREEMPTING, why, now)
                work.jobs.add(job_id)
                work.nodes |= {t.node for t in held if t.job_id == job_id}
        self._show_waits(session, plan)
        return plan

    def _observe(
        self,
        session: Session,
        row: PoolUnitRow,
        units: dict[str, ProviderUnit] | None,
        nodes: dict[str, NodeRow],
        busy: set[str],
        failures: dict[str, PoolFailureRow],
        now: float,
        work: _Work,
    ) -> bool:
        """Bring one unit's record up to date; True if the unit is gone (row deleted)."""
        info = None if units is None else units.get(row.name)
        phase = UnitPhase(row.phase)
        if phase is UnitPhase.DELETING:
            if units is not None and info is None:  # the provider is done with it
                for name in row.nodes:
                    if name in nodes:
                        session.delete(nodes.pop(name))
                session.delete(row)
                pool_event(session, row.pool, "deleted", f"{row.name}: deleted", now)
                return True
            return False
        lost = units is not None and (info is None or info.state is UnitState.FAILED)
        if phase in (UnitPhase.PROVISIONING, UnitPhase.READY, UnitPhase.DRAINING) and lost:
            why = info.message if info is not None and info.message else "its provider lost it"
            if phase is UnitPhase.PROVISIONING:
                self._count_failure(session, row.pool, failures, now)
            self._phase(session, row, UnitPhase.FAILED, f"{row.name}: {why}", now)
            return False
        if phase is UnitPhase.PROVISIONING:
            if all(n in nodes and nodes[n].state == NodeState.READY.value for n in row.nodes):
                took = now - row.requested_at
                self._phase(session, row, UnitPhase.READY, f"{row.name}: ready in {took:.0f}s", now)
                row.idle_since = now
                failures.pop(row.pool, None)
                session.execute(delete(PoolFailureRow).where(PoolFailureRow.pool == row.pool))
                work.ready = True
            return False
        if phase in (UnitPhase.READY, UnitPhase.DRAINING):
            if any(n in busy for n in row.nodes):
                row.idle_since = None
            elif row.idle_since is None:
                row.idle_since = now
            if info is not None and info.notice is not None and row.deadline is None:
                for name in row.nodes:
                    if name in nodes:
                        out = give_notice_in(session, nodes[name], info.notice, "provider", now)
                        work.jobs |= out
                        work.nodes.add(name)
                row.deadline = info.notice
                if phase is UnitPhase.READY:
                    self._phase(session, row, UnitPhase.DRAINING, f"{row.name}: spot notice", now)
        return False

    def _record(
        self,
        session: Session,
        action: Provision | Drain | Delete,
        rows: dict[str, PoolUnitRow],
        nodes: dict[str, NodeRow],
        failures: dict[str, PoolFailureRow],
        now: float,
        work: _Work,
    ) -> None:
        pool = self.by_name.get(action.pool)
        if pool is None:
            return
        if isinstance(action, Provision):
            for unit in action.units:
                if unit in rows:
                    continue
                names = [n.name for n in pool.unit_nodes(unit)]
                row = PoolUnitRow(
                    name=unit,
                    pool=pool.name,
                    phase=UnitPhase.PROVISIONING.value,
                    since=now,
                    requested_at=now,
                    nodes=names,
                    reason=action.reason,
                )
                session.add(row)
                rows[unit] = row
                work.create.append((pool, unit))
            pool_event(
                session, pool.name, "provision", f"{', '.join(action.units)}: {action.reason}", now
            )
            return
        row = rows.get(action.unit)
        if row is None:
            return
        if isinstance(action, Drain):
            self._phase(session, row, UnitPhase.DRAINING, f"{row.name}: {action.reason}", now)
            self._drain_nodes(session, row, nodes, action.reason, now)
            return
        if action.failed:
            self._count_failure(session, pool.name, failures, now)
        self._phase(session, row, UnitPhase.DELETING, f"{row.name}: {action.reason}", now)
        self._drain_nodes(session, row, nodes, action.reason, now)
        work.delete.append((pool, row.name))

    def _show_waits(self, session: Session, plan: ScalePlan) -> None:
        """The pending jobs' reasons: the autoscaler's, where it has one."""
        if plan.waits:
            session.connection().execute(
                _WAIT_REASON, [{"jid": job, "r": why} for job, why in plan.waits.items()]
            )

    @staticmethod
    def _drain_nodes(
        session: Session, row: PoolUnitRow, nodes: dict[str, NodeRow], why: str, now: float
    ) -> None:
        for name in row.nodes:
            node = nodes.get(name)
            if node is not None and node.state == NodeState.READY.value:
                move_node(session, node, NodeState.DRAINING, f"pool {row.pool}: {why}", now)

    @staticmethod
    def _phase(
        session: Session, row: PoolUnitRow, phase: UnitPhase, reason: str, now: float
    ) -> None:
        pool_event(session, row.pool, phase.value, reason, now)
        row.phase = phase.value
        row.since = now
        row.reason = reason

    @staticmethod
    def _count_failure(
        session: Session, pool: str, failures: dict[str, PoolFailureRow], now: float
    ) -> None:
        row = failures.get(pool)
        if row is None:
            row = failures[pool] = PoolFailureRow(pool=pool, count=0, last=now)
            session.add(row)
        row.count += 1
        row.last = now

    def _duty(self, nodes: dict[str, NodeRow], now: float) -> dict[str, float]:
        """Each node's mean GPU utilization (0..1) over the last ``DUTY_WINDOW`` seconds."""
        duty = {}
        for name in nodes:
            samples = self.ctx.telemetry.node_samples(name, now - DUTY_WINDOW)
            if samples:
                duty[name] = sum(s.utilization for s in samples) / len(samples) / 100.0
        return duty

    # -- the providers -------------------------------------------------------------------

    def _call_providers(self, work: _Work, term: Term | None) -> None:
        providers = self.providers()
        failed: list[tuple[Pool, str, str]] = []
        for pool, unit in work.create:
            try:
                providers[pool.provider].create(pool, unit, pool.unit_nodes(unit))
            except Exception as exc:  # noqa: BLE001 -- recorded as the unit's failure
                failed.append((pool, unit, f"{type(exc).__name__}: {exc}"))
        for pool, unit in work.delete:
            try:
                providers[pool.provider].delete(pool, unit)
            except Exception as exc:  # noqa: BLE001 -- tried again on the next pass
                log.warning("pool %s: deleting %s failed: %s", pool.name, unit, exc)
        if not failed:
            return
        now = self.ctx.clock()
        with self.ctx.sessions.begin() as session:
            if term is not None:
                term.fence(session)
            failures = {r.pool: r for r in session.scalars(select(PoolFailureRow))}
            for pool, unit, why in failed:
                row = session.get(PoolUnitRow, unit)
                if row is not None and row.phase == UnitPhase.PROVISIONING.value:
                    self._count_failure(session, pool.name, failures, now)
                    self._phase(session, row, UnitPhase.FAILED, f"{unit}: {why}", now)
