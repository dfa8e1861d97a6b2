"""Nodes: registration (bound to a node credential), the agent sync (heartbeat, report,
pull), drain, reset, liveness."""

from __future__ import annotations

import base64
import hmac
from collections import defaultdict
from collections.abc import Callable, Sequence

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.node import NodeState
from corral.core.tpu import slice_env
from corral.errors import ConflictError, NotFoundError, PermissionDeniedError
from corral.kinds.base import JobNode
from corral.schemas.agent import (
    DesiredTask,
    RegisterRequest,
    SyncRequest,
    SyncResponse,
    TaskAck,
    TaskReport,
)
from corral.schemas.api import NodeOut
from corral.server.context import Context
from corral.server.db.models import JobRow, NodeRow, TaskRow, TokenRow
from corral.server.leader import Term
from corral.server.services.auth import hash_secret, job_token, new_secret
from corral.server.services.converters import node_of, node_out, spec_of
from corral.server.services.hooks import hook_failures
from corral.server.services.launch import job_layout, share_node_gpus, task_launch
from corral.server.services.logs import store_chunk
from corral.server.services.notify import notify_jobs
from corral.server.services.settle import FINAL_TASK_STATES, lose_tasks, settle_job
from corral.server.services.step_sync import sync_steps
from corral.server.services.telemetry import ingest
from corral.server.services.transitions import lock_job, move_node

LIVE_TASK_STATES = ("assigned", "running", "terminating")


NOTICE_MARGIN = 5.0  # seconds a spot notice keeps for the agent to report the exits


