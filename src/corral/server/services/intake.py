"""Job submissions, stored in batches (group commit).

Every submission of this replica goes through one writer thread. It takes what is queued
(up to ``MAX_BATCH``), checks each submission as ``JobService.submit`` documents (replayed
``Idempotency-Key``, the queue's users, priority, limits, feasibility), and stores the
admitted ones with their submission events and keys in one transaction: one commit, and
one multi-row insert per table, however many clients submit at once. Nothing waits to
fill a batch: a lone submission is stored at once, and submissions that arrive meanwhile
form the next batch. A job array is one submission: its first element is stored with
the batch, and the database copies it into the others in the same transaction
(``services.arrays.store_elements``); every element counts against the pending limits.

Each submission has its own outcome: one refused (403, 409, 422, 429) does not affect the
others of its batch. A batch that the database refuses as a whole (unavailable: 503) fails
every submission in it, and none was stored. Two submissions with one key in one batch
store one job; a key that another replica stored meanwhile (a unique-key violation)
rolls the batch back, and its submissions are then stored one by one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.array import parsed_array
from corral.core.job import JobState
from corral.core.units import format_size
from corral.errors import (
    ConflictError,
    CorralError,
    LimitExceededError,
    PermissionDeniedError,
    UnschedulableError,
    ValidationError,
)
from corral.scheduling.config import Limits, QueueConfig
from corral.scheduling.feasibility import with_tpu_hosts
from corral.schemas.api import JobOut
from corral.schemas.manifest import JobManifest
from corral.server.db.models import EventRow, IdempotencyKeyRow, JobRow
from corral.server.services.arrays import array_out, array_values, store_elements
from corral.server.services.converters import job_out
from corral.server.services.dependencies import HELD, check_dependency

if TYPE_CHECKING:
    from corral.server.context import Context

log = logging.getLogger("corral.server")
MAX_BATCH = 256  # submissions per transaction
FIRST_REASON = "waiting for the next scheduling cycle"


@dataclass
class Submission:
    """One submission waiting for the writer; ``future`` gets ``(job, created)``."""

    manifest: JobManifest
    user: str
    admin: bool
    key: str | None
    unix_user: str | None = None  # the account its tasks run as; None: ``user``
    digest: str = field(init=False)  # of the manifest, with a key (to tell a retry)
    future: Future[tuple[JobOut, bool]] = field(default_factory=Future)

    def __post_init__(self) -> None:
        self.digest = manifest_hash(self.manifest) if self.key is not None else ""
        self.unix_user = self.unix_user or self.user


_JOBS = JobRow.__table__
# Built once: constructing an insert costs more than executing this one.
_INSERT_JOBS = insert(_JOBS).returning(_JOBS.c.id, sort_by_parameter_order=True)
_INSERT_EVENTS = insert(EventRow.__table__)
_INSERT_KEYS = insert(IdempotencyKeyRow.__table__)


class _StoredJob(SimpleNamespace):
    """A job row just inserted, as ``job_out`` reads it (the columns not set are None)."""

    def __getattr__(self, name: str) -> None:
        if name.startswith("_"):
            raise AttributeError(name)
        return None


class Intake:
    """The batched submission writer of one replica; the thread starts with the first
    submission and stops at :meth:`close` (later submissions are stored by the caller)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._queue: queue.SimpleQueue[Submission | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def put(self, submission: Submission) -> Future[tuple[JobOut, bool]]:
        """Queue ``submission``; its future completes once it is stored or refused."""
        with self._lock:
            closed = self._closed
            if not closed and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="intake", daemon=True)
                self._thread.start()
            if not closed:
                self._queue.put(submission)
        if closed:
            self.store([submission])
        return submission.future

    def submit(
        self,
        manifest: JobManifest,
        user: str,
        admin: bool = False,
        key: str | None = None,
        unix_user: str | None = None,
    ) -> tuple[JobOut, bool]:
        """Store one submission and wait for it (see ``JobService.submit``)."""
        return self.put(Submission(manifest, user, admin, key, unix_user)).result()

    async def submit_async(
        self,
        manifest: JobManifest,
        user: str,
        admin: bool = False,
        key: str | None = None,
        unix_user: str | None = None,
    ) -> tuple[JobOut, bool]:
        """:meth:`submit` for the event loop: waits without holding a thread."""
        submission = Submission(manifest, user, admin, key, unix_user)
        return await asyncio.wrap_future(self.put(submission))

    def close(self) -> None:
        """Store what is queued and stop the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while len(items) < MAX_BATCH:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batch = [i for i in items if i is not None]
            if batch:
                self.store(batch)
            if None in items:
                return

    def store(self, batch: Sequence[Submission]) -> None:
        """Check and store ``batch`` in one transaction and complete every future in it;
        never raises. The writer thread's step; callable directly with a batch. A
        submission whose caller gave up (its future cancelled) is left out."""
        self._store([s for s in batch if s.future.set_running_or_notify_cancel()])

    def _store(self, batch: Sequence[Submission]) -> None:
        if not batch:
            return
        try:
            outcomes = self._write(batch)
        except IntegrityError as exc:  # a key another replica stored meanwhile
            if len(batch) > 1:
                for submission in batch:
                    self._store([submission])
                return
            outcomes = [self._lost_race(batch[0], exc)]
        except Exception as exc:  # the database refused the batch: nothing was stored
            outcomes = [exc] * len(batch)
        if any(isinstance(o, tuple) and o[1] for o in outcomes):
            self.ctx.wake()
        for submission, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, int):  # a replay: the job the key's first use created
                outcome = self._replay(outcome)
            if isinstance(outcome, BaseException):
                submission.future.set_exception(outcome)
            else:
                submission.future.set_result(outcome)

    def _write(self, batch: Sequence[Submission]) -> list[Any]:
        """One transaction: check each submission, insert the admitted ones. Per
        submission: ``(JobOut, True)`` if stored, the id of a replayed job, or the error."""
        ctx, now = self.ctx, self.ctx.clock()
        outcomes: list[Any] = [None] * len(batch)
        with ctx.sessions.begin() as session:
            earlier = _stored_keys(session, [s for s in batch if s.key is not None])
            claimed: dict[tuple[str, str], int] = {}  # key -> index of its first use here
            repeats: dict[int, int] = {}  # index -> index of the first use of its key
            pending = _PendingCounts(session)
            admitted: list[tuple[int, dict[str, Any]]] = []
            for index, sub in enumerate(batch):
                ident = (sub.user, sub.key) if sub.key is not None else None
                try:
                    if ident in earlier:
                        job_id, digest = earlier[ident]
                        outcomes[index] = _replayed(sub, job_id, digest, f"job {job_id}")
                        continue
                    if ident in claimed:  # the same key twice in this batch
                        first = claimed[ident]
                        repeats[index] = _replayed(sub, first, batch[first].digest, "another job")
                        continue
                    admitted.append((index, self._admit(session, sub, pending, now)))
                    if ident is not None:
                        claimed[ident] = index
                except CorralError as exc:
                    outcomes[index] = exc
            if not admitted:
                return outcomes
            # Core statements on the connection: the ORM's bulk path costs more than the
            # inserts themselves here.
            connection = session.connection()
            rows = [values for _, values in admitted]
            ids = connection.execute(_INSERT_JOBS, rows).scalars().all()
            events = [
                _submitted_event(job_id, now, values["held"])
                for (_, values), job_id in zip(admitted, ids, strict=True)
            ]
            connection.execute(_INSERT_EVENTS, events)
            elements: dict[int, list[int]] = {}  # batch index -> an array's job ids
            for (index, values), job_id in zip(admitted, ids, strict=True):
                if values["array_task_id"] is not None:
                    elements[index] = store_elements(
                        connection,
                        job_id,
                        values["manifest"]["array"],
                        now,
                        _submitted_event(job_id, now, values["held"])["reason"],
                    )
            keys = [
                _key_row(batch[index], job_id, now)
                for (index, _), job_id in zip(admitted, ids, strict=True)
                if batch[index].key is not None
            ]
            if keys:
                connection.execute(_INSERT_KEYS, keys)
        for (index, values), job_id in zip(admitted, ids, strict=True):
            job = job_out(_StoredJob(**{**values, "id": job_id}))
            if index in elements:
                job.array_job_id = job_id
                states = {JobState.PENDING.value: len(elements[index])}
                job.array = array_out(values["manifest"]["array"], job_id, states, elements[index])
            outcomes[index] = (job, True)
        for index, first in repeats.items():  # a key used twice: the first one's job
            outcomes[index] = outcomes[first][0].id
        return outcomes

    def _admit(
        self, session: Session, sub: Submission, pending: _PendingCounts, now: float
    ) -> dict[str, Any]:
        """The job row's values if ``sub`` may be stored; else the refusal (raised)."""
        config, manifest = self.ctx.config, sub.manifest
        spec = manifest.to_spec()
        self._check_identity(sub)
        self._check_grace_period(spec.grace_period)
        queue_config = config.queue(spec.queue)
        if not sub.admin and not queue_config.allows(sub.user):
            raise PermissionDeniedError(
                f"queue: {sub.user} may not submit to queue {queue_config.name!r}"
            )
        priority, preemptible = config.resolve_priority(spec.priority, spec.preemptible)
        limits = config.limits.for_caller(sub.admin)
        self.ctx.submissions.take(sub.user, limits)
        count = parsed_array(manifest.array).count if manifest.array else 1
        pending.check(limits, sub.user, queue_config, count)
        if spec.tpu is not None:  # a TPU slice: as many nodes as the box has hosts
            spec = with_tpu_hosts(spec, self.ctx.catalog.shapes(session, now))
            manifest = manifest.model_copy(update={"nodes": spec.nodes or None})
        reason = self.ctx.catalog.never_fits(session, spec, config, now)
        if reason:
            raise UnschedulableError(reason)
        self._check_shm_size(session, spec.shm_size, now)
        dependency = manifest.dependency and check_dependency(
            session, manifest.dependency, sub.user, sub.admin, spec.name
        )
        pending.add(sub.user, queue_config.name, count)
        return {
            "name": spec.name,
            "user": sub.user,
            "queue": spec.queue,
            "state": JobState.PENDING.value,
            "priority": priority,
            "priority_class": config.priority_class_name(spec.priority),
            "preemptible": preemptible,
            "manifest": manifest.model_dump(mode="json", exclude_none=True),
            "attempt": 0,
            "submitted_at": now,
            "time_limit": spec.time_limit,
            "reason": HELD if manifest.hold else FIRST_REASON,
            "updated_at": now,
            "idle": False,
            "unix_user": sub.unix_user,
            "held": bool(manifest.hold),
            "dependency": dependency or None,
            **array_values(manifest.array),
        }

    def _check_identity(self, sub: Submission) -> None:
        """Jobs never run as root unless the server allows it."""
        if sub.unix_user == "root" and not self.ctx.settings.allow_root_jobs:
            mapped = "" if sub.unix_user == sub.user else f" (user {sub.user} is mapped to it)"
            raise PermissionDeniedError(
                f"the cluster does not run jobs as root: this job's Unix account is root"
                f"{mapped}; an admin can start the server with --allow-root-jobs, or map the "
                f"user to another account with `corral token create --user {sub.user} "
                "--unix-user NAME`"
            )

    def _check_shm_size(self, session: Session, shm_size: int | None, now: float) -> None:
        """A container's /dev/shm (memory) no larger than the largest node's memory, where
        nodes have registered (else the node that runs it checks)."""
        if shm_size is None:
            return
        largest = max((node.memory for node, _ in self.ctx.catalog.shapes(session, now)), default=0)
        if largest and shm_size > largest:
            raise ValidationError(
                f"shm_size: {format_size(shm_size)} is more than the memory of any node "
                f"(the largest has {format_size(largest)})"
            )

    def _check_grace_period(self, grace_period: float) -> None:
        cap = self.ctx.settings.max_grace_period
        if grace_period > cap:
            raise ValidationError(
                f"grace_period: {grace_period:g}s is more than this cluster's maximum of "
                f"{cap:g}s (corral server --max-grace-period)"
            )

    def _lost_race(self, sub: Submission, exc: IntegrityError) -> Any:
        """A lone submission whose key another replica stored first: that job, else
        ``exc``."""
        if sub.key is None:
            return exc
        try:
            with self.ctx.sessions() as session:
                earlier = _stored_keys(session, [sub])
        except Exception as error:  # noqa: BLE001 -- the caller's outcome, not a crash
            return error
        if (sub.user, sub.key) not in earlier:
            return exc
        job_id, digest = earlier[(sub.user, sub.key)]
        try:
            return _replayed(sub, job_id, digest, f"job {job_id}")
        except ConflictError as conflict:
            return conflict

    def _replay(self, job_id: int) -> Any:
        from corral.server.services.jobs import JobService  # jobs uses this module

        try:
            return JobService(self.ctx).get(job_id, element_ids=True), False
        except Exception as exc:  # noqa: BLE001 -- the caller's outcome
            return exc


