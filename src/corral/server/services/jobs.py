"""Jobs: submit, list, show, cancel, preempt and logs; job arrays' elements are jobs, and
a whole array is cancelled, held or released by its id (``services.arrays``)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.lifecycle import Transition
from corral.errors import ConflictError, NotFoundError
from corral.schemas.api import JobList, JobOut, LogOut
from corral.schemas.manifest import JobManifest
from corral.schemas.steps import FINAL_STEP_TASK_STATES
from corral.server.context import Context
from corral.server.db.models import EventRow, JobRow, NodeRow, StepTaskRow, TaskRow
from corral.server.services import arrays
from corral.server.services.arrays import Action
from corral.server.services.converters import job_out, spec_of
from corral.server.services.dependencies import HELD
from corral.server.services.intake import FIRST_REASON
from corral.server.services.logs import read_log
from corral.server.services.notify import notify_jobs
from corral.server.services.settle import FINAL_TASK_STATES
from corral.server.services.transitions import lock_job, move_job, record

ACTIVE_STATES = (JobState.PENDING.value, JobState.RUNNING.value, JobState.PREEMPTING.value)
_CANCEL = Action(
    "cancelled",
    None,
    {},
    "job array {array} already ended: no element is pending or running",
    cancel=True,
)
_HOLD = Action(
    "held",
    False,
    {"held": True, "reason": HELD},
    "job array {array} has no pending element that is not held",
)
_RELEASE = Action(
    "released",
    True,
    {"held": False, "reason": FIRST_REASON},
    "job array {array} has no held element",
)


class JobService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def submit(
        self,
        manifest: JobManifest,
        user: str,
        admin: bool = False,
        idempotency_key: str | None = None,
        unix_user: str | None = None,
    ) -> tuple[JobOut, bool]:
        """Validate against the configuration, the caller's rights and limits, the cluster;
        then store as pending. Returns the job and whether it was created now.

        A job that can never fit is refused with ``UnschedulableError`` and nothing is stored.
        With ``idempotency_key``, a second submission by ``user`` with the same key returns the
        first one's job (``ConflictError`` if its manifest differs), even when both race.
        Stored by this replica's batched writer (``services.intake``), with the submissions
        of other callers in flight. Its tasks run as ``unix_user`` (default: ``user``);
        root only where the server allows it.
        """
        return self.ctx.intake.submit(manifest, user, admin, idempotency_key, unix_user)

    def owner_check(self, job_id: int, user: str | None) -> None:
        """``NotFoundError`` unless the job exists and (when ``user`` is given) is theirs:
        other users' jobs are not revealed."""
        with self.ctx.sessions() as session:
            owner = session.scalar(select(JobRow.user).where(JobRow.id == job_id))
        if owner is None or (user is not None and owner != user):
            raise NotFoundError(f"no job with id {job_id}")

    def resolve(self, ref: str) -> int:
        """The job id a name stands for: ``12``, or ``12_3`` (element 3 of array 12)."""
        with self.ctx.sessions() as session:
            return arrays.resolve(session, ref)

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
        group_arrays: bool = False,
        before: int | None = None,
    ) -> list[JobOut]:
        """The newest ``limit`` jobs (below ``before``), oldest first: :meth:`page`'s."""
        return self.page(include_done, queue, state, limit, user, group_arrays, before).jobs

    def page(
        self,
        include_done: bool = False,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 1000,
        user: str | None = None,
        group_arrays: bool = False,
        before: int | None = None,
        count: bool = False,
    ) -> JobList:
        """The newest ``limit`` jobs with an id below ``before`` (the cursor), oldest
        first; only ``user``'s when given. With ``group_arrays``, a job array is one row
        (``arrays.as_array_row``, its key the array's id) when any element matches,
        counted as one against ``limit``. Says whether older rows exist, the cursor
        that asks for them, and (``count``) how many there are."""
        where = []
        if user is not None:
            where.append(JobRow.user == user)
        if state:
            where.append(JobRow.state == state)
        elif not include_done:
            where.append(JobRow.state.in_(ACTIVE_STATES))
        if queue:
            where.append(JobRow.queue == queue)
        key = arrays.group_key() if group_arrays else JobRow.id
        with self.ctx.sessions() as session:
            if group_arrays:
                keys = arrays.grouped_keys(session, where, limit + 1, before)
                more = len(keys) > limit
                keys = keys[1:] if more else keys  # the extra one is the oldest
                jobs = self._grouped(session, keys)
            else:
                cursor = [] if before is None else [JobRow.id < before]
                query = select(JobRow).where(*where, *cursor).order_by(JobRow.id.desc())
                rows = list(session.scalars(query.limit(limit + 1)))
                more = len(rows) > limit
                rows = rows[:limit]
                tasks = self._tasks(session, [r.id for r in rows])
                jobs = [job_out(r, tasks.get(r.id, ())) for r in reversed(rows)]
            after = jobs[0].id if more else None
            remaining = 0 if count else None
            if count and after is not None:
                counted = select(func.count(func.distinct(key))).where(*where, key < after)
                remaining = session.scalar(counted)
        return JobList(jobs=jobs, has_more=more, next=after, remaining=remaining)

    def _grouped(self, session: Session, keys: list[int]) -> list[JobOut]:
        rows = list(session.scalars(select(JobRow).where(JobRow.id.in_(keys))))
        whole = [r.id for r in rows if r.array_job_id == r.id and r.manifest.get("array")]
        seen = arrays.array_rows(session, whole)
        singles = [r.id for r in rows if r.id not in seen]
        tasks = self._tasks(session, singles)
        out = []
        for row in sorted(rows, key=_id):
            job = job_out(row, tasks.get(row.id, ()))
            if row.id in seen:
                job = arrays.as_array_row(job, row.manifest["array"], seen[row.id])
            out.append(job)
        return out

    def get(self, job_id: int, element_ids: bool = False) -> JobOut:
        """The job with its tasks and events; an element of an array also with the array's
        summary (``element_ids``: and every element's job id, in index order)."""
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
            job = arrays.with_array(session, row, job_out(row, tasks, events, devices))
            if element_ids and job.array is not None:
                job.array.job_ids = list(
                    session.scalars(
                        select(JobRow.id)
                        .where(JobRow.array_job_id == job.array.job_id)
                        .order_by(JobRow.array_task_id)
                    )
                )
            return job

    def act(self, ref: str, job_id: int, action: str) -> JobOut:
        """``cancel``, ``hold`` or ``release`` the job ``ref`` names (resolved: ``job_id``):
        a plain id that is an array's id names every element of it (``scancel 12``)."""
        single = {"cancel": self.cancel, "hold": self.hold, "release": self.release}[action]
        with self.ctx.sessions() as session:
            row = self._row(session, job_id)
            whole = arrays.names_array(ref, row)
        if not whole:
            return single(job_id)
        chosen = {"cancel": _CANCEL, "hold": _HOLD, "release": _RELEASE}[action]
        with self.ctx.sessions.begin() as session:
            notified = arrays.act_on_array(session, job_id, chosen, self.ctx.clock())
        notify_jobs(self.ctx, notified)
        if action != "hold":
            self.ctx.wake()
        return self.get(job_id)

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

    def hold(self, job_id: int) -> JobOut:
        """Keep a pending job from being scheduled until :meth:`release`."""
        return self._set_held(job_id, True)

    def release(self, job_id: int) -> JobOut:
        """Let a held job be scheduled again."""
        return self._set_held(job_id, False)

    def _set_held(self, job_id: int, held: bool) -> JobOut:
        now = self.ctx.clock()
        verb = "held" if held else "released"
        with self.ctx.sessions.begin() as session:
            row = self._row(session, job_id, lock=True)
            if row.state != JobState.PENDING.value:
                raise ConflictError(
                    f"job {job_id} is {row.state}; only pending jobs can be held or released"
                )
            if bool(row.held) == held:
                raise ConflictError(f"job {job_id} is {'already' if held else 'not'} held")
            row.held, row.updated_at = held, now
            row.reason = HELD if held else FIRST_REASON
            row.position = row.estimated_start = None
            event = Transition(row.state, row.state, now, f"{verb} by user")
            record(session, "job", str(row.id), row.attempt, event)
        if not held:
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
        self,
        job_id: int,
        rank: int = 0,
        attempt: int | None = None,
        offset: int = 0,
        step: int = 0,
    ) -> LogOut:
        """One task's log from ``offset`` (``services.logs``: bytes dropped past the log cap
        read as a line that says so); ``complete`` once it ended and all is here. With
        ``step``, the log of that step's task of rank ``rank``."""
        if step:
            return self._step_log(job_id, step, rank, attempt, offset)
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
            settings = self.ctx.settings
            text, end = read_log(
                session,
                task,
                (job_id, attempt, rank),
                offset,
                settings.log_chunk_limit,
                settings.log_cap,
            )
            final = task is not None and task.state in FINAL_TASK_STATES
            complete = (final and end >= task.log_size) or (
                task is None and JobState(job.state).terminal and job.attempt == attempt
            )
        return LogOut(
            job_id=job_id,
            attempt=attempt,
            task=rank,
            offset=end,
            data=text,
            complete=complete,
        )

    def _step_log(
        self, job_id: int, step: int, rank: int, attempt: int | None, offset: int
    ) -> LogOut:
        """The log of a step's task (of the latest attempt that has the step by default)."""
        with self.ctx.sessions() as session:
            self._row(session, job_id)
            query = select(StepTaskRow).where(
                StepTaskRow.job_id == job_id, StepTaskRow.step == step, StepTaskRow.rank == rank
            )
            if attempt is not None:
                query = query.where(StepTaskRow.attempt == attempt)
            task = session.scalar(query.order_by(StepTaskRow.attempt.desc()).limit(1))
            if task is None:
                where = "" if attempt is None else f" in attempt {attempt}"
                raise NotFoundError(f"job {job_id} has no task {rank} of step {step}{where}")
            settings = self.ctx.settings
            text, end = read_log(
                session,
                task,
                (job_id, task.attempt, rank),
                offset,
                settings.log_chunk_limit,
                settings.log_cap,
                step=step,
            )
            complete = task.state in FINAL_STEP_TASK_STATES and end >= task.log_size
            return LogOut(
                job_id=job_id,
                attempt=task.attempt,
                task=rank,
                step=step,
                offset=end,
                data=text,
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


def _id(row: JobRow) -> int:
    return row.id