class NodeService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def register(self, req: RegisterRequest) -> str | None:
        """Create or refresh a node. A new agent incarnation loses the old one's tasks.

        A name is bound to the agent that registers it first (or first after
        :meth:`reset`, or first since this check exists): that registration returns a new
        node credential, and every later one must present it, else
        ``PermissionDeniedError``. Returns the new credential, or None."""
        try:
            return self._register(req)
        except IntegrityError:  # another agent registered the same new name at once
            return self._register(req)

    def _register(self, req: RegisterRequest) -> str | None:
        now = self.ctx.clock()
        devices = [d.model_dump() for d in req.devices]
        jobs: set[int] = set()
        issued = None
        with self.ctx.sessions.begin() as session:
            row = session.get(NodeRow, req.name, with_for_update=True)
            if row is not None and row.credential_hash is not None:
                _check_credential(row, req.credential)
            else:
                issued = new_secret("crc")
            if row is None:
                row = NodeRow(
                    name=req.name, state=NodeState.READY.value, registered_at=now, reason=None
                )
                session.add(row)
            elif row.agent_id != req.agent_id:
                why = f"agent on {row.name} restarted"
                jobs = self._lose_node_tasks(session, row.name, why, now, release=True)
            if issued is not None:
                row.credential_hash = hash_secret(issued)
            if row.state == NodeState.LOST.value:
                move_node(session, row, NodeState.READY, "agent registered again", now)
            row.agent_id = req.agent_id
            row.address = req.address
            row.devices = devices
            row.cpus = req.cpus
            row.memory = req.memory
            row.network = list(req.network)
            row.labels = dict(req.labels)
            row.attributes = dict(req.attributes)
            row.free_ports = []
            row.last_heartbeat = now
        notify_jobs(self.ctx, jobs, skip=req.name)
        self.ctx.catalog.invalidate()
        self.ctx.wake()
        return issued

    def reset(self, name: str) -> NodeOut:
        """Free a node's name for a new agent (a reinstalled host): forget its credential,
        revoke its node token, lose its live tasks (as a new agent incarnation would) and
        mark it lost until an agent registers the name again."""
        now = self.ctx.clock()
        with self.ctx.sessions.begin() as session:
            row = session.get(NodeRow, name, with_for_update=True)
            if row is None:
                raise NotFoundError(f"no node named {name!r}")
            why = f"node {name} was reset by an admin"
            jobs = self._lose_node_tasks(session, name, why, now, release=True)
            row.credential_hash = None
            row.agent_id = ""  # the old agent's syncs are refused: it must register again
            session.execute(
                update(TokenRow)
                .where(TokenRow.node == name, TokenRow.revoked_at.is_(None))
                .values(revoked_at=now)
            )
            if row.state != NodeState.LOST.value:
                reason = "reset by admin: waiting for an agent to register the name"
                move_node(session, row, NodeState.LOST, reason, now)
        self.ctx.tokens.clear()
        notify_jobs(self.ctx, jobs, skip=name)
        self.ctx.catalog.invalidate()
        self.ctx.wake()
        return self.get(name)

    def sync(self, req: SyncRequest) -> SyncResponse:
        """Record what the agent runs and its logs; answer with what it should run."""
        now = self.ctx.clock()
        woke = False
        with self.ctx.sessions.begin() as session:
            node = session.get(NodeRow, req.node)
            if node is None:
                raise NotFoundError(f"node {req.node} is not registered; register first")
            if node.agent_id != req.agent_id:
                raise ConflictError(f"node {req.node} is held by another agent; register again")
            if now - (node.last_heartbeat or 0.0) >= self.ctx.settings.heartbeat_period:
                node.last_heartbeat = now  # (not at every sync: one that changes nothing
            if node.free_ports != req.free_ports[:16]:  # else then writes nothing)
                node.free_ports = req.free_ports[:16]
            if req.attributes is not None and req.attributes != node.attributes:
                node.attributes = dict(req.attributes)
            if node.state == NodeState.LOST.value:
                move_node(session, node, NodeState.READY, "agent reconnected", now)
            keys = {(t.job_id, t.attempt, t.rank) for t in req.tasks} | {
                (c.job_id, c.attempt, c.rank) for c in req.logs
            }
            tasks = self._tasks_by_key(session, req.node, keys)
            touched: set[int] = set()
            for report in [] if req.shutdown else req.tasks:  # a shutdown's exits are not the job's
                task = tasks.get((report.job_id, report.attempt, report.rank))
                if task is None:
                    continue
                if task.state in FINAL_TASK_STATES:
                    if not task.released and report.state == "exited":
                        task.released = woke = True  # a lost task's process finally ended
                    _usage(task, report)
                    continue
                if task.started_at is None:
                    task.started_at = report.started_at or now
                    touched.add(task.job_id)
                task.pid = report.pid or task.pid
                _usage(task, report)
                if report.state == "exited":
                    task.state = "exited"
                    task.exit_code = report.exit_code
                    task.ended_at = report.ended_at or now
                    task.released = True
                    touched.add(task.job_id)
                    woke = True
                else:
                    task.state = report.state
            cap = self.ctx.settings.log_cap
            for chunk in req.logs:  # also of tasks that ended: their logs may trail the exit
                task = tasks.get((chunk.job_id, chunk.attempt, chunk.rank))
                if task is not None and chunk.offset >= task.log_size:
                    data = base64.b64decode(chunk.data)
                    store_chunk(session, task, chunk.offset, data, cap)
            if req.hook_failures:  # the node drains; a failed prolog requeues its job
                touched |= hook_failures(session, node, req.hook_failures, now)
                woke = True
            if req.shutdown:
                reason = f"agent on {node.name} shut down"
                touched |= self._lose_node_tasks(session, node.name, reason, now, release=True)
                move_node(session, node, NodeState.LOST, reason, now)
                woke = True
            if req.gpus is not None and not req.shutdown:
                outcome = ingest(self.ctx, session, node, req.gpus, now)
                touched |= outcome.jobs
                woke |= outcome.drained
            woke |= self._release_vanished(session, req.node, keys)
            touched |= self._skip_unstarted(session, req.node, keys, now)
            # one lock order for every transaction
            settled = {job_id: self._settle(session, job_id, now) for job_id in sorted(touched)}
            started = [first for first, _ in settled.values()]
            # only a job that stopped running changes what its other nodes should run
            ended = {job_id for job_id, (_, left) in settled.items() if left}
            acks = [
                TaskAck(
                    job_id=key[0],
                    attempt=key[1],
                    rank=key[2],
                    log_offset=tasks[key].log_size if key in tasks else -1,
                    final=key not in tasks or tasks[key].state in FINAL_TASK_STATES,
                )
                for key in sorted(keys)
            ]
            desired = self._desired(session, node)
            leave_at = node.leave_at
            steps, step_acks = sync_steps(session, req, desired, self.ctx.settings.log_cap, now)
        for queue, wait in filter(None, started):
            self.ctx.metrics.start_wait.labels(queue).observe(wait)
        notify_jobs(self.ctx, ended, skip=req.node)  # e.g. a failed task's peers must stop
        if woke:
            self.ctx.wake()
        settings = self.ctx.settings
        return SyncResponse(
            tasks=desired,
            acks=acks,
            steps=steps,
            step_acks=step_acks,
            sync_interval=settings.sync_interval,
            heartbeat_interval=settings.heartbeat_interval,
            log_cap=settings.log_cap,
            stop_grace=None if leave_at is None else max(0.0, leave_at - now - NOTICE_MARGIN),
        )

    @staticmethod
    def _release_vanished(session: Session, node: str, reported: set[tuple[int, int, int]]) -> bool:
        """Release lost tasks that the node's agent no longer runs (it reports every task)."""
        held = session.scalars(
            select(TaskRow).where(
                TaskRow.node == node, TaskRow.released.is_(False), TaskRow.state == "lost"
            )
        )
        released = False
        for task in held:
            if (task.job_id, task.attempt, task.rank) not in reported:
                task.released = released = True
        return released

    @staticmethod
    def _skip_unstarted(
        session: Session, node: str, reported: set[tuple[int, int, int]], now: float
    ) -> set[int]:
        """Release tasks this agent never started and no longer should.

        The agent builds each request after applying the previous answer, so a task it was
        ever sent is in its report; one missing from the report never ran here.
        """
        rows = session.execute(
            select(TaskRow, JobRow)
            .join(JobRow, JobRow.id == TaskRow.job_id)
            .where(
                TaskRow.node == node,
                TaskRow.released.is_(False),
                TaskRow.state == "assigned",
            )
        ).all()
        skipped = set()
        for task, job in rows:
            wanted = job.state == JobState.RUNNING.value and task.attempt == job.attempt
            if wanted or (task.job_id, task.attempt, task.rank) in reported:
                continue
            task.state = "skipped"
            task.ended_at = now
            task.released = True
            skipped.add(task.job_id)
        return skipped

    def set_draining(self, name: str, draining: bool) -> NodeOut:
        now = self.ctx.clock()
        with self.ctx.sessions.begin() as session:
            row = self._row(session, name)
            target = NodeState.DRAINING if draining else NodeState.READY
            if row.state == NodeState.LOST.value and not draining:
                raise ConflictError(f"node {name} is lost; it becomes ready when its agent returns")
            if row.state != target.value:
                move_node(
                    session, row, target, "drained by admin" if draining else "undrained", now
                )
            if not draining:
                row.leave_at = None  # a spot notice is withdrawn with the drain
        self.ctx.wake()
        return self.get(name)

    def list(self, viewer: str | None = None) -> list[NodeOut]:
        """Every node; with ``viewer`` (a user, not an admin) naming only their jobs."""
        with self.ctx.sessions() as session:
            held = defaultdict(list)
            for task in session.scalars(select(TaskRow).where(TaskRow.released.is_(False))):
                held[task.node].append(task)
            visible = _visible(session, viewer, [t for ts in held.values() for t in ts])
            rows = session.scalars(select(NodeRow).order_by(NodeRow.name))
            return [self._readings(node_out(row, held.get(row.name, []), visible)) for row in rows]

    def get(self, name: str, viewer: str | None = None) -> NodeOut:
        """One node; with ``viewer`` (a user, not an admin) naming only their jobs."""
        with self.ctx.sessions() as session:
            row = self._row(session, name)
            held = list(
                session.scalars(
                    select(TaskRow).where(TaskRow.node == name, TaskRow.released.is_(False))
                )
            )
            return self._readings(node_out(row, held, _visible(session, viewer, held)))

    def _readings(self, node: NodeOut) -> NodeOut:
        """``node`` with each GPU's latest telemetry reading, if recent."""
        fresh_after = self.ctx.clock() - self.ctx.settings.node_timeout
        for device in node.devices:
            sample = self.ctx.telemetry.latest(node.name, device.index)
            if sample is not None and sample.at >= fresh_after and device.kind == "gpu":
                device.utilization = sample.utilization
                device.memory_used = sample.memory_used
                device.temperature = sample.temperature
        return node

    def check_liveness(self, term: Term | None = None) -> list[str]:
        """Mark nodes lost that have not synced within the timeout; returns their names.

        The server's own downtime does not count: the clock starts at the later of the
        last sync and this server's start. Fenced by ``term`` when given.
        """
        now = self.ctx.clock()
        deadline = now - self.ctx.settings.node_timeout
        if self.ctx.started_at > deadline:
            return []
        lost, jobs = [], set()
        with self.ctx.sessions.begin() as session:
            if term is not None:
                term.fence(session)
            stale = session.scalars(
                select(NodeRow).where(
                    NodeRow.state != NodeState.LOST.value, NodeRow.last_heartbeat < deadline
                )
            )
            for node in stale:
                silent = now - max(node.last_heartbeat, self.ctx.started_at)
                move_node(session, node, NodeState.LOST, f"no heartbeat for {silent:.0f}s", now)
                why = f"node {node.name} lost"
                jobs |= self._lose_node_tasks(session, node.name, why, now, release=False)
                lost.append(node.name)
            if term is not None and lost:
                term.announce(session, None)
        if lost:
            notify_jobs(self.ctx, jobs)
            self.ctx.wake()
        return lost

    @staticmethod
    def _lose_node_tasks(
        session: Session, node: str, why: str, now: float, release: bool
    ) -> set[int]:
        """Lose every task still held on ``node``; returns the ids of their jobs."""
        held = list(
            session.scalars(
                select(TaskRow).where(TaskRow.node == node, TaskRow.released.is_(False))
            )
        )
        by_job: dict[int, list[TaskRow]] = defaultdict(list)
        for task in held:
            by_job[task.job_id].append(task)
        for job_id, tasks in sorted(by_job.items()):
            job = lock_job(session, job_id)
            if job is not None:
                lose_tasks(session, job, tasks, why, now, release)
        return set(by_job)

    @staticmethod
    def _settle(session: Session, job_id: int, now: float) -> tuple[tuple[str, float] | None, bool]:
        """Settle the job. Returns its queue and wait when its first attempt just started
        (else None), and whether settling ended the attempt its tasks run (the job left
        RUNNING or moved to another attempt): only then do its other nodes need a nudge."""
        job = lock_job(session, job_id)
        if job is None:
            return None, False
        before = (job.state, job.attempt)
        first_start = None
        tasks = list(
            session.scalars(
                select(TaskRow).where(TaskRow.job_id == job_id, TaskRow.attempt == job.attempt)
            )
        )
        if job.started_at is None and any(t.started_at for t in tasks):
            job.started_at = min(t.started_at for t in tasks if t.started_at)
            if job.attempt == 0:
                first_start = (job.queue, max(0.0, job.started_at - job.submitted_at))
        settle_job(session, job, tasks, now)
        running = before[0] == JobState.RUNNING.value
        left = running and (job.state, job.attempt) != before
        return first_start, left or not running

    @staticmethod
    def _tasks_by_key(
        session: Session, node: str, keys: set[tuple[int, int, int]]
    ) -> dict[tuple[int, int, int], TaskRow]:
        if not keys:
            return {}
        job_ids = {k[0] for k in keys}
        rows = session.scalars(
            select(TaskRow).where(TaskRow.node == node, TaskRow.job_id.in_(job_ids))
        )
        return {
            (t.job_id, t.attempt, t.rank): t for t in rows if (t.job_id, t.attempt, t.rank) in keys
        }

    def _desired(self, session: Session, node: NodeRow) -> list[DesiredTask]:
        rows = session.execute(
            select(TaskRow, JobRow)
            .join(JobRow, JobRow.id == TaskRow.job_id)
            .where(
                TaskRow.node == node.name,
                TaskRow.released.is_(False),
                TaskRow.state.in_(LIVE_TASK_STATES),
                TaskRow.attempt == JobRow.attempt,
                JobRow.state == JobState.RUNNING.value,
            )
        ).all()
        layouts: dict[int, tuple[JobNode, ...]] = {}
        slices: dict[int, dict[str, str]] = {}
        desired = []
        for task, job in rows:
            if job.id not in layouts:
                layouts[job.id] = job_layout(session, job)
                slices[job.id] = self._tpu_env(session, job)
            launch = task_launch(job, task, layouts[job.id], slices[job.id], devices=node.devices)
            launch.env["CORRAL_JOB_TOKEN"] = job_token(self.ctx.job_key, job.id, job.attempt)
            desired.append(launch)
        share_node_gpus(desired)
        return desired

    @staticmethod
    def _tpu_env(session: Session, job: JobRow) -> dict[str, str]:
        """The TPU variables shared by a TPU slice's tasks (none for other jobs)."""
        tpu = spec_of(job).tpu
        if tpu is None:
            return {}
        names = list(
            session.scalars(
                select(TaskRow.node)
                .where(TaskRow.job_id == job.id, TaskRow.attempt == job.attempt)
                .order_by(TaskRow.rank)
            )
        )
        rows = {r.name: r for r in session.scalars(select(NodeRow).where(NodeRow.name.in_(names)))}
        hosts = [(n, node_of(rows[n]).tpu_host if n in rows else None) for n in names]
        return slice_env(tpu, hosts)

    @staticmethod
    def _row(session: Session, name: str) -> NodeRow:
        row = session.get(NodeRow, name)
        if row is None:
            raise NotFoundError(f"no node named {name!r}")
        return row