class _PendingCounts:
    """Pending jobs per user, per queue and per (queue, user), counted once per batch
    and only for the limits that are configured; the batch's own admissions included."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._counts: dict[tuple[str, ...], int] = {}

    def check(self, limits: Limits, user: str, queue_config: QueueConfig, count: int = 1) -> None:
        """``LimitExceededError`` if ``count`` more pending jobs of ``user`` in
        ``queue_config`` (an array's elements) would pass a limit (``limits``: the
        caller's, see ``Limits.for_caller``)."""
        per_queue = (
            queue_config.max_pending
            if queue_config.max_pending is not None
            else limits.max_pending_per_queue
        )
        name = queue_config.name
        checks = (
            (limits.max_pending_per_user, ("user", user), f"{user} has"),
            (per_queue, ("queue", name), f"queue {name!r} has"),
            (
                queue_config.max_pending_per_user,
                ("queue-user", name, user),
                f"{user} has in queue {name!r}",
            ),
        )
        for limit, what, who in checks:
            if limit is None:
                continue
            known = self._count(what)
            if known + count > limit:
                more = f"; this array would add {count}" if count > 1 else ""
                raise LimitExceededError(
                    f"too many pending jobs: {who} {known} (limit {limit}){more}; "
                    "wait for some to start or cancel some"
                )

    def add(self, user: str, queue_name: str, count: int = 1) -> None:
        for what in (("user", user), ("queue", queue_name), ("queue-user", queue_name, user)):
            if what in self._counts:
                self._counts[what] += count

    def _count(self, what: tuple[str, ...]) -> int:
        if what not in self._counts:
            query = select(func.count()).select_from(JobRow)
            query = query.where(JobRow.state == JobState.PENDING.value)
            if what[0] == "user":
                query = query.where(JobRow.user == what[1])
            elif what[0] == "queue":
                query = query.where(JobRow.queue == what[1])
            else:
                query = query.where(JobRow.queue == what[1], JobRow.user == what[2])
            self._counts[what] = self.session.scalar(query) or 0
        return self._counts[what]


def _stored_keys(
    session: Session, keyed: Sequence[Submission]
) -> dict[tuple[str, str], tuple[int, str]]:
    """Stored uses of the submissions' keys: ``(user, key) -> (job id, manifest hash)``."""
    if not keyed:
        return {}
    idents = list({(s.user, s.key) for s in keyed})
    rows = session.execute(
        select(
            IdempotencyKeyRow.user,
            IdempotencyKeyRow.key,
            IdempotencyKeyRow.job_id,
            IdempotencyKeyRow.manifest_hash,
        ).where(tuple_(IdempotencyKeyRow.user, IdempotencyKeyRow.key).in_(idents))
    )
    return {(user, key): (job_id, digest) for user, key, job_id, digest in rows}


def _replayed(sub: Submission, earlier: int, digest: str, job: str) -> int:
    """``earlier`` (a job id, or a batch index) if ``sub`` repeats the submission that
    used its key first (whose manifest hash is ``digest``, for ``job``); else a conflict."""
    if digest != sub.digest:
        raise ConflictError(
            f"Idempotency-Key {sub.key!r} was used for {job} with a different "
            "manifest; use a new key for a new job"
        )
    return earlier


def _submitted_event(job_id: int, now: float, held: bool = False) -> dict[str, Any]:
    return {
        "entity": "job",
        "entity_id": str(job_id),
        "attempt": 0,
        "at": now,
        "from_state": "",
        "to_state": JobState.PENDING.value,
        "reason": "submitted held" if held else "submitted",
    }


def _key_row(sub: Submission, job_id: int, now: float) -> dict[str, Any]:
    return {
        "user": sub.user,
        "key": sub.key,
        "job_id": job_id,
        "manifest_hash": sub.digest,
        "created_at": now,
    }


def manifest_hash(manifest: JobManifest) -> str:
    """A stable digest of what was submitted (to tell a retry from a different job)."""
    data = manifest.model_dump(mode="json", exclude_none=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
