"""Jobs: submit, list, show, cancel, preempt and logs."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.lifecycle import Transition
from corral.errors import (
    ConflictError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    UnschedulableError,
)
from corral.scheduling.config import QueueConfig
from corral.scheduling.feasibility import never_fits, with_tpu_hosts
from corral.schemas.api import JobOut, LogOut
from corral.schemas.manifest import JobManifest
from corral.server.context import Context
from corral.server.db.models import (
    EventRow,
    IdempotencyKeyRow,
    JobRow,
    LogChunkRow,
    NodeRow,
    TaskRow,
)
from corral.server.services.converters import job_out, spec_of
from corral.server.services.notify import notify_jobs
from corral.server.services.settle import FINAL_TASK_STATES
from corral.server.services.transitions import lock_job, move_job, record, record_submission


class _Replay(Exception):  # noqa: N818 -- control flow: leave the transaction, store nothing
    """A submission whose Idempotency-Key names an earlier job."""


ACTIVE_STATES = (JobState.PENDING.value, JobState.RUNNING.value, JobState.PREEMPTING.value)


class JobService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def submit(
        self,
        manifest: JobManifest,
        user: str,
        admin: bool = False,
        idempotency_key: str | None = None,
    ) -> tuple[JobOut, bool]:
        """Validate against the configuration, the caller's rights and limits, the cluster;
        then store as pending. Returns the job and whether it was created now.

        A job that can never fit is refused with ``UnschedulableError`` and nothing is stored.
        With ``idempotency_key``, a second submission by ``user`` with the same key returns the
        first one's job (``ConflictError`` if its manifest differs), even when both race.
        """
        digest = manifest_hash(manifest)
        config = self.ctx.config
        replayed: int | None = None
        try:
            with self.ctx.sessions.begin() as session:  # one session: replay check, insert
                if idempotency_key is not None:
                    replayed = self._replayed(session, user, idempotency_key, digest)
                    if replayed is not None:
                        raise _Replay
                spec = manifest.to_spec()
                queue = config.queue(spec.queue)
                if not admin and not queue.allows(user):
                    raise PermissionDeniedError(
                        f"queue: {user} may not submit to queue {queue.name!r}"
                    )
                priority, preemptible = config.resolve_priority(spec.priority, spec.preemptible)
                self.ctx.submissions.take(user, config.limits)
                now = self.ctx.clock()
                self._check_pending(session, user, queue)
                shapes = self.ctx.catalog.shapes(session, now)
                if spec.tpu is not None:  # a TPU slice: as many nodes as the box has hosts
                    spec = with_tpu_hosts(spec, shapes)
                    manifest = manifest.model_copy(update={"nodes": spec.nodes or None})
                reason = never_fits(spec, shapes, config)
                if reason:  # the cached inventory may predate a node another replica added
                    self.ctx.catalog.invalidate()
                    reason = never_fits(spec, self.ctx.catalog.shapes(session, now), config)
                if reason:
                    raise UnschedulableError(reason)
                row = JobRow(
                    name=spec.name,
                    user=user,
                    queue=spec.queue,
                    state=JobState.PENDING.value,
                    priority=priority,
                    priority_class=config.priority_class_name(spec.priority),
                    preemptible=preemptible,
                    manifest=manifest.model_dump(mode="json", exclude_none=True),
                    attempt=0,
                    submitted_at=now,
                    time_limit=spec.time_limit,
                    reason="waiting for the next scheduling cycle",
                    updated_at=now,
                )
                session.add(row)
                session.flush()
                if idempotency_key is not None:
                    session.add(
                        IdempotencyKeyRow(
                            user=user,
                            key=idempotency_key,
                            job_id=row.id,
                            manifest_hash=digest,
                            created_at=now,
                        )
                    )
                    session.flush()
                record_submission(session, row, now)
                out = job_out(row)
        except _Replay:
            assert replayed is not None
            return self.get(replayed), False
        except IntegrityError:
            if idempotency_key is None:
                raise
            with self.ctx.sessions() as session:  # a racing submission with the key won
                replayed = self._replayed(session, user, idempotency_key, digest)
            if replayed is None:
                raise
            return self.get(replayed), False
        self.ctx.wake()
        return out, True

    def _replayed(self, session: Session, user: str, key: str, digest: str) -> int | None:
        """The id of the job an earlier submission with this key created, if any."""
        row = session.get(IdempotencyKeyRow, (user, key))
        if row is None:
            return None
        if row.manifest_hash != digest:
            raise ConflictError(
                f"Idempotency-Key {key!r} was used for job {row.job_id} with a different "
                "manifest; use a new key for a new job"
            )
        return row.job_id

    def _check_pending(self, session: Session, user: str, queue: QueueConfig) -> None:
        """Refuse a submission past a pending-jobs limit (``limits`` and the queue's)."""
        limits = self.ctx.config.limits
        per_queue = (
            queue.max_pending if queue.max_pending is not None else limits.max_pending_per_queue
        )
        if (limits.max_pending_per_user, per_queue, queue.max_pending_per_user) == (None,) * 3:
            return  # the default: no limit, no query to build
        pending = (
            select(func.count()).select_from(JobRow).where(JobRow.state == JobState.PENDING.value)
        )
        checks = (
            (limits.max_pending_per_user, JobRow.user == user, f"{user} has"),
            (
                per_queue,
                JobRow.queue == queue.name,
                f"queue {queue.name!r} has",
            ),
            (
                queue.max_pending_per_user,
                (JobRow.queue == queue.name) & (JobRow.user == user),
                f"{user} has in queue {queue.name!r}",
            ),
        )
        for limit, where, who in checks:
            if limit is None:
                continue
            count = session.scalar(pending.where(where)) or 0
            if count >= limit:
                raise LimitExceededError(
                    f"too many pending jobs: {who} {count} (limit {limit}); "
                    "wait for some to start or cancel some"
                )

    def owner_check(self, job_id: int, user: str | None) -> None:
        """``NotFoundError`` unless the job exists and (when ``user`` is given) is theirs:
        other users' jobs are not revealed."""
        with self.ctx.sessions() as session:
            owner = session.scalar(select(JobRow.user).where(JobRow.id == job_id))
        if owner is None or (user is not None and owner != user):
            raise NotFoundError(f"no job with id {job_id}")

    def current_attempt(self, job_id: int) -> int:
        with self.ctx.sessions() as session:
            return self._row(session, job_id).attempt

    def list(
        self,
        include_done: bool = False,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 1000,
        user: str | None = None,
    ) -> list[JobOut]:
        """Jobs, oldest first; only ``user``'s when given."""
        query = select(JobRow)
        if user is not None:
            query = query.where(JobRow.user == user)
        if state:
            query = query.where(JobRow.state == state)
        elif not include_done:
            query = query.where(JobRow.state.in_(ACTIVE_STATES))
        if queue:
            query = query.where(JobRow.queue == queue)
        query = query.order_by(JobRow.id.desc()).limit(limit)
        with self.ctx.sessions() as session:
            rows = list(session.scalars(query))
            tasks = self._tasks(session, [r.id for r in rows])
        return [job_out(r, tasks.get(r.id, ())) for r in reversed(rows)]

    def get(self, job_id: int) -> JobOut:
        with self.ctx.sessions() as session:
            row = self._row(session, job_id)
            tasks = self._tasks(session, [job_id]).get(job_id, [])
            events = list(
                session.scalars(
                    select(EventRow)
                    .where(EventRow.entity == "job", EventRow.entity_id == str(job_id))
                    .order_by(EventRow.id)
                )
            )
            mig_nodes = {t.node for t in tasks if t.mig_slots}
            devices = {
                n.name: n.devices
                for n in session.scalars(select(NodeRow).where(NodeRow.name.in_(mig_nodes)))
            }
            return job_out(row, tasks, events, devices)

    def cancel(self, job_id: int) -> JobOut:
        """Cancel; running tasks get SIGTERM, then SIGKILL after the grace period."""
        now = self.ctx.clock()
        with self.ctx.sessions.begin() as session:
            row = self._row(session, job_id, lock=True)
            if JobState(row.state).terminal:
                raise ConflictError(f"job {job_id} already ended ({row.state})")
            move_job(session, row, JobState.CANCELLED, "cancelled by user", now)
        notify_jobs(self.ctx, [job_id])
        self.ctx.wake()
        return self.get(job_id)

    def preempt(self, job_id: int, reason: str = "preempted by user") -> JobOut:
        """SIGTERM every task, wait the grace period, requeue (SPEC section 4)."""
        now = self.ctx.clock()
        with self.ctx.sessions.begin() as session:
            row = self._row(session, job_id, lock=True)
            if row.state != JobState.RUNNING.value:
                raise ConflictError(
                    f"job {job_id} is {row.state}; only running jobs can be preempted"
                )
            move_job(session, row, JobState.PREEMPTING, reason, now)
        notify_jobs(self.ctx, [job_id])
        return self.get(job_id)

    def checkpoint(self, job_id: int, step: int | None, path: str | None) -> JobOut:
        """Record that the running job saved a complete checkpoint (now)."""
        now = self.ctx.clock()
        with self.ctx.sessions.begin() as session:
            row = self._row(session, job_id, lock=True)
            if not JobState(row.state).active:
                raise ConflictError(
                    f"job {job_id} is {row.state}; only running jobs report checkpoints"
                )
            row.last_checkpoint_at = now
            what = "checkpoint saved" + (f" at step {step}" if step is not None else "")
            what += f" ({path})" if path else ""
            event = Transition(row.state, row.state, now, what)
            record(session, "job", str(row.id), row.attempt, event)
        return self.get(job_id)

    def logs(
        self, job_id: int, rank: int = 0, attempt: int | None = None, offset: int = 0
    ) -> LogOut:
        """Bytes of one task's log from ``offset``; ``complete`` once it ended and all is here."""
        with self.ctx.sessions() as session:
            job = self._row(session, job_id)
            if attempt is None:
                attempt = session.scalar(
                    select(TaskRow.attempt)
                    .where(TaskRow.job_id == job_id)
                    .order_by(TaskRow.attempt.desc())
                    .limit(1)
                )
                attempt = job.attempt if attempt is None else attempt
            task = session.scalar(
                select(TaskRow).where(
                    TaskRow.job_id == job_id, TaskRow.attempt == attempt, TaskRow.rank == rank
                )
            )
            world = spec_of(job).world_size
            if not 0 <= rank < world:
                raise NotFoundError(f"job {job_id} has tasks 0..{world - 1}, not {rank}")
            chunks = session.scalars(
                select(LogChunkRow)
                .where(
                    LogChunkRow.job_id == job_id,
                    LogChunkRow.attempt == attempt,
                    LogChunkRow.rank == rank,
                    LogChunkRow.offset + _length(LogChunkRow) > offset,
                )
                .order_by(LogChunkRow.offset)
            )
            data = bytearray()
            end = offset
            for chunk in chunks:
                piece = chunk.data[max(0, offset - chunk.offset) :]
                data += piece
                end = chunk.offset + len(chunk.data)
                if len(data) >= self.ctx.settings.log_chunk_limit:
                    break
            final = task is not None and task.state in FINAL_TASK_STATES
            complete = (final and end >= task.log_size) or (
                task is None and JobState(job.state).terminal and job.attempt == attempt
            )
            if task is not None and task.log_size > end:
                complete = False
        return LogOut(
            job_id=job_id,
            attempt=attempt,
            task=rank,
            offset=max(end, offset),
            data=bytes(data).decode("utf-8", errors="replace"),
            complete=complete,
        )

    @staticmethod
    def _row(session: Session, job_id: int, lock: bool = False) -> JobRow:
        """The job (``lock``: locked for an update, see ``lock_job``); ``NotFoundError``."""
        row = lock_job(session, job_id) if lock else session.get(JobRow, job_id)
        if row is None:
            raise NotFoundError(f"no job with id {job_id}")
        return row

    @staticmethod
    def _tasks(session: Session, job_ids: list[int]) -> dict[int, list[TaskRow]]:
        result: dict[int, list[TaskRow]] = {}
        if not job_ids:
            return result
        for task in session.scalars(select(TaskRow).where(TaskRow.job_id.in_(job_ids))):
            result.setdefault(task.job_id, []).append(task)
        return result


def manifest_hash(manifest: JobManifest) -> str:
    """A stable digest of what was submitted (to tell a retry from a different job)."""
    data = manifest.model_dump(mode="json", exclude_none=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _length(model: type[LogChunkRow]):  # noqa: ANN202
    from sqlalchemy import func

    return func.length(model.data)