def _check_credential(row: NodeRow, credential: str | None) -> None:
    """``PermissionDeniedError`` unless ``credential`` is the one ``row``'s name is bound to."""
    given = hash_secret(credential) if credential else ""
    if credential and hmac.compare_digest(given, row.credential_hash or ""):
        return
    presented = "a different node credential" if credential else "no node credential"
    raise PermissionDeniedError(
        f"node name {row.name!r} belongs to another agent (this one presented {presented}). "
        f"If this host was reinstalled, an admin frees the name with `corral reset-node "
        f"{row.name}`; otherwise start this agent with another --name"
    )


def _usage(task: TaskRow, report: TaskReport) -> None:
    """Keep what the agent measured of the task: peak memory, CPU time, why it ended."""
    if report.peak_memory is not None:
        task.peak_memory = max(report.peak_memory, task.peak_memory or 0)
    if report.cpu_seconds is not None:
        task.cpu_seconds = report.cpu_seconds
    if report.reason:
        task.reason = report.reason


def _visible(
    session: Session, viewer: str | None, tasks: Sequence[TaskRow]
) -> Callable[[int], bool] | None:
    """Which of the jobs of ``tasks`` ``viewer`` may see named (None: all, for admins)."""
    if viewer is None:
        return None
    ids = {t.job_id for t in tasks}
    own = (
        set(session.scalars(select(JobRow.id).where(JobRow.id.in_(ids), JobRow.user == viewer)))
        if ids
        else set()
    )
    return own.__contains__
